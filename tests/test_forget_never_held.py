"""forget_subject of a subject the ledger never held (DESIGN 4: the tombstone is written even
when nothing matched): the request is recorded, and the certificate says at its top that nothing
was held, so a mistyped subject id never reads as a clean erasure of the real one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import Env

HELD = "acct:1042"
TYPO = "acct:1024"
DPO = "user:dpo"


def test_a_subject_never_held_is_said_never_held_and_the_real_one_is_untouched(env: Env) -> None:
    fact = env.put(HELD, "plan", "gold")
    for attempt in (1, 2):  # asked again, it is still a subject the ledger never held
        result = env.ledger.forget_subject(TYPO, actor=DPO, reason="consent_withdrawn")
        cert = result.certificate
        assert cert.never_held, attempt
        assert cert.erased == [] and result.counts == {"derived": 0}
        assert "NEVER HELD" in cert.render().splitlines()[4]
        assert json.loads(result.model_dump_json())["certificate"]["never_held"] is True
        keys = next(p for p in cert.places if p.place.startswith("key store"))
        assert "no fact of this subject was ever held" in keys.detail
    assert env.status(fact) == "active"
    assert env.ledger.as_of(subject=HELD).facts[0].value == "gold"
    assert env.ledger.verify().valid


def test_a_held_subject_is_never_said_never_held_even_when_erased_again(env: Env) -> None:
    env.put(HELD, "plan", "gold")
    first = env.ledger.forget_subject(HELD, actor=DPO, reason="consent_withdrawn")
    assert not first.certificate.never_held and len(first.certificate.erased) == 1
    assert "NEVER HELD" not in first.certificate.render()
    assert "never_held" not in json.loads(first.model_dump_json())["certificate"]
    # Its facts are gone and renamed by the hash, but the ledger did hold them.
    again = env.ledger.forget_subject(HELD, actor=DPO, reason="consent_withdrawn")
    assert not again.certificate.never_held and again.certificate.erased == []
    assert "NEVER HELD" not in again.certificate.render()


def test_the_command_line_says_never_held(env: Env) -> None:
    env.put(HELD, "plan", "gold")
    env.ledger.close()
    try:
        out = subprocess.run(
            [sys.executable, "-m", "custody_app", "forget-subject", TYPO, "--ledger",
             str(env.path), "--reason", "consent_withdrawn"], capture_output=True, text=True,
            timeout=120, stdin=subprocess.DEVNULL,
            env={k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")})
    finally:
        env.reopen()
    # Its exit says whether the certificate is complete, as for any erasure (a server's stays
    # pending until the epoch rotates).
    assert out.returncode == (0 if "\n  complete: yes\n" in out.stdout else 1), out.stderr
    assert "NEVER HELD" in out.stdout and "erased 0 fact(s)" in out.stdout
    assert env.ledger.as_of(subject=HELD).facts[0].value == "gold"
