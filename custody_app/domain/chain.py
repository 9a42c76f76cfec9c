"""The hash chain: salted value commitments, event hashes over RFC 8785 JSON, verification."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, TypeVar

from custody_app.domain.canonical import canonical as canonical  # callers import it from here
from custody_app.domain.canonical import orjson  # type: ignore[attr-defined]
from custody_app.domain.records import EventRecord
from custody_app.domain.sealed_text import Texts, hashed_body

E = TypeVar("E", bound=EventRecord)

GENESIS = "0" * 64
# Columns repeated outside the hashed body; verify checks they still agree with it.
_MIRRORED = ("seq", "kind", "tx_at", "actor", "policy_hash", "fact_id")
_MIRRORED_OF = attrgetter(*_MIRRORED)
_sha256 = hashlib.sha256
# orjson reads an integer of 19 digits or more (past 64 bits) as a float where json.loads keeps
# it exact: a body holding such a run of ASCII digits (anywhere, even in a string) is read by
# json. Found by mapping every digit byte to "0" and every other byte to " " (two C passes; a
# regular expression took 30 µs a body).
_DIGITS = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))
_LONG_RUN = b"0" * 19
# A cheap test before parsing: only bodies sealed by the schema upgrade hold this.
_UPGRADED = '"upgraded":true'


def new_salt() -> str:
    return os.urandom(16).hex()


def commitment(salt: str, value_text: str) -> str:
    """sha256(salt || canonical(value)): hashed instead of the value, so a forget keeps the chain."""
    return hashlib.sha256(bytes.fromhex(salt) + value_text.encode("utf-8")).hexdigest()


def event_hash(prev_hash: str, body: str) -> str:
    return hashlib.sha256(prev_hash.encode("ascii") + body.encode("utf-8")).hexdigest()


# An affirm's whole body as the append writes it (RFC 8785: keys sorted, no spaces) when it has
# no session and no signer, the most common event of a long ledger. When none of its strings
# needs escaping in JSON (no quote, backslash or control character) a stored body equal to this
# text parses to exactly these columns, so the walk compares the text instead of parsing it.
_AFFIRM = ('{"actor":"%s","fact_id":"%s","kind":"affirm","policy_hash":"%s","seq":%d,'
           '"tx_at":"%s"}')


class PlainAffirm(dict):  # type: ignore[type-arg]
    """The body `plain_affirm` rebuilt from an affirm's columns (its stored text compared
    equal): by construction it names no signer, session, sealed text, receipt or retraction,
    so a walk may leave out the checks that look only for those (verify's does)."""

    __slots__ = ()


def plain_affirm(row: EventRecord) -> dict[str, Any] | None:
    """The body of an affirm stored exactly as `_AFFIRM` prints its columns, else None (the
    walk then parses it like any other body)."""
    actor, fact_id, policy_hash, tx_at, seq = (row.actor, row.fact_id, row.policy_hash,
                                               row.tx_at, row.seq)
    try:
        strings = actor + fact_id + policy_hash + tx_at  # type: ignore[operator]
    except TypeError:  # a column that is not text (or no fact id): parsed and compared
        return None
    if '"' in strings or "\\" in strings or not strings.isprintable() or type(seq) is not int:
        return None
    if row.body != _AFFIRM % (actor, fact_id, policy_hash, seq, tx_at):
        return None
    return PlainAffirm(actor=actor, fact_id=fact_id, kind="affirm", policy_hash=policy_hash,
                       seq=seq, tx_at=tx_at)


def parse_body(text: str, encoded: bytes | None = None) -> Any:
    """json.loads(text), by orjson where its answer is the same: every JSON text orjson
    accepts it reads to the same structure, keys and strings, except integers past 64 bits
    (kept to json.loads by the digit guard); what orjson refuses (NaN, an escaped lone
    surrogate, a number past the double range) json.loads reads or refuses as before.
    Raises ValueError on text that is not JSON, like json.loads. `encoded`: the text's UTF-8
    bytes when the caller has them (the chain walk hashed them)."""
    if orjson is not None:
        data = text.encode("utf-8", "surrogatepass") if encoded is None else encoded
        if _LONG_RUN not in data.translate(_DIGITS):
            try:
                return orjson.loads(data)
            except orjson.JSONDecodeError:
                pass
    return json.loads(text)


@dataclass(frozen=True, slots=True)
class ChainReport:
    """The outcome of walking the chain."""

    valid: bool
    events: int
    head: str | None
    first_bad_seq: int | None = None
    problem: str | None = None




def check_event(row: E, prev_hash: str, expected_seq: int,
                open_value: Callable[[E, dict[str, Any]], str | None] | None = None,
                texts_of: Callable[[E], Texts | None] | None = None) -> str | None:
    """What is wrong with one event given its predecessor, or None. `open_value` turns a stored
    value into its canonical text (None when its key is gone) so the commitment can be checked;
    `texts_of` opens an event's sealed free text (None when erased), needed for the hash of an
    event sealed by the schema upgrade (whose hash covers its body as it was before)."""
    return _check(row, prev_hash, expected_seq, open_value, texts_of)[0]


def _check(row: E, prev_hash: str, expected_seq: int,
           open_value: Callable[[E, dict[str, Any]], str | None] | None,
           texts_of: Callable[[E], Texts | None] | None = None,
           ) -> tuple[str | None, dict[str, Any]]:
    """(problem or None, the body as parsed here: handed on so no later check parses it again)."""
    if row.seq != expected_seq:
        return f"event {expected_seq} is missing (next stored event is {row.seq})", {}
    if row.prev_hash != prev_hash:
        return f"event {row.seq} does not link to the event before it", {}
    text = row.body
    body: Any = None
    encoded: bytes | None = None
    if _UPGRADED in text:
        try:
            body = parse_body(text)
        except ValueError:
            return f"event {row.seq} has a body that is not JSON", {}
        # Erased text cannot rebuild the old body: verify checks the upgrade's digest instead.
        hashed: str | None = hashed_body(text, body, texts_of(row) if texts_of else None)
        if hashed is not None and event_hash(prev_hash, hashed) != row.hash:
            return f"event {row.seq} does not match its hash", {}
    else:
        # event_hash(prev_hash, text), the body encoded once for the hash and the parse.
        encoded = text.encode("utf-8")
        if _sha256(prev_hash.encode("ascii") + encoded).hexdigest() != row.hash:
            return f"event {row.seq} does not match its hash", {}
        if row.kind == "affirm" and (body := plain_affirm(row)) is not None:
            # Its mirrored columns are the body's by construction.
            if row.value is None and row.salt is None and row.subject is None:
                return None, body
            return _valueless(row, body)
    try:
        body = parse_body(text, encoded) if body is None else body
    except ValueError:
        return f"event {row.seq} has a body that is not JSON", {}
    if not isinstance(body, dict):
        return f"event {row.seq} has a body that is not a JSON object", {}
    get = body.get
    # One tuple comparison for the six columns; the loop only names the one that differs.
    if (get("seq"), get("kind"), get("tx_at"), get("actor"), get("policy_hash"),
            get("fact_id")) != _MIRRORED_OF(row):
        for column in _MIRRORED:
            if get(column) != getattr(row, column):
                return f"event {row.seq} column {column} disagrees with the hashed event", body
    if row.kind == "assert":
        if (row.value is None) != (row.salt is None):
            return (f"event {row.seq} has a value without its salt, or a salt without its "
                    "value"), body
        if row.value is not None and row.salt is not None and open_value is not None:
            try:
                value_text = open_value(row, body)
            except Exception:  # any failure to open a stored value is a broken event
                return f"event {row.seq} has a stored value that does not decrypt", body
            try:
                if value_text is not None and commitment(row.salt, value_text) != body.get(
                        "commitment"):
                    return f"event {row.seq} value does not match its commitment", body
            except ValueError:
                return f"event {row.seq} has a malformed salt", body
        return None, body
    return _valueless(row, body)


def _valueless(row: E, body: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """Only an assert carries a value, a salt or a plaintext subject."""
    if row.value is not None or row.salt is not None or row.subject is not None:
        return f"event {row.seq} is not an assert but carries a value or a subject", body
    return None, body


def verify_chain(
    rows: Iterable[E], progress: Callable[[int], None] | None = None,
    open_value: Callable[[E, dict[str, Any]], str | None] | None = None,
    extra_check: Callable[[E], str | None] | None = None,
    texts_of: Callable[[E], Texts | None] | None = None,
    body_check: Callable[[E, dict[str, Any]], str | None] | None = None,
    plain_check: Callable[[E], str | None] | None = None,
) -> ChainReport:
    """Walk every event in seq order; report the first bad seq for an edit, gap or reordering.
    `body_check` is given each good event with the body the walk parsed (parsed once only).
    `plain_check`, when given, replaces `extra_check` and `body_check` for a plain affirm
    (`plain_affirm`): such an event the loop accepts itself, without a frame, when every check
    `_check` makes holds; anything else (a wrong link, hash, text or order) goes the general
    way, which names the problem."""
    prev_hash = GENESIS
    prev_tx = ""
    count = 0
    sha = _sha256
    affirm = _AFFIRM
    for row in rows:
        expected = count + 1
        if (plain_check is not None and row.kind == "affirm" and row.seq == expected
                and row.prev_hash == prev_hash and row.value is None and row.salt is None
                and row.subject is None and type(row.seq) is int):
            # _check and plain_affirm, inlined for the event most of a long ledger holds.
            actor, fact_id, policy_hash, tx_at, text = (row.actor, row.fact_id,
                                                        row.policy_hash, row.tx_at, row.body)
            if (type(actor) is str and type(fact_id) is str and type(policy_hash) is str
                    and type(tx_at) is str and tx_at >= prev_tx):
                strings = actor + fact_id + policy_hash + tx_at
                if ('"' not in strings and "\\" not in strings and strings.isprintable()
                        and text == affirm % (actor, fact_id, policy_hash, expected, tx_at)
                        and sha(prev_hash.encode("ascii") + text.encode("utf-8")).hexdigest()
                        == row.hash):
                    problem = plain_check(row)
                    if problem is not None:
                        return ChainReport(False, count, prev_hash, expected, problem)
                    prev_hash, prev_tx, count = row.hash, tx_at, expected
                    if progress is not None and count % 10000 == 0:
                        progress(count)
                    continue
        problem, body = _check(row, prev_hash, expected, open_value, texts_of)
        if problem is None and row.tx_at < prev_tx:
            problem = f"event {row.seq} has a transaction time before the event preceding it"
        if problem is None and type(body) is PlainAffirm and plain_check is not None:
            problem = plain_check(row)
        else:
            if problem is None and extra_check is not None:
                problem = extra_check(row)
            if problem is None and body_check is not None:
                problem = body_check(row, body)
        if problem is not None:
            bad = expected if row.seq != expected else row.seq
            return ChainReport(False, count, prev_hash, bad, problem)
        prev_hash, prev_tx = row.hash, row.tx_at
        count += 1
        if progress is not None and count % 10000 == 0:
            progress(count)
    return ChainReport(True, count, None if count == 0 else prev_hash)
