"""Shared fixtures: a real ledger file in tmp_path under a manual clock, and ledger snapshots."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from custody_app.domain import policy as policy_module
from custody_app.domain import resources
from custody_app.domain.timeutil import ManualClock, format_time
from custody_app.ledger.facade import Ledger

T0 = datetime(2026, 9, 1, tzinfo=UTC)
CAUSE: dict[str, Any] = {"kind": "message", "ref": "msg-1"}
WRITER = "agent:support"
REVIEWER = "user:rev"


# The suite's default policy: the shipped one with the embedder pinned to hashed-ngram, so a
# test that does not care about the embedder neither loads the minilm-l6 model nor runs the
# background embedding worker (its policy hashes as the shipped default did before minilm-l6
# became the default). The tests of the default itself ask for `shipped_default`.
# A file in the tree, not a temporary one: a child process that imports this module and is
# killed (the crash tests) left a temporary folder behind it on every run.
SUITE_DEFAULT_POLICY = Path(__file__).parent / "fixtures" / "suite_policy" / "default.toml"
SHIPPED_DEFAULT_POLICY = resources.default_policy_path()
_shipped_text = SHIPPED_DEFAULT_POLICY.read_text(encoding="utf-8")
assert 'embedder = "minilm-l6"\n' in _shipped_text
if SUITE_DEFAULT_POLICY.read_text(encoding="utf-8") != _shipped_text.replace(
        'embedder = "minilm-l6"\n', 'embedder = "hashed-ngram"\n'):
    raise RuntimeError(f"{SUITE_DEFAULT_POLICY} is no longer the shipped default policy with "
                       "the embedder set to hashed-ngram: copy policies/default.toml over it "
                       "and change that one line")
policy_module.default_policy_path = lambda: SUITE_DEFAULT_POLICY  # type: ignore[attr-defined]


@pytest.fixture
def shipped_default(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shipped default policy (minilm-l6, embedded by the background worker) for ledgers
    opened with no policy named in this test."""
    monkeypatch.setattr(policy_module, "default_policy_path", lambda: SHIPPED_DEFAULT_POLICY)
    return SHIPPED_DEFAULT_POLICY


def day(n: float) -> str:
    """Midnight UTC of 2026-09-n (fractions allowed), in the ledger's own time format."""
    return format_time(T0 + timedelta(days=n - 1))


class Env:
    """A ledger and its manual clock, with helpers that keep the tests short."""

    def __init__(self, path: Path | str, policy: Path | None = None) -> None:
        self.path = path
        self.policy = policy
        self.clock = ManualClock(T0)
        self.opens = 1
        self.ledger = Ledger.open(path, policy=policy, clock=self.clock, id_seed=self.opens)

    def at(self, moment: str) -> None:
        """Set transaction time (the clock only moves forward in these tests)."""
        self.clock.set(datetime.fromisoformat(moment.replace("Z", "+00:00")))

    def reopen(self, policy: Path | None = None, *, readonly: bool = False) -> Ledger:
        self.ledger.close()
        self.policy = policy if policy is not None else self.policy
        # A fresh id seed per open: the same seed at the same instant would repeat fact ids.
        self.opens += 1
        self.ledger = Ledger.open(self.path, policy=self.policy, clock=self.clock,
                                  readonly=readonly, id_seed=self.opens)
        return self.ledger

    def put(self, subject: str = "acct:42", predicate: str = "plan", value: Any = "basic", *,
            actor: str = WRITER, provenance: str = "attested", **optional: Any) -> str:
        """Assert a fact and return its id."""
        result = self.ledger.assert_fact(subject, predicate, value, actor=actor, cause=CAUSE,
                                         provenance=provenance, **optional)
        return result.fact_id

    def status(self, fact_id: str) -> str:
        return self.ledger.history(fact_id).status

    def snapshot(self) -> tuple[Any, ...]:
        """Everything a refused operation must leave untouched: chain and projection."""
        report = self.ledger.verify()
        assert report.valid
        return report.events, report.head, self.ledger.db.facts.dump()


# --- the contract suite: one source, two backends ---------------------------------------------
# The tests of these modules that build their ledgers through `env`, `make_env`, `ledger_at` or
# `module_ledger_at` (any fixture that asks for `backend`) define the
# ledger's behaviour: each runs twice, on a SQLite file and on a PostgreSQL server
# (`[sqlite]`/`[postgres]` in its id). A test of theirs about one backend's own mechanics (bytes
# in a file, a WAL) is marked `sqlite_only` and runs once.
CONTRACT = frozenset({
    "test_lifecycle", "test_bitemporal", "test_retractions", "test_corroboration", "test_blast",
    "test_actions_search", "test_receipts", "test_review_binding", "test_sweep_group",
    "test_browse", "test_evidence", "test_explain_full",
    "test_verify_derived", "test_sealed_text_verify",
    "test_tui_review", "test_tui_review_bulk", "test_tui_review_filter", "test_erasure",
    "test_receipt_binding", "test_writer_signatures", "test_erasure_receipts",
    "test_embedding_worker", "test_key_fence", "test_receipt_spent", "test_forget_never_held",
})
BACKENDS = ("sqlite", "postgres")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if (metafunc.module.__name__.rsplit(".", 1)[-1] in CONTRACT
            and "backend" in metafunc.fixturenames
            and metafunc.definition.get_closest_marker("sqlite_only") is None):
        metafunc.parametrize("backend", BACKENDS, indirect=True)


@pytest.fixture(scope="module")
def backend(request: pytest.FixtureRequest) -> str:
    """The backend a contract test runs on (SQLite for every other test). Module-scoped, so a
    ledger a module builds once (`module_ledger_at`) is built once per backend."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture(scope="module", autouse=True)
def _own_data_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A server ledger's local key files go to $XDG_DATA_HOME: never the real home's. One
    folder per test module (set before the module's own fixtures are built), so a ledger a
    module builds once keeps its local key files for all of the module's tests; each server
    ledger has a database of its own, so its files have a folder of their own in it."""
    folder = tmp_path_factory.mktemp("xdg-data")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_DATA_HOME", str(folder))
        yield folder


@pytest.fixture
def ledger_at(backend: str, tmp_path: Path,
              request: pytest.FixtureRequest) -> Iterator[Callable[[str], Any]]:
    """A new ledger address on the test's backend: a file in tmp_path, or a fresh database."""
    databases: list[str] = []
    server = request.getfixturevalue("pg_server") if backend == "postgres" else None

    def at(name: str = "ledger.db") -> Any:
        if server is None:
            return tmp_path / name
        databases.append(server.fresh_database())
        return databases[-1]

    yield at
    for url in databases:
        server.drop_database(url)


@pytest.fixture(scope="module")
def module_ledger_at(backend: str, tmp_path_factory: pytest.TempPathFactory,
                     request: pytest.FixtureRequest) -> Iterator[Callable[[str], Any]]:
    """`ledger_at` for a ledger a module builds once and its tests share (or copy with
    `ledger_copy`): a file in a folder of the module's, or a fresh database."""
    databases: list[str] = []
    server = request.getfixturevalue("pg_server") if backend == "postgres" else None
    folder = tmp_path_factory.mktemp("module-ledgers")

    def at(name: str = "ledger.db") -> Any:
        if server is None:
            return folder / name
        databases.append(server.fresh_database())
        return databases[-1]

    yield at
    for url in databases:
        server.drop_database(url)


@pytest.fixture
def ledger_copy(backend: str, tmp_path: Path,
                request: pytest.FixtureRequest) -> Iterator[Callable[[Any], Any]]:
    """A copy of a closed ledger, to edit without touching the original: its file and key
    files into tmp_path, or its database (CREATE DATABASE ... TEMPLATE) and its local key
    folder on a server."""
    databases: list[str] = []
    server = request.getfixturevalue("pg_server") if backend == "postgres" else None

    def copy(address: Any) -> Any:
        if server is None:
            target = tmp_path / f"copy-{len(databases)}-{Path(address).name}"
            for item in Path(address).parent.iterdir():
                if item.name.startswith(Path(address).name):
                    shutil.copyfile(item, f"{target}{item.name[len(Path(address).name):]}")
            databases.append(str(target))
            return target
        from store.address import LedgerAddress

        databases.append(server.copy_database(str(address)))
        source = LedgerAddress(str(address)).sibling("").parent
        if source.is_dir():
            shutil.copytree(source, LedgerAddress(databases[-1]).sibling("").parent)
        return databases[-1]

    yield copy
    if server is not None:
        for url in databases:
            server.drop_database(url)


@pytest.fixture(params=["sqlite", "postgres"])
def address(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new ledger address on each backend, for a test that opens ledgers itself: a file
    path, or a fresh database on the worker's server."""
    if request.param == "sqlite":
        yield str(tmp_path / "l.db")
        return
    server = request.getfixturevalue("pg_server")
    url = server.fresh_database()
    try:
        yield url
    finally:
        server.drop_database(url)


@pytest.fixture
def env(ledger_at: Callable[[str], Any]) -> Iterator[Env]:
    e = Env(ledger_at("ledger.db"))
    yield e
    e.ledger.close()


@pytest.fixture
def make_env(tmp_path: Path, ledger_at: Callable[[str], Any]) -> Iterator[Callable[..., Env]]:
    """Ledgers on the test's backend, each optionally under a policy written from TOML text."""
    made: list[Env] = []

    def make(policy_text: str | None = None, name: str = "ledger.db") -> Env:
        policy = None
        if policy_text is not None:
            policy = tmp_path / f"{name}.policy.toml"
            policy.write_text(policy_text, encoding="utf-8")
        made.append(Env(ledger_at(name), policy))
        return made[-1]

    yield make
    for e in made:
        e.ledger.close()


def fixture_copy(fixture: Path, into: Path) -> Path:
    """A copy of the fixture ledger in `fixture` (tests/fixtures/vN) and its key files, in
    `into`; returns the ledger's path there."""
    for item in fixture.iterdir():
        if item.name.startswith("ledger.db"):
            shutil.copyfile(item, into / item.name)
    return into / "ledger.db"


def delete_ledger(address: Any) -> None:
    """A ledger gone, with every file of its own: a file ledger's database and the files
    beside it; a server ledger's database (dropped) and its local key folder."""
    from store.address import address_of

    own = address_of(str(address))
    if own.server:
        import psycopg

        from tests.pgserver import database_of

        head, _, query = str(address).partition("?")
        kept = "&".join(p for p in query.split("&") if p and not p.startswith("schema="))
        with psycopg.connect(head.rsplit("/", 1)[0] + "/postgres" + (f"?{kept}" if kept else ""),
                             autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{database_of(str(address))}" WITH (FORCE)')
        shutil.rmtree(own.sibling("").parent)
        return
    path = Path(address)
    for item in path.parent.iterdir():
        if item.name.startswith(path.name):
            item.unlink()


def stored_state(env: Env) -> Any:
    """What a refused operation must leave exactly as it was: the bytes of a SQLite ledger, its
    WAL (checkpointed first) and its key store; every row of a server ledger's schemas."""
    if str(env.path).startswith("postgresql://"):
        from tests import pgserver

        return pgserver.dump(str(env.path))
    env.ledger.db.wal_checkpoint()
    return tuple(Path(f"{env.path}{s}").read_bytes() if Path(f"{env.path}{s}").exists() else b""
                 for s in ("", "-wal", ".keys"))


def ledger_bytes(path: Path) -> bytes:
    """The raw bytes of the ledger file followed by its WAL's (if any)."""
    out = b""
    for name in (str(path), f"{path}-wal"):
        try:
            with open(name, "rb") as handle:
                out += handle.read()
        except FileNotFoundError:
            pass
    return out


def sealed(ledger: Ledger, fact_id: str) -> bytes:
    """The sealed value blob of a fact's assert event, as stored."""
    fact = ledger.db.facts.get(fact_id)
    assert fact is not None
    event = ledger.db.events.get(fact.assert_seq)
    assert event is not None and event.value is not None
    return bytes(event.value)


# --- a real PostgreSQL server (tests/pgserver.py): one per pytest worker, a database per test ---

@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """The worker's PostgreSQL server. It never skips: a machine that cannot start one fails
    the PostgreSQL tests, naming why (.ci/run also fails when none ran)."""
    from tests import pgserver

    server = pgserver.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: Any) -> Iterator[str]:
    """A fresh, empty database on the worker's server, dropped after the test."""
    url = pg_server.fresh_database()
    try:
        yield url
    finally:
        pg_server.drop_database(url)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_server = callspec is not None and callspec.params.get("backend") == "postgres"
        if on_server or "pg_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    passed = [r for r in terminalreporter.stats.get("passed", [])
              if "postgres" in getattr(r, "keywords", {})]
    terminalreporter.write_line(f"PostgreSQL tests passed: {len(passed)}")


def opens(keys: list[bytes], blob: bytes, bind: str) -> bool:
    """Does any of `keys` open the sealed `blob` bound to `bind`? (an attacker trying every key
    it holds)."""
    from custody_app.keys import crypto

    for key in keys:
        try:
            crypto.open_sealed(key, blob, bind)
            return True
        except crypto.DecryptError:
            continue
    return False
