"""The command line's one grammar (DESIGN 11 and 14), in real subprocesses on real ledger files:
the policy in force (recorded, adopted only when named, never by a read), which commands may
create a ledger, --json/text, --actor, paging, exit codes, correct and affirm, and the batch
summary."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from custody_app import Ledger
from custody_app.domain.errors import LedgerError
from custody_app.domain.policy import load_policy
from custody_app.interfaces.tui.access import LedgerAccess
from tests.conftest import SUITE_DEFAULT_POLICY

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = SUITE_DEFAULT_POLICY.read_text(encoding="utf-8")
CAUSE = {"kind": "message", "ref": "msg_1"}


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("CUSTODY_LEDGER", "CUSTODY_POLICY", "CUSTODY_REVIEWER", "CUSTODY_CONFIG")}


def cli(*args: str | Path, stdin: str | None = None, cwd: Path | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "custody_app", *map(str, args)], input=stdin,
                          capture_output=True, text=True, timeout=120, cwd=cwd, env=_env(),
                          stdin=None if stdin is not None else subprocess.DEVNULL)


def ops(*lines: dict[str, Any]) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


def claim(subject: str = "acct:1", predicate: str = "plan", value: Any = "basic",
          **extra: Any) -> dict[str, Any]:
    return {"op": "assert", "subject": subject, "predicate": predicate, "value": value,
            "actor": "agent:bot", "cause": CAUSE, "provenance": "claimed", **extra}


def policy_file(folder: Path, space: str, name: str = "custom.toml") -> Path:
    path = folder / name
    path.write_text(DEFAULT.replace('default_space = "org"', f'default_space = "{space}"'),
                    encoding="utf-8")
    return path


def policy_events(ledger: Path) -> list[str]:
    with Ledger.open(ledger, readonly=True) as led, led.db.read():
        return [h for _, _, h in led.db.events.policy_changes()]


def file_digest(path: Path) -> str:
    out = hashlib.sha256()
    for name in (str(path), f"{path}-wal", f"{path}.keys"):
        if os.path.exists(name):
            out.update(Path(name).read_bytes())
    return out.hexdigest()


@pytest.fixture
def custom(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """A ledger initialised under a custom policy, with two claims written under it."""
    policy = policy_file(tmp_path, "team:a")
    ledger = tmp_path / "l.db"
    done = cli("init", "--ledger", ledger, "--policy", policy)
    assert done.returncode == 0, done.stderr
    done = cli("--batch", "-", "--ledger", ledger, "--policy", policy,
               stdin=ops(claim(), claim("acct:2")))
    assert done.returncode == 0, done.stderr
    facts = [json.loads(line)["result"]["fact_id"] for line in done.stdout.splitlines()]
    return ledger, policy, facts


# ---- policy in force --------------------------------------------------------------------------

def test_init_records_its_policy_and_a_write_without_policy_keeps_it(
        custom: tuple[Path, Path, list[str]]) -> None:
    ledger, policy, facts = custom
    wanted = load_policy(policy).hash
    assert policy_events(ledger) == [wanted]
    done = cli("confirm", facts[0], "--ledger", ledger)
    assert done.returncode == 0, done.stderr
    assert "adopted" not in done.stderr
    done = cli("--batch", "-", "--ledger", ledger, stdin=ops(claim("acct:3")))
    assert done.returncode == 0, done.stderr
    assert policy_events(ledger) == [wanted]  # never the shipped default, silently
    # The write used the recorded policy's rules: its default space.
    assert json.loads(cli("beliefs", "--subject", "acct:1", "--json", "--ledger",
                          ledger).stdout)["facts"][0]["space"] == "team:a"


def test_a_write_given_another_policy_adopts_it_and_says_so(
        custom: tuple[Path, Path, list[str]], tmp_path: Path) -> None:
    ledger, policy, facts = custom
    other = policy_file(tmp_path, "team:b", "other.toml")
    done = cli("confirm", facts[0], "--ledger", ledger, "--policy", other)
    assert done.returncode == 0, done.stderr
    assert "adopted policy " + load_policy(other).hash[:12] in done.stderr
    assert policy_events(ledger) == [load_policy(policy).hash, load_policy(other).hash]
    # From then on the adopted one is in force for commands without --policy.
    done = cli("confirm", facts[1], "--ledger", ledger)
    assert done.returncode == 0 and "adopted" not in done.stderr
    assert len(policy_events(ledger)) == 2


def test_a_policy_file_swapped_under_a_read_only_command_is_never_adopted(
        custom: tuple[Path, Path, list[str]]) -> None:
    ledger, policy, facts = custom
    recorded = load_policy(policy).hash
    policy.write_text(DEFAULT.replace('default_space = "org"', 'default_space = "evil"'),
                      encoding="utf-8")  # the file the ledger was initialised with, edited
    before = file_digest(ledger)
    for command in (["beliefs"], ["verify"], ["queue"], ["history", facts[0]],
                    ["beliefs", "--policy", policy], ["verify", "--policy", policy]):
        done = cli(*command, "--ledger", ledger)
        assert done.returncode == 0, (command, done.stderr)
        assert "adopted policy" not in done.stderr
        if "--policy" in command:  # read under it, and told it was not adopted
            assert "not adopted" in done.stderr
    assert file_digest(ledger) == before and policy_events(ledger) == [recorded]
    # A write without --policy uses the stored text, not the edited file.
    assert cli("confirm", facts[0], "--ledger", ledger).returncode == 0
    assert policy_events(ledger) == [recorded]


def test_a_stored_policy_text_that_was_replaced_is_refused_not_swapped(
        custom: tuple[Path, Path, list[str]]) -> None:
    ledger, policy, facts = custom
    import sqlite3
    with sqlite3.connect(ledger) as conn:
        conn.execute("UPDATE policies SET source = replace(source, 'team:a', 'team:z')")
    before = file_digest(ledger)
    done = cli("confirm", facts[0], "--ledger", ledger)
    assert done.returncode == 3 and "policy_tampered" in done.stderr
    assert file_digest(ledger) == before
    # A read-only command still opens it, adopting nothing, so verify can name the edit.
    check = cli("verify", "--ledger", ledger)
    assert check.returncode == 1 and "policy" in check.stdout, check.stdout + check.stderr
    assert file_digest(ledger) == before
    # The Python API opens it read-write to verify, but a write records no policy in its place.
    with Ledger.open(ledger) as led:
        assert not led.verify().valid
        with pytest.raises(LedgerError) as refused:
            led.assert_fact("acct:9", "plan", "x", actor="user:a", cause=CAUSE)
        assert refused.value.code == "policy_tampered"
    assert policy_events(ledger) == [load_policy(policy).hash]


def test_the_terminal_app_without_policy_follows_the_ledgers_policy(
        custom: tuple[Path, Path, list[str]]) -> None:
    ledger, policy, facts = custom
    access = LedgerAccess.create(ledger, None, reviewer="user:rev")
    assert access.policy.hash == load_policy(policy).hash
    with access.open() as led:
        led.confirm(facts[0], actor="user:rev")
    assert policy_events(ledger) == [load_policy(policy).hash]
    assert access.watched_files == [os.path.abspath(ledger), os.path.abspath(f"{ledger}-wal")]


# ---- only init, --demo and --create create a ledger -------------------------------------------

def _listing(folder: Path) -> dict[str, bytes]:
    return {p.name: (p.read_bytes() if p.is_file() and not p.is_symlink() else b"")
            for p in folder.iterdir()}


SERVE = ("serve", "--agent", "agent:bot")


@pytest.mark.parametrize("command", [("--batch", "-"), SERVE, ("beliefs",), ("confirm", "f_x")])
def test_a_mistyped_ledger_is_refused_naming_the_nearest_and_init(
        tmp_path: Path, command: tuple[str, ...]) -> None:
    assert cli("init", "--ledger", tmp_path / "support-memory.db").returncode == 0
    (tmp_path / "notes.db").write_bytes(b"not a ledger")
    before = _listing(tmp_path)
    done = cli(*command, "--ledger", tmp_path / "suport-memory.db", stdin='{"op":"verify"}\n')
    assert done.returncode == 3, done.stderr
    assert f"did you mean {tmp_path / 'support-memory.db'}" in done.stderr
    assert "custody-app init --ledger" in done.stderr and "ledger_missing" in done.stderr
    assert _listing(tmp_path) == before  # no empty ledger, no key files


def test_the_nearest_ledger_is_named_even_when_the_name_is_far(tmp_path: Path) -> None:
    assert cli("init", "--ledger", tmp_path / "agents.db").returncode == 0
    done = cli("--batch", "-", "--ledger", tmp_path / "memory.db", stdin="")
    assert done.returncode == 3 and f"did you mean {tmp_path / 'agents.db'}" in done.stderr


def test_create_on_batch_creates_explicitly(tmp_path: Path) -> None:
    done = cli("--batch", "-", "--create", "--ledger", tmp_path / "new.db",
               stdin=ops(claim()))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "new.db").exists() and (tmp_path / "new.db.keys").exists()


def _hostile_path(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "l.db"
    if kind == "directory":
        path.mkdir()
    elif kind == "dangling symlink":
        path.symlink_to(tmp_path / "elsewhere" / "gone.db")
    else:
        path.write_bytes(b"SQLite? no: just some bytes\n" * 200)
    return path


@pytest.mark.parametrize("kind", ["directory", "dangling symlink", "not SQLite"])
@pytest.mark.parametrize("command", [("--batch", "-"), ("--batch", "-", "--create"), SERVE,
                                     (*SERVE, "--create"), ("verify",), ("confirm", "f_x")])
def test_a_ledger_path_that_is_no_ledger_is_refused_and_nothing_created(
        tmp_path: Path, kind: str, command: tuple[str, ...]) -> None:
    path = _hostile_path(tmp_path, kind)
    before = _listing(tmp_path)
    done = cli(*command, "--ledger", path, stdin='{"op":"verify"}\n')
    assert done.returncode == 3, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and str(path) in done.stderr
    assert _listing(tmp_path) == before and not (tmp_path / "elsewhere").exists()


# ---- batch: the summary line, and what redaction masked ---------------------------------------

def test_every_batch_run_ends_with_a_one_line_summary(tmp_path: Path) -> None:
    ledger = tmp_path / "l.db"
    assert cli("init", "--ledger", ledger).returncode == 0
    done = cli("--batch", "-", "--ledger", ledger, stdin=ops(
        claim(), {"op": "teleport"}, {"op": "verify"},
        {"op": "retract", "fact_id": "f_00000000dead", "actor": "user:a", "reason": "x"},
        {"op": "teleport"}))
    assert done.returncode == 1
    # Under the shipped default its one fact waits for its vector: the same line says so.
    assert done.stderr.splitlines()[-1] == (
        "custody-app: batch: 5 op(s), 2 ok, 3 failed (unknown_fact 1, unknown_op 2); 1 fact(s) "
        "wait for their vector, found by their words meanwhile (`custody-app embed` makes them "
        "now)")
    empty = cli("--batch", "-", "--ledger", ledger, stdin="")
    assert empty.returncode == 0
    # The ledger's waiting fact is still named (the count is the ledger's, not the run's).
    assert empty.stderr == ("custody-app: batch: 0 op(s), 0 ok, 0 failed; 1 fact(s) wait for "
                            "their vector, found by their words meanwhile (`custody-app embed` "
                            "makes them now)\n")


def test_an_assert_says_which_kinds_were_masked_in_which_field(tmp_path: Path) -> None:
    ledger = tmp_path / "l.db"
    assert cli("init", "--ledger", ledger).returncode == 0
    secret = "ann.lee@example.com"
    done = cli("--batch", "-", "--ledger", ledger, stdin=ops(
        claim(value={"note": f"mail {secret}"},
              cause={"kind": "message", "ref": "m1", "detail": f"from {secret}"}),
        claim("acct:2", value="nothing to mask")))
    assert done.returncode == 0, done.stderr
    masked, clean = (json.loads(line)["result"] for line in done.stdout.splitlines())
    assert masked["redacted"] == {"cause.detail": ["email"], "value": ["email"]}
    assert "redacted" not in clean  # absent when nothing was masked
    assert secret not in done.stdout and "example" not in json.dumps(masked)
    # The Python API's read model says the same.
    with Ledger.open(ledger) as led:
        result = led.assert_fact("acct:3", "email", f"{secret}", actor="user:a", cause=CAUSE)
    assert result.redacted == {"value": ["email"]}


# ---- correct and affirm; one --actor rule -----------------------------------------------------

def trusted(subject: str = "acct:1", predicate: str = "plan", value: Any = "basic"
            ) -> dict[str, Any]:
    return {**claim(subject, predicate, value), "actor": "user:a", "provenance": "attested"}


@pytest.fixture
def believed(tmp_path: Path) -> tuple[Path, list[str]]:
    ledger = tmp_path / "l.db"
    assert cli("init", "--ledger", ledger).returncode == 0
    done = cli("--batch", "-", "--ledger", ledger,
               stdin=ops(trusted(), trusted("acct:2"), trusted("acct:3")))
    assert done.returncode == 0, done.stderr
    return ledger, [json.loads(line)["result"]["fact_id"] for line in done.stdout.splitlines()]


def _history(ledger: Path, fact: str) -> dict[str, Any]:
    done = cli("history", fact, "--json", "--ledger", ledger)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_correct_replaces_a_fact_with_a_json_or_string_value(
        believed: tuple[Path, list[str]]) -> None:
    import getpass
    ledger, facts = believed
    done = cli("correct", facts[0], '{"tier": 2}', "--reason", "typo in the plan", "--ledger", ledger)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"corrected {facts[0]} with f_") and "now active" in done.stdout
    new = _history(ledger, facts[0])["events"][-1]
    assert new["kind"] == "assert" and new["supersedes"] == facts[0]
    assert new["actor"] == f"user:{getpass.getuser()}"  # the operator, without --actor
    [fact] = json.loads(cli("beliefs", "--subject", "acct:1", "--json", "--ledger",
                            ledger).stdout)["facts"]
    assert fact["value"] == {"tier": 2} and fact["predicate"] == "plan"
    done = cli("correct", facts[1], "pro plan", "--reason", "r", "--json", "--actor", "user:b",
               "--ledger", ledger)
    assert done.returncode == 0 and json.loads(done.stdout)["status"] == "active"
    [fact] = json.loads(cli("beliefs", "--subject", "acct:2", "--json", "--ledger",
                            ledger).stdout)["facts"]
    assert fact["value"] == "pro plan"
    # A correction of a fact already replaced is refused by the ledger's own rule.
    again = cli("correct", facts[0], "x", "--reason", "r", "--ledger", ledger)
    assert again.returncode == 1 and "already_superseded" in again.stderr


def test_affirm_from_the_command_line(believed: tuple[Path, list[str]]) -> None:
    ledger, facts = believed
    done = cli("affirm", facts[2], "--ledger", ledger)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"affirmed {facts[2]}: acct:3 plan = ")
    assert _history(ledger, facts[2])["events"][-1]["kind"] == "affirm"


@pytest.mark.parametrize("command", [("hold", "F", "--reason", "audit"),
                                     ("forget", "F", "--reason", "error"),
                                     ("checkpoint",), ("affirm", "F")])
def test_actor_is_optional_on_every_write_defaulting_to_the_operator(
        believed: tuple[Path, list[str]], command: tuple[str, ...]) -> None:
    import getpass
    ledger, facts = believed
    done = cli(*(facts[0] if word == "F" else word for word in command), "--ledger", ledger)
    assert done.returncode == 0, done.stderr
    with Ledger.open(ledger, readonly=True) as led:
        last = [e for e in led.events() if e.kind not in ("checkpoint",) or command[0] ==
                "checkpoint"][-1]
    assert last.actor == f"user:{getpass.getuser()}"


# ---- one grammar: --json everywhere, text for people, paging, exit codes ----------------------

def test_every_subcommand_takes_json() -> None:
    from custody_app.interfaces.cli.main import SUBCOMMANDS, _sub_parser
    sub = next(a for a in _sub_parser()._actions if a.dest == "command")
    missing = [name for name in SUBCOMMANDS
               if not any("--json" in a.option_strings for a in sub.choices[name]._actions)]
    assert missing == []


def test_verify_checkpoint_rebuild_init_print_text_and_json_on_request(tmp_path: Path) -> None:
    ledger = tmp_path / "l.db"
    text = cli("init", "--ledger", ledger)
    assert text.returncode == 0 and text.stdout.startswith(f"ledger ready: {ledger}")
    assert cli("init", "--json", "--ledger", ledger).stdout.startswith("{")
    for command, first in (("verify", "chain valid: "), ("checkpoint", "signed checkpoint of seq"),
                           ("rebuild", "projection matches the events")):
        done = cli(command, "--ledger", ledger)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(first), done.stdout
        as_json = cli(command, "--json", "--ledger", ledger)
        assert as_json.returncode == 0 and isinstance(json.loads(as_json.stdout), dict)


def test_beliefs_pages_past_500_with_after(tmp_path: Path) -> None:
    ledger = tmp_path / "l.db"
    assert cli("init", "--ledger", ledger).returncode == 0
    done = cli("--batch", "-", "--ledger", ledger,
               stdin=ops(*(trusted(f"acct:{n}") for n in range(510))))
    assert done.returncode == 0, done.stderr[-500:]
    first = json.loads(cli("beliefs", "--limit", "500", "--json", "--ledger", ledger).stdout)
    assert len(first["facts"]) == 500 and first["next_after"] is not None
    text = cli("beliefs", "--limit", "500", "--ledger", ledger).stdout
    assert f"next page: {first['next_after']}" in text
    rest = json.loads(cli("beliefs", "--limit", "500", "--after", str(first["next_after"]),
                          "--json", "--ledger", ledger).stdout)
    assert len(rest["facts"]) == 10 and rest["next_after"] is None
    subjects = {f["subject"] for f in first["facts"] + rest["facts"]}
    assert subjects == {f"acct:{n}" for n in range(510)}


def test_queue_history_and_actions_page_with_after(custom: tuple[Path, Path, list[str]]) -> None:
    ledger, _, facts = custom
    page = json.loads(cli("queue", "--limit", "1", "--json", "--ledger", ledger).stdout)
    assert [i["fact"]["fact_id"] for i in page["items"]] == [facts[0]]
    after = json.loads(cli("queue", "--limit", "1", "--after", str(page["next_after"]), "--json",
                           "--ledger", ledger).stdout)
    assert [i["fact"]["fact_id"] for i in after["items"]] == [facts[1]]
    assert after["next_after"] is None
    assert cli("confirm", facts[0], "--ledger", ledger).returncode == 0
    history = json.loads(cli("history", facts[0], "--limit", "1", "--json", "--ledger",
                             ledger).stdout)
    assert [e["kind"] for e in history["events"]] == ["assert"]
    more = json.loads(cli("history", facts[0], "--after", str(history["next_after"]), "--json",
                          "--ledger", ledger).stdout)
    assert [e["kind"] for e in more["events"]] == ["confirm"]
    assert cli("actions", "--after", "1", "--ledger", ledger).returncode == 0


@pytest.mark.parametrize("bad", ["abc", "-5", "1; DROP TABLE events", "", "1e3", "\u0661\u0662",
                                 "99999999", "9" * 40, "\x1b[31m7"])
@pytest.mark.parametrize("command", ["beliefs", "queue", "history F", "actions"])
def test_after_with_a_hostile_or_unknown_cursor_is_a_clear_bad_request(
        custom: tuple[Path, Path, list[str]], bad: str, command: str) -> None:
    ledger, _, facts = custom
    words = [facts[0] if w == "F" else w for w in command.split()]
    before = file_digest(ledger)
    done = cli(*words, "--after", bad, "--ledger", ledger)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "(bad_request)" in done.stderr and "--after" in done.stderr
    assert "\x1b" not in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == "" and file_digest(ledger) == before


def test_a_dry_run_that_would_skip_a_held_fact_exits_0_naming_it(
        believed: tuple[Path, list[str]]) -> None:
    ledger, facts = believed
    assert cli("hold", facts[1], "--reason", "litigation", "--ledger", ledger).returncode == 0
    done = cli("sweep", "--before", "2999-01-01T00:00:00Z", "--dry-run", "--ledger", ledger)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "would skip, on legal hold: 1 fact(s)" in done.stdout
    assert f"{facts[1]}  acct:2 plan = " in done.stdout


def test_doctor_accepts_a_policy_and_never_adopts_it(
        custom: tuple[Path, Path, list[str]], tmp_path: Path) -> None:
    ledger, policy, _ = custom
    other = policy_file(tmp_path, "team:b", "other.toml")
    before = file_digest(ledger)
    done = cli("doctor", "--ledger", ledger, "--policy", other)
    assert done.returncode in (0, 1), done.stderr  # a usage error was 2
    assert f"is not the policy {ledger} records" in done.stdout
    same = cli("doctor", "--ledger", ledger, "--policy", policy)
    assert f"is the policy {ledger} records" in same.stdout
    assert file_digest(ledger) == before and len(policy_events(ledger)) == 1


def test_recall_prints_its_results_first(believed: tuple[Path, list[str]]) -> None:
    ledger, _ = believed
    done = cli("recall", "basic", "--ledger", ledger)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("  1. acct:"), done.stdout
    verbose = cli("recall", "basic", "--verbose", "--ledger", ledger).stdout.splitlines()
    assert verbose[0].startswith("  1. acct:") and verbose[-1].startswith("hybrid: ")


def test_actions_pages_like_every_other_list(tmp_path: Path) -> None:
    """`actions` printed `(more: --before-seq N)` where every other list prints `next page: N`
    for `--after N`, and took --limit up to 1000 with a pydantic message where the others stop
    at 500 saying so."""
    ledger = tmp_path / "l.db"
    assert cli("init", "--ledger", ledger).returncode == 0
    with Ledger.open(ledger) as led:
        for n in range(3):
            led.act("sess-1", "billing.refund", f"tx-{n}", "ok", actor="agent:bot")
    text = cli("actions", "--limit", "2", "--ledger", ledger).stdout
    assert "next page: " in text and "--before-seq" not in text, text
    cursor = text.split("next page: ")[1].split()[0]
    rest = json.loads(cli("actions", "--limit", "2", "--after", cursor, "--json", "--ledger",
                          ledger).stdout)
    assert [a["ref"] for a in rest["actions"]] == ["tx-0"]
    before = file_digest(ledger)
    done = cli("actions", "--limit", "1000", "--ledger", ledger)
    assert done.returncode == 1 and "--limit must be between 1 and 500" in done.stderr
    assert file_digest(ledger) == before
