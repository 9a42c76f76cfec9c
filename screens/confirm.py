"""A modal that names exactly what a destructive action will erase and asks to go ahead."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Select, Static

from custody_app.domain.models import REASON_CODES
from screens.base import focus_now


class ConfirmDialog(ModalScreen[str | None]):
    """Returns the chosen reason code on "Erase" (or "yes" without `reason_codes`), None on
    cancel. The listed `items` are what will be erased."""

    CSS_PATH = "confirm.tcss"
    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("y", "confirm", "Erase")]

    def __init__(self, title: str, items: list[str], *, warning: str = "",
                 reason_codes: bool = True, default_code: str = "subject_request",
                 verb: str = "Erase", blocked: bool = False) -> None:
        super().__init__()
        # The action would be refused (a held fact): show it disabled rather than offer it.
        self.blocked = blocked
        self.title_text = title
        self.items = items
        self.warning = warning
        self.reason_codes = reason_codes
        self.default_code = default_code
        self.verb = verb

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self.title_text, id="title")
            with VerticalScroll(id="items"):
                yield Static("\n".join(self.items) or "(nothing)", id="list")
            if self.warning:
                yield Label(self.warning, id="warning")
            if self.reason_codes and not self.blocked:
                yield Select([(c, c) for c in REASON_CODES], value=self.default_code,
                             allow_blank=False, id="code", compact=True)
            with Horizontal(id="buttons"):
                yield Button(f"{self.verb} (y)" if not self.blocked else f"{self.verb}: blocked",
                             variant="error", id="ok", disabled=self.blocked, compact=True)
                yield Button("Cancel (esc)", id="cancel", compact=True)

    def on_mount(self) -> None:
        focus_now(self.query_one("#cancel", Button))
        self.on_resize()

    def on_resize(self) -> None:
        """The list scrolls within what the terminal leaves: the title, warning, reason and
        buttons (and the borders) always show, at 80x24 too."""
        rest = 11 + (2 if self.warning else 0)
        self.query_one("#items").styles.max_height = max(3, min(16, self.app.size.height - rest))

    @on(Button.Pressed, "#ok")
    def action_confirm(self) -> None:
        if self.blocked:
            return
        if not self.reason_codes:
            self.dismiss("yes")
            return
        self.dismiss(str(self.query_one("#code", Select).value))

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
