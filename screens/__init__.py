"""Textual screens, one per file with its .tcss beside it; SCREENS maps mode names to them."""

from __future__ import annotations

from collections.abc import Callable

from textual.screen import Screen

from custody_app.interfaces.tui.access import LedgerAccess
from screens.actions import ActionsScreen
from screens.beliefs import BeliefsScreen
from screens.blast import BlastScreen
from screens.fact import FactScreen
from screens.holds import HoldsScreen
from screens.integrity import IntegrityScreen
from screens.retention import RetentionScreen
from screens.review import ReviewScreen
from screens.timeline import TimelineScreen

# Every screen with keys of its own, in the order help lists them.
SCREEN_CLASSES: tuple[type[Screen[None]], ...] = (
    BeliefsScreen, ReviewScreen, HoldsScreen, RetentionScreen, IntegrityScreen, BlastScreen,
    ActionsScreen, TimelineScreen, FactScreen)

SCREENS: dict[str, Callable[[LedgerAccess], Screen[None]]] = {
    "beliefs": BeliefsScreen,
    "review": ReviewScreen,
    "holds": HoldsScreen,
    "retention": RetentionScreen,
    "integrity": IntegrityScreen,
    "blast": lambda access: BlastScreen(access, fact_screen=FactScreen),
    "actions": ActionsScreen,
    "timeline": TimelineScreen,
}
