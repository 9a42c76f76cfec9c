"""The façade's evidence methods (blast radius, evidence packs and where they are written, the
export, actions explained and searched): one concern of `Ledger`, kept beside it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from custody_app.domain.commands import Actions, Blast, Command, Explain, parse_command
from custody_app.domain.errors import LedgerError
from custody_app.evidence.actionpack import build_action_pack
from custody_app.evidence.explain import account, accounts
from custody_app.evidence.export import ExportResult
from custody_app.evidence.export import export as export_events
from custody_app.evidence.packs import EvidencePack, build_pack, pack_text
from custody_app.evidence.readmodels import ActionAccount, ActionsResult, BlastResult, ExplainResult
from custody_app.files.output import ledger_files, write_output
from custody_app.ledger.browse import BrowseReads
from store.address import address_of

R = TypeVar("R", bound=BaseModel)


class EvidenceViews(BrowseReads):
    """What a ledger shows as evidence; `Ledger` adds the commands and their dispatch."""

    def execute(self, command: Command) -> BaseModel:
        """Run one validated command (the façade dispatches it to its handler)."""
        raise NotImplementedError

    def _do(self, kind: type[Command], result: type[R], **fields: Any) -> R:
        out = self.execute(parse_command(kind, fields))
        assert isinstance(out, result)
        return out

    def blast(self, fact_id: str) -> BlastResult:
        """Everything that could have relied on a fact: sessions served it, their later writes
        and actions, derived facts, to a fixpoint. An upper bound."""
        return self._do(Blast, BlastResult, fact_id=fact_id)

    def pack(self, fact_id: str) -> EvidencePack:
        """One fact's whole story (events with their chain links, holds, blast radius, policy
        texts, forget certificate), signed with the ledger's Ed25519 key."""
        return build_pack(self, fact_id)

    def write_pack(self, fact_id: str, path: str | Path, *, force: bool = False) -> EvidencePack:
        """`pack` written to `path` (0600: it holds plaintext values), never over the ledger's
        own files, nor over an existing file without `force`."""
        pack = build_pack(self, fact_id)
        write_output(path, pack_text(pack), force=force, protected=self.own_files())
        return pack

    def pack_beside(self, fact_id: str) -> tuple[Path, EvidencePack]:
        """The terminal app's pack export: `pack-FACT.json` in the ledger's folder, or the first
        `pack-FACT-N.json` that does not exist yet (an earlier pack is never replaced)."""
        folder = address_of(self.db.path).folder()
        for n in range(1, 1000):
            target = folder / (f"pack-{fact_id}.json" if n == 1 else f"pack-{fact_id}-{n}.json")
            if not os.path.lexists(target):
                return target, self.write_pack(fact_id, target)
        raise LedgerError("output_exists", f"refusing to write a pack of {fact_id}: "
                          f"{folder} already holds 999 of them", path=str(folder))

    def own_files(self) -> list[Path]:
        """The ledger's files (database, WAL, SHM, key store, master and public key)."""
        return ledger_files(self.db.path, self.keys.address if self.keys is not None else None)

    def export(self, path: str | Path, *, force: bool = False) -> ExportResult:
        """The whole event log as JSON Lines at `path` (erased values null), with a trailer
        signed by the ledger key; `offline.verify_export` checks it from the file alone."""
        return export_events(self, path, force=force)

    def explain(self, action_ref: str) -> ExplainResult:
        """What had been served to an action's session before it, and which of those facts
        were since retracted or erased."""
        return self._do(Explain, ExplainResult, action_ref=action_ref)

    def actions(self, **filters: Any) -> ActionsResult:
        """Recorded actions, newest first, a page at a time. Filters: tool, actor, session,
        subject, since, until (ISO times, [since, until)), before_seq (cursor), limit."""
        return self._do(Actions, ActionsResult, **filters)

    def explain_full(self, action_ref: str, *, walk_chain: bool = True) -> ActionAccount:
        """The ten answers about one action, in order (who acted ... what needs reversal);
        `walk_chain=False` skips the whole-chain verify (a browsing screen on a big ledger)."""
        return account(self, action_ref, run_verify=walk_chain)

    def explain_all(self, action_ref: str, *, walk_chain: bool = True) -> list[ActionAccount]:
        """The ten answers for each action with this ref, newest trusted first (an action
        whose receipt checks and matches it, then one a writer key signed, then the rest)."""
        return accounts(self, action_ref, run_verify=walk_chain)

    def action_pack(self, action_ref: str) -> dict[str, Any]:
        """The action explained in full as a signed pack (`verify_action_pack` checks it)."""
        return build_action_pack(self, action_ref)
