"""Help, usage and version text is output like any other (DESIGN section 13, issue 14): written
to a full disk or a closed pipe it ends with exit 4 (Exit.OUTPUT_CLOSED), quietly, not 0; a
standard stream closed outright (`>&-`) neither crashes the process nor lends its number to a
file it opens. Real subprocesses of the console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CLI = str(Path(sys.executable).parent / "custody-app")
HELPS = [["--help"], ["-h"], ["--version"], ["export", "--help"], ["recall", "-h"], ["tui", "--help"],
         ["doctor", "--help"], ["eval", "--help"], ["serve", "--help"], ["writer-key", "--help"],
         ["receipt-key", "--help"], ["receipt", "verify", "--help"], ["receipt", "--help"]]


def run(args: list[str], **streams: Any) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    streams.setdefault("stderr", subprocess.PIPE)
    return subprocess.run([CLI, *args], env=env, timeout=60, **streams)


def quiet(done: subprocess.CompletedProcess[bytes]) -> None:
    assert b"Traceback" not in done.stderr and b"Exception ignored" not in done.stderr, done.stderr


@pytest.mark.parametrize("args", HELPS, ids=" ".join)
def test_help_and_version_to_a_full_disk_exit_4(args: list[str]) -> None:
    with open("/dev/full", "wb") as full:
        done = run(args, stdout=full)
    quiet(done)
    assert done.returncode == 4, done.stderr
    assert b"No space left" in done.stderr  # one line saying why, not silence as if read


@pytest.mark.parametrize("args", [["--help"], ["export", "--help"], ["--version"],
                                  ["doctor", "--help"]], ids=" ".join)
def test_help_into_a_closed_pipe_exits_4_without_a_word(args: list[str]) -> None:
    done = into_a_closed_pipe(args)
    quiet(done)
    assert done.returncode == 4 and done.stderr == b"", done.stderr


def into_a_closed_pipe(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    """`| head -c1` whose reader is gone before the text is written (deterministic: the read
    end is closed before the process starts)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return run(args, stdout=write_end)
    finally:
        os.close(write_end)


def test_help_still_prints_and_exits_0_when_it_can_be_written() -> None:
    done = run(["export", "--help"], stdout=subprocess.PIPE)
    assert done.returncode == 0 and b"usage: custody-app export" in done.stdout
    version = run(["--version"], stdout=subprocess.PIPE)
    assert version.returncode == 0 and version.stdout.startswith(b"custody-app ")


def test_a_usage_error_with_a_closed_stderr_is_still_exit_2() -> None:
    # Only lost *output* is exit 4; a usage diagnostic that cannot be shown stays a usage error.
    done = run(["recall"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
               preexec_fn=lambda: os.close(2))
    assert done.returncode == 2 and done.stdout == b""


def _closed(fd: int) -> Any:
    return lambda: os.close(fd)


def test_a_closed_stdout_runs_nothing_and_exits_4(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    for args in (["--help"], ["init", "--ledger", str(db)],
                 ["--create", "--batch", "-", "--ledger", str(db)]):
        done = run(args, stdin=subprocess.DEVNULL, preexec_fn=_closed(1))
        quiet(done)
        assert done.returncode == 4 and b"stdout is closed" in done.stderr, (args, done.stderr)
    assert list(tmp_path.iterdir()) == []  # init did not half-run with its report lost


def test_a_closed_stderr_or_stdin_is_no_crash_and_lends_no_file_its_number(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    done = run(["init", "--json", "--ledger", str(db)], stdout=subprocess.PIPE, preexec_fn=_closed(2),
               stderr=None)
    assert done.returncode == 0 and b'"ledger"' in done.stdout
    missing = run(["verify", "--ledger", str(tmp_path / "none.db")], stdout=subprocess.PIPE,
                  preexec_fn=_closed(2), stderr=None)
    assert missing.returncode == 3  # its diagnostic went to /dev/null, not into a traceback
    ops = b'{"op":"assert","subject":"acct:1","predicate":"plan","value":"v","actor":"user:a",' \
          b'"cause":{"kind":"tool","ref":"r"}}\n'
    batch = tmp_path / "b.jsonl"
    batch.write_bytes(ops)
    # stderr closed: a file opened later would be fd 2, and a diagnostic would land in it
    wrote = run(["--create", "--batch", str(batch), "--ledger", str(db)], stdout=subprocess.PIPE,
                preexec_fn=_closed(2), stderr=None)
    assert wrote.returncode == 0 and b'"ok": true' in wrote.stdout.replace(b'"ok":true', b'"ok": true')
    check = run(["verify", "--ledger", str(db)], stdout=subprocess.PIPE)
    assert check.returncode == 0, check.stderr
    empty = run(["--batch", "-", "--ledger", str(db)], stdout=subprocess.PIPE,
                preexec_fn=_closed(0))
    quiet(empty)
    assert empty.returncode == 0 and empty.stdout == b""


@pytest.mark.parametrize("output", ["closed pipe", "full disk"])
def test_a_batch_whose_output_fails_still_ends_with_its_signed_checkpoint(
        tmp_path: Path, output: str) -> None:
    """`--batch FILE | head -1` whose reader is gone, or a stdout on a full disk: the ops
    commit before their results are written, and the run still closes with the signed
    checkpoint over them (it used to end on the write error with none)."""
    db, ops = tmp_path / "l.db", tmp_path / "ops.jsonl"
    assert run(["init", "--ledger", str(db)], stdout=subprocess.DEVNULL).returncode == 0
    ops.write_text("".join(json.dumps({
        "op": "assert", "subject": f"acct:{i}", "predicate": "plan", "value": "gold",
        "actor": "user:ops", "cause": {"kind": "manual", "ref": "m"}}) + "\n" for i in range(3)))
    args = ["--batch", str(ops), "--ledger", str(db)]
    if output == "closed pipe":
        done = into_a_closed_pipe(args)
    else:
        with open("/dev/full", "wb") as full:
            done = run(args, stdout=full)
    quiet(done)
    assert done.returncode == 4, done.stderr
    report = json.loads(run(["verify", "--ledger", str(db), "--json"],
                            stdout=subprocess.PIPE).stdout)
    assert report["valid"] and report["events"] == 5, report  # policy, 3 asserts, checkpoint
    assert report["checkpoints"] == 1 and report["last_checkpoint_seq"] >= 4, report
