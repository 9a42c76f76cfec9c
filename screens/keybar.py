"""The footer: every key of the screen and the app on one or two lines, as a single widget
(Textual's Footer recomposes one widget per key on each screen switch, which costs ~0.2 s per
switch on this machine)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.widgets import Static


class KeyBar(Static):
    """Keys of the screen it sits on, then the app's; ctrl+p opens the command palette."""

    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: auto;
        max-height: 2;
        background: $footer-background;
        color: $footer-foreground;
        padding: 0 1;
    }
    """

    def on_mount(self) -> None:
        self.update(self.keys_text())

    def keys_text(self) -> Text:
        text = Text()
        bindings: list[Any] = [*self.screen.BINDINGS, *self.app.BINDINGS]
        seen: set[str] = set()
        for b in bindings:
            if not isinstance(b, Binding) or not b.show or not b.description or b.key in seen:
                continue
            seen.add(b.key)
            key = b.key_display or self.app.get_key_display(b)
            text.append(f" {key} ", style="bold reverse")
            text.append(f" {b.description}  ")
        text.append(" ^p ", style="bold reverse")
        text.append(" palette")
        return text
