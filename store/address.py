"""Where a ledger lives, as the layers above see it: a file path (SQLite) or a `postgresql://`
URL (a team ledger on a server). The code above never asks which: it asks an address what it
needs (whether the ledger exists, the local files named after it, what to print, what to watch),
and the answer differs here, in the store, not up there.

- A **file** ledger's own files sit beside it (`<ledger>-wal`, `<ledger>.keys`, `<ledger>.pub`).
- A **server** ledger has no file: its key store lives in the same database (its own schema),
  and the few local files a host keeps for it (the master key when not in the environment, the
  published public key) live in a per-user folder named after the server, database and schema:
  `$XDG_DATA_HOME/custody-app/servers/<host>-<port>-<database>-<schema>/` (default
  `~/.local/share/...`). What it prints never carries a password.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, parse_qsl, unquote, urlencode, urlsplit, urlunsplit

SERVER_SCHEMES = ("postgresql", "postgres")
DEFAULT_SCHEMA = "custody"
# Connection parameters never printed.
SECRET_PARAMETERS = ("password", "passfile", "sslpassword", "sslkey")
# A server's local folder name keeps only these characters (a hostile URL names no path).
_SAFE = re.compile(r"[^A-Za-z0-9_.]+")


def is_server_text(text: str | os.PathLike[str]) -> bool:
    """Whether a ledger address names a server (`postgresql://...`), not a file."""
    head = str(text).split(":", 1)[0].lower()
    return str(text).lower().startswith(tuple(f"{s}://" for s in SERVER_SCHEMES)) and \
        head in SERVER_SCHEMES


@dataclass(frozen=True)
class LedgerAddress:
    """One ledger's address: `text` as given (a path, or a URL with its password)."""

    text: str

    @property
    def server(self) -> bool:
        return is_server_text(self.text)

    @property
    def display(self) -> str:
        """The address as printed: a URL without its password (user, host, port, database and
        the schema kept), a path as given."""
        if not self.server:
            return self.text
        parts = urlsplit(self.text)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, host = netloc.rpartition("@")
            netloc = f"{userinfo.split(':', 1)[0]}@{host}"
        query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                 if k.lower() not in SECRET_PARAMETERS]
        return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query, safe="/"), ""))

    @property
    def schema(self) -> str:
        """The server ledger's schema (`?schema=NAME`, default `custody`)."""
        values = parse_qs(urlsplit(self.text).query).get("schema")
        return values[-1] if values else DEFAULT_SCHEMA

    def _server_folder(self) -> Path:
        parts = urlsplit(self.text)
        query = parse_qs(parts.query)
        host = parts.hostname or (query.get("host", ["local"])[-1])
        port = str(parts.port or query.get("port", ["5432"])[-1])
        database = unquote(parts.path.lstrip("/")) or "postgres"
        name = "-".join(_SAFE.sub("_", p).strip("._") or "_"
                        for p in (host, port, database, self.schema))
        base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
        return Path(base) / "custody-app" / "servers" / name

    def sibling(self, suffix: str) -> Path:
        """The local file named after the ledger with `suffix` (`.pub`, `.keys`...): beside a
        file ledger; in the server's folder for a server ledger."""
        if self.server:
            return self._server_folder() / f"ledger{suffix}"
        return Path(f"{self.file()}{suffix}")

    def file(self) -> str:
        """The file a file ledger's own files are named after: the path as given, or, when it
        is a symbolic link (to a link, relative or not), the file it points to, as SQLite
        names the ledger's `-wal` after it. Resolved here, once, so a link finds the key
        store, master key and `.pub` beside the ledger it points to, never new ones beside
        the link."""
        return os.path.realpath(self.text) if os.path.islink(self.text) else self.text

    def folder(self) -> Path:
        """Where a command writes its outputs when not told: beside a file ledger; the working
        folder for a server ledger."""
        if self.server:
            return Path.cwd()
        return Path(self.text).resolve().parent

    def default_keystore(self) -> str:
        """The key store's address when none is named: `<ledger>.keys` beside a file ledger;
        the server ledger's own database (its key store schema) for a server ledger."""
        return self.text if self.server else f"{self.file()}.keys"

    def master_key_file(self) -> Path:
        """The master key file of this key store address (when `$CUSTODY_MASTER_KEY` is unset)."""
        return self.sibling(".master") if self.server else Path(f"{self.text}.master")

    def place(self) -> tuple[str, ...]:
        """What tells two addresses of one ledger apart from two ledgers: a server's host,
        port, database and schema (whatever user or options the URL carries); a file's real
        path (through symbolic links)."""
        if self.server:
            parts = urlsplit(self.text)
            query = parse_qs(parts.query)
            host = parts.hostname or query.get("host", ["local"])[-1]
            port = str(parts.port or query.get("port", ["5432"])[-1])
            return ("server", host, port, unquote(parts.path.lstrip("/")) or "postgres",
                    self.schema)
        return ("file", os.path.realpath(self.text))

    @property
    def name(self) -> str:
        """A short name for a title bar: a file's name; a server ledger's `database/schema`."""
        if not self.server:
            return Path(self.text).name
        database = unquote(urlsplit(self.text).path.lstrip("/")) or "postgres"
        return f"{database}/{self.schema}"

    def host_mark_file(self) -> Path | None:
        """This host's own copy of the ledger's high-water mark, kept outside the database, for
        a ledger whose key store (and its marks) a restore of the ledger restores with it: a
        server ledger's (`ledger.seen` in its local folder). None for a file ledger, whose key
        store is a file of its own."""
        return self.sibling(".seen") if self.server else None

    def own_file(self) -> str | None:
        """The ledger's own file (None for a server ledger, which has none)."""
        return None if self.server else self.text

    def watched_files(self) -> list[str]:
        """The local files whose change means the ledger changed (none for a server: a reader
        polls, or listens, instead)."""
        if self.server:
            return []
        return [os.path.abspath(self.text), os.path.abspath(f"{self.file()}-wal")]


def address_of(text: str | os.PathLike[str] | LedgerAddress) -> LedgerAddress:
    return text if isinstance(text, LedgerAddress) else LedgerAddress(os.fspath(text))
