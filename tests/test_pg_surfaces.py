"""Every surface on a ledger on a PostgreSQL server, in real subprocesses against the real test
server (the `pg_url` fixture): init, every subcommand, --batch (file and stdin), doctor, the
output paths, and the server's errors, compared with the same runs on a SQLite file where the
output is deterministic (ids, times, hashes and the ledger's address masked)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from custody_app.erasure.epoch import SERVER_COPIES
from store.address import address_of
from tests.conftest import SUITE_DEFAULT_POLICY

ROOT = Path(__file__).resolve().parent.parent
CAUSE = {"kind": "message", "ref": "msg-1"}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    # The suite's policy (hashed-ngram, vectors made in the write on both backends): under the
    # shipped minilm-l6 the vectors come from the background worker, so a recall right after
    # the writes would count facts waiting, as many as the worker had not reached.
    env["CUSTODY_POLICY"] = str(SUITE_DEFAULT_POLICY)
    env.update(extra)
    return env


def cli(*args: str | Path, stdin: str | None = None, cwd: Path | None = None,
        **env: str) -> subprocess.CompletedProcess[str]:
    """`custody-app ARGS` as a real process (XDG_DATA_HOME is the test's own: conftest)."""
    return subprocess.run([sys.executable, "-m", "custody_app", *map(str, args)], input=stdin,
                          capture_output=True, text=True, timeout=120, cwd=cwd or ROOT,
                          env=_env(**env), stdin=None if stdin is not None else subprocess.DEVNULL)


def ops(*lines: dict[str, Any]) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


def fact(subject: str, predicate: str, value: Any, provenance: str = "attested",
         **extra: Any) -> dict[str, Any]:
    return {"op": "assert", "subject": subject, "predicate": predicate, "value": value,
            "actor": "agent:bot", "cause": CAUSE, "provenance": provenance, **extra}


@pytest.fixture(params=("sqlite", "postgres"))
def address(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A ledger address on each backend: a file in tmp_path, or a fresh database."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.db")
    return str(request.getfixturevalue("pg_url"))


def masker(address: str, tmp_path: Path) -> Callable[[str], str]:
    """Output made comparable across backends: the address and folders named, fact ids
    numbered in order of appearance, times, hashes, fingerprints and durations masked."""
    ids: dict[str, str] = {}
    shown = address_of(address).display

    def mask(text: str) -> str:
        own = address_of(address)
        for known, name in ((str(address_of(own.default_keystore()).master_key_file()),
                             "<MASTER>"), (str(own.sibling("")), "<LEDGER>"),
                            (shown, "<LEDGER>"), (address, "<LEDGER>"), (str(tmp_path), "<TMP>")):
            text = text.replace(known, name)
        text = re.sub(r"<LEDGER> \(schema custody_keys\)|<LEDGER>\.keys", "<KEYS>", text)
        text = re.sub(r"\bf_[0-9a-z]{10,}", lambda m: ids.setdefault(m.group(0),
                                                                     f"F{len(ids) + 1}"), text)
        text = re.sub(r"\d{4}-\d\d-\d\dT[0-9:.]+(Z|[+-]\d\d:\d\d)?", "<T>", text)
        text = re.sub(r"\b[0-9a-f]{12,}\b", "<H>", text)
        text = re.sub(r'"seconds": [0-9.]+', '"seconds": <D>', text)
        return re.sub(r"\b\d+(\.\d+)? ?(ms|s)\b", "<D>", text)

    return mask


# --- init, missing ledgers, --create ------------------------------------------------------------

def test_init_on_a_server_makes_the_ledger_and_prints_where_its_key_files_went(
        pg_url: str) -> None:
    done = cli("init", "--ledger", pg_url, "--json")
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    folder = address_of(pg_url).sibling("").parent
    assert said["ledger"] == address_of(pg_url).display
    assert Path(said["master_key"]) == address_of(pg_url).master_key_file()
    assert Path(said["master_key"]).parent == folder and Path(said["master_key"]).is_file()
    assert Path(said["public_key"]) == folder / "ledger.pub"
    assert Path(said["public_key"]).read_text().startswith("-----BEGIN PUBLIC KEY")
    # The key file printed is the one the key store opens with: another one makes it refuse.
    Path(said["master_key"]).write_text("00" * 32)
    refused = cli("beliefs", "--ledger", pg_url)
    assert refused.returncode == 3 and "(master_key_wrong)" in refused.stderr


def test_a_second_init_is_as_on_sqlite(address: str, tmp_path: Path) -> None:
    mask = masker(address, tmp_path)
    first, second = cli("init", "--ledger", address), cli("init", "--ledger", address)
    assert first.returncode == second.returncode == 0, second.stderr
    assert mask(second.stdout) == mask(first.stdout)
    beliefs = cli("verify", "--ledger", address, "--json")
    assert json.loads(beliefs.stdout)["events"] == 1  # one policy event: the second added none


def test_a_missing_ledger_is_refused_naming_init_and_create_creates(
        address: str, tmp_path: Path) -> None:
    for args in (("beliefs",), ("verify",), ("hold", "f_x", "--reason", "r")):
        done = cli(*args, "--ledger", address)
        assert done.returncode == 3, done.stderr
        assert "(ledger_missing)" in done.stderr and "custody-app init --ledger" in done.stderr
        assert "Traceback" not in done.stderr
    refused = cli("--batch", "-", "--ledger", address, stdin=ops(fact("acct:1", "plan", "a")))
    assert refused.returncode == 3 and "(ledger_missing)" in refused.stderr
    made = cli("--create", "--batch", "-", "--ledger", address,
               stdin=ops(fact("acct:1", "plan", "a")))
    assert made.returncode == 0, made.stderr
    assert cli("beliefs", "--ledger", address).returncode == 0


def test_an_empty_schema_beside_a_ledger_is_missing_and_the_environment_names_a_server(
        pg_url: str) -> None:
    assert cli("init", "--ledger", pg_url).returncode == 0
    other = f"{pg_url}&schema=other"
    done = cli("beliefs", "--ledger", other)
    assert done.returncode == 3 and "(ledger_missing)" in done.stderr
    via_env = cli("beliefs", "--json", CUSTODY_LEDGER=pg_url)
    assert via_env.returncode == 0, via_env.stderr
    assert cli("beliefs", CUSTODY_LEDGER=other).returncode == 3


# --- every subcommand, the same on both backends ----------------------------------------------

def _scenario(address: str, tmp_path: Path) -> list[tuple[str, int, str]]:
    """Run every subcommand on a fresh ledger; (command, exit code, masked stdout) each."""
    mask = masker(address, tmp_path)
    out: list[tuple[str, int, str]] = []

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        done = cli(*args, "--ledger", address, stdin=stdin, cwd=tmp_path)
        assert "Traceback" not in done.stderr, done.stderr
        out.append((" ".join(mask(a) for a in args), done.returncode, mask(done.stdout)))
        return done

    assert run("init", "--json").returncode == 0
    batch_file = tmp_path / "ops.jsonl"
    batch_file.write_text(ops(fact("acct:1", "plan", "basic"), fact("acct:1", "seats", 12),
                              fact("acct:2", "plan", "pro", "claimed"),
                              fact("acct:3", "plan", "team", "claimed"),
                              fact("acct:4", "tier", "gold", "claimed")), encoding="utf-8")
    written = run("--batch", str(batch_file))
    plan, seats, claim, claim2, claim3 = [json.loads(line)["result"]["fact_id"]
                                          for line in written.stdout.splitlines()]
    newer = run("--batch", "-", stdin=ops(fact("acct:1", "plan", "enterprise")))
    plan2 = json.loads(newer.stdout)["result"]["fact_id"]
    run("recall", "enterprise", "--session", "s9", "--json")  # served to session s9
    run("--batch", "-", stdin=ops({"op": "act", "session": "s9", "tool": "billing.refund",
                                   "ref": "R-1", "outcome": "ok", "actor": "agent:bot",
                                   "subject": "acct:1", "args_digest": "sha256:" + "ab" * 32}))
    pub = str(address_of(address).sibling(".pub"))
    for args in (
            ("explain", "R-1", "--json"), ("explain", "R-1", "--out", "action.json"),
            ("explain", "--verify", "action.json", "--key", pub, "--json"),
            ("beliefs", "--json"), ("beliefs",), ("show", plan2, "--json"), ("why", plan2, "--json"),
            ("history", plan, "--json"), ("queue", "--json"), ("confirm", claim, "--json"),
            ("reject", claim2, "--reason", "wrong account", "--json"),
            ("recall", "enterprise", "--json"), ("recall", "enterprise"),
            ("hold", seats, "--reason", "audit", "--json"),
            ("release", seats, "--reason", "done", "--json"),
            ("correct", claim3, "platinum", "--reason", "typo", "--json"),
            ("affirm", plan2, "--json"),
            ("checkpoint", "--json"), ("verify", "--json"), ("verify", "--deep"),
            ("rebuild", "--json"), ("blast", plan2, "--json"), ("actions", "--json"),
            ("retract", seats, "--reason", "stale", "--json"),
            ("pack", plan2, "--out", "pack.json", "--json"),
            ("pack", "--verify", "pack.json", "--key", pub),
            ("export", "--out", "export.jsonl", "--json"),
            ("verify", "--export", "export.jsonl", "--key", pub, "--json"),
            ("sweep", "--dry-run", "--json"),
            ("forget", plan, "--reason", "error", "--json"),
            ("forget-subject", "acct:2", "--reason", "subject_request", "--json"),
            ("erasures", "--json"), ("rotate-index-key", "--json"), ("rotate-epoch", "--json"),
            ("history", plan, "--json"), ("verify", "--json"), ("rebuild", "--deep")):
        run(*args)
    return out


def test_every_subcommand_gives_the_same_results_on_a_server_as_on_a_file(
        tmp_path: Path, pg_url: str) -> None:
    (tmp_path / "f").mkdir()
    (tmp_path / "s").mkdir()
    with ThreadPoolExecutor(2) as pool:  # the two runs are independent processes
        file_run = pool.submit(_scenario, str(tmp_path / "f" / "ledger.db"), tmp_path / "f")
        server_run = pool.submit(_scenario, pg_url, tmp_path / "s")
        on_file, on_server = file_run.result(), server_run.result()
    assert [c for c, _, _ in on_server] == [c for c, _, _ in on_file]
    assert [(c, code) for c, code, _ in on_file if code != 0] == []  # each did its work
    for (command, code_f, out_f), (_, code_s, out_s) in zip(on_file, on_server, strict=True):
        if command.startswith("forget"):
            # The erasure certificate differs by design: a file's WAL checkpoint and byte scans
            # against a server's own places (issue 34): no older snapshot holds the erasure,
            # the old row versions were vacuumed but cannot be read back without pageinspect
            # (not installed here: `unverifiable`, with why), and the server's WAL and copies
            # are beyond this process. It never claims a byte scan it did not do.
            places = _found(json.loads(out_s), "places")
            assert places and not any("byte scan" in p["place"] and p["outcome"] == "clean"
                                      for p in places), places
            assert [p["outcome"] for p in places if p["place"].startswith("server: in-flight")
                    ] == ["clean"], places
            assert [p["detail"] for p in places if p["place"].startswith("server: old row")
                    and "pageinspect extension is not installed" in p["detail"]], places
            # Pending on a server only while the epoch that wrapped the destroyed keys is live
            # (its WAL, archives, backups and replicas: rotate-epoch makes them crypto-erased).
            pending = [p["place"] for p in places if p["outcome"] == "pending"]
            assert set(pending) <= {SERVER_COPIES}, places
            assert (code_f, code_s) == (0, 1 if pending else 0), command
            out_s, out_f = (json.dumps(_without(json.loads(o), ("places", "complete")))
                            for o in (out_s, out_f))
        else:
            assert code_s == code_f, command
        if command.startswith("rotate-epoch"):
            # It re-issues the certificates of the erasures above, crypto-erased: their places
            # are each backend's own, as the erasures' were; the rest must agree.
            parsed = [json.loads(re.sub(r": <D>", ': "<D>"', o)) for o in (out_s, out_f)]
            assert all(p["certificates"] for p in parsed), parsed
            out_s, out_f = (json.dumps(_without(p, ("places", "complete"))) for p in parsed)
        if command.startswith("recall"):
            # The strategy statement names each backend's own indexes (FTS5 and sqlite-vec on
            # a file, the server's postings and vector tables): the ranking is the same.
            from tests.test_copy import engines_named
            out_s, out_f = engines_named(out_s), engines_named(out_f)
        assert out_s == out_f, command
    # Every subcommand the CLI has was run (the scenario is kept whole as the CLI grows).
    from custody_app.interfaces.cli.main import SUBCOMMANDS
    ran = {c.split()[0] for c, _, _ in on_server}
    assert set(SUBCOMMANDS) <= ran, set(SUBCOMMANDS) - ran


def _found(obj: Any, key: str) -> list[Any]:
    """Every item of every list under `key`, anywhere in `obj`."""
    if isinstance(obj, dict):
        return [*obj.get(key, []), *(x for k, v in obj.items() if k != key
                                     for x in _found(v, key))]
    if isinstance(obj, list):
        return [x for v in obj for x in _found(v, key)]
    return []


def _without(obj: Any, key: str | tuple[str, ...]) -> Any:
    keys = (key,) if isinstance(key, str) else key
    if isinstance(obj, dict):
        return {k: _without(v, keys) for k, v in obj.items() if k not in keys}
    if isinstance(obj, list):
        return [_without(v, keys) for v in obj]
    return obj


# --- doctor -------------------------------------------------------------------------------------

def test_doctor_reports_the_servers_health_and_runs_no_file_check(pg_url: str) -> None:
    assert cli("init", "--ledger", pg_url).returncode == 0
    assert cli("--batch", "-", "--ledger", pg_url,
               stdin=ops(fact("acct:1", "plan", "basic"))).returncode == 0
    done = cli("doctor", "--ledger", pg_url, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert {"server", "pgvector", "schema", "triggers", "role"} <= set(checks)
    assert not {"ledger", "wal", "secure-delete", "pending-scrubs"} & set(checks)
    assert checks["triggers"]["outcome"] == "ok"
    assert "PostgreSQL 1" in checks["server"]["detail"]
    assert checks["role"]["outcome"] == "warn"  # the test role is a superuser: said so
    assert "superuser" in checks["role"]["detail"]
    for name in ("key-store", "master-key", "forget-key", "signing-key", "keys-match",
                 "ledger-marks", "integrity"):
        assert checks[name]["outcome"] == "ok", checks[name]
    assert "reproduces the subject hash" in checks["keys-match"]["detail"]


def test_doctor_fails_a_disabled_trigger_and_refuses_an_empty_schema(
        pg_url: str, pg_server: Any) -> None:
    empty = cli("doctor", "--ledger", pg_url)
    assert empty.returncode == 3 and "custody-app init --ledger" in empty.stdout
    assert cli("init", "--ledger", pg_url).returncode == 0
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE custody.events DISABLE TRIGGER events_append_only_delete")
    done = cli("doctor", "--ledger", pg_url, "--json")
    assert done.returncode == 1
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["triggers"]["outcome"] == "FAIL"
    assert "events_append_only_delete" in checks["triggers"]["detail"]


def test_doctor_without_the_server_key_store_fails_it_and_creates_none(pg_url: str) -> None:
    assert cli("init", "--ledger", pg_url).returncode == 0
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA custody_keys CASCADE")
    done = cli("doctor", "--ledger", pg_url, "--json")
    assert done.returncode == 1
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["key-store"]["outcome"] == "FAIL"
    assert "(keystore_missing)" in checks["key-store"]["detail"]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'custody_keys'"
                            ).fetchone() is None


# --- output paths -------------------------------------------------------------------------------

def test_no_output_lands_on_a_server_ledgers_local_key_files(pg_url: str) -> None:
    made = json.loads(cli("init", "--ledger", pg_url, "--json").stdout)
    batch = cli("--batch", "-", "--ledger", pg_url, stdin=ops(fact("acct:1", "plan", "basic")))
    fact_id = json.loads(batch.stdout)["result"]["fact_id"]
    master, pub = Path(made["master_key"]), Path(made["public_key"])
    before = master.read_bytes(), pub.read_bytes()
    for target in (master, pub):
        for args in (("pack", fact_id, "--out", target, "--force"),
                     ("export", "--out", target, "--force")):
            done = cli(*args, "--ledger", pg_url)
            assert done.returncode != 0 and "(output_protected)" in done.stderr, done.stderr
    assert (master.read_bytes(), pub.read_bytes()) == before


# --- the server's errors, and the password ------------------------------------------------------

PASSWORD = "Zq7-secret-pw-9431"


def _with_password(url: str) -> str:
    return url.replace("postgresql://custody@", f"postgresql://custody:{PASSWORD}@", 1)


def test_a_password_in_the_url_never_appears_in_any_output(pg_url: str, tmp_path: Path) -> None:
    url = _with_password(pg_url)  # the test server trusts the socket: any password opens it
    runs = [cli("beliefs", "--ledger", url),  # missing: refused, naming init
            cli("doctor", "--ledger", url),
            cli("init", "--ledger", url), cli("init", "--ledger", url, "--json"),
            cli("--batch", "-", "--ledger", url, stdin=ops(fact("acct:1", "plan", "a"))),
            cli("--batch", "-", "--ledger", url, stdin='{"op": "nope"}\n'),
            cli("beliefs", "--ledger", url), cli("verify", "--ledger", url, "--json"),
            cli("history", "f_nothing", "--ledger", url), cli("doctor", "--ledger", url),
            cli("doctor", "--ledger", url, "--json"), cli("hold", "f_x", "--ledger", url,
                                                          "--reason", "r"),
            cli("beliefs", CUSTODY_LEDGER=url), cli("beliefs", "--ledger", f"{url}&schema=none"),
            cli("beliefs", "--ledger", _with_password(
                "postgresql://custody@127.0.0.1:1/nodb?connect_timeout=5")),
            cli("beliefs", "--ledger", url.replace("/t_", "/nodb_t_", 1)),
            cli("serve", "--agent", "agent:x", "--ledger", f"{url}&schema=none")]
    assert runs[2].returncode == 0, runs[2].stderr
    for done in runs:
        assert PASSWORD not in done.stdout + done.stderr, done.args
        assert "Traceback" not in done.stderr, done.stderr
    assert not any(PASSWORD in p.read_text(errors="replace")
                   for p in tmp_path.rglob("*") if p.is_file())


def test_an_unreachable_server_is_a_one_line_error_not_a_missing_ledger() -> None:
    url = "postgresql://custody@127.0.0.1:1/nodb?connect_timeout=5"
    for args in (("beliefs",), ("init",), ("hold", "f_x", "--reason", "r")):
        done = cli(*args, "--ledger", url)
        assert done.returncode == 3, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "(ledger_unopenable)" in lines[0], done.stderr
        assert "ledger_missing" not in done.stderr
    batch = cli("--batch", "-", "--create", "--ledger", url, stdin=ops(fact("a:1", "p", 1)))
    assert batch.returncode == 3 and "(ledger_unopenable)" in batch.stderr


def test_a_read_only_role_reads_and_a_write_is_a_one_line_refusal(
        pg_url: str, pg_server: Any) -> None:
    assert cli("init", "--ledger", pg_url).returncode == 0
    batch = cli("--batch", "-", "--ledger", pg_url, stdin=ops(fact("acct:1", "plan", "basic")))
    fact_id = json.loads(batch.stdout)["result"]["fact_id"]
    import psycopg

    database = urlsplit(pg_url).path.lstrip("/")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'reader') "
                     "THEN CREATE ROLE reader LOGIN; END IF; END $$")
        conn.execute(f'GRANT CONNECT ON DATABASE "{database}" TO reader')
        for schema in ("custody", "custody_keys"):
            conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO reader")
            conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO reader")
    reader = pg_url.replace("postgresql://custody@", "postgresql://reader@", 1)
    read = cli("verify", "--ledger", reader, "--json")
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout)["valid"] is True
    shown = cli("beliefs", "--ledger", reader, "--json")
    assert shown.returncode == 0 and fact_id in shown.stdout, shown.stderr
    for args in (("hold", fact_id, "--reason", "audit"), ("checkpoint",)):
        done = cli(*args, "--ledger", reader)
        assert done.returncode in (1, 3), done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert re.search(r"\((postgres_denied|read_only|[a-z_]+)\)$", lines[0]), lines
    assert "denied" in cli("hold", fact_id, "--reason", "a", "--ledger", reader).stderr
