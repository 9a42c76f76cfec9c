"""Benchmarks write only where told: bench_mcp.py with no --out leaves the checkout untouched."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _tree() -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in (ROOT / "bench").rglob("*") if p.is_file()
            and "__pycache__" not in p.parts}


def test_bench_mcp_writes_only_where_told(tmp_path: Path) -> None:
    before = _tree()
    out = tmp_path / "mcp.md"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_mcp.py"), "--facts", "20",
                           "--calls", "3", "--out", str(out)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert out.read_text().startswith(done.stdout.strip()[:40])
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_mcp.py"), "--facts", "20",
                           "--calls", "3"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    written = Path(done.stderr.strip().splitlines()[-1].removeprefix("written to "))
    try:
        assert written.is_file() and ROOT not in written.parents
        assert _tree() == before
    finally:
        shutil.rmtree(written.parent, ignore_errors=True)
