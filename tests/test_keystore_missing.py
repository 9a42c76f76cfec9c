"""A ledger's key store missing, or looked for in the wrong place (DESIGN 13, files and
output): a ledger that holds events never gets a new key store, a write with its key store
missing is refused (`keystore_missing`) before any file is made, a symbolic link to a ledger
finds the key files beside the file it points to, reads without the key store say so and show
values as sealed (never as erased), and `init` refuses a `LEDGER.pub` that is there before
making anything. Real files and real subprocesses of the console script throughout."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from custody_app import Ledger
from custody_app.domain.errors import LedgerError

STRIPPED = ("CUSTODY_LEDGER", "CUSTODY_POLICY", "CUSTODY_KEYSTORE", "CUSTODY_MASTER_KEY",
            "CUSTODY_REVIEWER", "CUSTODY_CONFIG", "CUSTODY_ACCEPT_ROLLBACK")
SEALED = "(sealed: key store missing)"
VALUE = "pro-plan-ZQX-KEYS-0001"
SERVE = ("serve", "--agent", "agent:bot")


def cli(*args: str | Path, stdin: str | None = None, cwd: Path | None = None
        ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in STRIPPED}
    return subprocess.run([sys.executable, "-m", "custody_app", *map(str, args)], input=stdin,
                          capture_output=True, text=True, timeout=120, cwd=cwd, env=env,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


def ops(*lines: dict[str, Any]) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


def claim(subject: str = "acct:1", value: str = VALUE) -> dict[str, Any]:
    return {"op": "assert", "subject": subject, "predicate": "plan", "value": value,
            "actor": "user:ops", "provenance": "attested",
            "cause": {"kind": "manual", "ref": "ticket-ZQX-1", "detail": "said on the phone"}}


def state(folder: Path) -> dict[str, str]:
    """Every entry under `folder` (files, links, folders) with the sha256 of a file's bytes
    (a link: where it points): the list of files and their content, byte for byte."""
    seen: dict[str, str] = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            seen[name] = "-> " + os.readlink(path)
        elif path.is_file():
            seen[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            seen[name] = "dir"
    return seen


@pytest.fixture
def real(tmp_path: Path) -> tuple[Path, str]:
    """A ledger with one fact (its key store beside it), in `tmp_path/data`."""
    data = tmp_path / "data"
    data.mkdir()
    path = data / "real.db"
    assert cli("init", "--ledger", path).returncode == 0
    done = cli("--batch", "-", "--ledger", path, stdin=ops(claim()))
    assert done.returncode == 0, done.stderr
    return path, str(json.loads(done.stdout.splitlines()[0])["result"]["fact_id"])


def _links(tmp_path: Path, real: Path, kind: str) -> Path:
    """A path to `real` through symbolic links of `kind`."""
    if kind == "link":
        link = real.parent / "link.db"
        link.symlink_to(real.name)
    elif kind == "link to a link":
        (real.parent / "first.db").symlink_to(real.name)
        link = real.parent / "second.db"
        link.symlink_to("first.db")
    else:  # a relative link in another folder
        other = tmp_path / "elsewhere"
        other.mkdir()
        link = other / "rel.db"
        link.symlink_to(os.path.relpath(real, other))
    return link


@pytest.mark.parametrize("kind", ["link", "link to a link", "relative link from another folder"])
def test_a_symbolic_link_to_a_ledger_uses_the_key_files_beside_the_file_it_points_to(
        tmp_path: Path, real: tuple[Path, str], kind: str) -> None:
    path, fact = real
    link = _links(tmp_path, path, kind)
    shown = cli("beliefs", "--ledger", link)
    assert shown.returncode == 0 and VALUE in shown.stdout and SEALED not in shown.stdout
    assert "(erased)" not in shown.stdout and "missing" not in shown.stderr, shown.stderr
    for command in (("checkpoint",), ("hold", fact, "--reason", "audit")):
        done = cli(*command, "--ledger", link)
        assert done.returncode == 0, done.stderr
    done = cli("--batch", "-", "--ledger", link, stdin=ops(claim("acct:2", "basic")))
    assert done.returncode == 0 and json.loads(done.stdout)["ok"], done.stderr
    verified = cli("verify", "--json", "--ledger", link, "--key", f"{path}.pub")
    report = json.loads(verified.stdout)
    assert verified.returncode == 0 and report["valid"] and "keystore_missing" not in report
    assert report["values_unchecked"] == 0
    # No key file was made beside any link: only the ledger's own, beside real.db.
    made = sorted(p.name for p in tmp_path.rglob("*") if p.name.endswith(
        (".keys", ".master", ".pub", "-journal", "-wal", "-shm")))
    assert set(made) <= {"real.db.keys", "real.db.keys.master", "real.db.pub",
                         "real.db.keys-journal", "real.db-wal", "real.db-shm"}, made
    with Ledger.open(link, readonly=True) as led:
        assert {f.value for f in led.as_of(subject="acct:2").facts} == {"basic"}


def _moved(tmp_path: Path, real: Path, where: str) -> tuple[Path, list[str]]:
    """The ledger path and the extra options naming a key store that is not there."""
    if where == "key store moved away":
        Path(f"{real}.keys").rename(tmp_path / "kept-safe.keys")
        return real, []
    if where == "mistyped --keystore":
        return real, ["--keystore", str(real.parent / "typo.keys")]
    # A link (to a link) whose target's key store is missing too.
    Path(f"{real}.keys").rename(tmp_path / "kept-safe.keys")
    (real.parent / "first.db").symlink_to(real.name)
    link = real.parent / "link.db"
    link.symlink_to("first.db")
    return link, []


@pytest.mark.parametrize("where", ["key store moved away", "mistyped --keystore",
                                   "link to a link whose target's key store is missing"])
@pytest.mark.parametrize("command", [("checkpoint",), ("--batch", "-"), ("--batch", "-", "--create"),
                                     SERVE, ("init",), ("hold", "FACT", "--reason", "audit")],
                         ids=["checkpoint", "batch", "batch-create", "serve", "init", "hold"])
def test_a_write_with_the_key_store_missing_is_refused_and_changes_no_file(
        tmp_path: Path, real: tuple[Path, str], where: str, command: tuple[str, ...]) -> None:
    path, fact = real
    ledger, extra = _moved(tmp_path, path, where)
    before = state(tmp_path)
    argv = [fact if part == "FACT" else part for part in command]
    done = cli(*argv, "--ledger", ledger, *extra, stdin=ops(claim("acct:3")))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "(keystore_missing)" in done.stderr and "--keystore" in done.stderr, done.stderr
    looked_for = extra[1] if extra else f"{path.resolve()}.keys"
    assert looked_for in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stdout == ""
    assert state(tmp_path) == before  # byte for byte, and no file made


def test_the_python_api_refuses_a_read_write_open_without_the_key_store(
        tmp_path: Path, real: tuple[Path, str]) -> None:
    path, _ = real
    Path(f"{path}.keys").unlink()
    before = state(tmp_path)
    for keystore in (None, tmp_path / "typo.keys"):
        with pytest.raises(LedgerError) as caught:
            Ledger.open(path, keystore=keystore)
        assert caught.value.code == "keystore_missing"
    assert state(tmp_path) == before
    # A new ledger still gets its key store.
    with Ledger.open(tmp_path / "new.db") as led:
        assert led.keys is not None
    assert Path(f"{tmp_path / 'new.db'}.keys").exists()


def test_reads_without_the_key_store_say_so_and_show_values_sealed_never_erased(
        tmp_path: Path, real: tuple[Path, str]) -> None:
    path, fact = real
    done = cli("--batch", "-", "--ledger", path, stdin=ops(claim("acct:9", "to be forgotten")))
    gone = str(json.loads(done.stdout)["result"]["fact_id"])
    assert cli("forget", gone, "--ledger", path, "--reason", "subject_request").returncode == 0
    Path(f"{path}.keys").rename(tmp_path / "kept-safe.keys")
    link = _links(tmp_path, path, "link")
    before = state(tmp_path)
    keystore = f"{path.resolve()}.keys"
    for ledger in (path, link):
        beliefs = cli("beliefs", "--ledger", ledger)
        assert beliefs.returncode == 0 and f"acct:1 plan = {SEALED}" in beliefs.stdout
        assert "(erased)" not in beliefs.stdout and VALUE not in beliefs.stdout
        why = cli("why", fact, "--ledger", ledger)
        assert why.returncode == 0 and SEALED in why.stdout and "(erased)" not in why.stdout
        history = cli("history", fact, "--ledger", ledger)
        assert f"value {SEALED}" in history.stdout and "(erased)" not in history.stdout
        # A value really erased still reads as erased.
        forgotten = cli("history", gone, "--ledger", ledger)
        assert "value (erased)" in forgotten.stdout, forgotten.stdout
        as_json = cli("beliefs", "--json", "--ledger", ledger)
        [row] = [f for f in json.loads(as_json.stdout)["facts"] if f["fact_id"] == fact]
        assert (row["value"], row["erased"], row["sealed"]) == (None, False, True)
        for done in (beliefs, why, history, as_json):
            assert f"the key store {keystore} is missing" in done.stderr, done.stderr
    assert state(tmp_path) == before


def test_verify_without_the_key_store_says_values_were_not_checked(
        tmp_path: Path, real: tuple[Path, str]) -> None:
    path, _ = real
    assert cli("checkpoint", "--ledger", path).returncode == 0
    Path(f"{path}.keys").rename(tmp_path / "kept-safe.keys")
    before = state(tmp_path)
    text = cli("verify", "--ledger", path)
    keystore = f"{path.resolve()}.keys"
    assert text.returncode == 0, text.stderr
    first = text.stdout.splitlines()[0]
    assert first.startswith("chain valid") and "NOT checked" in first and keystore in first
    assert f"the key store {keystore} is missing" in text.stderr
    report = json.loads(cli("verify", "--json", "--ledger", path).stdout)
    assert report["valid"] and report["keystore_missing"] == keystore
    assert report["values_unchecked"] >= 1
    assert state(tmp_path) == before
    # The ledger file alone, copied elsewhere, still verifies against its public key.
    alone = tmp_path / "auditor"
    alone.mkdir()
    shutil.copyfile(path, alone / "copy.db")
    shutil.copyfile(f"{path}.pub", alone / "ledger.pub")
    held = state(alone)
    audit = cli("verify", "--json", "--ledger", alone / "copy.db", "--key", alone / "ledger.pub")
    report = json.loads(audit.stdout)
    assert audit.returncode == 0 and report["valid"] and report["checkpoints"] >= 1
    assert report["keystore_missing"] == f"{(alone / 'copy.db').resolve()}.keys"
    assert state(alone) == held


@pytest.mark.parametrize("kind", ["file", "directory", "dangling symlink"])
def test_init_with_a_public_key_file_already_there_creates_nothing(
        tmp_path: Path, kind: str) -> None:
    pub = tmp_path / "n.db.pub"
    if kind == "file":
        pub.write_text("x\n")
    elif kind == "directory":
        pub.mkdir()
    else:
        pub.symlink_to(tmp_path / "gone.pem")
    before = state(tmp_path)
    done = cli("init", "--ledger", tmp_path / "n.db")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "(key_exists)" in done.stderr and str(pub) in done.stderr, done.stderr
    assert "--force" not in done.stderr and "move" in done.stderr and "Traceback" not in done.stderr
    assert state(tmp_path) == before


def test_init_again_over_a_replaced_public_key_records_nothing(
        tmp_path: Path, real: tuple[Path, str]) -> None:
    path, _ = real
    Path(f"{path}.pub").write_text("not this ledger's key\n")
    with Ledger.open(path, readonly=True) as led:
        events = led.verify().events
    done = cli("init", "--ledger", path, "--policy", Path(__file__).parent.parent / "policies"
               / "default.toml")
    assert done.returncode == 1 and "(key_exists)" in done.stderr, done.stderr
    with Ledger.open(path, readonly=True) as led:
        assert led.verify().events == events
    assert Path(f"{path}.pub").read_text() == "not this ledger's key\n"
