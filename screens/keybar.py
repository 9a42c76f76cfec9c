"""The footer: every key of the screen and the app on one or two lines, as a single widget
(Textual's Footer recomposes one widget per key on each screen switch, which costs ~0.2 s per
switch on this machine). A key whose action the screen's `check_action` answers None with is
shown dimmed and struck through, with no key cap: there, now, but disabled."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.actions import parse
from textual.binding import Binding
from textual.screen import Screen
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
        self._shown: Text | None = None
        # The screen publishes this on refresh_bindings() and when focus moves.
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)
        self._bindings_changed(self.screen)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen[Any]) -> None:
        text = self.keys_text()
        if self._shown is None or text.plain != self._shown.plain or text.spans != \
                self._shown.spans:
            self._shown = text
            self.update(text)

    def keys_text(self) -> Text:
        """Help, palette and quit first (a narrow terminal cuts the end of the bar, never
        them), then the screen's keys, then `1-8 screens` for the app's screen keys."""
        text = Text()
        app_keys = [b for b in self.app.BINDINGS if isinstance(b, Binding)]
        screens = [b for b in app_keys if parse(b.action)[1] == "show"]
        for b in app_keys:
            if parse(b.action)[1] in ("help", "quit", "quit_app") and b.show:
                self._key(text, b.key_display or self.app.get_key_display(b),
                          b.description.lower(), True)
                if parse(b.action)[1] == "help":
                    self._key(text, "^p", "palette", True)
        seen: set[str] = {b.key for b in app_keys}
        for entry in self.screen.BINDINGS:
            if not isinstance(entry, Binding):
                continue
            b = entry
            if not b.show or not b.description or b.key in seen:
                continue
            seen.add(b.key)
            _, name, params = parse(b.action)
            state = self.screen.check_action(name, params)
            if state is False:
                continue  # hidden, as Textual's own footer does
            self._key(text, b.key_display or self.app.get_key_display(b), b.description,
                      state is not None)
        if screens:
            self._key(text, f"{screens[0].key}-{screens[-1].key}", "screens", True)
        text.rstrip()
        return text

    @staticmethod
    def _key(text: Text, key: str, description: str, enabled: bool) -> None:
        """A key cap and its description; a key that cannot apply now is dimmed and struck
        through (there, but disabled)."""
        if enabled:
            text.append(f" {key} ", style="bold reverse")
            text.append(f" {description}  ")
        else:
            text.append(f" {key} ", style="dim")
            text.append(f" {description}  ", style="dim strike")
