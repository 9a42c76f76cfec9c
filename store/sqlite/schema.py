"""The schema as a user_version ladder: migration N takes a file from version N-1 to N."""

from __future__ import annotations

# 'CUST' as a big-endian int: lets `file`-style tools and open_ledger tell a ledger from any db.
APPLICATION_ID = 0x43555354

# A re-seal (issue 34: the erasure re-keys the subject): a sealed blob replaced by a sealed blob
# of a higher key generation ("CV1", then the generation as a big-endian u32: bytes 4-7 compare
# as the numbers do), nothing else of the row changed. The commitment in the body still binds
# the plaintext: verify opens the new blob and checks it.
RESEALED = """
        AND typeof(NEW.{col}) = 'blob' AND length(NEW.{col}) >= 35
        AND substr(NEW.{col}, 1, 3) = X'435631' AND substr(OLD.{col}, 1, 3) = X'435631'
        AND substr(NEW.{col}, 4, 4) > substr(OLD.{col}, 4, 4)"""

EVENTS_UPDATE_TRIGGER = """
CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
WHEN NOT (
    OLD.kind = 'assert'
    AND (NEW.value IS NULL OR NEW.value IS OLD.value OR (
        OLD.value IS NOT NULL AND NEW.salt IS OLD.salt{RESEALED}))
    AND (NEW.salt IS NULL OR NEW.salt IS OLD.salt)
    AND ((NEW.value IS NULL) = (NEW.salt IS NULL))
    AND (NEW.subject IS NULL OR NEW.subject IS OLD.subject)
    AND NEW.seq IS OLD.seq AND NEW.kind IS OLD.kind AND NEW.tx_at IS OLD.tx_at
    AND NEW.actor IS OLD.actor AND NEW.policy_hash IS OLD.policy_hash
    AND NEW.fact_id IS OLD.fact_id AND NEW.body IS OLD.body
    AND NEW.prev_hash IS OLD.prev_hash AND NEW.hash IS OLD.hash
)
BEGIN
    SELECT RAISE(ABORT, 'custody: events are append-only; only erasure may null parts of an assert');
END;
""".replace("{RESEALED}", RESEALED.format(col="value"))

V1 = f"""
CREATE TABLE ledger_meta(
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE policies(
    hash      TEXT PRIMARY KEY,
    canonical TEXT NOT NULL,
    source    TEXT NOT NULL,
    path      TEXT
) WITHOUT ROWID;

-- The truth. `body` is the exact canonical JSON that was hashed (the envelope, with the value
-- replaced by its salted commitment and the subject by its peppered hash); the other columns
-- repeat parts of it for querying and verify checks that they agree. Only an assert's `value`
-- with its `salt`, and its plaintext `subject`, may ever change, and only to NULL (erasure).
CREATE TABLE events(
    seq         INTEGER PRIMARY KEY,
    kind        TEXT NOT NULL,
    tx_at       TEXT NOT NULL,
    actor       TEXT NOT NULL,
    policy_hash TEXT NOT NULL,
    fact_id     TEXT,
    subject     TEXT,
    body        TEXT NOT NULL,
    value       BLOB,
    salt        TEXT,
    prev_hash   TEXT NOT NULL,
    hash        TEXT NOT NULL
);
CREATE INDEX events_by_fact ON events(fact_id, seq) WHERE fact_id IS NOT NULL;
CREATE INDEX events_policy ON events(seq) WHERE kind = 'policy';
CREATE INDEX events_special ON events(kind, seq) WHERE kind IN ('forget_subject', 'checkpoint');

CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'custody: events are append-only; an event cannot be deleted');
END;

-- INSERT OR REPLACE deletes without firing delete triggers: refuse any insert over a row.
CREATE TRIGGER events_no_replace BEFORE INSERT ON events
WHEN EXISTS (SELECT 1 FROM events WHERE seq = NEW.seq)
BEGIN
    SELECT RAISE(ABORT, 'custody: events are append-only; an event cannot be replaced');
END;

{EVENTS_UPDATE_TRIGGER}
-- The projection: one row per fact, its state now.
CREATE TABLE facts(
    assert_seq    INTEGER PRIMARY KEY,
    fact_id       TEXT NOT NULL UNIQUE,
    subject       TEXT NOT NULL,
    predicate     TEXT NOT NULL,
    space         TEXT NOT NULL,
    valid_from    TEXT NOT NULL,
    valid_to      TEXT,
    provenance    TEXT NOT NULL,
    confirmed_seq INTEGER,
    ended         TEXT,
    ended_seq     INTEGER,
    supersedes    TEXT,
    superseded_by TEXT,
    held          INTEGER NOT NULL DEFAULT 0,
    actor         TEXT NOT NULL,
    session       TEXT,
    status        TEXT NOT NULL,
    marks         TEXT
);
CREATE INDEX facts_by_subject ON facts(subject, predicate);
CREATE INDEX facts_by_space ON facts(space);
CREATE INDEX facts_by_status ON facts(status);
CREATE INDEX facts_by_supersedes ON facts(supersedes) WHERE supersedes IS NOT NULL;
CREATE INDEX facts_by_superseder ON facts(superseded_by) WHERE superseded_by IS NOT NULL;

-- Transaction-time history of each fact's state (fact_seq = the fact's assert_seq): the row
-- with the greatest from_seq whose tx_from <= T is the fact's state as of T. "_all" columns
-- count pending (claimed) replacements, "_trusted" columns only confirmed or attested ones.
CREATE TABLE fact_states(
    fact_seq       INTEGER NOT NULL,
    from_seq       INTEGER NOT NULL,
    tx_from        TEXT NOT NULL,
    live           INTEGER NOT NULL,
    prov_rank      INTEGER NOT NULL,
    status_all     TEXT NOT NULL,
    status_trusted TEXT NOT NULL,
    vto_all        TEXT,
    vto_trusted    TEXT,
    PRIMARY KEY(fact_seq, from_seq)
) WITHOUT ROWID;

-- Keyed digests (HMAC under the forget key, kept outside this file) of forgotten values, so a
-- write of the same value for the same subject and predicate does not silently come back.
CREATE TABLE forgotten_digests(
    subject_ref TEXT NOT NULL,
    predicate   TEXT NOT NULL,
    digest      TEXT NOT NULL,
    PRIMARY KEY(subject_ref, predicate, digest)
) WITHOUT ROWID;

-- Content-free erasure tombstones of data principals: written once, never changed.
CREATE TABLE tombstones(
    seq          INTEGER PRIMARY KEY,
    subject_hash TEXT NOT NULL,
    reason       TEXT NOT NULL,
    counts       TEXT NOT NULL,
    at           TEXT NOT NULL
);
CREATE TRIGGER tombstones_no_update BEFORE UPDATE ON tombstones
BEGIN SELECT RAISE(ABORT, 'custody: an erasure tombstone cannot be changed'); END;
CREATE TRIGGER tombstones_no_delete BEFORE DELETE ON tombstones
BEGIN SELECT RAISE(ABORT, 'custody: an erasure tombstone cannot be deleted'); END;
CREATE TRIGGER tombstones_no_replace BEFORE INSERT ON tombstones
WHEN EXISTS (SELECT 1 FROM tombstones WHERE seq = NEW.seq)
BEGIN SELECT RAISE(ABORT, 'custody: an erasure tombstone cannot be replaced'); END;

-- Erasures whose truncating WAL checkpoint could not complete yet (a reader held the WAL).
CREATE TABLE pending_scrubs(
    fact_id TEXT PRIMARY KEY,
    since   TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE fact_sources(
    fact_id   TEXT NOT NULL,
    source_id TEXT NOT NULL,
    PRIMARY KEY(fact_id, source_id)
) WITHOUT ROWID;
CREATE INDEX fact_sources_by_source ON fact_sources(source_id);
"""

# Sessions (blast radius): which facts each served event handed to which session, every event
# of a session (asserts made in it, served reads, acted actions) in order, and one summary row
# per session so sessions with writes but no recorded reads are found without a scan. Filled
# in the same transaction as the event; the backfill below covers ledgers written before.
V2 = """
CREATE TABLE served_facts(
    fact_id TEXT NOT NULL,
    session TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    PRIMARY KEY(fact_id, session, seq)
) WITHOUT ROWID;
CREATE INDEX served_facts_by_session ON served_facts(session, seq);

CREATE TABLE session_events(
    session TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    fact_id TEXT,
    ref     TEXT,
    PRIMARY KEY(session, seq)
) WITHOUT ROWID;
CREATE INDEX session_actions_by_ref ON session_events(ref) WHERE kind = 'acted';

CREATE TABLE sessions(
    session        TEXT PRIMARY KEY,
    reads          INTEGER NOT NULL,
    last_write_seq INTEGER
) WITHOUT ROWID;
CREATE INDEX sessions_unread ON sessions(last_write_seq) WHERE reads = 0;

INSERT INTO session_events(session, seq, kind, fact_id, ref)
SELECT json_extract(body, '$.session'), seq, kind, fact_id,
       CASE WHEN kind = 'acted' THEN json_extract(body, '$.ref') END
FROM events
WHERE kind IN ('assert', 'served', 'acted') AND json_extract(body, '$.session') IS NOT NULL;

INSERT OR IGNORE INTO served_facts(fact_id, session, seq)
SELECT j.value, json_extract(e.body, '$.session'), e.seq
FROM events e, json_each(e.body, '$.fact_ids') j
WHERE e.kind = 'served';

INSERT INTO sessions(session, reads, last_write_seq)
SELECT session, sum(kind = 'served'), max(CASE WHEN kind != 'served' THEN seq END)
FROM session_events GROUP BY session;
"""

# Actions you can search: one row per `acted` event with the fields a reviewer filters on (the
# subject only as the peppered hash the chain holds), filled in the event's transaction.
V3 = """
CREATE TABLE IF NOT EXISTS actions(
    seq         INTEGER PRIMARY KEY,
    tool        TEXT NOT NULL,
    actor       TEXT NOT NULL,
    session     TEXT NOT NULL,
    subject_ref TEXT,
    tx_at       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS actions_by_tool ON actions(tool, seq);
CREATE INDEX IF NOT EXISTS actions_by_actor ON actions(actor, seq);
CREATE INDEX IF NOT EXISTS actions_by_session ON actions(session, seq);
CREATE INDEX IF NOT EXISTS actions_by_subject ON actions(subject_ref, seq) WHERE subject_ref IS NOT NULL;
CREATE INDEX IF NOT EXISTS actions_by_time ON actions(tx_at, seq);

INSERT OR IGNORE INTO actions(seq, tool, actor, session, subject_ref, tx_at)
SELECT seq, json_extract(body, '$.tool'), actor, json_extract(body, '$.session'),
       json_extract(body, '$.subject_ref'), tx_at
FROM events WHERE kind = 'acted';
"""

# Issue 13. A retraction that waits for review is a `retract` event marked
# pending; the review queue lists those no confirm or reject has settled, through this index.
V4 = """
CREATE INDEX IF NOT EXISTS events_retractions ON events(seq) WHERE kind = 'retract';
-- The key fence and the roll-forward of a subject erasure look up its latest tombstone.
CREATE INDEX IF NOT EXISTS tombstones_by_subject ON tombstones(subject_hash, at);
"""

# Issue 15. The free text attached to a fact (an assert's cause ref and detail, the reason of
# an event about it) sealed under the subject's data key, one row per event, committed in the
# event's body by a salted commitment. Only erasure changes a row: sealed and salt to NULL.
# Rows of events written before this version are filled by the upgrade at read-write open
# (custody_app.core.upgrade), which also takes the plaintext out of their bodies.
V5 = """
CREATE TABLE IF NOT EXISTS event_texts(
    seq         INTEGER PRIMARY KEY,
    fact_id     TEXT NOT NULL,
    subject_ref TEXT NOT NULL,
    sealed      BLOB,
    salt        TEXT
);
CREATE INDEX IF NOT EXISTS event_texts_by_fact ON event_texts(fact_id);
CREATE TRIGGER IF NOT EXISTS event_texts_no_delete BEFORE DELETE ON event_texts
BEGIN SELECT RAISE(ABORT, 'custody: sealed free text cannot be deleted, only erased'); END;
CREATE TRIGGER IF NOT EXISTS event_texts_no_replace BEFORE INSERT ON event_texts
WHEN EXISTS (SELECT 1 FROM event_texts WHERE seq = NEW.seq)
BEGIN SELECT RAISE(ABORT, 'custody: sealed free text cannot be replaced'); END;
CREATE TRIGGER IF NOT EXISTS event_texts_erase_only BEFORE UPDATE ON event_texts
WHEN NOT (NEW.sealed IS NULL AND NEW.salt IS NULL AND NEW.seq IS OLD.seq
          AND NEW.fact_id IS OLD.fact_id AND NEW.subject_ref IS OLD.subject_ref)
BEGIN SELECT RAISE(ABORT, 'custody: sealed free text can only be erased'); END;
-- A ledger with no event yet has no plaintext to seal: the upgrade is done already.
INSERT OR IGNORE INTO ledger_meta(key, value)
SELECT 'free_text_sealed', 'at creation' WHERE NOT EXISTS (SELECT 1 FROM events);
"""

# Issue 17. The lexical recall index's rows no longer begin their scope with a status token, so
# a confirm (or any move between live and quarantined) does not rewrite a fact's FTS5 row; the
# live-only filter reads the facts table. No table changes here: the rows of an existing index
# are rewritten by `store.recall_upgrade.drop_status_scope`, which the migration runs in the same
# transaction right after this script (store.opening, POST_MIGRATION).
V6 = """
UPDATE ledger_meta SET value = value WHERE 0;
"""

# Issue 17. The vector table loses its auxiliary `embedder` column (sqlite-vec 0.1.9 leaks memory
# on every insert into a table with an auxiliary column; the name is in ledger_meta already). The
# vectors are copied into a table made anew by `store.recall_upgrade.recode_vec_table`, run in
# the same transaction right after this script (store.opening, POST_MIGRATION): no re-embedding.
V7 = """
UPDATE ledger_meta SET value = value WHERE 0;
"""

# Issue 17. The vector table's space and subject filters become 64-bit integer codes
# (`store.rows.filter_code`): sqlite-vec 0.1.9 leaks the SQL of every text metadata value over
# 12 bytes it writes, and a subject reference is 64 characters. The same copy as schema 7 (which
# already writes this layout; this step then finds the table current).
V8 = """
UPDATE ledger_meta SET value = value WHERE 0;
"""

# Issue 31. Writer keys are Ed25519 key pairs: an event a keyed writer wrote names its `signer`
# in the hashed body, and its signature over the event's hash is kept here, one row per signed
# event, written with the event and never changed or removed (unsigned events have no row, so
# the events table is as it was). `verify` checks each against the policy in force then.
V9 = """
CREATE TABLE IF NOT EXISTS event_signatures(
    seq       INTEGER PRIMARY KEY REFERENCES events(seq),
    signature BLOB NOT NULL
);
CREATE TRIGGER IF NOT EXISTS event_signatures_no_update BEFORE UPDATE ON event_signatures
BEGIN SELECT RAISE(ABORT, 'custody: an event signature cannot be changed'); END;
CREATE TRIGGER IF NOT EXISTS event_signatures_no_delete BEFORE DELETE ON event_signatures
BEGIN SELECT RAISE(ABORT, 'custody: an event signature cannot be deleted'); END;
CREATE TRIGGER IF NOT EXISTS event_signatures_no_replace BEFORE INSERT ON event_signatures
WHEN EXISTS (SELECT 1 FROM event_signatures WHERE seq = NEW.seq)
BEGIN SELECT RAISE(ABORT, 'custody: an event signature cannot be replaced'); END;
"""

# Issue 34. Erasing facts of a subject that lives on re-keys it: every surviving sealed value
# and free text of the subject is sealed again under a new key generation, and the old ones
# are destroyed. The update rules of events and event_texts allow exactly that re-seal (a
# non-null blob replaced by one of a higher generation, every other column untouched). A
# self-contained step, so it can be renumbered at a merge.
TEXTS_UPDATE_TRIGGER = """
CREATE TRIGGER event_texts_erase_only BEFORE UPDATE ON event_texts
WHEN NOT (NEW.seq IS OLD.seq AND NEW.fact_id IS OLD.fact_id AND NEW.subject_ref IS OLD.subject_ref
          AND ((NEW.sealed IS NULL AND NEW.salt IS NULL)
               OR (OLD.sealed IS NOT NULL AND NEW.salt IS OLD.salt{RESEALED})))
BEGIN SELECT RAISE(ABORT, 'custody: sealed free text can only be erased or re-sealed'); END;
""".replace("{RESEALED}", RESEALED.format(col="sealed"))
V10 = f"""
DROP TRIGGER events_append_only_update;
{EVENTS_UPDATE_TRIGGER}
DROP TRIGGER event_texts_erase_only;
{TEXTS_UPDATE_TRIGGER}
"""

# A receipt is spent by the first fact it raises (docs/evidence.md, "spent"): the verified
# asserts that cite a receipt, by (issuer, receipt id, pointer: '' for the whole output), read
# through this index of the events themselves (no table of its own to keep in step: verify
# compares what reads through it with the fold of the events, store.sqlite.events.SPENT_ALL).
# Built from the events already there by the upgrade, in its transaction.
V11 = """
CREATE INDEX IF NOT EXISTS events_receipts ON events(
    json_extract(body, '$.cause.receipt.issuer'), json_extract(body, '$.cause.receipt.receipt_id'),
    coalesce(json_extract(body, '$.cause.pointer'), ''))
WHERE kind = 'assert' AND json_extract(body, '$.provenance') = 'verified'
  AND json_extract(body, '$.cause.receipt.receipt_id') IS NOT NULL;
"""

# Index i holds the script that upgrades user_version i to i+1.
MIGRATIONS: tuple[str, ...] = (V1, V2, V3, V4, V5, V6, V7, V8, V9, V10, V11)
SCHEMA_VERSION = len(MIGRATIONS)
