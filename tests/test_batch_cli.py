"""The real console script in subprocesses: --batch framing, exit codes, the sample story, and the
verify / why / history subcommands, on real ledger files (DESIGN sections 9, 10 and 11)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from custody_app import Ledger
from custody_app.domain.resources import sample_batch_path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_data" / "support_agent.jsonl"
ASSERT_FIELDS = '"subject":"acct:1042","predicate":"tier_note","value":"gold","actor":"agent:support-bot"'
CAUSE = '"cause":{"kind":"message","ref":"msg_test_1"}'


def _env() -> dict[str, str]:
    """The caller's environment without ledger/policy overrides, so every run is explicit."""
    return {k: v for k, v in os.environ.items() if k not in ("CUSTODY_LEDGER", "CUSTODY_POLICY")}


def cli(*args: str | Path, stdin: str | None = None, cwd: Path | None = None
        ) -> subprocess.CompletedProcess[str]:
    """Run `custody-app ARGS` as a real process with this interpreter."""
    return subprocess.run([sys.executable, "-m", "custody_app", *map(str, args)], input=stdin,
                          capture_output=True, text=True, timeout=120, cwd=cwd, env=_env())


def results(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """Every stdout line is one JSON object."""
    return [json.loads(line) for line in done.stdout.splitlines()]


def batch(ledger: Path, text: str, *flags: str) -> subprocess.CompletedProcess[str]:
    """Run a batch given as text (written to a file beside the ledger)."""
    file = ledger.with_name(f"{ledger.name}.{abs(hash(text))}.jsonl")
    file.write_text(text, encoding="utf-8")
    return cli("--create", "--batch", file, "--ledger", ledger, *flags, cwd=ledger.parent)


def op_lines(text: str) -> list[int]:
    """Physical numbers of the lines that carry an op (not blank, not a # comment)."""
    return [n for n, line in enumerate(text.splitlines(), start=1)
            if line.strip() and not line.strip().startswith("#")]


def snapshot(path: Path) -> tuple[Any, ...]:
    """What a refused op must leave untouched: the event count, the chain head, the projection."""
    with Ledger.open(path, readonly=True) as ledger:
        report = ledger.verify()
        assert report.valid, report.problem
        return report.events, report.head, ledger.db.facts.dump()


def copy_ledger(src: Path, dst: Path) -> Path:
    """The ledger file, its WAL, and its key store with the master key file."""
    for suffix in ("", "-wal", ".keys", ".keys.master"):
        if Path(f"{src}{suffix}").exists():
            shutil.copyfile(f"{src}{suffix}", f"{dst}{suffix}")
    return dst


@dataclass
class Replay:
    path: Path
    done: subprocess.CompletedProcess[str]
    out: list[dict[str, Any]]

    def by_id(self, op_id: str) -> dict[str, Any]:
        [found] = [r for r in self.out if r["id"] == op_id]
        return found

    def fact(self, op_id: str) -> str:
        return str(self.by_id(op_id)["result"]["fact_id"])

    def fact_on_line(self, text: str) -> str:
        """The fact id of the sample's assert whose line contains `text`."""
        lines = SAMPLE.read_text(encoding="utf-8").splitlines()
        [number] = [n for n, line in enumerate(lines, start=1) if text in line]
        [found] = [r for r in self.out if r["line"] == number]
        return str(found["result"]["fact_id"])

    def copy(self, tmp_path: Path) -> Path:
        return copy_ledger(self.path, tmp_path / "ledger.db")


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Replay:
    """The sample replayed once into a ledger; tests that write copy it first."""
    path = tmp_path_factory.mktemp("sample") / "support.db"
    done = cli("--create", "--batch", SAMPLE, "--ledger", path, "--manual-clock", cwd=path.parent)
    return Replay(path, done, results(done))


@pytest.fixture
def ledger_copy(replayed: Replay, tmp_path: Path) -> Path:
    return replayed.copy(tmp_path)


# ---- the sample file ------------------------------------------------------------------------

def test_sample_replays_cleanly_on_physical_lines(replayed: Replay) -> None:
    assert replayed.done.returncode == 0, replayed.done.stderr
    # Only the run's one-line summary (issue 32): every op ok.
    [line] = replayed.done.stderr.splitlines()
    assert line.startswith("custody-app: batch: ") and " 0 failed" in line
    text = SAMPLE.read_text(encoding="utf-8")
    assert [r["line"] for r in replayed.out] == op_lines(text)
    bad = [r for r in replayed.out if r["ok"] is not True]
    assert bad == []
    # ids are echoed, and null when the line has none
    sent = [json.loads(line) for line in text.splitlines()
            if line.strip() and not line.strip().startswith("#")]
    assert [r["id"] for r in replayed.out] == [s.get("id") for s in sent]
    assert [r["op"] for r in replayed.out] == [s["op"] for s in sent]
    assert replayed.by_id("final-verify")["result"]["valid"] is True


def test_verify_subcommand_after_replay(replayed: Replay) -> None:
    done = cli("verify", "--json", "--ledger", replayed.path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["valid"] is True
    assert report["events"] == snapshot(replayed.path)[0] > 50


def test_sample_covers_the_protocol() -> None:
    """The demo's data exercises every actor kind, cause kind, space and op of this version."""
    ops = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()
           if line.strip() and not line.strip().startswith("#")]
    assert len(ops) >= 70
    asserts = [o for o in ops if o["op"] == "assert"]
    assert {o["actor"].split(":")[0] for o in ops if "actor" in o} == {
        "user", "agent", "llm", "reviewer", "system", "rule"}
    assert {o["cause"]["kind"] for o in asserts} == {
        "message", "tool", "document", "manual", "rule", "import"}
    assert {"org", "team:support", "user:88"} <= {o.get("space") for o in asserts}
    assert {"assert", "retract", "confirm", "reject", "affirm", "as_of", "history", "why",
            "verify", "clock"} <= {o["op"] for o in ops}
    assert all("llm" in o for o in asserts if o["actor"].startswith("llm:"))
    assert any("sources" in o for o in asserts) and any("supersedes" in o for o in asserts)
    clocks = [o["set"] for o in ops if o["op"] == "clock"]
    assert clocks == sorted(clocks) and clocks[0] < clocks[-1]


def test_demo_replays_the_sample_file() -> None:
    assert sample_batch_path().resolve() == SAMPLE.resolve()


# ---- the sample's story -----------------------------------------------------------------------

def test_sample_story_in_its_own_reads(replayed: Replay) -> None:
    def predicates(op_id: str) -> list[str]:
        return [f["predicate"] for f in replayed.by_id(op_id)["result"]["facts"]]

    assert "refund_approved" in predicates("acme-thursday")
    assert "refund_approved" in predicates("acme-friday-6th")
    assert "refund_approved" not in predicates("acme-now")
    assert "vip" not in predicates("acme-now")
    [plan] = replayed.by_id("acme-plan-february")["result"]["facts"]
    assert plan["value"]["tier"] == "team" and plan["valid_to"] == "2026-03-01T00:00:00.000000Z"
    [plan] = replayed.by_id("acme-plan-5th-now")["result"]["facts"]
    assert plan["value"]["tier"] == "business"
    [plan] = replayed.by_id("acme-plan-5th-then")["result"]["facts"]
    assert plan["value"]["tier"] == "team"
    [plan] = replayed.by_id("globex-mistake")["result"]["facts"]
    assert plan["value"]["tier"] == "business" and plan["actor"] == "user:tomas"
    [plan] = replayed.by_id("globex-now")["result"]["facts"]
    assert plan["value"]["tier"] == "starter"
    [addr] = replayed.by_id("acme-address-pending")["result"]["facts"]
    assert addr["value"]["street"] == "Hafenstrasse 12"
    [addr] = replayed.by_id("acme-address-incl-claims")["result"]["facts"]
    assert addr["value"]["street"] == "Am Sandtorkai 50" and addr["status"] == "quarantined"
    jonas = replayed.by_id("jonas-space")["result"]["facts"]
    assert [(f["predicate"], f["value"]) for f in jonas] == [("preferred_language", "de")]


def test_poisoned_fact_absent_now_but_believed_before_its_retraction(
        replayed: Replay, ledger_copy: Path) -> None:
    poison = replayed.fact("poisoned-refund")
    retracted_at = replayed.by_id("retract-poison")["result"]["tx_at"]
    assert retracted_at == "2026-03-09T08:40:00.000000Z"
    before = "2026-03-09T08:39:59.999999Z"
    text = "\n".join([
        "# reads after the replay: the clock only moves forward; reads name their moments",
        '{"op":"clock","set":"2026-04-01T09:00:00Z"}',
        '{"id":"now","op":"as_of","subject":"acct:1042"}',
        '{"id":"now-claimed","op":"as_of","subject":"acct:1042","include":"claimed"}',
        f'{{"id":"before","op":"as_of","subject":"acct:1042","tx_at":"{before}"}}',
        f'{{"id":"at","op":"as_of","subject":"acct:1042","tx_at":"{retracted_at}"}}',
        f'{{"id":"h","op":"history","fact_id":"{poison}"}}',
        f'{{"id":"w","op":"why","fact_id":"{poison}"}}',
    ]) + "\n"
    done = batch(ledger_copy, text, "--manual-clock")
    assert done.returncode == 0, done.stdout + done.stderr
    out = {r["id"]: r["result"] for r in results(done)}
    assert poison not in [f["fact_id"] for f in out["now"]["facts"]]
    assert poison not in [f["fact_id"] for f in out["now-claimed"]["facts"]]
    assert poison not in [f["fact_id"] for f in out["at"]["facts"]]
    [seen] = [f for f in out["before"]["facts"] if f["fact_id"] == poison]
    assert seen["value"]["amount_eur"] == 2268 and seen["status"] == "active"
    assert seen["actor"] == "agent:support-bot"
    assert [e["kind"] for e in out["h"]["events"]] == ["assert", "retract"]
    assert out["h"]["status"] == "retracted"
    retract = out["h"]["events"][1]
    assert retract["actor"] == "user:maria" and "prompt injection" in retract["reason"]
    # The summary built on it is named as a dependent.
    summary_v1 = replayed.fact_on_line('"ref":"summary_v1"')
    assert summary_v1 in [d["fact_id"] for d in out["w"]["dependents"]]
    assert out["w"]["cause"] == {"kind": "tool", "ref": "call_web_5f2e91", "detail":
                                 "web.fetch(https://track-dhl-parcel.info/JJD0001490082541)"}


def test_retracted_replacement_restores_the_old_value(replayed: Replay) -> None:
    old = replayed.fact("crm-globex-plan")
    wrong = replayed.fact("tomas-mistake")
    done = batch(replayed.path, "\n".join([
        '{"id":"now","op":"as_of","subject":"acct:2077","predicate":"plan"}',
        '{"id":"then","op":"as_of","subject":"acct:2077","predicate":"plan",'
        '"valid_at":"2026-03-12T12:00:00Z","tx_at":"2026-03-12T12:00:00Z"}',
        f'{{"id":"h","op":"history","fact_id":"{old}"}}',
    ]) + "\n")
    assert done.returncode == 0, done.stdout + done.stderr
    out = {r["id"]: r["result"] for r in results(done)}
    assert [(f["fact_id"], f["status"], f["valid_to"]) for f in out["now"]["facts"]] == [
        (old, "active", None)]
    assert [f["fact_id"] for f in out["then"]["facts"]] == [wrong]
    assert out["h"]["status"] == "active"
    assert [(e["kind"], e.get("fact_id")) for e in out["h"]["events"]] == [
        ("assert", old), ("assert", wrong)]


# ---- failed ops --------------------------------------------------------------------------------

FAILURES = [
    # (case, line, code, expected op, text the message must contain, extra flags)
    ("bad_json", '{"op": "assert", "subject": ', "bad_json", None, "not JSON", ()),
    ("array", '[{"op": "verify"}]', "bad_request", None, "not a JSON object", ()),
    ("no_op", '{"id": "x-1", "subject": "acct:1042"}', "bad_request", None, "'op'", ()),
    ("unknown_op", '{"id": 17, "op": "upsert"}', "unknown_op", "upsert", "upsert", ()),
    ("missing_cause", f'{{"op":"assert",{ASSERT_FIELDS}}}', "bad_request", "assert", "'cause'", ()),
    ("extra_field", f'{{"op":"assert",{ASSERT_FIELDS},{CAUSE},"confidence":0.9}}',
     "bad_request", "assert", "'confidence'", ()),
    ("naive_time", f'{{"op":"assert",{ASSERT_FIELDS},{CAUSE},"valid_from":"2026-03-05T12:00:00"}}',
     "invalid_time", "assert", "2026-03-05T12:00:00", ()),
    ("unknown_alias", '{"op":"retract","fact_id":"@nope","actor":"user:maria","reason":"test"}',
     "unknown_alias", "retract", "@nope", ()),
    ("unknown_fact", '{"op":"retract","fact_id":"f_00000000dead","actor":"user:maria","reason":"x"}',
     "unknown_fact", "retract", "f_00000000dead", ()),
    ("bad_actor", '{"op":"assert","subject":"acct:1042","predicate":"tier_note","value":"gold",'
     f'"actor":"robot:r2",{CAUSE}}}', "invalid_actor", "assert", "robot:r2", ()),
    ("clock_disabled", '{"op":"clock","set":"2026-04-01T00:00:00Z"}', "manual_clock_disabled",
     "clock", "--manual-clock", ()),
    ("clock_backwards", '{"op":"clock","set":"2026-03-01T00:00:00Z"}', "clock_backwards", "clock",
     "2026-03-01", ("--manual-clock",)),
    ("null_value", '{"op":"assert","subject":"acct:1042","predicate":"tier_note","value":null,'
     f'"actor":"agent:support-bot",{CAUSE}}}', "bad_request", "assert", "value", ()),
    ("llm_without_block", '{"op":"assert","subject":"acct:1042","predicate":"tier_note",'
     f'"value":"gold","actor":"llm:claude-haiku",{CAUSE}}}', "llm_block", "assert", "llm", ()),
]


@pytest.mark.parametrize(("line", "code", "op", "needle", "flags"),
                         [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES])
def test_failed_op_is_reported_and_writes_nothing(
        ledger_copy: Path, line: str, code: str, op: str | None, needle: str,
        flags: tuple[str, ...]) -> None:
    before = snapshot(ledger_copy)
    done = batch(ledger_copy, f"# one refused op\n\n{line}\n", *flags)
    assert done.returncode == 1, done.stdout + done.stderr
    [out] = results(done)
    sent_id = None
    try:
        sent = json.loads(line)
        sent_id = sent.get("id") if isinstance(sent, dict) else None
    except ValueError:
        pass
    assert out["line"] == 3
    assert out["id"] == sent_id
    assert out["op"] == op
    assert out["ok"] is False
    assert "result" not in out
    assert out["error"]["code"] == code
    message = out["error"]["message"]
    assert isinstance(message, str) and "\n" not in message and needle in message
    assert snapshot(ledger_copy) == before


def test_lifecycle_refusals_write_nothing(replayed: Replay, ledger_copy: Path) -> None:
    poison = replayed.fact("poisoned-refund")
    tz_claim = replayed.fact_on_line('"predicate":"timezone"')
    plan = replayed.fact("crm-acme-plan")
    before = snapshot(ledger_copy)
    text = "\n".join([
        f'{{"id":"a","op":"retract","fact_id":"{poison}","actor":"user:maria","reason":"again"}}',
        f'{{"id":"b","op":"confirm","fact_id":"{tz_claim}","actor":"agent:support-bot"}}',
        f'{{"id":"c","op":"confirm","fact_id":"{plan}","actor":"reviewer:dana"}}',
        f'{{"id":"d","op":"assert","subject":"acct:1042","predicate":"plan","value":"x",'
        f'"supersedes":"{plan}","actor":"user:maria",{CAUSE}}}',
        f'{{"id":"e","op":"assert","subject":"acct:2077","predicate":"plan","value":"x",'
        f'"supersedes":"{replayed.fact("crm-acme-upgrade")}","actor":"user:maria",{CAUSE}}}',
        f'{{"id":"f","op":"affirm","fact_id":"{poison}","actor":"agent:support-bot"}}',
    ]) + "\n"
    done = batch(ledger_copy, text)
    assert done.returncode == 1
    codes = {r["id"]: r["error"]["code"] for r in results(done)}
    assert codes == {"a": "already_retracted", "b": "not_reviewer", "c": "not_quarantined",
                     "d": "already_superseded", "e": "supersede_mismatch", "f": "fact_retracted"}
    assert snapshot(ledger_copy) == before


def test_failures_on_a_fresh_ledger_write_no_event(tmp_path: Path) -> None:
    """Not even the policy event: it comes with the first write that succeeds."""
    ledger = tmp_path / "fresh.db"
    done = batch(ledger, "".join(f[1] + "\n" for f in FAILURES))
    assert done.returncode == 1
    out = results(done)
    assert [r["line"] for r in out] == list(range(1, len(FAILURES) + 1))
    assert all(r["ok"] is False for r in out)
    assert snapshot(ledger)[:2] == (0, None)


def test_exit_code_1_when_one_op_fails_and_the_others_still_run(ledger_copy: Path) -> None:
    before = snapshot(ledger_copy)
    text = (f'{{"id":"ok-1","op":"assert",{ASSERT_FIELDS},{CAUSE}}}\n'
            '{"id":"bad","op":"upsert"}\n'
            f'{{"id":"ok-2","op":"assert",{ASSERT_FIELDS},{CAUSE},"provenance":"attested"}}\n')
    done = batch(ledger_copy, text)
    assert done.returncode == 1
    assert [(r["id"], r["ok"]) for r in results(done)] == [
        ("ok-1", True), ("bad", False), ("ok-2", True)]
    # Two asserts, then the signed checkpoint that ends every run that wrote.
    assert snapshot(ledger_copy)[0] == before[0] + 3


def test_fail_fast_stops_at_the_first_failure(ledger_copy: Path) -> None:
    before = snapshot(ledger_copy)
    text = "\n".join([
        "# fail-fast",
        '{"id":"v","op":"verify"}',
        f'{{"id":"w1","op":"assert",{ASSERT_FIELDS},{CAUSE}}}',
        "",
        '{"id":"boom","op":"retract","fact_id":"f_00000000dead","actor":"user:maria","reason":"x"}',
        f'{{"id":"w2","op":"assert",{ASSERT_FIELDS},{CAUSE}}}',
        '{"id":"later-bad","op":"upsert"}',
        '{"id":"v2","op":"verify"}',
    ]) + "\n"
    done = batch(ledger_copy, text, "--fail-fast")
    assert done.returncode == 1
    assert [(r["line"], r["id"], r["ok"]) for r in results(done)] == [
        (2, "v", True), (3, "w1", True), (5, "boom", False)]
    stop, summary = done.stderr.splitlines()  # the stop, then the run's summary (issue 32)
    assert "line 5" in stop and "unknown_fact" in stop and "f_00000000dead" in stop
    # (after "; ": the sample's facts still waiting for their vector, test_batch_embedding)
    assert summary.split("; ")[0] == ("custody-app: batch: 3 op(s), 2 ok, 1 failed "
                                      "(unknown_fact 1), stopped at the first failure")
    # w1 and the run's closing signed checkpoint; w2 never ran.
    assert snapshot(ledger_copy)[0] == before[0] + 2


def test_without_fail_fast_every_line_is_reported(ledger_copy: Path) -> None:
    text = '{"op":"upsert"}\n{"op":"verify"}\n{"op":"upsert"}\n'
    done = batch(ledger_copy, text)
    assert done.returncode == 1
    assert [(r["line"], r["ok"]) for r in results(done)] == [(1, False), (2, True), (3, False)]
    [line] = done.stderr.splitlines()
    assert line.split("; ")[0] == "custody-app: batch: 3 op(s), 1 ok, 2 failed (unknown_op 2)"


# ---- opening, usage and stdin ---------------------------------------------------------------------

def test_ledger_path_that_is_a_directory_exits_3(tmp_path: Path) -> None:
    folder = tmp_path / "adir"
    folder.mkdir()
    done = batch(folder, '{"op":"verify"}\n')
    assert done.returncode == 3
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and "adir" in done.stderr


def test_file_that_is_not_sqlite_exits_3(tmp_path: Path) -> None:
    junk = tmp_path / "notes.db"
    junk.write_text("these are not the droids you are looking for\n" * 200)
    done = batch(junk, '{"op":"verify"}\n')
    assert done.returncode == 3 and done.stdout == ""
    assert "notes.db" in done.stderr
    assert junk.read_text().startswith("these are not")


def test_sqlite_file_of_another_app_exits_3(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE todo (id INTEGER PRIMARY KEY, title TEXT)")
    done = batch(other, '{"op":"verify"}\n')
    assert done.returncode == 3 and done.stdout == ""
    assert "other.db" in done.stderr and "not a custody-app ledger" in done.stderr
    assert cli("verify", "--ledger", other).returncode == 3


@pytest.mark.parametrize(("toml", "key"), [
    ('[review]\nreviewer_kinds = ["wizard"]\n', "reviewer_kinds"),
    ('version = 1\nretention_days = 30\n', "retention_days"),
    ('[erasure]\ndigest = "md5"\n', "erasure.digest"),
], ids=["bad_reviewer_kind", "unknown_key", "bad_digest"])
def test_bad_policy_exits_3_naming_file_and_key(tmp_path: Path, toml: str, key: str) -> None:
    policy = tmp_path / "strict.toml"
    policy.write_text(toml)
    ledger = tmp_path / "p.db"
    done = batch(ledger, '{"op":"verify"}\n', "--policy", str(policy))
    assert done.returncode == 3
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert "strict.toml" in line and key in line and "policy_invalid" in line
    assert not ledger.exists()


def test_missing_policy_file_exits_3(tmp_path: Path) -> None:
    done = batch(tmp_path / "p.db", '{"op":"verify"}\n', "--policy", str(tmp_path / "gone.toml"))
    assert done.returncode == 3 and "gone.toml" in done.stderr


def test_missing_batch_file_exits_2_and_creates_no_ledger(tmp_path: Path) -> None:
    ledger = tmp_path / "never.db"
    done = cli("--create", "--batch", tmp_path / "nothing.jsonl", "--ledger", ledger, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == "" and "nothing.jsonl" in done.stderr
    assert not ledger.exists()


def test_batch_from_stdin(tmp_path: Path) -> None:
    ledger = tmp_path / "stdin.db"
    text = "\n".join([
        "# from a pipe",
        '{"op":"clock","set":"2026-05-04T10:00:00+02:00"}',
        f'{{"id":"w","op":"assert","ref":"n","provenance":"attested",{ASSERT_FIELDS},{CAUSE}}}',
        "   ",
        '{"id":"r","op":"as_of","subject":"acct:1042"}',
        '{"id":"h","op":"history","fact_id":"@n"}',
    ]) + "\n"
    done = cli("--create", "--batch", "-", "--ledger", ledger, "--manual-clock", stdin=text, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = results(done)
    assert [(r["line"], r["id"]) for r in out] == [(2, None), (3, "w"), (5, "r"), (6, "h")]
    written = out[1]["result"]
    assert written["tx_at"] == "2026-05-04T08:00:00.000000Z"
    assert written["status"] == "active" and written["provenance"] == "attested"
    [fact] = out[2]["result"]["facts"]
    assert fact["fact_id"] == written["fact_id"] and fact["value"] == "gold"
    assert out[3]["result"]["fact_id"] == written["fact_id"]
    # The policy event, the assert, and the signed checkpoint that closes the run.
    assert snapshot(ledger)[0] == 3
    with Ledger.open(ledger, readonly=True) as opened:
        assert [e.kind for e in opened.events()] == ["policy", "assert", "checkpoint"]


def _batch_then(tmp_path: Path, lines: str, after: str) -> str:
    """Run a `--batch` of `lines` through the CLI's main in a fresh interpreter, then `after`
    (Python, in the same process); the last line it prints."""
    file = tmp_path / "ops.jsonl"
    file.write_text(lines)
    code = (
        "import sys\n"
        "from custody_app.interfaces.cli.main import main\n"
        f"rc = main(['--batch', {str(file)!r}, '--create', '--ledger', "
        f"{str(tmp_path / 't.db')!r}])\n"
        "assert rc == 0, rc\n" + after)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, env=_env())
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()[-1]


def test_batch_never_imports_textual(tmp_path: Path) -> None:
    assert _batch_then(
        tmp_path, f'{{"op":"assert",{ASSERT_FIELDS},{CAUSE}}}\n{{"op":"verify"}}\n',
        "loaded = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "assert not loaded, loaded\n"
        "print('no textual')\n") == "no textual"


def test_batch_never_builds_the_validators_of_models_it_does_not_use(tmp_path: Path) -> None:
    # Start-up (issue 35): the read models, commands and events are built on first use
    # (defer_build), so a batch of asserts builds neither the evidence read models nor the
    # commands it never runs; what it runs is built and validates as ever.
    assert _batch_then(
        tmp_path, f'{{"op":"assert",{ASSERT_FIELDS},{CAUSE}}}\n',
        "from custody_app.domain import commands, readmodels\n"
        "from custody_app.evidence import readmodels as evidence\n"
        "built = {m.__name__: m.__pydantic_complete__ for m in (commands.AssertFact,"
        " readmodels.AssertResult, commands.Forget, commands.Blast, evidence.ActResult)}\n"
        "print(sorted(name for name, done in built.items() if done))\n"
    ) == "['AssertFact', 'AssertResult']"


# ---- why and history ------------------------------------------------------------------------------

def test_why_subcommand_prints_json(replayed: Replay) -> None:
    summary = replayed.fact_on_line('"ref":"summary_v3"')
    before = snapshot(replayed.path)
    done = cli("why", summary, "--json", "--ledger", replayed.path)
    assert done.returncode == 0, done.stderr
    why = json.loads(done.stdout)
    assert why["fact"]["fact_id"] == summary and why["fact"]["status"] == "active"
    assert why["actor"] == "llm:claude-haiku"
    assert why["llm"]["model"] == "claude-3-5-haiku-20241022" and why["llm"]["tokens"] == 2011
    assert why["cause"]["ref"] == "call_summarise_4a7b30"
    assert replayed.fact("crm-acme-upgrade") in [s["fact_id"] for s in why["sources"]]
    assert [s["status"] for s in why["supersedes"]] == ["superseded", "superseded"]
    assert [(r["kind"], r["actor"]) for r in why["reviews"]] == [("confirm", "reviewer:dana")]
    assert "reviewer_kinds" in why["policy"]["source"] and why["events_verified"] is True
    assert snapshot(replayed.path) == before


def test_history_subcommand_prints_json(replayed: Replay) -> None:
    address = replayed.fact("crm-acme-addr")
    done = cli("history", address, "--json", "--ledger", replayed.path)
    assert done.returncode == 0, done.stderr
    history = json.loads(done.stdout)
    assert history["fact_id"] == address and history["status"] == "superseded"
    kinds = [(e["kind"], e["actor"]) for e in history["events"]]
    assert kinds == [("assert", "system:crm-sync"), ("assert", "agent:support-bot")]
    assert history["events"][1]["value"]["street"] == "Am Sandtorkai 50"
    seqs = [e["seq"] for e in history["events"]]
    assert seqs == sorted(seqs)


@pytest.mark.parametrize("command", ["why", "history"])
def test_unknown_fact_exits_1_naming_it(replayed: Replay, command: str) -> None:
    done = cli(command, "f_0000feedface", "--ledger", replayed.path)
    assert done.returncode == 1
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert "f_0000feedface" in line and "unknown_fact" in line


def test_two_clock_ops_cannot_go_backwards_even_without_a_write_between(tmp_path: Path) -> None:
    batch = tmp_path / "clock.jsonl"
    batch.write_text('{"op":"clock","set":"2026-05-02T00:00:00Z"}\n'
                     '{"op":"clock","set":"2026-05-01T00:00:00Z"}\n')
    done = subprocess.run([sys.executable, "-m", "custody_app", "--create", "--batch", str(batch),
                           "--ledger", str(tmp_path / "l.db"), "--manual-clock"],
                          capture_output=True, text=True, timeout=60)
    first, second = (json.loads(line) for line in done.stdout.splitlines())
    assert first["ok"] and not second["ok"]
    assert second["error"]["code"] == "clock_backwards"
    assert done.returncode == 1
