"""The cost of rewriting a ledger file (VACUUM, in-memory temp store, TRUNCATE checkpoint), which
an erasure does when its byte scan finds erased bytes no live row explains (SQLite's residue in
rebuilt pages), and the schema-5 upgrade does once after sealing.

    .venv/bin/python bench/bench_rewrite.py --ledger CACHED.db [--forgets 5] [--out FILE] [--tmp DIR]

Every measurement runs in a fresh child process on its own COPY of the cached ledger (the
cache is never written), so its peak RSS (ru_maxrss) is its own:

- forgets: `--forgets` forgets of random live facts (seeded), each with its CPU time, whether
  its certificate is complete and whether it rewrote the file;
- sweep: a sweep of about 20,000 facts (a fifth of the live ones if fewer; the cutoff of
  bench_erasure.py), whole call, whether
  its certificate is complete and whether it rewrote the file;
- rewrite: `LedgerFile.rewrite()` on a ledger just opened: CPU and wall time, the RSS just
  before it and the peak RSS during it (VmHWM reset through /proc/self/clear_refs first), file
  size before and after;
- VACUUM, mmap on: the same VACUUM and checkpoint with the ledger's memory map left on (the
  rewrite turns it off for the VACUUM), to tell mapped file pages from the temp database.

Pages whose unallocated space (between the cell pointers and the cells) holds non-zero bytes are
counted before and after, by reading the b-tree page headers of the file.

Not a timed test: it prints a markdown table (and writes it to `--out` if given).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from bench.benchenv import header, machine_note  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402

DPO = "user:dpo"
SWEEP_FACTS = 20_000


def dirty_pages(path: Path) -> tuple[int, int]:
    """(b-tree pages whose unallocated gap holds non-zero bytes, those bytes)."""
    data = path.read_bytes()
    size = struct.unpack(">H", data[16:18])[0]
    size = 65536 if size == 1 else size
    pages = nonzero = 0
    for n in range(len(data) // size):
        base = n * size
        head = base + (100 if n == 0 else 0)
        kind = data[head]
        if kind not in (2, 5, 10, 13):
            continue
        cells = struct.unpack(">H", data[head + 3:head + 5])[0]
        start = struct.unpack(">H", data[head + 5:head + 7])[0] or 65536
        gap = data[head + (12 if kind in (2, 5) else 8) + 2 * cells:base + start]
        count = len(gap) - gap.count(0)
        if count:
            pages += 1
            nonzero += count
    return pages, nonzero


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak() -> None:
    """Reset VmHWM (the peak RSS) to the RSS now, so the next peak is the measured step's own."""
    Path("/proc/self/clear_refs").write_text("5")


def _copy(ledger: Path, into: Path) -> Path:
    for f in ledger.parent.glob(ledger.name + "*"):
        if f.is_file() and not f.name.endswith(".json"):
            shutil.copyfile(f, into / f.name)
    return into / ledger.name


def child(mode: str, path: Path, forgets: int) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": mode, "dirty_before": dirty_pages(path),
                           "bytes_before": path.stat().st_size}
    t0 = time.process_time()
    led = Ledger.open(path)
    out["open_cpu_s"], out["rss_after_open_mb"] = time.process_time() - t0, _rss_mb()
    try:
        if mode == "sweep":
            from bench.bench_erasure import cutoff_for_count
            live = sum(1 for f in led.db.facts.dump()[0] if f.ended is None)
            cutoff, _ = cutoff_for_count(led, min(SWEEP_FACTS, live // 5))
            out["rss_before_mb"] = _status_mb("VmRSS")
            _reset_peak()
            c0, w0 = time.process_time(), time.perf_counter()
            res = led.sweep(before=cutoff)
            assert res.certificate is not None
            out.update(cpu_s=time.process_time() - c0, wall_s=time.perf_counter() - w0,
                       complete=res.certificate.complete, rewritten=res.certificate.rewritten,
                       expired=len(res.expired), rss_step_peak_mb=_status_mb("VmHWM"))
        elif mode == "forgets":
            ids = [f.fact_id for f in led.db.facts.dump()[0] if f.ended is None]
            runs = []
            out["rss_before_mb"] = _status_mb("VmRSS")
            _reset_peak()
            for fact_id in random.Random(20260901).sample(ids, forgets):
                c0, w0 = time.process_time(), time.perf_counter()
                cert = led.forget(fact_id, actor=DPO, reason="subject_request").certificate
                runs.append({"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - w0,
                             "complete": cert.complete, "rewritten": cert.rewritten})
            out["forgets"], out["rss_step_peak_mb"] = runs, _status_mb("VmHWM")
        else:
            out["rss_before_mb"] = _status_mb("VmRSS")
            _reset_peak()
            c0, w0 = time.process_time(), time.perf_counter()
            if mode == "vacuum-mapped":  # the same VACUUM with the ledger's memory map left on
                led.db.conn.execute("VACUUM")
                complete = led.db.wal_checkpoint().complete
            else:
                complete = led.db.rewrite().complete
            out.update(cpu_s=time.process_time() - c0, wall_s=time.perf_counter() - w0,
                       complete=complete, rss_step_peak_mb=_status_mb("VmHWM"))
        out["rss_peak_mb"] = _rss_mb()
    finally:
        led.close()
    out["bytes_after"] = path.stat().st_size
    out["dirty_after"] = dirty_pages(path)
    return out


def run(mode: str, ledger: Path, forgets: int, tmp: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rewrite-", dir=tmp) as scratch:
        path = _copy(ledger, Path(scratch))
        proc = subprocess.run([sys.executable, __file__, "--child", mode, "--ledger", str(path),
                               "--forgets", str(forgets)], capture_output=True, text=True,
                              check=True)
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def report(ledger: Path, results: list[dict[str, Any]]) -> str:
    loads = [f"{x:.2f}" for x in os.getloadavg()]
    by = {r["mode"]: r for r in results}
    fg = by["forgets"]["forgets"]
    mb = by["rewrite"]["bytes_before"] / 2**20
    lines = [header([machine_note(), f"ledger: a copy of {ledger.name} ({mb:,.0f} MiB); load "
                     f"average at the end {' / '.join(loads)} (1 / 5 / 15 min)"]), "",
             "| measurement | CPU s | wall s | RSS MiB (before -> peak during it) | file MiB "
             "(before -> after) | pages with non-zero unallocated bytes (before -> after) |",
             "|---|---|---|---|---|---|"]
    for mode in ("rewrite", "vacuum-mapped"):
        r = by[mode]
        label = ("rewrite (`LedgerFile.rewrite`: VACUUM with mmap off, TRUNCATE checkpoint)"
                 if mode == "rewrite" else "VACUUM + checkpoint with the memory map left on")
        lines.append(
            f"| {label} | {r['cpu_s']:.2f} | {r['wall_s']:.2f} | {r['rss_before_mb']:,.0f} -> "
            f"{r['rss_step_peak_mb']:,.0f} | {r['bytes_before'] / 2**20:,.0f} -> "
            f"{r['bytes_after'] / 2**20:,.0f} | {r['dirty_before'][0]:,} -> {r['dirty_after'][0]:,} |")
    f = by["forgets"]
    cpu = sorted(x["cpu_s"] for x in fg)
    lines.append(
        f"| {len(fg)} forgets ({sum(x['rewritten'] for x in fg)} rewrote the file, "
        f"{sum(x['complete'] for x in fg)} complete) | median {cpu[len(cpu) // 2]:.2f}, max "
        f"{cpu[-1]:.2f} | max {max(x['wall_s'] for x in fg):.2f} | {f['rss_before_mb']:,.0f} "
        f"-> {f['rss_step_peak_mb']:,.0f} | {f['bytes_before'] / 2**20:,.0f} -> "
        f"{f['bytes_after'] / 2**20:,.0f} | {f['dirty_before'][0]:,} -> {f['dirty_after'][0]:,} |")
    sw = by["sweep"]
    lines.append(
        f"| sweep of {sw['expired']:,} facts (rewrote the file: {sw['rewritten']}, complete: "
        f"{sw['complete']}) | {sw['cpu_s']:.2f} | {sw['wall_s']:.2f} | {sw['rss_before_mb']:,.0f} "
        f"-> {sw['rss_step_peak_mb']:,.0f} | {sw['bytes_before'] / 2**20:,.0f} -> "
        f"{sw['bytes_after'] / 2**20:,.0f} | {sw['dirty_before'][0]:,} -> {sw['dirty_after'][0]:,} |")
    ratio = by["rewrite"]["cpu_s"] / cpu[len(cpu) // 2]
    lines += ["", f"Rewrite CPU / median forget CPU: {ratio:.1f}x. Per-forget: "
              + "; ".join(f"{x['cpu_s']:.2f} s CPU, rewritten {x['rewritten']}" for x in fg)]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ledger", type=Path, required=True)
    ap.add_argument("--forgets", type=int, default=5)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--tmp", type=Path, default=Path("/tmp"),
                    help="where each measurement's copy of the ledger goes (removed after)")
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.ledger, args.forgets)))
        return
    args.tmp.mkdir(parents=True, exist_ok=True)
    results = [run(mode, args.ledger, args.forgets, args.tmp)
               for mode in ("rewrite", "vacuum-mapped", "forgets", "sweep")]
    text = report(args.ledger, results)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
