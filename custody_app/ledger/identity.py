"""One identity per process (DESIGN 14): an agent process (`serve --agent`, `--batch --agent`)
writes as its one agent only and runs no operator op; every process names a writer whose key
the policy registers only while holding that key. The operator surfaces (CLI, terminal app,
operator batch, Python API) name whichever actor the operator chooses: trusted by design."""

from __future__ import annotations

from pydantic_core import PydanticCustomError

from custody_app.core.ledger_core import LedgerCore
from custody_app.domain.commands import (
    Act,
    Affirm,
    AssertFact,
    Checkpoint,
    Command,
    Confirm,
    Forget,
    ForgetSubject,
    Hold,
    Reject,
    Release,
    Retract,
    Sweep,
)
from custody_app.domain.errors import LedgerError
from custody_app.domain.models import actor_kind, check_actor
from custody_app.keys import writer_keys
from custody_app.keys.writer_keys import WriterKey

# An agent process's identity: the kinds an MCP server may run as.
AGENT_KINDS = ("agent", "llm")
# Ops only the operator runs: erasure, retention, legal holds, checkpoints (and key rotation,
# which no agent surface offers at all).
OPERATOR_ONLY: dict[type[Command], str] = {
    Forget: "forget", ForgetSubject: "forget_subject", Sweep: "sweep", Hold: "hold",
    Release: "release", Checkpoint: "checkpoint"}
# Commands whose `actor` is who acts (Actions' `actor` is a filter of a read).
_ACTING: tuple[type[Command], ...] = (AssertFact, Retract, Confirm, Reject, Affirm, Act,
                                      *OPERATOR_ONLY)


def bind_agent(ledger: LedgerCore, agent: str, key: WriterKey | None) -> None:
    """Fix this process's identity as `agent` (agent:NAME or llm:NAME), holding `key` if
    given. Refused when the policy registers a key for `agent` and `key` is not it
    (`writer_key_required`), or `key` is registered for nobody of that name
    (`writer_key_unregistered`): a key that proves nothing is never silently dropped."""
    try:
        valid = actor_kind(check_actor(agent)) in AGENT_KINDS
    except PydanticCustomError:
        valid = False
    if not valid:
        raise LedgerError("invalid_actor", f"the process's agent '{agent}' must be "
                          "agent:NAME or llm:NAME", actor=agent)
    registered = writer_keys.registered(ledger.policy.policy, agent)
    if key is not None and not ledger.hold_writer_key(agent, key):
        if registered is None:
            raise LedgerError("writer_key_unregistered", f"the policy in force registers no "
                              f"writer key for {agent}: add the line `custody-app writer-key` "
                              f"printed for this key ({key.signer}) under [provenance]",
                              actor=agent)
        raise LedgerError("writer_key_required", f"the writer key given is not the one the "
                          f"policy in force registers for {agent}", actor=agent)
    if registered is not None and agent not in ledger.signers:
        raise LedgerError("writer_key_required", writer_keys.required_message(agent),
                          actor=agent)
    ledger.agent = agent


def check_identity(ledger: LedgerCore, command: Command) -> None:
    """Refuse a command this process may not run as the actor it names (nothing written)."""
    if not isinstance(command, _ACTING):
        return
    actor = str(getattr(command, "actor"))  # noqa: B009 (every acting command has one)
    if ledger.agent is not None:
        op = OPERATOR_ONLY.get(type(command))
        if op is not None:
            raise LedgerError("operator_only", f"{op} is the operator's: this process runs as "
                              f"{ledger.agent}, an agent, and may not run it", op=op)
        if actor != ledger.agent:
            raise LedgerError("actor_mismatch", f"this process writes as {ledger.agent} only, "
                              f"not as {actor}", actor=actor)
    ledger.signer_for(actor)  # a registered name is its key: refused without it
