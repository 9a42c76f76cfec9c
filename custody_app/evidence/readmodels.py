"""Read models of sessions and blast radius: actions, reached facts and sessions, explanations."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from custody_app.domain.escaping import escape_lines, escaped

UPPER_BOUND = (
    "This is an upper bound: it lists everything that could have relied on the root, from "
    "recorded reads, writes, actions and derivations; it does not prove that each one did. "
    "Sessions marked INCOMPLETE have no recorded reads but wrote or acted while the root was "
    "believed, about its subject or in its space, so whether they relied on it cannot be told. "
    "Sessions ruled out are counted, with the reason.")


_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """Stored text as a terminal may show it: control characters and bidi overrides escaped."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                       else f"\\u{ord(m.group()):04x}", text)


class _Model(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True)


class ActResult(_Model):
    """An `acted` event appended in a session."""

    event_id: str
    seq: int
    tx_at: str
    session: str
    ref: str


class BlastFact(_Model):
    """One belief the blast radius reached, and how. `believed`: its status now is active."""

    fact_id: str
    subject: str
    predicate: str
    status: str
    believed: bool
    reached_via: Literal["root", "session", "sources"]
    session: str | None
    from_fact: str | None
    depth: int
    seq: int = 0
    tx_at: str = ""
    actor: str = ""


class BlastAction(_Model):
    """One recorded agent action (an `acted` event)."""

    event_id: str
    seq: int
    tx_at: str
    session: str
    tool: str
    ref: str
    outcome: str
    actor: str = ""
    args_digest: str | None = None


class BlastSession(_Model):
    """A session that was served a reached fact (or, `incomplete`, wrote with no recorded
    reads): its writes and actions from its first such read on."""

    session: str
    first_served_seq: int | None
    first_served_at: str | None
    incomplete: bool
    writes: list[str]
    actions: list[BlastAction]
    served: list[str] = []


Reason = Literal["reads_recorded", "not_active_while_believed", "unrelated"]


class RuledOut(_Model):
    """Sessions of the ledger left out of a blast radius for one reason: how many, and why."""

    reason: Reason
    sessions: int
    why: str


class BlastResult(_Model):
    """What could have relied on a fact (DESIGN section 7): an upper bound by design."""

    root: BlastFact
    root_ended_by: dict[str, Any] | None
    sessions: list[BlastSession]
    actions: list[BlastAction]
    facts: list[BlastFact]
    incomplete_sessions: list[str]
    ruled_out: list[RuledOut] = []
    upper_bound: str = UPPER_BOUND

    @property
    def read_sessions(self) -> list[BlastSession]:
        """Sessions with a recorded read of the root or of a fact reached from it (known)."""
        return [s for s in self.sessions if not s.incomplete]

    def counts(self) -> str:
        """The one line of counts every surface shows (CLI text, the terminal app)."""
        believed = sum(f.believed for f in self.facts)
        ruled = sum(r.sessions for r in self.ruled_out)
        why = ", ".join(f"{r.sessions} {r.reason}" for r in self.ruled_out)
        return (f"{len(self.read_sessions)} session(s) read it, "
                f"{len(self.incomplete_sessions)} could have (INCOMPLETE), {ruled} ruled out"
                f"{f' ({why})' if why else ''}; {len(self.actions)} action(s), "
                f"{len(self.facts)} belief(s) of which {believed} still believed")

    def render(self) -> str:
        """The report as a person reads it."""
        reached = self.read_sessions
        r = self.root
        lines = [f"Blast radius of {r.fact_id} ({r.subject} {r.predicate}), now {r.status}"]
        if self.root_ended_by:
            e = self.root_ended_by
            why = f": {e['reason']}" if e.get("reason") else ""
            lines.append(f"  ended by {e['kind']} at seq {e['seq']} ({e['tx_at']}) by "
                         f"{e['actor']}{why}")
        else:
            lines.append("  not ended: the root is still in the ledger's beliefs")
        lines.append(f"  {self.counts()}")
        for s in reached:
            lines.append(f"  session {s.session}: first served a reached fact at seq "
                         f"{s.first_served_seq} ({s.first_served_at}); served "
                         f"{', '.join(s.served) or '-'}")
            lines += [f"    wrote {w}" for w in s.writes]
            lines += [f"    acted {a.tool} {a.ref} -> {a.outcome} (seq {a.seq}, {a.tx_at})"
                      for a in s.actions]
        if self.facts:
            lines.append("  beliefs reached:")
        for f in self.facts:
            how = (f"written in session {f.session} after it was served {f.from_fact}"
                   if f.reached_via == "session" else f"derived from {f.from_fact}")
            mark = "STILL BELIEVED" if f.believed else f.status
            lines.append(f"    {f.fact_id} {f.subject} {f.predicate} [{mark}] {how}")
        for name in self.incomplete_sessions:
            lines.append(f"  INCOMPLETE session {name}: no recorded reads, but wrote or "
                         "acted on its subject or space while the root was believed")
        for out in self.ruled_out:
            lines.append(f"  ruled out: {out.sessions} session(s), {out.reason}: {out.why}")
        lines.append(self.upper_bound)
        return "\n".join(lines)


class ExplainedFact(_Model):
    """A fact served to a session before an action, and what became of it."""

    fact_id: str
    subject: str
    predicate: str
    status_now: str
    served_seq: int
    served_at: str
    ended: bool
    ended_by_kind: str | None
    ended_seq: int | None = None
    ended_at: str | None = None
    times_served: int = 1


class ExplainResult(_Model):
    """What the agent had been served in its session when it took an action."""

    action: BlastAction
    session: str
    served: list[ExplainedFact]
    incomplete: bool = False
    same_ref: list[int] = []
    """The seqs of the other actions with the same ref, newest trusted first (`seq:N` names
    one): a ref another agent reused is listed, never a reason to refuse."""

    def render(self) -> str:
        a = self.action
        lines = [f"Action {a.tool} {a.ref} -> {a.outcome} in session {self.session} "
                 f"(seq {a.seq}, {a.tx_at}, by {a.actor})",
                 f"  {len(self.served)} fact(s) served to the session before it:"]
        for f in self.served:
            end = (f" -- since {f.ended_by_kind} at seq {f.ended_seq} ({f.ended_at})"
                   if f.ended else "")
            lines.append(f"    {f.fact_id} {f.subject} {f.predicate}, served seq {f.served_seq}"
                         f" ({f.served_at}), now {f.status_now}{end}")
        ended = [f.fact_id for f in self.served if f.ended]
        lines.append(f"  since retracted or erased: {', '.join(ended) if ended else 'none'}")
        if self.incomplete:
            lines.append("  INCOMPLETE: no read was recorded in this session before the action")
        if self.same_ref:
            lines.append(f"  {len(self.same_ref)} other action(s) carry the ref {a.ref}: "
                         + ", ".join(f"seq:{q}" for q in self.same_ref))
        return "\n".join(lines)


class Answer(_Model):
    """One of the ten questions `explain` answers, and its one-line answer."""

    question: str
    answer: str


class ActionAccount(_Model):
    """An action explained in full: the ten answers in order, and what they rest on."""

    action_ref: str
    seq: int
    answers: list[Answer]
    receipt: dict[str, Any] | None
    explain: ExplainResult
    dependent_facts: list[str]
    later_actions: list[int]

    def render(self) -> str:
        # Each line escaped whole, the explanation rendered from escaped fields: the report's
        # own line breaks stay breaks, a stored one never is (escaping.escape_lines).
        lines = [f"{a.question}: {a.answer}" for a in self.answers]
        explain: ExplainResult = escaped(self.explain)
        return escape_lines([*lines, ""]) + "\n" + explain.render()


class ListedAction(_Model):
    """One recorded action as the search lists it: what, where, by whom, and its receipt."""

    seq: int
    tx_at: str
    tool: str
    ref: str
    outcome: str
    actor: str
    session: str
    subject_ref: str | None = None
    receipt_id: str | None = None
    principal: str | None = None
    grant: str | None = None


class ActionsResult(_Model):
    """A page of actions, newest first; `next_before_seq` fetches the next page."""

    actions: list[ListedAction]
    next_before_seq: int | None = None

    def render(self) -> str:
        lines = [f"{a.tx_at}  seq {a.seq}  {a.tool} {a.ref} -> {a.outcome}  by {a.actor} in "
                 f"{a.session}" + (f"  receipt {a.receipt_id}" if a.receipt_id else "")
                 for a in self.actions]
        if self.next_before_seq is not None:
            # Every list pages the same way: `next page: N`, fetched with --after N.
            lines.append(f"next page: {self.next_before_seq} (custody-app actions --after "
                         f"{self.next_before_seq} ...)")
        return escape_lines(lines) if lines else "no recorded action matches"
