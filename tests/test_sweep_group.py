"""A sweep's expiries written as one group (issue 15's sweep target) store exactly what the
reference path, erasing cascade by cascade through `erase` and `append`, stores: every row of
every table of the ledger and of its key store, the chain, and the certificate."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import apsw
import pytest

from custody_app.domain.commands import Sweep
from custody_app.domain.timeutil import ManualClock
from custody_app.erasure import group as erasure_group
from custody_app.erasure.sweep import sweep
from custody_app.ledger.facade import Ledger
from tests.conftest import T0, Env, day

DPO = "user:dpo"
LEGAL = "user:legal"
WINDOWS = """
[retention.windows]
"team:*" = "P30D"
"org" = "P60D"
"""


def _populate(env: Env) -> None:
    """Roots in several windowed spaces, derived chains (one reached from two roots), a
    supersession, a retraction, a confirmed claim, a held fact inside a cascade, sealed free
    text (cause details and reasons), and enough facts that the index removals go in bulk."""
    ids: list[str] = []
    for n in range(30):
        space = ("team:support", "team:sales", "org")[n % 3]
        ids.append(env.ledger.assert_fact(
            f"acct:{n % 7}", f"note{n % 4}", {"text": f"renewal call {n} for ZQX-{n:03d}",
                                             "amount": n * 11}, actor="agent:support",
            cause={"kind": "message", "ref": f"m-{n}", "detail": f"asked about plan {n}"},
            space=space).fact_id)
    # Strings that name a space or a subject stay in the file by design: not scanned for.
    env.put("acct:00000007", "note9", {"space": "team:support", "who": "acct:00000007",
                                       "text": "a string that is no name"}, space="org")
    derived = env.put("acct:1", "summary", {"of": "two notes"}, space="user:1",
                      sources=[ids[0], ids[3]])
    env.put("acct:1", "summary2", {"of": "a summary"}, space="user:1", sources=[derived])
    child = env.put("acct:2", "summary", {"of": "a held one"}, space="user:2", sources=[ids[4]])
    claimed = env.put("acct:3", "plan", {"tier": "gold"}, space="team:sales", provenance="claimed")
    env.at(day(2))
    env.put("acct:5", "note1", {"tier": "silver"}, space="org", supersedes=ids[5])
    env.ledger.retract(ids[6], actor="agent:support", reason="wrong account, said the caller")
    env.ledger.confirm(claimed, actor="user:rev", reason="checked in the CRM")
    env.ledger.hold(child, actor=LEGAL, reason="litigation 2026-17")
    env.at(day(90))
    env.put("acct:5", "plan", {"tier": "new"}, space="team:support")
    env.at(day(100))


def _tables(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        names = [str(r[0]) for r in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")]
        out = {}
        for name in names:
            quoted = '"' + name.replace('"', '""') + '"'
            try:
                rows = list(conn.execute(f"SELECT rowid, * FROM {quoted}"))
            except apsw.SQLError:  # WITHOUT ROWID, or a virtual table: its shadow tables count
                try:
                    rows = sorted(conn.execute(f"SELECT * FROM {quoted}"), key=repr)
                except apsw.SQLError:
                    continue
            out[name] = rows
        return out
    finally:
        conn.close()


def _run(src: Env, where: Path, grouped: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[
        dict[str, Any], dict[str, Any], dict[str, Any]]:
    where.mkdir()
    for f in src.path.parent.glob(src.path.name + "*"):
        shutil.copyfile(f, where / f.name)
    rng = random.Random(7)  # the random tokens (the vector version) equal in both runs
    monkeypatch.setattr(os, "urandom", lambda n: rng.randbytes(n))
    clock = ManualClock(T0)
    clock.set(src.clock.now())
    path = where / src.path.name
    with Ledger.open(path, policy=src.policy, clock=clock, id_seed=99) as ledger:
        result = sweep(ledger, ledger.scrubs, Sweep(actor=DPO), grouped=grouped)
        report = ledger.verify()
        assert report.valid, report
    monkeypatch.undo()
    text = result.model_dump_json().replace(str(where), "<dir>")
    return json.loads(text), _tables(path), _tables(Path(f"{path}.keys"))


@pytest.mark.sqlite_only  # copies the SQLite files and compares their tables
@pytest.mark.parametrize("names_read_at", [1, 10_000])
def test_a_grouped_sweep_stores_what_one_event_at_a_time_stores(make_env, tmp_path, monkeypatch,
                                                                names_read_at: int) -> None:
    """With the names of all facts read at once (a big sweep) and one by one (a small one)."""
    env: Env = make_env(WINDOWS)
    _populate(env)
    env.ledger.close()
    calls: list[int] = []
    original = erasure_group.erase_group

    def spy(ledger: Any, members: list[Any], **kw: Any) -> None:
        calls.append(len(members))
        original(ledger, members, **kw)

    monkeypatch.setattr("custody_app.erasure.sweep.erase_group", spy)
    one_by_one = _run(env, tmp_path / "reference", False, monkeypatch)
    monkeypatch.setattr("custody_app.erasure.sweep.erase_group", spy)
    monkeypatch.setattr(erasure_group, "NAMES_READ_AT", names_read_at)
    grouped = _run(env, tmp_path / "grouped", True, monkeypatch)
    result, tables, keys = grouped
    # The reference wrote nothing as a group; the grouped run wrote every expiry in one.
    assert calls == [0, len(result["expired"])] and calls[1] > 30
    assert result["held"] and result["certificate"]["complete"]
    assert result == one_by_one[0]
    assert tables.keys() == one_by_one[1].keys()
    for name in tables:
        assert tables[name] == one_by_one[1][name], name
    assert keys == one_by_one[2]
