"""The MCP memory tools: argument models derived from the batch commands, run as one agent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError, create_model
from pydantic_core import PydanticCustomError

from custody_app.domain import commands
from custody_app.domain.commands import Command, parse_command, refusal
from custody_app.domain.errors import LedgerError
from custody_app.domain.models import Frozen, actor_kind, check_actor
from custody_app.domain.readmodels import AssertResult
from custody_app.domain.timeutil import format_time
from custody_app.interfaces.mcp.pending import (
    PendingArguments,
    QuarantinedWrite,
    pending_writes,
)
from custody_app.keys.writer_keys import WriterKey
from custody_app.ledger.facade import Ledger

# Fields the server sets itself and an agent can never pass: who writes (the configured agent),
# which run it is (the MCP connection's session), how far the write is trusted (the writer
# key), and which provenance reads may see (believed facts only: quarantine hides claims).
SERVER_FIXED = ("actor", "session", "provenance", "include", "include_claimed")
AGENT_KINDS = ("agent", "llm")


@dataclass(frozen=True)
class ToolSpec:
    """One MCP tool: the batch command it runs and its arguments (the command's fields minus
    the server-fixed ones, with the command's own types and constraints)."""

    name: str
    command: type[Command] | None  # None: a tool of the server's own (memory_pending)
    description: str
    read_only: bool
    arguments: type[BaseModel]

    def input_schema(self) -> dict[str, Any]:
        return self.arguments.model_json_schema()


def arguments_model(name: str, command: type[Command]) -> type[BaseModel]:
    """The command's fields minus SERVER_FIXED, as a strict model (unknown fields refused)."""
    fields: dict[str, Any] = {n: (f.annotation, f) for n, f in command.model_fields.items()
                              if n not in SERVER_FIXED}
    title = "".join(part.title() for part in name.split("_")) + "Arguments"
    return create_model(title, __base__=Frozen, __doc__=f"Arguments of {name}.", **fields)


def _spec(name: str, command: type[Command], read_only: bool, description: str) -> ToolSpec:
    return ToolSpec(name, command, description, read_only, arguments_model(name, command))


_TOOLS = [
    _spec("memory_write", commands.AssertFact, False,
          "Write a fact (subject, predicate, JSON value) with its cause {kind, ref}; name the "
          "fact it replaces in `supersedes` to correct it, or the facts it was derived from in "
          "`sources`. Unless this server holds a registered writer key, the write is `claimed`: "
          "quarantined, and invisible to reads and recall, until a reviewer confirms it."),
    _spec("memory_read", commands.AsOf, True,
          "The facts believed at valid time `valid_at` as the ledger knew them at `tx_at` (both "
          "default to now), filtered by space, subject or predicate. Quarantined facts are not "
          "returned. Recorded as served to this session."),
    _spec("memory_recall", commands.Recall, True,
          "Search the facts believed now (hybrid full-text and vector recall); each result says "
          "how it was found and its salience. Recorded as served to this session."),
    _spec("memory_retract", commands.Retract, False,
          "Retract a fact that should never have been believed, with a reason (history is "
          "kept; a retracted replacement restores the fact it replaced). Another writer's "
          "fact, retracted without a writer key, waits for a reviewer (`pending`)."),
    _spec("memory_history", commands.History, True,
          "Every event that touched a fact, oldest first. Recorded as served to this session."),
    _spec("memory_why", commands.Why, True,
          "Why a fact is (or was) believed: who wrote it, its cause and session, sources, "
          "supersession chain, reviews and the policy in force. Recorded as served."),
    _spec("memory_act", commands.Act, False,
          "Record an action this agent took (the tool it called, a reference such as a "
          "transaction id, the outcome, optionally a digest of its arguments), so that blast "
          "radius can later trace what the action relied on."),
]
TOOLS: dict[str, ToolSpec] = {t.name: t for t in _TOOLS}
# Tools that are not batch commands.
PENDING = ToolSpec("memory_pending", None,
                   "This agent's own writes still waiting for a reviewer (claimed, quarantined): "
                   "how many, and the oldest of them. Reads and recall do not return them until "
                   "they are confirmed.", True, PendingArguments)


class MemoryTools:
    """The tools bound to a ledger and one configured agent identity."""

    def __init__(self, ledger: Ledger, agent: str, *,
                 writer_key: bytes | WriterKey | None = None) -> None:
        try:
            check_actor(agent)
            valid = actor_kind(agent) in AGENT_KINDS
        except PydanticCustomError:
            valid = False
        if not valid:
            raise LedgerError("invalid_actor", f"the server's agent '{agent}' must be "
                              "agent:NAME or llm:NAME")
        self.ledger = ledger
        self.agent = agent
        if writer_key is not None:
            ledger.present_writer_key(agent, writer_key)
        # A name whose key the policy registers is that key: never served without it.
        ledger.signer_for(agent)
        self.trusted = agent in ledger.signers
        self.provenance = "attested" if self.trusted else "claimed"

    def specs(self) -> list[ToolSpec]:
        return [*TOOLS.values(), PENDING]

    def now(self) -> str:
        return format_time(self.ledger.clock.now())

    def call(self, name: str, arguments: dict[str, Any] | None, session: str, *,
             started: str | None = None) -> BaseModel:
        """Run one tool call in `session`, as work begun at `started` (the session's start);
        a refusal raises LedgerError and writes nothing."""
        spec = TOOLS.get(name) or (PENDING if name == PENDING.name else None)
        if spec is None:
            raise LedgerError("unknown_tool", f"there is no tool named {name!r}")
        data = dict(arguments or {})
        try:
            checked = spec.arguments.model_validate(data)
        except ValidationError as exc:
            raise refusal(exc) from None
        if spec.command is None:
            assert isinstance(checked, PendingArguments)
            return pending_writes(self.ledger, self.agent, checked.limit)
        fixed = {"actor": self.agent, "session": session, "provenance": self.provenance,
                 "include": "attested", "include_claimed": False}
        data.update({k: v for k, v in fixed.items() if k in spec.command.model_fields})
        command = parse_command(spec.command, data)
        if name in ("memory_history", "memory_why"):
            self._check_visible(str(data["fact_id"]))
        before = self.ledger.work_started
        self.ledger.work_started = started or before
        try:
            result = self.ledger.execute(command)
        finally:
            self.ledger.work_started = before
        if isinstance(result, AssertResult) and result.status == "quarantined":
            return QuarantinedWrite(**result.model_dump())
        return result

    def _check_visible(self, fact_id: str) -> None:
        """Another writer's quarantined claim stays hidden from this agent until confirmed."""
        fact = self.ledger.db.facts.get(fact_id)
        if fact is not None and fact.status == "quarantined" and fact.actor != self.agent:
            raise LedgerError("quarantined", f"fact {fact_id} is quarantined until a reviewer "
                              "confirms it")
