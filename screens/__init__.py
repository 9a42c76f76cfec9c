"""Textual screens, one per file with its .tcss beside it; SCREENS maps mode names to them."""

from __future__ import annotations

from collections.abc import Callable

from textual.screen import Screen

from custody_app.interfaces.tui.access import LedgerAccess
from screens.actions import ActionsScreen
from screens.beliefs import BeliefsScreen
from screens.blast import BlastScreen
from screens.holds import HoldsScreen
from screens.integrity import IntegrityScreen
from screens.retention import RetentionScreen
from screens.review import ReviewScreen

SCREENS: dict[str, Callable[[LedgerAccess], Screen[None]]] = {
    "beliefs": BeliefsScreen,
    "review": ReviewScreen,
    "holds": HoldsScreen,
    "retention": RetentionScreen,
    "integrity": IntegrityScreen,
    "blast": BlastScreen,
    "actions": ActionsScreen,
}
