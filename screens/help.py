"""The help screen: every key of the open screen and of the app."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label

from screens.base import Table


class HelpScreen(ModalScreen[None]):
    """Lists (where, key, what) for each binding; any of escape, ? or q closes it."""

    CSS_PATH = "help.tcss"
    BINDINGS = [Binding("escape,f1,question_mark,q", "dismiss", "Close")]

    def __init__(self, bindings: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.bindings = bindings

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("Keys · ctrl+p: the command palette (the same actions) · esc: close",
                        id="title")
            table: DataTable[Any] = Table(id="keys", cursor_type="row")
            table.add_columns("where", "key", "does")
            for row in self.bindings:
                table.add_row(*row)
            yield table

    async def action_dismiss(self, result: Any = None) -> None:
        self.dismiss(None)
