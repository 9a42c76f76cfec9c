"""Identifiers a ledger written before the door refused invisible characters still holds, on a
SQLite file and on a PostgreSQL server: `doctor` names each (`unsafe-identifiers`: the field,
the identifier escaped, the character, how many facts or events hold it, what to do), and
`forget-subject` erases a lookalike subject named as stored or as `doctor` shows it
(`acct:1042\\u200b`), where the door refuses to name a lookalike the ledger does not hold.

The ledgers are written the way an older version wrote them: through the product, under the
door as it was before it refused invisible characters (control and bidirectional characters
only). A hand edit of a stored identifier would not do: the chain hashes the predicate, the
space, the actor and the session, so verify would fail where an upgraded ledger verifies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from custody_app import Ledger
from custody_app.doctor import diagnose
from custody_app.doctor.identifiers import NAME, SHOWN, identifiers_check
from custody_app.domain import models
from custody_app.domain.errors import LedgerError
from custody_app.domain.escaping import escape_text

CLI = str(Path(sys.executable).parent / "custody-app")
CAUSE = {"kind": "tool", "ref": "r"}
LOOKALIKE = "acct:1042\u200b"  # looks exactly like acct:1042
ACTOR = "agent:support-bot\u2060"
# Invisible characters that must never reach the output raw.
RAW = ("\u200b", "\u2060", "\u00ad", "\ufeff")


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=120,
                          env=env, stdin=subprocess.DEVNULL)


@contextmanager
def door_before_invisible_characters() -> Iterator[None]:
    """The door as it was before it refused invisible characters: an identifier was refused only
    for a character `escape_text` escapes (a control or bidirectional one)."""
    def kind(text: str) -> tuple[str, str] | None:
        return None if escape_text(text) == text else ("(control)", "control or bidirectional")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(models, "unsafe_kind", kind)
        patch.setattr(models, "unsafe_character", lambda text: None if kind(text) is None else "x")
        yield


def _put(led: Ledger, subject: str, predicate: str = "plan", value: str = "gold",
         actor: str = "agent:support", **optional: Any) -> str:
    return led.assert_fact(subject, predicate, value, actor=actor, cause=CAUSE,
                           provenance="attested", **optional).fact_id


def plant(address: str) -> dict[str, str]:
    """A ledger holding clean identifiers (some not ASCII) and, written under the older door,
    a lookalike of each kind: {name: fact id}."""
    with Ledger.open(address) as led:
        ids = {"clean": _put(led, "acct:1042"), "unicode": _put(led, "acct:東京", "café")}
        with door_before_invisible_characters():
            ids["subject"] = _put(led, LOOKALIKE)
            ids["second"] = _put(led, "acct:1042\u2060", value="silver")
            ids["others"] = _put(led, "acct:7", "plan\u2060", actor=ACTOR, space="crm\u00ad",
                                 session="s-1\ufeff")
        assert led.verify().valid  # what an upgraded ledger is: whole
    return ids


def _line(report: dict[str, Any]) -> dict[str, Any]:
    [found] = [c for c in report["checks"] if c["name"] == NAME]
    return dict(found)


def test_doctor_names_each_stored_lookalike_escaped_with_what_to_do(address: str) -> None:
    plant(address)
    done = run("doctor", "--ledger", address, "--json")
    assert done.returncode == 0, done.stdout + done.stderr  # a warning, not a failure
    line = _line(json.loads(done.stdout))
    detail = line["detail"]
    assert line["outcome"] == "warn", line
    assert not any(char in done.stdout for char in RAW)  # every identifier shown escaped
    assert "predicate 'plan\\u2060' (invisible \\u2060): 1 fact(s), 1 believed" in detail
    assert "space 'crm\\xad' (invisible \\xad): 1 fact(s)" in detail
    assert "actor 'agent:support-bot\\u2060' (invisible \\u2060): 1 event(s), 1 fact(s) it " \
           "wrote believed" in detail
    assert "session 's-1\\ufeff' (invisible \\ufeff): 1 event(s)" in detail
    assert "`custody-app beliefs --predicate 'plan\\u2060'`" in detail
    assert "café" not in detail and "東京" not in detail  # not ASCII, yet clean
    if address.startswith("postgresql"):
        # The server stores subject ids sealed: the line says it cannot read them.
        assert "subject ids are stored sealed" in detail and "acct:1042" not in detail
    else:
        assert "subject 'acct:1042\\u200b' (invisible \\u200b): 1 fact(s), 1 believed" in detail
        assert "subject 'acct:1042\\u2060' (invisible \\u2060)" in detail
        assert "`custody-app forget-subject 'acct:1042\\u200b' --reason error`" in detail
    text = run("doctor", "--ledger", address)
    assert f"warn {NAME}" in text.stdout and not any(char in text.stdout for char in RAW)
    assert run("doctor", "--ledger", address, "--strict").returncode == 1


def test_a_lookalike_subject_is_erased_by_the_spelling_doctor_shows_or_as_stored(
        address: str) -> None:
    ids = plant(address)
    shown = "acct:1042\\u200b"  # what doctor and every text output print (a backslash, a u...)
    found = run("beliefs", "--ledger", address, "--subject", shown, "--json")
    assert found.returncode == 0, found.stderr
    assert [f["fact_id"] for f in json.loads(found.stdout)["facts"]] == [ids["subject"]]
    done = run("forget-subject", shown, "--reason", "error", "--ledger", address, "--json")
    # On a server the certificate stays pending (exit 1) until the epoch key is rotated.
    server = address.startswith("postgresql")
    assert done.returncode == (1 if server else 0), done.stdout + done.stderr
    assert json.loads(done.stdout)["counts"] == {"active": 1, "derived": 0}
    erased = run("erasures", "--subject", shown, "--ledger", address, "--json")
    assert json.loads(erased.stdout)["subject"]["erased"] is True, erased.stdout
    with Ledger.open(address) as led:
        # As stored, through the Python API (and so --batch): the other lookalike.
        assert led.forget_subject("acct:1042\u2060", actor="user:op",
                                  reason="error").counts["active"] == 1
        believed = {f.fact_id: f.subject for f in led.as_of().facts}
        assert ids["subject"] not in believed and ids["second"] not in believed
        assert believed[ids["clean"]] == "acct:1042"  # the id they looked like is untouched
        assert led.erasures("acct:1042").subject.erased is False  # type: ignore[union-attr]
        assert led.verify().valid
    detail = _line(diagnose(address).model_dump())["detail"]
    assert "subject 'acct" not in detail and "predicate 'plan\\u2060'" in detail


def test_forget_subject_still_refuses_a_lookalike_the_ledger_does_not_hold(address: str) -> None:
    plant(address)
    with Ledger.open(address) as led:
        before = led.verify()
        with pytest.raises(LedgerError) as caught:
            led.forget_subject("acct:9\u200b", actor="user:op", reason="error")
        assert caught.value.code == "bad_request" and caught.value.details["field"] == "subject"
        assert "invisible character \\u200b" in caught.value.message
        assert "holds no subject spelled so" in caught.value.message
        with pytest.raises(LedgerError) as control:
            led.forget_subject("acct:9\x1b[2J", actor="user:op", reason="error")
        assert "control or bidirectional character \\x1b" in control.value.message
        assert (led.verify().events, led.verify().head) == (before.events, before.head)


def _rows(*found: tuple[str, str, int, int]) -> list[tuple[str, str, int, int]]:
    return list(found)


def test_the_line_is_bounded_graded_by_what_is_left_to_do_and_says_what_it_covers() -> None:
    many = _rows(*((("subject", f"acct:{n:02d}\u200b", 1, 1)) for n in range(SHOWN + 3)))
    line = identifiers_check("l.db", many + [("subject", "acct:café", 4, 4)])
    assert line.outcome == "warn" and line.detail.count("(invisible \\u200b)") == SHOWN
    assert f"{SHOWN + 3} identifier(s)" in line.detail and "; and 3 more." in line.detail
    # What the chain keeps for good (a session, an actor and a predicate of ended facts, no
    # subject id): named, and ok, so `doctor --strict` does not fail for ever.
    history = identifiers_check("l.db", _rows(
        ("session", "s\u200b", 2, 0), ("actor", ACTOR, 3, 0), ("writer", ACTOR, 1, 0),
        ("predicate", "plan\u2060", 1, 0)))
    assert history.outcome == "ok" and "actor 'agent:support-bot\\u2060'" in history.detail
    assert "the chain keeps them" in history.detail
    # ...but an actor whose facts are believed or awaiting review is something to do.
    live = identifiers_check("l.db", _rows(("actor", ACTOR, 3, 0), ("writer", ACTOR, 1, 1)))
    assert live.outcome == "warn" and "1 fact(s) it wrote believed" in live.detail
    clean = identifiers_check("h (schema custody)", [("predicate", "café", 1, 1)],
                              subjects_sealed=True)
    assert clean.outcome == "ok" and clean.detail.startswith(
        "no predicate, space, actor or session of h (schema custody)")
    assert "subject ids are stored sealed" in clean.detail
