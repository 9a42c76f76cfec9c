"""Key files go through the one output helper too (DESIGN section 13, "Files and output"):
`receipt-key`, `writer-key` and `eval --keygen` never write over the ledger, its key store, a
link to either, a key file or a device, and make private keys 0600 and public keys 0644 whatever
the umask; what `init` makes for itself (ledger, WAL, SHM, key store, master key) is 0600 under
umask 000; `--demo` never replaces a ledger it was pointed at. Real processes, real files."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from custody_app import Ledger

CLI = str(Path(sys.executable).parent / "custody-app")
CAUSE = {"kind": "tool", "ref": "r"}
OWN = ("", ".keys", ".keys.master", ".pub")
MAKERS = {"receipt-key": ["receipt-key", "{}", "--issuer", "gw"],
          "writer-key": ["writer-key", "{}", "--agent", "agent:x"],
          "eval-keygen": ["eval", "--keygen", "{}"]}


def run(*args: str, umask: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=120, env=env,
                          preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)


def make(kind: str, path: Path, umask: int | None = None) -> subprocess.CompletedProcess[str]:
    return run(*[a.format(path) for a in MAKERS[kind]], umask=umask)


def snapshot(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())
            if p.is_file() and not p.is_symlink()}


@pytest.fixture()
def ledger(tmp_path: Path) -> Path:
    db = tmp_path / "l.db"
    with Ledger.open(db) as led:
        led.assert_fact("acct:1", "plan", "a plaintext value", actor="agent:x", cause=CAUSE,
                        provenance="attested")
        led.checkpoint()
    return db


@pytest.mark.parametrize("kind", list(MAKERS))
@pytest.mark.parametrize("target", ["ledger", "keystore", "master", "public", "link", "hardlink",
                                    "devnull", "directory"])
def test_a_key_is_never_written_over_the_ledgers_files_a_link_to_them_or_a_device(
        ledger: Path, kind: str, target: str) -> None:
    folder = ledger.parent
    if target == "link":
        (folder / "soft.pem").symlink_to(ledger)
    elif target == "hardlink":
        os.link(f"{ledger}.keys", folder / "hard.pem")
    elif target == "directory":
        (folder / "d").mkdir()
    path = {"ledger": ledger, "keystore": Path(f"{ledger}.keys"),
            "master": Path(f"{ledger}.keys.master"), "public": Path(f"{ledger}.pub"),
            "link": folder / "soft.pem", "hardlink": folder / "hard.pem",
            "devnull": Path("/dev/null"), "directory": folder / "d"}[target]
    before = snapshot(folder)
    done = make(kind, path, umask=0)
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr
    assert "key_exists" in done.stderr or "output_protected" in done.stderr, done.stderr
    assert snapshot(folder) == before  # nothing replaced, no half pair, no temp file left
    assert not Path("/dev/null").is_file()
    with Ledger.open(ledger, readonly=True) as led:
        assert led.verify().valid
        assert led.as_of(subject="acct:1").facts[0].value == "a plaintext value"


@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_key_over_a_plain_existing_file_is_key_exists_and_leaves_it(tmp_path: Path, kind: str) -> None:
    mine = tmp_path / "notes.txt"
    mine.write_text("my notes")
    done = make(kind, mine)
    assert done.returncode != 0 and "key_exists" in done.stderr and "never replaced" in done.stderr
    assert mine.read_text() == "my notes" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("kind", ["receipt-key", "eval-keygen"])
def test_a_pair_whose_public_half_exists_writes_neither(tmp_path: Path, kind: str) -> None:
    key = tmp_path / "k.pem"
    Path(f"{key}.pub").write_text("someone's public key")
    done = make(kind, key)
    assert done.returncode != 0 and "key_exists" in done.stderr
    assert not key.exists() and Path(f"{key}.pub").read_text() == "someone's public key"


@pytest.mark.parametrize("umask", [0o000, 0o077, 0o022])
@pytest.mark.parametrize("kind", list(MAKERS))
def test_private_keys_are_0600_and_public_keys_0644_whatever_the_umask(
        tmp_path: Path, kind: str, umask: int) -> None:
    key = tmp_path / "k.pem"
    done = make(kind, key, umask=umask)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    public = Path(f"{key}.pub")
    if kind != "writer-key":
        assert stat.S_IMODE(public.stat().st_mode) == 0o644
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_what_init_makes_for_itself_is_0600_under_umask_000_wal_and_shm_included(tmp_path: Path) -> None:
    db = tmp_path / "u.db"
    assert run("init", "--ledger", str(db), umask=0).returncode == 0
    batch = tmp_path / "b.jsonl"
    batch.write_text('{"op":"assert","subject":"acct:1","predicate":"plan","value":"v",'
                     '"actor":"user:a","cause":{"kind":"tool","ref":"r"}}\n')
    # A process that holds the ledger open while another writes: SQLite makes -wal and -shm.
    with Ledger.open(db, readonly=True):
        assert run("--create", "--batch", str(batch), "--ledger", str(db), umask=0).returncode == 0
        modes = {s: stat.S_IMODE(Path(f"{db}{s}").stat().st_mode)
                 for s in (*OWN, "-wal", "-shm") if Path(f"{db}{s}").exists()}
    assert {"-wal", "-shm"} <= set(modes), modes
    assert modes == {"": 0o600, ".keys": 0o600, ".keys.master": 0o600, ".pub": 0o644,
                     "-wal": 0o600, "-shm": 0o600}


def test_demo_never_replaces_a_ledger_it_is_pointed_at(ledger: Path) -> None:
    before = snapshot(ledger.parent)
    done = run("--demo", "--no-tui", "--ledger", str(ledger))
    assert done.returncode == 2 and "output_exists" in done.stderr, done.stderr
    assert snapshot(ledger.parent) == before
    with Ledger.open(ledger, readonly=True) as led:
        assert led.as_of(subject="acct:1").facts[0].value == "a plaintext value"
    only_keys = ledger.parent / "k.db"
    Path(f"{only_keys}.keys").write_bytes(b"a key store whose ledger was moved away")
    done = run("--demo", "--no-tui", "--ledger", str(only_keys))
    assert done.returncode == 2 and Path(f"{only_keys}.keys").read_bytes().startswith(b"a key store")
