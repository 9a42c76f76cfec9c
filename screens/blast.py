"""Blast radius: a tree from a fact through the sessions served it and their actions to the
beliefs written or derived after it, still-believed ones marked; export the evidence pack."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Header, Input, Static, Tree
from textual.widgets.tree import TreeNode

from custody_app.evidence.readmodels import BlastFact, BlastResult
from custody_app.interfaces.tui.access import LedgerAccess
from screens.base import LedgerScreen, Loaded, box_key, focus_now, show
from screens.keybar import KeyBar
from screens.labels import Labels

# Why an INCOMPLETE session is listed: it could have read the fact (the blast radius rule).
POSSIBLE = "wrote or acted about its subject or space while it was believed"


class BlastScreen(LedgerScreen):
    """What could have relied on a fact (an upper bound, from recorded reads)."""

    CSS_PATH = "blast.tcss"
    BINDINGS = [
        Binding("e", "export", "Export pack"),
        Binding("x", "expand", "Expand all"),
        Binding("escape", "back", "Back"),
        box_key("slash", "#fact", "Fact id", key_display="/"),
    ]

    def __init__(self, access: LedgerAccess, fact_id: str | None = None, *,
                 fact_screen: Callable[[LedgerAccess, str], Screen[None]] | None = None) -> None:
        super().__init__(access)
        self.fact_id = fact_id
        # How a fact of the tree opens: handed in, as the fact screen imports this one.
        self.fact_screen = fact_screen
        self.result: BlastResult | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="fact id to trace, then enter", id="fact",
                    value=self.fact_id or "")
        yield Static(id="summary")
        yield Tree("(no fact chosen: press / and type its id)", id="tree")
        # The node under the cursor in full, wrapped: a tree line is cut at the screen's edge.
        yield Static(id="detail")
        yield Static(id="bound")
        yield KeyBar()

    def on_mount(self) -> None:
        # The tree has focus even with no fact chosen: the screen keys (1-6, ?) must work on
        # arrival; `/` is how a user chooses to type an id.
        tree: Tree[str] = self.query_one("#tree", Tree)
        tree.auto_expand = False  # enter opens the fact; space folds
        focus_now(tree)

    def reload(self) -> None:
        if self.fact_id is not None:
            self.load(self.fact_id)

    @work(thread=True, exclusive=True, exit_on_error=False, group="read")
    def load(self, fact_id: str) -> None:
        self.run_read("blast", lambda ledger: ledger.blast(fact_id))

    def on_loaded(self, message: Loaded) -> None:
        if message.what == "pack":
            path, pack = message.data
            self.notify(f"evidence pack of {pack.fact_id} written to {path} ({len(pack.events)} "
                        f"events, signed by key {pack.signature['key_fingerprint'][:16]})",
                        title="Evidence pack")
            return
        if message.what != "blast":
            return
        result: BlastResult = message.data
        if self.result == result:
            return  # a reload with nothing new keeps the tree as the user unfolded it
        self.result = result
        self.refresh_bindings()  # export and expand apply now
        self._show(result)

    def _show(self, r: BlastResult) -> None:
        tree: Tree[str] = self.query_one("#tree", Tree)
        tree.clear()
        labels = self.labels()
        tree.root.set_label(_fact_label(r.root, labels, root=True))
        tree.root.data = r.root.fact_id
        nodes: dict[str, TreeNode[str]] = {r.root.fact_id: tree.root}
        sessions: dict[str, TreeNode[str]] = {}
        for s in r.sessions:
            state = "INCOMPLETE: no recorded reads" if s.incomplete else (
                f"first served a reached fact at #{s.first_served_seq} "
                f"({(s.first_served_at or '')[:19]})")
            node = tree.root.add(Text.assemble(("session ", "bold"), s.session, f"  {state}"),
                                 data=s.session, expand=True)
            if s.incomplete:  # why it could have read it, on a line of its own (fits 80 cols)
                node.add_leaf(Text(POSSIBLE, style="italic"), data=s.session)
            sessions[s.session] = node
            for a in s.actions:
                node.add_leaf(Text.assemble(("action ", "bold cyan"),
                                            f"{a.tool} {a.ref} → {a.outcome}",
                                            (f"  #{a.seq} {a.tx_at[:19]}", "dim")), data=a.ref)
        for f in sorted(r.facts, key=lambda f: (f.depth, f.seq)):
            parent = (sessions.get(f.session or "") if f.reached_via == "session" else
                      nodes.get(f.from_fact or ""))
            node = (parent or tree.root).add(_fact_label(f, labels), data=f.fact_id,
                                             expand=True)
            nodes[f.fact_id] = node
        tree.root.expand_all()
        ended = ""
        if r.root_ended_by:
            e = r.root_ended_by
            ended = (f" · ended by {e['kind']} at #{e['seq']} by {e['actor']}"
                     + (f": {e['reason']}" if e.get("reason") else ""))
        self._detail(tree.cursor_node or tree.root)
        show(self.query_one("#summary", Static),
            f"[b]{r.root.fact_id}[/b] {r.root.subject} {r.root.predicate} "
            f"\\[{labels.markup('status', r.root.status)}]"
            f"{ended}\n{r.counts()}")  # the same counts as the CLI's text and --json
        show(self.query_one("#bound", Static), r.upper_bound)

    # ---- actions -----------------------------------------------------------------------
    @on(Input.Submitted, "#fact")
    def _picked(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if text:
            self.fact_id = text
            self.result = None
            focus_now(self.query_one("#tree", Tree))
            self.reload()

    @on(Tree.NodeSelected, "#tree")
    def _open_node(self, event: Tree.NodeSelected[str]) -> None:
        """Enter on a fact (the root or a belief reached) opens its detail screen."""
        fact_id = event.node.data
        if self.result is None or not isinstance(fact_id, str):
            return
        if self.fact_screen is not None and (fact_id == self.result.root.fact_id or any(
                f.fact_id == fact_id for f in self.result.facts)):
            self.app.push_screen(self.fact_screen(self.access, fact_id))

    @on(Tree.NodeHighlighted, "#tree")
    def _highlighted(self, event: Tree.NodeHighlighted[str]) -> None:
        self._detail(event.node)

    def _detail(self, node: TreeNode[str]) -> None:
        label = node.label
        show(self.query_one("#detail", Static),
             label.copy() if isinstance(label, Text) else Text(str(label)))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Shown dimmed (and doing nothing) where they cannot apply: no fact traced yet, or
        # "back" on the Blast screen opened from the number key (nothing under it).
        if action in ("export", "expand"):
            return True if self.fact_id is not None and self.result is not None else None
        if action == "back":
            return True if self._can_go_back() else None
        return True

    def _can_go_back(self) -> bool:
        stack = self.app.screen_stack
        return len(stack) > 1 and stack[0] is not self

    def action_expand(self) -> None:
        self.query_one("#tree", Tree).root.expand_all()

    def action_back(self) -> None:
        if self.app.screen is self and self._can_go_back():
            self.app.pop_screen()

    def action_export(self) -> None:
        if self.fact_id is None or self.result is None:
            self.notify("trace a fact first", severity="warning")
            return
        self.export(self.fact_id)

    @work(thread=True, exclusive=True, exit_on_error=False, group="write")
    def export(self, fact_id: str) -> None:
        self.run_read("pack", lambda ledger: ledger.pack_beside(fact_id))


def _fact_label(f: BlastFact, labels: Labels, *, root: bool = False) -> Text:
    mark = (labels.status("believed", f"STILL BELIEVED ({f.status})") if f.believed
            else labels.status(f.status))
    how = "" if root else (f"  (written in session {f.session} after it was served "
                           f"{f.from_fact})" if f.reached_via == "session"
                           else f"  (derived from {f.from_fact})")
    return Text.assemble(("fact " if not root else "root ", "bold"),
                         f"{f.fact_id} {f.subject} {f.predicate} ", "[", mark, "]",
                         (how, "dim"))
