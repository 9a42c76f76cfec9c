"""`custody-app copy SRC DST` in real subprocesses, on a real SQLite file and the real PostgreSQL
server: the demo ledger (with a fact forgotten, a subject erased and a signed event) copied
SQLite -> PostgreSQL -> SQLite verifies on both copies under the source's public key, with the
same event hashes, signature rows, sealed values and reads; refusals change nothing anywhere; a
killed copy leaves a destination every open refuses."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from custody_app import Ledger
from custody_app.domain.errors import LedgerError
from custody_app.domain.resources import demo_policy_path
from custody_app.ledger.copy import KEY_TABLES, LEDGER_TABLES, NOT_COPIED_META
from store.address import address_of
from store.postgres import recall as pg_recall
from store.sqlite import recall as sqlite_recall
from tests import pgserver
from tests.writer_keys import KEY, registration

ROOT = Path(__file__).resolve().parent.parent
AGENT = "agent:signed-bot"
# The recall indexes are rebuilt on the destination (each backend lays them out its own way);
# the version table is each backend's own.
REBUILT_SQLITE = ("recall_", "sqlite_")
# `subjects` (a server's sealed subject ids, issue 34) is sealed anew as the events load.
REBUILT_SERVER = ("recall_", "schema_version", "keystore_changes", "subjects")


def cli(*args: str | Path, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items()
            if k not in ("CUSTODY_LEDGER", "CUSTODY_POLICY", "CUSTODY_KEYSTORE",
                         "CUSTODY_MASTER_KEY", "CUSTODY_FAULT")}
    return subprocess.run([sys.executable, "-m", "custody_app", *map(str, args)], input=stdin,
                          capture_output=True, text=True, timeout=300, env={**full, **env},
                          stdin=None if stdin is not None else subprocess.DEVNULL)


def ok(*args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    done = cli(*args, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def as_json(*args: str | Path) -> Any:
    return json.loads(ok(*args, "--json").stdout)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """The demo ledger, then a signed write (a writer key the adopted policy registers), a
    fact forgotten and a subject erased: (ledger, forgotten fact, erased subject)."""
    folder = tmp_path_factory.mktemp("source")
    ledger = folder / "demo.db"
    ok("--demo", "--no-tui", "--ledger", ledger)
    policy = folder / "signed.toml"
    policy.write_text(demo_policy_path().read_text(encoding="utf-8").replace(
        "writer_keys = {}\n", registration((AGENT, KEY)), 1), encoding="utf-8")
    key = folder / "writer.pem"
    key.write_bytes(KEY)
    claim = {"op": "assert", "subject": "acct:9001", "predicate": "plan", "value": "signed gold",
             "actor": AGENT, "cause": {"kind": "message", "ref": "m-signed"},
             "provenance": "attested"}
    done = cli("--batch", "-", "--ledger", ledger, "--policy", policy, "--agent", AGENT,
               "--writer-key", key, stdin=json.dumps(claim) + "\n")
    assert done.returncode == 0, done.stderr
    facts = as_json("beliefs", "--ledger", ledger)["facts"]
    forgotten = next(f["fact_id"] for f in facts if f["subject"] == "acct:1042")
    ok("forget", forgotten, "--reason", "error", "--ledger", ledger)
    ok("forget-subject", "acct:2077", "--reason", "subject_request", "--ledger", ledger)
    ok("checkpoint", "--ledger", ledger)
    return ledger, forgotten, "acct:2077"


def events_of(address: str | Path) -> list[tuple[Any, ...]]:
    """Every event row as stored, with its signature (if any) and sealed free text."""
    with Ledger.open(address, readonly=True) as led, led.db.read():
        sigs = {r[0]: r[1] for b in led.db.copy_rows("event_signatures", ["seq", "signature"])
                for r in b}
        texts = {r[0]: r[1:] for b in led.db.copy_rows(
            "event_texts", ["seq", "fact_id", "subject_ref", "sealed", "salt"]) for r in b}
        return [(e.seq, e.kind, e.tx_at, e.actor, e.fact_id, e.subject, e.body, e.value, e.salt,
                 e.prev_hash, e.hash, sigs.get(e.seq), texts.get(e.seq))
                for e in led.db.events.iter_all()]


# Salience decays with the wall clock, which moves between two runs of one read.
CLOCKED = frozenset({"salience", "score", "salience_class"})


def timeless(value: Any) -> Any:
    """A JSON value without the fields that depend on when it was read."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items() if k not in CLOCKED}
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


def engines_named(note: str) -> str:
    """A recall's strategy statement with each backend's own names of its indexes (FTS5 and
    sqlite-vec, or the server's tables) replaced by what they are: the rest must be the same."""
    for engines in (sqlite_recall.ENGINES, pg_recall.ENGINES):
        for name in sorted(engines.__slots__, key=lambda n: -len(getattr(engines, n))):
            if getattr(engines, name):
                note = note.replace(getattr(engines, name), f"<{name}>")
    return note


def reads(address: str | Path, forgotten: str, pub: Path) -> dict[str, Any]:
    """What the reading commands print (JSON) on one ledger."""
    out: dict[str, Any] = {}
    out["verify"] = {k: v for k, v in as_json("verify", "--ledger", address, "--key", pub).items()
                     if k not in ("seconds",)}
    later = "2099-01-01T00:00:00Z"  # not "now", which moves between two runs
    out["beliefs"] = as_json("beliefs", "--ledger", address, "--valid-at", later)
    out["as_of"] = as_json("beliefs", "--ledger", address, "--tx-at", "2026-03-20T00:00:00Z",
                           "--valid-at", "2026-03-20T00:00:00Z")
    out["claimed"] = as_json("beliefs", "--ledger", address, "--include", "quarantined",
                             "--valid-at", later)
    for fact in [f["fact_id"] for f in out["beliefs"]["facts"]][:2] + [forgotten]:
        out[f"history {fact}"] = as_json("history", fact, "--ledger", address)
        out[f"show {fact}"] = as_json("show", fact, "--ledger", address)
    for query in ("refund", "plan seats annual"):
        out[f"recall {query}"] = as_json("recall", query, "--ledger", address, "-k", "5")
        out[f"recall {query}"]["note"] = engines_named(out[f"recall {query}"]["note"])
    out["explain"] = as_json("explain", "RF-2026-0412", "--ledger", address)
    out["erasures"] = as_json("erasures", "--ledger", address)
    return dict(timeless(out))


def differences(have: Any, want: Any, at: str = "") -> list[str]:
    """Where two JSON values differ, by path (a readable failure, not two walls of JSON)."""
    if isinstance(have, dict) and isinstance(want, dict):
        return [d for k in sorted(set(have) | set(want), key=str)
                for d in differences(have.get(k), want.get(k), f"{at}.{k}")]
    if isinstance(have, list) and isinstance(want, list) and len(have) == len(want):
        return [d for i, (h, w) in enumerate(zip(have, want, strict=True))
                for d in differences(h, w, f"{at}[{i}]")]
    return [] if have == want else [f"{at}: {have!r} != {want!r}"]


def rebuilt_by_copy(address: str | Path) -> None:
    """The copy rebuilt the recall indexes itself (read-only: no open rebuilds them here)."""
    with Ledger.open(address, readonly=True) as led:
        assert led.db.recall.embedder() is not None
        assert led.index.differences() == []
        assert sum(led.db.recall.counts()) > 0


def test_the_demo_ledger_copied_to_postgresql_and_back_reads_the_same(
        source: tuple[Path, str, str], pg_url: str, tmp_path: Path) -> None:
    ledger, forgotten, erased = source
    pub = Path(f"{ledger}.pub")
    back = tmp_path / "back.db"
    to_server = ok("copy", ledger, pg_url)
    assert to_server.stdout.startswith(f"copied {ledger} to ")
    rebuilt_by_copy(pg_url)
    done = ok("copy", pg_url, back, "--json")
    rebuilt_by_copy(back)
    result = json.loads(done.stdout)
    assert result["events"] == len(events_of(ledger)) and result["destroyed_keys"] >= 1
    assert result["master_key"] == str(back) + ".keys.master"
    assert Path(result["master_key"]).read_text() == Path(f"{ledger}.keys.master").read_text()
    assert (Path(result["master_key"]).stat().st_mode & 0o777) == 0o600
    assert Path(result["public_key"]).read_text() == pub.read_text()

    # Every event as stored: hash, body, sealed value and salt, signature row, sealed text.
    rows = events_of(ledger)
    assert any(r[11] is not None for r in rows)  # the signed write kept its signature row
    assert events_of(pg_url) == rows and events_of(back) == rows

    # Every read answers the same, verify under the source's public key included.
    want = reads(ledger, forgotten, pub)
    assert want["verify"]["valid"] is True and want["verify"]["events"] == len(rows)
    assert differences(reads(pg_url, forgotten, pub), want) == []
    assert differences(reads(back, forgotten, pub), want) == []
    # The same ledger id (a receipt's audience), on all three.
    ids = set()
    for address in (ledger, pg_url, back):
        with Ledger.open(address, readonly=True) as led:
            ids.add(led.ledger_id)
            # The forgotten value stays unreadable; the erased subject's key stays destroyed.
            fact = led.db.facts.get(forgotten)
            assert fact is not None and fact.status == "forgotten"
            event = led.db.events.get(fact.assert_seq)
            assert event is not None and event.value is None and event.salt is None
            assert led.keys is not None and led.keys.destroyed_at(erased) is not None
            assert led.db.facts.of_subject_predicate(erased, "legal_name") == [] or all(
                f.status == "forgotten" for f in led.db.facts.of_subject_predicate(
                    erased, "legal_name"))
    assert len(ids) == 1
    # verify --deep: the rebuilt recall indexes hold what the believed facts say.
    for address in (pg_url, back):
        assert ok("verify", "--deep", "--ledger", address, "--key", pub).returncode == 0


def test_a_copy_into_a_file_keeps_the_master_key_of_the_environment(
        source: tuple[Path, str, str], tmp_path: Path) -> None:
    """With $CUSTODY_MASTER_KEY the copy writes no master key file (the environment gives it
    to both); one that does not open the source's key store is refused before anything is
    written."""
    ledger = source[0]
    master = Path(f"{ledger}.keys.master").read_text().strip()
    copy = tmp_path / "copy.db"
    wrong = cli("copy", ledger, copy, CUSTODY_MASTER_KEY="ab" * 32)
    assert wrong.returncode == 3 and "(master_key_wrong)" in wrong.stderr
    assert sorted(os.listdir(tmp_path)) == []
    done = ok("copy", ledger, copy, "--json", CUSTODY_MASTER_KEY=master)
    assert json.loads(done.stdout)["master_key"] == "$CUSTODY_MASTER_KEY"
    assert not Path(f"{copy}.keys.master").exists()
    ok("verify", "--ledger", copy, "--key", f"{ledger}.pub", CUSTODY_MASTER_KEY=master)


# ---- refusals: nothing changes anywhere -------------------------------------------------------

def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def state(folder: Path, *urls: str) -> tuple[Any, ...]:
    return (listing(folder), *(pgserver.dump(u) for u in urls))


@pytest.fixture
def here(source: tuple[Path, str, str], tmp_path: Path) -> Path:
    """A copy of the source ledger in this test's own folder (its bytes are compared)."""
    target = tmp_path / "src" / "ledger.db"
    target.parent.mkdir()
    ok("copy", source[0], target)
    return target


def refused(code: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    done = cli("copy", *args)
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"({code})" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""
    return done


def test_a_destination_that_holds_anything_is_refused_and_nothing_changes(
        here: Path, pg_url: str, tmp_path: Path) -> None:
    ok("copy", here, pg_url)
    other = tmp_path / "other.db"
    other.write_bytes(b"someone's notes\n")
    keys_only = tmp_path / "new.db"
    Path(f"{keys_only}.keys").write_bytes(b"x" * 10)
    before = state(tmp_path, pg_url)
    for dst in (pg_url, other, keys_only, tmp_path / "src"):
        done = refused("copy_destination_not_empty", here, dst)
        assert "copy writes only into an empty place" in done.stderr
    assert state(tmp_path, pg_url) == before


def test_a_destination_schema_of_another_application_is_refused_not_merged_into(
        here: Path, pg_url: str, tmp_path: Path) -> None:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA custody")
        conn.execute("CREATE TABLE custody.events(id int, note text)")
        conn.execute("INSERT INTO custody.events VALUES (1, 'theirs')")
        conn.execute("CREATE SCHEMA other_keys")
        conn.execute("CREATE TABLE other_keys.subject_keys(id int)")
    before = state(tmp_path, pg_url)
    done = refused("copy_destination_not_empty", here, pg_url)
    assert "custody with events" in done.stderr
    refused("copy_destination_not_empty", here, pg_url + "&schema=other")
    assert state(tmp_path, pg_url) == before


def test_the_same_place_as_source_and_destination_is_refused(
        here: Path, pg_url: str, tmp_path: Path) -> None:
    link = tmp_path / "link.db"
    link.symlink_to(here)
    ok("copy", here, pg_url)
    before = state(tmp_path, pg_url)
    refused("copy_same_place", here, here)
    refused("copy_same_place", here, link)
    refused("copy_same_place", pg_url, pg_url)
    # Another spelling of the same server schema (an explicit default schema) is the same place.
    refused("copy_same_place", pg_url, pg_url + "&schema=custody")
    assert state(tmp_path, pg_url) == before


def test_a_missing_source_is_refused_and_no_destination_is_made(
        tmp_path: Path, pg_url: str) -> None:
    before = state(tmp_path, pg_url)
    refused("ledger_missing", tmp_path / "nothing.db", tmp_path / "copy.db")
    refused("ledger_missing", pg_url, tmp_path / "copy.db")
    refused("ledger_missing", tmp_path / "nothing.db", pg_url)
    assert state(tmp_path, pg_url) == before


def test_a_master_key_file_at_the_destination_holding_another_key_is_refused(
        here: Path, tmp_path: Path) -> None:
    dst = tmp_path / "copy.db"
    Path(f"{dst}.keys.master").write_text("cd" * 32)
    before = state(tmp_path)
    refused("master_key_conflict", here, dst)
    assert state(tmp_path) == before


# ---- a killed copy ----------------------------------------------------------------------------

# The key store's tables load first (a server destination seals subject ids as the events
# load), then the ledger's: the 5th batch is the events' signatures, after the events.
@pytest.mark.parametrize("point", ["copy.loading#5", "copy.indexed"])
@pytest.mark.parametrize("to_server", [True, False], ids=["to-postgres", "to-sqlite"])
def test_a_killed_copy_leaves_a_destination_every_open_refuses(
        here: Path, pg_url: str, tmp_path: Path, point: str, to_server: bool) -> None:
    dst = pg_url if to_server else str(tmp_path / "copy.db")
    head = as_json("verify", "--ledger", here)["head"]
    killed = cli("copy", here, dst, CUSTODY_FAULT=point)
    assert killed.returncode == -9, killed.stdout + killed.stderr
    # Recognisably incomplete: rows are there, and every way in refuses it, naming copy.
    for command in (("verify",), ("beliefs",), ("history", "f_x")):
        done = cli(*command, "--ledger", dst)
        assert done.returncode == 3, done.stdout + done.stderr
        assert "(copy_incomplete)" in done.stderr and "custody-app copy" in done.stderr
    with pytest.raises(LedgerError) as caught:
        Ledger.open(dst, readonly=True)
    assert caught.value.code == "copy_incomplete"
    done = cli("--batch", "-", "--ledger", dst, stdin='{"op": "verify"}\n')
    assert done.returncode == 3 and "(copy_incomplete)" in done.stderr
    # A second copy into it is refused (the message says what to do); the source is whole.
    refused("copy_destination_not_empty", here, dst)
    assert as_json("verify", "--ledger", here)["head"] == head
    if to_server:
        assert pgserver.dump(pg_url)["custody.events"]  # part of it was loaded
    else:
        with sqlite3.connect(dst) as conn:
            assert conn.execute("SELECT count(*) FROM events").fetchone()[0] > 0


# ---- what is copied covers every table of both backends ---------------------------------------

def test_every_table_of_both_backends_is_copied_or_rebuilt(
        here: Path, pg_url: str) -> None:
    ok("copy", here, pg_url)
    copied = {*LEDGER_TABLES, *KEY_TABLES, "ledger_meta", "keystore_meta"}
    with sqlite3.connect(here) as conn:
        sqlite_tables = {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table'")}
    with sqlite3.connect(f"{here}.keys") as conn:
        sqlite_tables |= {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table'")}
    server_tables = {name.split(".", 1)[1] for name in pgserver.dump(pg_url)}
    for tables, rebuilt in ((sqlite_tables, REBUILT_SQLITE), (server_tables, REBUILT_SERVER)):
        left = {t for t in tables - copied if not t.startswith(rebuilt)}
        assert left == set()
        assert copied <= tables
    # The meta entries not copied are the indexes' and one backend's own.
    with Ledger.open(pg_url, readonly=True) as led:
        assert led.db.meta("copy_incomplete") is None
        assert led.db.meta("ledger_id") == Ledger.open(here, readonly=True).db.meta("ledger_id")
    assert {"embedder", "recall_layout", "sqlite_vec_version"} <= NOT_COPIED_META
    assert address_of(pg_url).place() == address_of(pg_url + "&schema=custody").place()


# ---- the store's part: a batch at a time, values converted to the column's type -------------

def test_rows_come_a_batch_at_a_time_and_load_converted_on_both_backends(
        here: Path, pg_url: str) -> None:
    ok("copy", here, pg_url)
    for address in (here, pg_url):
        with Ledger.open(address, readonly=True) as led, led.db.read():
            names = led.db.columns("events")
            whole = [r for b in led.db.copy_rows("events", names, 10_000) for r in b]
            batches = list(led.db.copy_rows("events", names, 7))
            assert [len(b) for b in batches[:-1]] == [7] * (len(batches) - 1)
            assert [r for b in batches for r in b] == whole
            assert [r[names.index("seq")] for r in whole] == list(range(1, len(whole) + 1))
    # A SQLite file may hold bytes in a text column: the server's store loads them as text;
    # a table's columns must all be named (none dropped silently).
    from store import StoreError, open_ledger

    db = open_ledger(pg_url)
    try:
        db.load_rows("ledger_meta", ["key", "value"], [("copied_bytes", b"as text")])
        assert db.meta("copied_bytes") == "as text"
        with pytest.raises(StoreError) as caught:
            db.load_rows("ledger_meta", ["key"], [("only_a_key",)])
        assert caught.value.code == "copy_schema_mismatch"
        # The chain trigger still guards a load: an event that does not link is refused.
        head = db.copy_rows("events", db.columns("events"))
        last = [r for b in head for r in b][-1]
        seq = db.columns("events").index("seq")
        forged = tuple(v + 1 if i == seq else v for i, v in enumerate(last))
        with pytest.raises(StoreError):
            db.load_rows("events", db.columns("events"), [forged])
    finally:
        db.close()


def test_two_ledgers_in_one_database_each_in_its_own_schema(here: Path, pg_url: str) -> None:
    ok("copy", here, pg_url)
    second = pg_url + "&schema=team2"
    done = json.loads(ok("copy", pg_url, second, "--json").stdout)
    assert done["keystore"].endswith("schema=team2")
    assert {"team2.events", "team2_keys.subject_keys"} <= set(pgserver.dump(pg_url))
    assert as_json("verify", "--ledger", second, "--key", f"{here}.pub")["valid"] is True
