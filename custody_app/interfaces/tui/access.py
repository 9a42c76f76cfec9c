"""What the terminal app's screens are handed: how to open the ledger (one connection per
worker), the policy in force, and who is at the keyboard. No Textual here."""

from __future__ import annotations

import getpass
import os
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from custody_app.domain.errors import LedgerError
from custody_app.domain.models import ACTOR_KINDS
from custody_app.domain.policy import LoadedPolicy, load_policy
from custody_app.domain.timeutil import Clock
from custody_app.ledger.changes import LedgerChanges
from custody_app.ledger.facade import Ledger
from store.address import address_of

REVIEWER_ENV = "CUSTODY_REVIEWER"
CONFIG_ENV = "CUSTODY_CONFIG"


def config_path() -> Path:
    """`$CUSTODY_CONFIG`, else `$XDG_CONFIG_HOME/custody-app/config.toml` (~/.config/...)."""
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "custody-app" / "config.toml"


def resolve_reviewer(given: str | None = None) -> str:
    """The reviewer identity: `--reviewer`, else `$CUSTODY_REVIEWER`, else `reviewer = ...` in
    the config file, else `user:<login name>`. Refused unless it is `kind:id`."""
    reviewer = given or os.environ.get(REVIEWER_ENV)
    source = "--reviewer" if given else REVIEWER_ENV
    if not reviewer:
        path = config_path()
        if path.exists():
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise LedgerError("config_invalid", f"{path}: cannot read config: {exc}") from None
            value = data.get("reviewer")
            if value is not None and not isinstance(value, str):
                raise LedgerError("config_invalid", f"{path}: key 'reviewer' must be a string")
            reviewer, source = value, str(path)
    if not reviewer:
        return f"user:{getpass.getuser()}"
    kind, _, ident = reviewer.partition(":")
    if kind not in ACTOR_KINDS or not ident:
        raise LedgerError("invalid_actor", f"reviewer {reviewer!r} (from {source}) must be "
                          "kind:id with kind one of " + ", ".join(ACTOR_KINDS))
    return reviewer


class LedgerAccess:
    """Opens the ledger afresh for each piece of work (each thread its own connection)."""

    def __init__(self, ledger_path: str | Path, policy: LoadedPolicy, *, reviewer: str,
                 clock: Clock | None = None, keystore: str | Path | None = None,
                 policy_path: str | Path | None = None) -> None:
        self.path = str(ledger_path)
        self.policy = policy
        # Only a policy file the user named is adopted (and watched); without one the app
        # follows the policy the ledger records, whoever adopted it (DESIGN 14).
        self.policy_path = str(policy_path) if policy_path is not None else None
        self.reviewer = reviewer
        self.clock = clock
        self.keystore = keystore

    @classmethod
    def create(cls, ledger_path: str | Path, policy_path: str | Path | None = None, *,
               reviewer: str | None = None, clock: Clock | None = None,
               keystore: str | Path | None = None) -> LedgerAccess:
        """Load the policy, resolve the reviewer, and create the ledger if it is missing."""
        policy = load_policy(policy_path)
        access = cls(ledger_path, policy, reviewer=resolve_reviewer(reviewer), clock=clock,
                     keystore=keystore, policy_path=policy_path)
        with access.open(readonly=False):
            pass  # without --policy, this read the ledger's recorded policy into `policy`
        return access

    @contextmanager
    def open(self, *, readonly: bool = False) -> Iterator[Ledger]:
        ledger = Ledger.open(self.path, policy=self.policy if self.policy_path else None,
                             clock=self.clock, keystore=self.keystore, readonly=readonly)
        if not self.policy_path:
            self.policy = ledger.policy
        try:
            yield ledger
        finally:
            ledger.close()

    def reload_policy(self) -> LoadedPolicy:
        """Read the policy file again; raises PolicyError (naming file and key) when invalid.
        The caller adopts the result by setting `policy`. Without a named file: the one in force."""
        return load_policy(self.policy_path) if self.policy_path else self.policy

    @property
    def watched_files(self) -> list[str]:
        """The files whose change means the open screen must refresh."""
        files = address_of(self.path).watched_files()
        if self.policy_path is not None:
            files.append(os.path.abspath(self.policy_path))
        return files

    @property
    def ledger_files_watched(self) -> bool:
        """Whether a local file shows the ledger's changes (false on a server: the app listens
        for them, and polls while it cannot)."""
        return bool(address_of(self.path).watched_files())

    def listen(self) -> LedgerChanges | None:
        """A listener to the ledger's changes committed by any process on any host (a server
        ledger's notifications); None when its files show them. LedgerError when the server
        cannot be reached."""
        return LedgerChanges.open(self.path)

    @property
    def folder(self) -> Path:
        """Where the app writes what it exports: beside a file ledger, the working folder for
        a server ledger."""
        return address_of(self.path).folder()
