"""Subject ids on PostgreSQL (issue 34, "nothing erasable in the clear"): the `subject` columns
of `events` and `facts` hold the subject's peppered ref (`KeyRing.subject_ref`, the hash the
chain already holds), never the id; the id itself is in `subjects`, once per subject, sealed
(AES-GCM) under the subject's data key and bound to its ref. forget_subject destroys that key
and nulls the row, so no old row version, WAL segment, dump or replica taken before yields
the id once the epoch that wrapped the key is gone. Erased facts keep `erased:<ref16>`, as on
SQLite.

Nothing above store/ sees this: the layer above hands the ledger a codec at open
(`store.port.SubjectCodec`: ref, seal, open) and every statement group turns a subject into
its stored form on the way in (`stored`) and back into the id on the way out (`named`), with
an in-memory cache of ref -> id (a ref is a keyed hash of its id: an entry never goes wrong;
only an erasure makes it unused). A ledger made before this (schema version 3) keeps
plaintext ids until its first read-write open seals them (`seal_existing`): until then
`ledger_meta.subject_ids` is not `sealed` and the stored form is the id itself."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

from store.errors import StoreError

ERASED = "erased:"
# ledger_meta: `sealed` once the subject columns hold refs (a new ledger: from its creation).
MODE_META = "subject_ids"
SEALED = "sealed"
META_GET = "SELECT value FROM ledger_meta WHERE key = %s"

# The update rule: the ref never changes; the sealed id goes to NULL (erasure), comes back from
# NULL (a subject written again after its erasure, under a new key generation), or is
# re-sealed under a higher generation (a re-key: "CV1", then the generation as a big-endian
# u32, as store.postgres.events.resealed reads it).
SUBJECTS_GUARD = """CREATE OR REPLACE FUNCTION subjects_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (NEW.subject_ref IS NOT DISTINCT FROM OLD.subject_ref AND (
            NEW.sealed IS NULL OR OLD.sealed IS NULL OR NEW.sealed = OLD.sealed OR (
                length(NEW.sealed) >= 35
                AND substring(NEW.sealed from 1 for 3) = '\\x435631'::bytea
                AND substring(OLD.sealed from 1 for 3) = '\\x435631'::bytea
                AND substring(NEW.sealed from 4 for 4) > substring(OLD.sealed from 4 for 4)))) THEN
        RAISE EXCEPTION 'custody: a sealed subject id can only be erased or re-sealed'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END $$"""
# Idempotent (the migration may meet a schema that has it: `TRIGGERS` are dropped first), so the
# order of the ladder's issue-34 steps can change at a merge.
TRIGGERS = ("subjects_erase_or_reseal", "subjects_no_delete", "subjects_no_truncate")
DDL: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS subjects(
    subject_ref text COLLATE "C" PRIMARY KEY,
    sealed      bytea
)""",
    SUBJECTS_GUARD,
    """CREATE TRIGGER subjects_erase_or_reseal BEFORE UPDATE ON subjects
FOR EACH ROW EXECUTE FUNCTION subjects_guard()""",
    """CREATE TRIGGER subjects_no_delete BEFORE DELETE ON subjects
FOR EACH ROW EXECUTE FUNCTION custody_refuse('a sealed subject id cannot be deleted, only erased')""",
    """CREATE TRIGGER subjects_no_truncate BEFORE TRUNCATE ON subjects
FOR EACH STATEMENT EXECUTE FUNCTION custody_refuse('sealed subject ids cannot be truncated')""",
)

# A subject's first assert seals it; a later one leaves it (an erased one gets its new seal).
PUT = ("INSERT INTO subjects(subject_ref, sealed) VALUES (%s, %s) ON CONFLICT (subject_ref) "
       "DO UPDATE SET sealed = EXCLUDED.sealed WHERE subjects.sealed IS NULL")
GET_MANY = "SELECT subject_ref, sealed FROM subjects WHERE subject_ref = ANY(%s::text[])"
GET = "SELECT sealed FROM subjects WHERE subject_ref = %s"
RESEAL = "UPDATE subjects SET sealed = %s WHERE subject_ref = %s AND sealed IS NOT NULL"
# The roll-forward of a ledger made before (seal_existing): every plaintext id in the columns.
PLAIN_IDS = ("SELECT DISTINCT subject FROM facts WHERE subject NOT LIKE 'erased:%%' "
             "UNION SELECT DISTINCT subject FROM events WHERE subject IS NOT NULL")
TO_REF_FACTS = "UPDATE facts SET subject = %s WHERE subject = %s"
TO_REF_EVENTS = ("UPDATE events SET subject = %s WHERE subject = %s AND kind = 'assert'")
SET_MODE = ("INSERT INTO ledger_meta(key, value) VALUES (%s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value")
# What the sealed ids' migration adds beside the table: the events' update rule lets an
# assert's subject go from the id to the ref its own hashed body names (the roll-forward), and
# a new ledger (nothing written yet) is sealed from the start.
MARK_NEW = ("INSERT INTO ledger_meta(key, value) SELECT 'subject_ids', 'sealed' WHERE NOT EXISTS "
            "(SELECT 1 FROM facts) AND NOT EXISTS (SELECT 1 FROM events WHERE subject IS NOT NULL) "
            "ON CONFLICT (key) DO NOTHING")


class SubjectNames:
    """The ledger connection's subject ids: stored form in, id out (see the module's
    docstring). One per connection (`LedgerConnection.subject_names`)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.codec: Any = None
        self._sealed: bool | None = None
        self._names: dict[str, str] = {}

    def attach(self, codec: Any) -> None:
        """The layer above's codec (store.port.SubjectCodec); the mode is read again."""
        self.codec = codec
        self._sealed = None
        self._names.clear()

    @property
    def sealed(self) -> bool:
        """Do the subject columns hold refs (else, a ledger not rolled forward yet: ids)?"""
        if self._sealed is None:
            row = self._conn.execute(META_GET, (MODE_META,)).fetchone()
            self._sealed = row is not None and str(row[0]) == SEALED
        return self._sealed

    def _codec(self) -> Any:
        if self.codec is None:
            raise StoreError("the subject ids of a server ledger are sealed: reading or writing "
                             "them needs the ledger's key store", "keystore_missing")
        return self.codec

    def stored(self, subject: str | None) -> str | None:
        """What the subject columns hold for `subject` (an erased name stays as it is)."""
        if subject is None or subject.startswith(ERASED) or not self.sealed:
            return subject
        ref = str(self._codec().ref(subject))
        self._remember(ref, subject)
        return ref

    def _remember(self, ref: str, subject: str) -> None:
        if len(self._names) >= 65_536:  # bounded, as the key ring's caches are
            self._names.clear()
        self._names[ref] = subject

    def seal(self, subject: str, beside: bytes | None) -> tuple[str, bytes]:
        """(ref, the id sealed under the key `beside` was sealed with; its subject's live key
        when None) for an assert about to be written; refused when no live key seals it."""
        codec = self._codec()
        ref = str(codec.ref(subject))
        blob = codec.seal(subject, beside)
        if blob is None:
            raise StoreError(f"subject {ref[:16]}... has no live key to seal its id under "
                             "(its keys are destroyed): nothing was written", "key_fenced")
        self._remember(ref, subject)
        return ref, bytes(blob)

    def named(self, stored: Iterable[str | None]) -> dict[str, str]:
        """stored form -> id for each of `stored` (one query for those not known here)."""
        wanted = {s for s in stored if s is not None}
        out: dict[str, str] = {}
        unknown = []
        for s in wanted:
            if s.startswith(ERASED) or not self.sealed:
                out[s] = s
            elif s in self._names:
                out[s] = self._names[s]
            else:
                unknown.append(s)
        if unknown:
            found = {str(r): (None if b is None else bytes(b)) for r, b in
                     self._conn.execute(GET_MANY, (sorted(unknown),)).fetchall()}
            for ref in unknown:
                out[ref] = self._open(ref, found)
        return out

    def _open(self, ref: str, found: dict[str, bytes | None]) -> str:
        if ref not in found:
            raise StoreError(f"the ledger names subject {ref[:16]}... and holds no sealed id "
                             "for it: its subjects table was edited (run verify)",
                             "subject_unreadable")
        blob = found[ref]
        if blob is None:
            return ERASED + ref[:16]
        if self.codec is None:
            return "sealed:" + ref[:16]  # no key store to open it with (a read-only open)
        subject = self.codec.open(ref, blob)  # raises on a blob that is not this ref's
        if subject is None:
            return ERASED + ref[:16]  # its key is destroyed
        self._remember(ref, str(subject))
        return str(subject)

    def seal_existing(self) -> int:
        """Inside a write transaction, on a ledger made before ids were sealed: each plaintext
        id in the facts and events is sealed into `subjects` and replaced by its ref; then the
        ledger is marked sealed. Returns how many subjects were sealed. A subject with no live
        key (every key of it destroyed) keeps its ref with no sealed id: it reads as erased."""
        if self.sealed:
            return 0
        codec = self._codec()
        plain = sorted(str(r[0]) for r in self._conn.execute(PLAIN_IDS).fetchall())
        for subject in plain:
            ref = str(codec.ref(subject))
            blob = codec.seal(subject, None)
            self._conn.execute(PUT, (ref, None if blob is None else bytes(blob)))
            self._conn.execute(TO_REF_FACTS, (ref, subject))
            self._conn.execute(TO_REF_EVENTS, (ref, subject))
        self._conn.execute(SET_MODE, (MODE_META, SEALED))
        self._sealed = True
        return len(plain)


def names_of(conn: Any) -> SubjectNames | None:
    """The connection's subject ids (None: a bare connection, as some tests build stores on:
    ids pass through as they are)."""
    found = getattr(conn, "subject_names", None)
    return found if isinstance(found, SubjectNames) else None


def stored(conn: Any, subject: str | None) -> str | None:
    names = names_of(conn)
    return subject if names is None else names.stored(subject)


def named_rows(conn: Any, rows: Sequence[Sequence[Any]], at: int,
               make: Callable[..., Any] = tuple) -> list[Any]:
    """`rows` with the stored subject in column `at` replaced by its id, each made by `make`."""
    names = names_of(conn)
    if names is None or not rows:
        return [make(*r) for r in rows] if make is not tuple else [tuple(r) for r in rows]
    ids = names.named(r[at] for r in rows)
    out = []
    for r in rows:
        row = list(r)
        if row[at] is not None:
            row[at] = ids[row[at]]
        out.append(make(*row) if make is not tuple else tuple(row))
    return out


def named_stream(conn: Any, rows: Iterator[Sequence[Any]], at: int,
                 chunk: int = 5000) -> Iterator[tuple[Any, ...]]:
    """`named_rows` over a lazy stream of rows, `chunk` rows at a time."""
    if names_of(conn) is None:
        yield from (tuple(r) for r in rows)
        return
    while True:
        part = list(islice(rows, chunk))
        if not part:
            return
        yield from named_rows(conn, part, at)


def stored_values(conn: Any, values: Sequence[Any], at: int) -> tuple[Any, ...]:
    """A row's values with the subject in column `at` in its stored form."""
    names = names_of(conn)
    if names is None or values[at] is None:
        return tuple(values)
    row = list(values)
    row[at] = names.stored(row[at])
    return tuple(row)


def reseal(conn: Any, ref: str, again: Callable[[bytes], bytes | None]) -> int:
    """A re-key (issue 34): the subject's sealed id sealed again (`again`: the blob under the
    new generation, None to leave it); 1 when re-sealed."""
    names = names_of(conn)
    if names is None or not names.sealed:
        return 0
    row = conn.execute(GET, (ref,)).fetchone()
    if row is None or row[0] is None:
        return 0
    blob = again(bytes(row[0]))
    if blob is None:
        return 0
    conn.execute(RESEAL, (blob, ref))
    return 1


def seal_existing(conn: Any) -> int:
    """`SubjectNames.seal_existing` of the connection (0 for a bare one)."""
    names = names_of(conn)
    return 0 if names is None else names.seal_existing()
