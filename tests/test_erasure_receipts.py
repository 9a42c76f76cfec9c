"""`custody-app erasures` (issue 15): the erasure receipts (reason, counts, cascade depth,
time) and whether a subject was erased, matched by peppered hash; a read-only command.
A contract module (tests/conftest.py): every test runs on a SQLite file and on a server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from store.address import address_of
from tests import rawsql
from tests.conftest import Env

DPO = "user:dpo"
ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "custody_app", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})


def files(address: Path | str) -> Any:
    """The ledger's and key store's bytes (a WAL-mode reader may create an empty -wal and the
    -shm index, which hold no data); a server ledger's rows and its local folder's files."""
    if rawsql.is_server(address):
        folder = address_of(address).sibling("").parent
        return rawsql.stored(address), {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    path = Path(address)
    return {p.name: p.read_bytes() for p in sorted(path.parent.iterdir())
            if p.is_file() and not p.name.endswith(("-shm", "-wal"))}


def test_receipts_name_each_erasure_and_match_a_subject_by_hash(make_env) -> None:
    env: Env = make_env()
    root = env.put("acct:42", "plan", "ZQX-R-ROOT-0001")
    mid = env.put("acct:42", "summary", "ZQX-R-MID-0002", sources=[root])
    env.put("acct:42", "digest", "ZQX-R-TOP-0003", sources=[mid])
    env.put("person:asha", "email", "ZQX-R-ASHA-0004")
    env.put("person:asha", "phone", "ZQX-R-ASHA-0005")
    env.ledger.forget(root, actor=DPO, reason="subject_request")
    env.ledger.forget_subject("person:asha", actor=DPO, reason="subject_request")
    env.ledger.close()
    before = files(env.path)

    out = cli("erasures", "--ledger", str(env.path), "--subject", "person:asha", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    forget, subject = data["erasures"]
    assert (forget["operation"], forget["facts"], forget["derived"], forget["cascade_depth"],
            forget["reason"], forget["roots"]) == ("forget", 3, 2, 2, "subject_request", [root])
    assert subject["operation"] == "forget_subject" and subject["facts"] == 2
    assert subject["counts"] == {"active": 2, "derived": 0}
    assert data["tombstones"] == 1
    assert data["subject"]["erased"] is True and data["subject"]["at"] == subject["tx_at"]
    assert "person:asha" not in out.stdout  # only its peppered hash is shown

    other = cli("erasures", "--ledger", str(env.path), "--subject", "person:ravi")
    assert other.returncode == 0 and "no erasure of this subject is recorded" in other.stdout
    assert data["subject"]["subject_hash"] not in other.stdout.splitlines()[-1]
    # read-only: no file changed, none created
    assert files(env.path) == before
    if not rawsql.is_server(env.path):
        wal = Path(f"{env.path}-wal")
        assert not wal.exists() or wal.stat().st_size == 0


def test_receipts_of_a_sweep(make_env) -> None:
    env: Env = make_env()
    env.put("acct:1", "plan", "ZQX-S-0001")
    env.put("acct:2", "plan", "ZQX-S-0002")
    env.at("2026-09-20T00:00:00Z")
    env.ledger.sweep(before="2026-09-10T00:00:00Z", actor=DPO)
    result = env.ledger.erasures()
    [receipt] = result.erasures
    assert (receipt.operation, receipt.facts, receipt.reason, receipt.actor) == (
        "sweep", 2, "retention", DPO)
    assert result.subject is None and "1 erasure(s)" in result.render()
