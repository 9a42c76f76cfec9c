"""Keys typed ahead of the screen: a box-opening key and what follows it, all arriving before the
app handles any of them (tmux send-keys, a paste without bracketed paste, a fast typist on a
loaded machine). Every key after the box key must land in the box, none may run a screen's
binding. The CI run that failed at 9f1a882 typed "/f_019cd654af..." on the blast screen: the
"4" in the id switched to the Retention screen, because focusing the box was queued behind the
keys already typed."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual import events
from textual.widgets import Input

from screens.actions import ActionsScreen
from screens.beliefs import BeliefsScreen
from screens.blast import BlastScreen
from screens.retention import RetentionScreen
from screens.review import ReviewScreen
from tests.tuikit import app_on, build_story, idle, open_screen

NAMED = {"/": ("slash", "/"), "_": ("underscore", "_"), ":": ("colon", ":"),
         "-": ("minus", "-"), " ": ("space", " ")}


def typed_at_once(app: object, text: str) -> None:
    """Post one key event per character without letting the app handle any in between."""
    for ch in text:
        key, char = NAMED.get(ch, (ch, ch))
        app.post_message(events.Key(key, char))  # type: ignore[attr-defined]


# (screen number, screen, the key that opens the box, the box, text with screen-switching digits
# and binding letters in it)
CASES = [
    ("1", BeliefsScreen, "/", "#subject", "acct:4-2-6 "),
    ("1", BeliefsScreen, "g", "#jump", "2026-03-04"),
    ("2", ReviewScreen, "/", "#filter", "acct:3001 plan 4"),
    ("4", RetentionScreen, "c", "#before", "2026-06-01"),
    ("6", BlastScreen, "/", "#fact", "f_019cd654af0065c4660df7"),
    ("7", ActionsScreen, "/", "#query", "actor=agent:x-1 tool=t_8"),
]


@pytest.mark.parametrize(("number", "screen", "opener", "box", "text"), CASES,
                         ids=[f"{c[1].__name__}-{c[3]}" for c in CASES])
async def test_keys_typed_ahead_after_a_box_key_land_in_the_box(
        tmp_path: Path, number: str, screen: type, opener: str, box: str, text: str) -> None:
    story = build_story(tmp_path / "story.db")
    app = app_on(story.path)
    async with app.run_test(size=(170, 50)) as pilot:
        await open_screen(pilot, number)
        assert isinstance(app.screen, screen)
        typed_at_once(app, opener + text)
        await idle(pilot)
        assert isinstance(app.screen, screen), f"a typed key switched to {type(app.screen)}"
        field = app.screen.query_one(box, Input)
        assert app.screen.focused is field
        assert field.value.endswith(text), field.value
