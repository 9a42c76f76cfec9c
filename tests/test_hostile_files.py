"""Hostile paths (DESIGN section 13, "Files and output"): no command replaces the ledger, its
WAL, its key store or a key file, even with --force; nothing replaces an existing file without
--force; outputs are 0600 (public keys 0644) whatever the umask; a FIFO, device or directory as
ledger, key store, policy, batch file or output is refused at once. Real processes, real files."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from custody_app import Ledger
from custody_app.domain.errors import LedgerError
from custody_app.files.output import write_output

CLI = str(Path(sys.executable).parent / "custody-app")
CAUSE = {"kind": "tool", "ref": "r"}
PRECIOUS = ("", "-wal", "-shm", ".keys", ".keys.master", ".pub")


def run(*args: str, umask: int | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout, env=env,
                          preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)


def digest(*paths: Path) -> list[str | None]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None for p in paths]


@pytest.fixture()
def ledger(tmp_path: Path) -> tuple[Path, str]:
    db = tmp_path / "l.db"
    assert run("init", "--ledger", str(db)).returncode == 0
    with Ledger.open(db) as led:
        fact = led.assert_fact("acct:1", "plan", "a plaintext value", actor="agent:x", cause=CAUSE,
                              provenance="attested")
        led.checkpoint()
    return db, fact.fact_id


def _files(db: Path) -> list[Path]:
    # -wal and -shm are SQLite's to create and delete at close; the rest must stay byte-equal.
    return [Path(f"{db}{suffix}") for suffix in PRECIOUS if suffix not in ("-wal", "-shm")]


@pytest.mark.parametrize("suffix", PRECIOUS)
@pytest.mark.parametrize("command", ["export", "pack"])
def test_no_output_replaces_the_ledgers_own_files_even_with_force(
        ledger: tuple[Path, str], suffix: str, command: str) -> None:
    db, fact = ledger
    target = Path(f"{db}{suffix}")
    target.touch()  # -wal and -shm may not exist between runs: the name alone is protected
    before = digest(*_files(db))
    args = ["export"] if command == "export" else ["pack", fact]
    done = run(*args, "--ledger", str(db), "--out", str(target), "--force")
    assert done.returncode == 1 and "output_protected" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert digest(*_files(db)) == before
    assert not target.exists() or b'"line_hash"' not in target.read_bytes()  # no export landed
    with Ledger.open(db, readonly=True) as led:
        assert led.verify().valid and led.as_of(subject="acct:1").facts[0].value == "a plaintext value"


def test_a_symlink_or_hard_link_to_the_ledger_is_the_ledger(ledger: tuple[Path, str]) -> None:
    db, fact = ledger
    (db.parent / "soft.json").symlink_to(db)
    os.link(f"{db}.keys", db.parent / "hard.json")
    before = digest(*_files(db))
    for name in ("soft.json", "hard.json"):
        done = run("pack", fact, "--ledger", str(db), "--out", str(db.parent / name), "--force")
        assert done.returncode == 1 and "output_protected" in done.stderr
    assert digest(*_files(db)) == before


def test_another_ledger_or_key_file_is_refused_by_its_content(ledger: tuple[Path, str],
                                                              tmp_path: Path) -> None:
    db, _ = ledger
    other = tmp_path / "other"
    other.mkdir()
    assert run("init", "--ledger", str(other / "o.db")).returncode == 0
    for name in ("o.db", "o.db.keys", "o.db.keys.master", "o.db.pub"):
        target = other / name
        before = digest(target)
        done = run("export", "--ledger", str(db), "--out", str(target), "--force")
        assert done.returncode == 1 and "output_protected" in done.stderr, name
        assert digest(target) == before


def test_an_existing_file_needs_force_and_outputs_are_0600_whatever_the_umask(
        ledger: tuple[Path, str]) -> None:
    db, fact = ledger
    out = db.parent / "pack.json"
    out.write_text("mine")
    done = run("pack", fact, "--ledger", str(db), "--out", str(out), umask=0)
    assert done.returncode == 1 and "output_exists" in done.stderr and out.read_text() == "mine"
    assert run("pack", fact, "--ledger", str(db), "--out", str(out), "--force", umask=0).returncode == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and "a plaintext value" in out.read_text()
    export = db.parent / "e.jsonl"
    assert run("export", "--ledger", str(db), "--out", str(export), umask=0).returncode == 0
    assert stat.S_IMODE(export.stat().st_mode) == 0o600
    assert not [p for p in db.parent.iterdir() if p.name.endswith(".partial")]


def test_init_under_umask_000_makes_secrets_0600_and_the_public_key_0644(tmp_path: Path) -> None:
    db = tmp_path / "u.db"
    assert run("init", "--ledger", str(db), umask=0).returncode == 0
    modes = {s: stat.S_IMODE(Path(f"{db}{s}").stat().st_mode) for s in ("", ".keys", ".keys.master", ".pub")}
    assert modes == {"": 0o600, ".keys": 0o600, ".keys.master": 0o600, ".pub": 0o644}
    assert run("init", "--ledger", str(db)).returncode == 0  # again: the same key is kept


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_non_regular_output_is_refused_at_once(ledger: tuple[Path, str], kind: str) -> None:
    db, fact = ledger
    target = {"fifo": db.parent / "f", "directory": db.parent / "d", "device": Path("/dev/null")}[kind]
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    done = run("pack", fact, "--ledger", str(db), "--out", str(target), "--force", timeout=30)
    assert done.returncode == 1 and "not a regular file" in done.stderr
    assert target.exists() and not target.is_file()


def test_eval_reports_and_keys_and_writer_keys_never_replace_a_file(tmp_path: Path) -> None:
    key = tmp_path / "k.pem"
    assert run("eval", "--keygen", str(key), umask=0).returncode == 0
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(Path(f"{key}.pub").stat().st_mode) == 0o644
    before = digest(key, Path(f"{key}.pub"))
    assert run("eval", "--keygen", str(key)).returncode == 2
    assert digest(key, Path(f"{key}.pub")) == before
    report = tmp_path / "r.json"
    report.write_text("keep")
    done = run("eval", "--out", str(report))
    assert done.returncode == 2 and "output_exists" in done.stderr and report.read_text() == "keep"
    done = run("eval", "--out", str(key), "--force")
    assert done.returncode == 2 and digest(key, Path(f"{key}.pub")) == before
    wk = tmp_path / "w.key"
    assert run("writer-key", str(wk), "--agent", "agent:x", umask=0).returncode == 0
    assert stat.S_IMODE(wk.stat().st_mode) == 0o600


def test_the_terminal_apps_pack_export_never_replaces_an_earlier_pack(ledger: tuple[Path, str]) -> None:
    db, fact = ledger
    with Ledger.open(db) as led:
        first, _ = led.pack_beside(fact)
        first.write_text("an earlier pack, edited by hand")
        second, _ = led.pack_beside(fact)
    assert first.name == f"pack-{fact}.json" and second.name == f"pack-{fact}-2.json"
    assert first.read_text() == "an earlier pack, edited by hand"
    assert stat.S_IMODE(second.stat().st_mode) == 0o600


def test_the_helper_refuses_before_writing_anything(tmp_path: Path) -> None:
    precious = tmp_path / "p"
    precious.write_text("x")
    with pytest.raises(LedgerError) as caught:
        write_output(tmp_path / "link", "y", force=True, protected=[precious]) if (
            (tmp_path / "link").symlink_to(precious) is None) else None
    assert caught.value.code == "output_protected" and precious.read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "p"]


@pytest.mark.parametrize("what", ["ledger", "keystore", "policy", "batch"])
def test_a_fifo_as_input_is_refused_at_once(tmp_path: Path, what: str) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    db = str(tmp_path / "l.db")
    if what == "policy":  # a missing ledger is refused before the policy is read
        assert run("init", "--ledger", db).returncode == 0
    args = {"ledger": ["verify", "--ledger", str(fifo)],
            "keystore": ["init", "--ledger", db, "--keystore", str(fifo)],
            "policy": ["verify", "--ledger", db, "--policy", str(fifo)],
            "batch": ["--batch", str(fifo), "--ledger", db]}[what]
    done = run(*args, timeout=30)  # a hang would raise TimeoutExpired
    assert done.returncode in (2, 3) and "FIFO" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_directory_as_batch_file_is_a_usage_error(tmp_path: Path) -> None:
    done = run("--batch", str(tmp_path), "--ledger", str(tmp_path / "l.db"))
    assert done.returncode == 2 and "directory" in done.stderr
    assert not (tmp_path / "l.db").exists()


def test_export_to_a_fresh_path_still_verifies(ledger: tuple[Path, str]) -> None:
    db, _ = ledger
    out = db.parent / "x.jsonl"
    done = run("export", "--json", "--ledger", str(db), "--out", str(out))
    assert done.returncode == 0 and json.loads(done.stdout)["events"] >= 2
    check = run("verify", "--export", str(out), "--key", f"{db}.pub")
    assert check.returncode == 0, check.stderr


def test_out_dash_is_refused_not_a_file_named_dash(ledger: tuple[Path, str]) -> None:
    """`--batch -` reads stdin, so `export --out -` looked like stdout: it wrote the plaintext
    export to a file named "-" and printed nothing. Refused now, with no file written."""
    db, fact = ledger
    for args in (["export", "--out", "-"], ["pack", fact, "--out", "-"]):
        done = subprocess.run([CLI, *args, "--ledger", str(db)], capture_output=True, text=True,
                              timeout=60, cwd=db.parent,
                              env={k: v for k, v in os.environ.items()
                                   if not k.startswith("CUSTODY_")})
        assert done.returncode == 1 and "output_protected" in done.stderr, done.stderr
        assert "never to stdout" in done.stderr and done.stdout == ""
        assert not (db.parent / "-").exists()


@pytest.mark.parametrize("blocker", ["custody-demo.db", "custody-demo.db.keys.master"])
def test_the_demo_refuses_a_directory_in_its_place_before_deleting_anything(
        tmp_path: Path, blocker: str) -> None:
    """A directory under one of the demo's names used to end in a traceback after the demo
    had already deleted the files named before it."""
    kept = {name: f"{name} bytes".encode() for name in ("custody-demo.db", "custody-demo.db.keys")
            if name != blocker}
    for name, data in kept.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / blocker).mkdir()
    done = subprocess.run([CLI, "--demo", "--no-tui"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path,
                          env={k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "output_protected" in done.stderr and "a directory" in done.stderr
    assert {name: (tmp_path / name).read_bytes() for name in kept} == kept
    assert (tmp_path / blocker).is_dir()


@pytest.mark.parametrize("kind", ["directory", "fifo", "device", "missing"])
def test_a_batch_file_that_is_no_readable_regular_file_is_refused_with_its_code(
        ledger: tuple[Path, str], kind: str) -> None:
    db, _ = ledger
    source = {"directory": db.parent / "d", "fifo": db.parent / "f", "device": Path("/dev/zero"),
              "missing": db.parent / "missing.jsonl"}[kind]
    if kind == "directory":
        source.mkdir()
    elif kind == "fifo":
        os.mkfifo(source)
    before = digest(*_files(db))
    done = run("--batch", str(source), "--ledger", str(db), timeout=30)  # a hang would raise
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.startswith("custody-app: ") and str(source) in done.stderr
    assert done.stderr.endswith(" (batch_unreadable)\n"), done.stderr
    assert digest(*_files(db)) == before
    missing_ledger = db.parent / "never.db"
    done = run("--batch", str(source), "--ledger", str(missing_ledger), "--create", timeout=30)
    assert done.returncode == 2 and done.stderr.endswith(" (batch_unreadable)\n")
    assert not missing_ledger.exists()
    batch_doc = " ".join((Path(__file__).resolve().parent.parent / "docs" / "batch.md")
                         .read_text().split())
    assert "`batch_unreadable`" in batch_doc
