"""A receipt is spent by the first fact it raises (docs/evidence.md, "spent"): one receipt (its
issuer and id) cited for one field (its pointer; the whole output when none) raises at most one
fact in a ledger. A later write citing it for that field, by any writer, in any session,
whatever became of the first fact, earns nothing from it: it keeps its writer's own standing
and its result says why (`receipt_unused`, check `spent`). The same receipt still raises one
fact for each other field it covers, corroboration never counts it again, and `verify` checks
what the write reads (an index of the verified asserts citing receipts) against the events.
A contract module (tests/conftest.py): real CLI processes on a file and on a server."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from custody_app.doctor.checks import diagnose
from custody_app.ledger.facade import Ledger
from custody_app.receipts import sign
from tests import rawsql

ROOT = Path(__file__).resolve().parent.parent
SESSION = "run-7"
OUTPUT = {"account": 42, "seats": 120, "plan": "pro"}


def cli(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUSTODY_LEDGER", "CUSTODY_POLICY")}
    return subprocess.run([sys.executable, "-m", "custody_app", *map(str, args)],
                          capture_output=True, text=True, timeout=120, cwd=cwd, env=env,
                          check=False)


class Crm:
    """A ledger made by `init` under the shipped policy with gateways registered (their keys
    made by `receipt-key`), and the receipts they sign for it."""

    def __init__(self, folder: Path, ledger: Any, issuers: tuple[str, ...] = ("gateway:crm",),
                 policy_edits: tuple[tuple[str, str], ...] = ()) -> None:
        self.folder, self.ledger, self.batches = folder, ledger, 0
        self.keys: dict[str, Path] = {}
        lines = []
        for issuer in issuers:
            key = folder / f"{issuer.split(':')[1]}.key"
            made = cli("receipt-key", key, "--issuer", issuer)
            assert made.returncode == 0, made.stderr
            self.keys[issuer] = key
            lines.append(f'"{issuer}" = "{Path(f"{key}.pub").read_text().strip()}"')
        text = (ROOT / "policies/default.toml").read_text(encoding="utf-8").replace(
            "\nreceipt_issuers = {}\n", f"\nreceipt_issuers = {{{', '.join(lines)}}}\n")
        for old, new in policy_edits:
            assert f"\n{old}\n" in text, old
            text = text.replace(f"\n{old}\n", f"\n{new}\n")
        self.policy = folder / "policy.toml"
        self.policy.write_text(text, encoding="utf-8")
        made = cli("init", "--ledger", ledger, "--policy", self.policy, "--json")
        assert made.returncode == 0, made.stderr
        self.ledger_id = json.loads(made.stdout)["ledger_id"]

    def receipt(self, receipt_id: str = "rc-1", issuer: str = "gateway:crm") -> dict[str, Any]:
        """A CRM lookup of account 42 in session run-7, signed for this ledger."""
        return sign(self.keys[issuer], issuer=issuer, receipt_id=receipt_id, tool="crm.lookup",
                    session=SESSION, arguments={"account": 42}, output=OUTPUT,
                    subject="acct:42", audience=self.ledger_id)

    def batch(self, ops: list[dict[str, Any]], *flags: str) -> list[dict[str, Any]]:
        self.batches += 1
        file = self.folder / f"batch{self.batches}.jsonl"
        file.write_text("".join(json.dumps(op) + "\n" for op in ops), encoding="utf-8")
        done = cli("--batch", file, "--ledger", self.ledger, *flags)
        out = [json.loads(line) for line in done.stdout.splitlines()]
        assert out and all(o["ok"] for o in out), (out, done.stderr)
        return [o["result"] for o in out]

    def cite(self, actor: str, receipt: dict[str, Any], pointer: str = "/seats",
             **extra: Any) -> dict[str, Any]:
        """`actor` writes OUTPUT's field at `pointer`, citing `receipt`: through `--batch
        --agent` for an agent, through the operator's batch for anyone else."""
        op = {"op": "assert", "subject": "acct:42", "predicate": pointer[1:],
              "value": OUTPUT[pointer[1:]], "actor": actor, "session": SESSION,
              "cause": {"kind": "tool", "ref": "call-1", "receipt": receipt, "pointer": pointer},
              "tool_output": OUTPUT, **extra}
        flags = ("--agent", actor) if actor.startswith("agent:") else ()
        return self.batch([op], *flags)[0]

    def run(self, *args: str, codes: tuple[int, ...] = (0,)) -> str:
        done = cli(*args, "--ledger", self.ledger)
        assert done.returncode in codes, done.stderr
        return done.stdout

    def verify(self) -> dict[str, Any]:
        return dict(json.loads(self.run("verify", "--json")))


@pytest.fixture
def crm(tmp_path: Path, ledger_at: Callable[[str], Any], backend: str) -> Callable[..., Crm]:
    """(`backend` named so the contract suite runs these on both backends.)"""
    return lambda **kw: Crm(tmp_path, ledger_at("ledger.db"), **kw)


def spent(result: dict[str, Any]) -> bool:
    """The write earned nothing from its receipt, and says it was spent."""
    return (result["provenance"] == "claimed" and result["status"] == "quarantined"
            and (result.get("receipt_unused") or {}).get("check") == "spent")


def test_a_stolen_receipt_replayed_after_a_human_retracted_its_fact_earns_nothing(
        crm: Callable[..., Crm]) -> None:
    """The hostile tester's repro: an unkeyed agent (`--batch --agent`, any session it names)
    cited the CRM bot's receipt after user:maria retracted the fact it raised, and its write
    came back `verified` and believed."""
    led = crm()
    rc = led.receipt()
    first = led.cite("agent:crmbot", rc)
    assert (first["provenance"], first["status"]) == ("verified", "active")
    assert "receipt_unused" not in first
    led.run("retract", first["fact_id"], "--actor", "user:maria",
            "--reason", "CRM row was a quote")
    thief = led.cite("agent:thief", rc)
    assert spent(thief), thief
    assert "rc-1" in thief["receipt_unused"]["message"]
    believed = json.loads(led.run("beliefs", "--subject", "acct:42", "--json"))
    assert [f["value"] for f in believed["facts"]] == []
    assert led.verify()["valid"] is True


FATES = ("believed", "retracted", "superseded", "forgotten")


@pytest.mark.parametrize("fate", FATES)
def test_the_writer_citing_its_own_receipt_again_earns_nothing_whatever_became_of_the_fact(
        crm: Callable[..., Crm], fate: str) -> None:
    """The same writer, the same session, the same receipt and field: spent by the first fact,
    whether it is still believed, was retracted, superseded, or its subject erased (the erasure
    drops the value's digest with the subject's key, so nothing else quarantines it)."""
    led = crm()
    rc = led.receipt()
    first = led.cite("agent:crmbot", rc)
    assert first["provenance"] == "verified"
    if fate == "retracted":
        led.run("retract", first["fact_id"], "--actor", "user:maria", "--reason", "a quote")
    elif fate == "superseded":
        led.run("correct", first["fact_id"], "130", "--actor", "user:maria", "--reason", "typo")
    elif fate == "forgotten":
        # On a server the certificate stays pending for the server's own copies (exit 1).
        led.run("forget-subject", "acct:42", "--actor", "user:dpo", "--reason", "subject_request",
                codes=(0, 1) if rawsql.is_server(led.ledger) else (0,))
    again = led.cite("agent:crmbot", rc)
    assert spent(again), again
    assert led.verify()["valid"] is True


def test_one_receipt_raises_one_fact_for_each_field_it_covers(crm: Callable[..., Crm]) -> None:
    """One receipt cited for /seats and for /plan raises two facts; each field once."""
    led = crm()
    rc = led.receipt()
    seats, plan = led.cite("agent:crmbot", rc, "/seats"), led.cite("agent:crmbot", rc, "/plan")
    assert [seats["provenance"], plan["provenance"]] == ["verified", "verified"]
    assert seats["fact_id"] != plan["fact_id"]
    assert spent(led.cite("agent:crmbot", rc, "/seats"))
    assert spent(led.cite("agent:other", rc, "/plan"))
    # Another receipt of the same gateway is another call: it raises its own fact.
    assert led.cite("agent:crmbot", led.receipt("rc-2"), "/seats")["provenance"] == "verified"


CORROBORATING = (("corroborate = 0", "corroborate = 2"),
                 ("predicates = {}", 'predicates = {seats = "many"}'))


def test_corroboration_never_counts_a_spent_receipt(crm: Callable[..., Crm]) -> None:
    """With `corroborate = 2`, receipts of two gateways each raised a fact once; both facts were
    replaced. A claim of the same value is then corroborated by nothing: neither receipt cited
    again by an agent (which earns nothing) nor by an operator declaring `verified` on its own
    authority (allowed by the policy, but a declaration, not the receipt's issuer) counts."""
    led = crm(issuers=("gateway:crm", "gateway:erp"), policy_edits=CORROBORATING)
    rc, re = led.receipt("rc-1", "gateway:crm"), led.receipt("re-1", "gateway:erp")
    for bot, receipt, replacement in (("agent:crmbot", rc, "100"), ("agent:erpbot", re, "101")):
        raised = led.cite(bot, receipt)
        assert raised["provenance"] == "verified"
        led.run("correct", raised["fact_id"], replacement, "--actor", "user:ops",
                "--reason", "recount")
    claim = led.batch([{"op": "assert", "subject": "acct:42", "predicate": "seats",
                        "value": 120, "actor": "agent:thief", "session": SESSION,
                        "cause": {"kind": "tool", "ref": "call-9"}}],
                      "--agent", "agent:thief")[0]
    assert claim["status"] == "quarantined"
    assert spent(led.cite("agent:thief", rc)) and spent(led.cite("agent:thief", re))
    declared = [led.cite("user:ops", receipt, provenance="verified") for receipt in (rc, re)]
    assert [(d["provenance"], d["receipt_unused"]["check"]) for d in declared] == \
        [("verified", "spent")] * 2
    queue = json.loads(led.run("queue", "--json"))
    assert claim["fact_id"] in json.dumps(queue), "the claim was corroborated by spent receipts"
    assert "corroborated" not in led.run("history", claim["fact_id"])
    assert led.verify()["valid"] is True


def test_a_receipt_spent_before_the_upgrade_stays_spent_after_it(crm: Callable[..., Crm]) -> None:
    """A ledger of the schema before the spent-receipt index: the upgrade at the first
    read-write open (one transaction) builds it from the events there, so a receipt spent
    before the upgrade is spent after it."""
    led = crm()
    rc = led.receipt()
    assert led.cite("agent:crmbot", rc)["provenance"] == "verified"
    if rawsql.is_server(led.ledger):
        from store.postgres.schema import MIGRATIONS, run_migration_spent_receipts
        before = ("UPDATE schema_version SET version = ?",
                  (MIGRATIONS.index(run_migration_spent_receipts),))
    else:
        before = "PRAGMA user_version = 10"
    rawsql.edit(led.ledger, "DROP INDEX events_receipts", before)
    assert spent(led.cite("agent:thief", rc))
    assert led.verify()["valid"] is True


@pytest.mark.sqlite_only  # edits SQLite's own schema table: a server has none
def test_verify_and_doctor_name_a_hidden_spent_receipt_and_rebuild_repairs_it(
        crm: Callable[..., Crm]) -> None:
    """Someone with the ledger file points the index a write reads to find a receipt's first
    fact at an empty b-tree (the schema unchanged): replays are believed again. `verify` and
    `doctor` name it; `rebuild --repair` rebuilds the index from the events."""
    led = crm()
    rc = led.receipt()
    assert led.cite("agent:crmbot", rc)["provenance"] == "verified"
    con = sqlite3.connect(led.ledger)
    con.execute("CREATE INDEX blank ON events(seq) WHERE kind = 'assert' AND seq < 0")
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'blank'").fetchone()
    con.execute("PRAGMA writable_schema = ON")
    con.execute("UPDATE sqlite_master SET rootpage = ? WHERE name = 'events_receipts'", (root,))
    con.execute("DELETE FROM sqlite_master WHERE name = 'blank'")
    con.commit()
    con.close()
    with Ledger.open(led.ledger, readonly=True) as ledger:
        # What a write citing the receipt reads: nothing spent it.
        assert ledger.db.events.spent_by("gateway:crm", "rc-1", "/seats") is None
        report = ledger.verify()
    assert not report.valid and "spent receipts" in (report.problem or ""), report.problem
    integrity = [c for c in diagnose(led.ledger).checks if c.name == "integrity"]
    assert [c.outcome for c in integrity] == ["FAIL"] and "spent receipts" in integrity[0].detail
    assert "repaired" in led.run("rebuild", "--repair")
    assert led.verify()["valid"] is True
    assert spent(led.cite("agent:thief", rc))
