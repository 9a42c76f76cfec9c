"""A modal asking for a reason (free text, or a reason code) before a write."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from screens.base import focus_now


class ReasonDialog(ModalScreen[str | None]):
    """Returns the reason typed (None when cancelled). `required`: an empty reason is refused."""

    CSS_PATH = "reason.tcss"
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, *, required: bool = True, placeholder: str = "reason",
                 details: str = "") -> None:
        super().__init__()
        self.title_text = title
        # What the write is about (subject, predicate, value) and what follows from it.
        self.details = details
        self.required = required
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self.title_text, id="title")
            if self.details:
                with VerticalScroll(id="details-box"):
                    yield Static(self.details, id="details", markup=False)
            yield Input(placeholder=self.placeholder + ("" if self.required else " (optional)"),
                        id="reason", max_length=500)
            yield Label("", id="problem")
            with Horizontal(id="buttons"):
                yield Button("OK (enter)", variant="primary", id="ok", compact=True)
                yield Button("Cancel (esc)", id="cancel", compact=True)

    def on_mount(self) -> None:
        focus_now(self.query_one("#reason", Input))
        self.on_resize()

    def on_resize(self) -> None:
        """Long details scroll within what the terminal leaves: the title, the reason box and
        the buttons (and the borders) always show, at 80x24 too."""
        if self.details:
            self.query_one("#details-box").styles.max_height = max(
                3, min(12, self.app.size.height - 13))

    @on(Input.Submitted)
    @on(Button.Pressed, "#ok")
    def _ok(self) -> None:
        text = self.query_one("#reason", Input).value.strip()
        if self.required and not text:
            self.query_one("#problem", Label).update("a reason is required")
            return
        self.dismiss(text)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
