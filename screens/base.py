"""What every ledger screen shares: the access it is handed, messages from its workers, and
table helpers that keep the cursor on the same row across a reload."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from rich.text import Text
from textual.actions import parse as parse_action
from textual.binding import Binding
from textual.events import Idle, Key
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Input, Static
from textual.worker import get_current_worker

from custody_app.domain.errors import LedgerError, PolicyError
from custody_app.domain.escaping import escape_text, escaped
from custody_app.interfaces.tui.access import LedgerAccess
from screens.labels import COMPONENT_CLASSES, Labels


class Loaded(Message):
    """A worker finished reading: `what` names the read, `data` is its read model."""

    def __init__(self, what: str, data: Any) -> None:
        super().__init__()
        self.what = what
        self.data = data


class Failed(Message):
    """A worker's operation was refused (or failed): the error's code and words."""

    def __init__(self, code: str, message: str, title: str = "Refused",
                 what: str | None = None) -> None:
        super().__init__()
        self.code = code
        self.message = message
        self.title = title
        self.what = what  # the read that failed (None: a write)


class Succeeded(Message):
    """A write went through: say so and reload."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message


_BOX_KEYS: dict[type, dict[str, str]] = {}


class LedgerScreen(Screen[None]):
    """A screen over the ledger. Subclasses implement `reload()` (start a read worker) and
    `on_loaded(message)`; all ledger work runs in thread workers that post messages."""

    # Status and provenance label styles, from app.tcss (see `labels()`).
    COMPONENT_CLASSES = COMPONENT_CLASSES

    # A screen opened again shows the page it had (the live watcher reloads it whenever the
    # ledger changes) and reloads it this much later, so the switch paints before the read.
    RESUME_RELOAD_S = 0.25

    def __init__(self, access: LedgerAccess) -> None:
        super().__init__()
        self.access = access
        self._shown_once = False

    def on_screen_resume(self) -> None:
        if self._shown_once:
            self.set_timer(self.RESUME_RELOAD_S, self.reload)
        else:
            self._shown_once = True
            self.reload()

    def reload(self) -> None:
        """Start the read worker(s) for what this screen shows."""

    def labels(self) -> Labels:
        """Status and provenance labels styled by this screen's stylesheet (now: themes change)."""
        return Labels(self)

    def on_key(self, event: Key) -> None:
        # No keyboard trap: escape always leaves a text box, so the screen's keys work again.
        if event.key == "escape" and isinstance(self.focused, Input):
            event.stop()
            event.prevent_default()
            self.leave_input(self.focused)

    def open_box_for(self, key: str) -> bool:
        """If `key` opens one of this screen's text boxes (a `box_key` binding) and no box has
        the focus, focus that box now and return True. The app calls this as each key arrives
        (CustodyApp.on_event), so the keys typed after it go into the box, in order."""
        box = self._box_keys().get(key)
        if box is None or isinstance(self.focused, Input):
            return False
        self.action_open_box(box)
        return True

    def _box_keys(self) -> dict[str, str]:
        """Key -> selector of the box it opens, from this screen's `box_key` bindings (read
        once per screen class: the app asks on every key)."""
        cls = type(self)
        if cls not in _BOX_KEYS:
            found: dict[str, str] = {}
            for b in cls.BINDINGS:
                if isinstance(b, Binding):
                    name, args = parse_action(b.action)[1:]
                    if name == "open_box":
                        found.update(dict.fromkeys(b.key.split(","), str(args[0])))
            _BOX_KEYS[cls] = found
        return _BOX_KEYS[cls]

    def action_open_box(self, box: str) -> None:
        focus_now(self.query_one(box, Input))

    def leave_input(self, box: Input) -> None:
        """Focus the screen's first widget that is not a text box (its table or tree)."""
        target = next((w for w in self.focus_chain if not isinstance(w, Input)), None)
        self.set_focus(target)

    def run_read(self, what: str, read: Callable[[Any], Any]) -> None:
        """In the calling worker thread: open the ledger, read, post Loaded or Failed."""
        try:
            with self.access.open(readonly=True) as ledger:
                data = read(ledger)
        except (LedgerError, PolicyError) as exc:
            self.post_message(Failed(exc.code, exc.message, "Cannot read", what=what))
            return
        except Exception as exc:  # noqa: BLE001 - a defect must be said, never a blank screen
            self.post_message(Failed("internal_error", f"reading {what} failed: "
                                     f"{type(exc).__name__}: {exc}", "Cannot read", what=what))
            return
        if not get_current_worker().is_cancelled:
            # Every stored string a screen shows is escaped here, once: nothing an agent wrote
            # can drive the reviewer's terminal. Clean strings (ids included) are unchanged.
            self.post_message(Loaded(what, escaped(data, markup=True)))

    def run_write(self, describe: Callable[[Any], str], write: Callable[[Any], Any]) -> bool:
        """In the calling worker thread: open the ledger, write, post Succeeded or Failed."""
        try:
            with self.access.open() as ledger:
                result = write(ledger)
        except (LedgerError, PolicyError) as exc:
            self.post_message(Failed(exc.code, exc.message))
            return False
        self.post_message(Succeeded(describe(result)))
        return True

    def on_failed(self, message: Failed) -> None:
        message.stop()
        self.notify(escape_text(f"{message.message} ({message.code})"), title=message.title,
                    severity="error", timeout=8)

    def on_succeeded(self, message: Succeeded) -> None:
        message.stop()
        self.notify(message.message, title="Done")
        self.reload()
        recount = getattr(self.app, "count_waiting", None)  # the header's review count
        if callable(recount):
            recount()


class Table(DataTable[Any]):
    """A DataTable whose cells are never shown at a stale width. Textual caches each rendered
    cell without its column width and measures new rows only when idle, so a paint that falls
    between `add_row` and that measurement (likely on a loaded machine) kept columns as narrow
    as their labels ("f_01" for a fact id) until something else changed the table."""

    async def _on_idle(self, event: Idle) -> None:
        measuring = self._require_update_dimensions
        await super()._on_idle(event)
        if measuring:
            self.notify_style_update()  # drops the render caches and repaints at the new widths


def box_key(key: str, box: str, description: str, key_display: str | None = None) -> Binding:
    """A key that focuses a text box (`box`: its selector). The app runs it as the key arrives,
    ahead of the keys typed after it (`LedgerScreen.open_box_for`)."""
    return Binding(key, f"open_box({box!r})", description, key_display=key_display)


def focus_now(widget: Widget) -> None:
    """Focus `widget` now: `Widget.focus()` only queues the change behind the messages already
    waiting, keys included, which then reach the old focus."""
    widget.screen.set_focus(widget)


def short(value: Any, width: int = 40) -> str:
    """A value as one line of JSON, cut to `width`."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


_SHOWN: WeakKeyDictionary[DataTable[Any], list[tuple[str, list[str | Text]]]] = \
    WeakKeyDictionary()


def fill(table: DataTable[Any], rows: Sequence[tuple[str, Sequence[str | Text]]]) -> None:
    """Replace the rows (key, cells), keeping the cursor on the same key if it is still there;
    rows equal to those shown are left alone (a reload after a screen switch repaints nothing)."""
    wanted = [(key, list(cells)) for key, cells in rows]
    if _SHOWN.get(table) == wanted:
        return
    _SHOWN[table] = wanted
    keep, at = cursor_key(table), table.cursor_row
    table.clear()
    for key, cells in rows:
        table.add_row(*cells, key=key)
    if keep is not None:
        for index, (key, _) in enumerate(rows):
            if key == keep:
                table.move_cursor(row=index, animate=False)
                break
        else:
            # The row is gone (approved, rejected, expired): the cursor stays where it was,
            # on the row that took its place, as a reviewer working down a list expects.
            if rows and at > 0:
                table.move_cursor(row=min(at, len(rows) - 1), animate=False)


def cut_cell(cell: str | Text, width: int) -> str | Text:
    """The cell cut to `width` with an ellipsis (styles kept); whole when it fits."""
    if len(cell) <= width:
        return cell
    if isinstance(cell, Text):
        cut = cell[: width - 1]
        cut.append("…")
        return cut
    return cell[: width - 1] + "…"


def pick_cells(cells: Sequence[str | Text], picks: Sequence[tuple[int, int]]) -> list[str | Text]:
    """The cells at the `picks` (index, width) in that order, each cut to its width with an
    ellipsis (width 0: whole): a narrow terminal's column set from a wide row."""
    return [cut_cell(cells[index], width) if width else cells[index] for index, width in picks]


# Below this many columns a table shows its narrow column set (what a reader needs first).
NARROW = 120


class ColumnSets:
    """A table's wide columns and, below NARROW columns, the picked ones (pick_cells) in the
    order a reader needs them; the set follows the terminal's width as it is resized."""

    def __init__(self, screen: Screen[Any], table: DataTable[Any], wide: Sequence[str],
                 picks: Sequence[tuple[int, int]]) -> None:
        self.screen, self.table, self.wide, self.picks = screen, table, tuple(wide), tuple(picks)
        self.narrow = screen.app.size.width < NARROW
        self.rows: list[tuple[str, list[str | Text]]] = []
        table.add_columns(*self.columns())

    def columns(self) -> tuple[str, ...]:
        return tuple(self.wide[i] for i, _ in self.picks) if self.narrow else self.wide

    def fill(self, rows: Sequence[tuple[str, Sequence[str | Text]]]) -> None:
        """Fill the table from wide rows (kept, to refill after a resize)."""
        self.rows = [(key, list(cells)) for key, cells in rows]
        fill(self.table, [(key, pick_cells(cells, self.picks)) for key, cells in self.rows]
             if self.narrow else self.rows)

    def resized(self) -> None:
        narrow = self.screen.app.size.width < NARROW
        if narrow != self.narrow:
            self.narrow = narrow
            reset_columns(self.table, self.columns())
            self.fill(self.rows)


def forget_rows(table: DataTable[Any]) -> None:
    """The table was cleared: the next fill must add every row again."""
    _SHOWN.pop(table, None)


def reset_columns(table: DataTable[Any], columns: Sequence[str]) -> None:
    """Another column set (the terminal was resized across NARROW): rows and columns go, the
    next fill adds every row again."""
    table.clear(columns=True)
    forget_rows(table)
    table.add_columns(*columns)


_TEXT: WeakKeyDictionary[Static, object] = WeakKeyDictionary()


def show(widget: Static, content: Any) -> None:
    """Update a Static only when its content changed: an update relayouts the screen, and a
    reload after a screen switch should repaint nothing that did not change."""
    if _TEXT.get(widget) != content:
        _TEXT[widget] = content
        widget.update(content)


def cursor_key(table: DataTable[Any]) -> str | None:
    if table.row_count == 0:
        return None
    try:
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
    except Exception:
        return None
    return None if key.value is None else str(key.value)


C = TypeVar("C")

# Paged screens read one page at a time (never the whole ledger) and keep the cursor each page
# started after, so PgUp goes back exactly.
PAGE_KEYS = [
    Binding("pagedown", "page(1)", "Next page", priority=True),
    Binding("pageup", "page(-1)", "Prev page", priority=True),
]


def turn_page(pages: list[C], delta: int, next_after: C | None) -> bool:
    """Push the next page's cursor (delta > 0) or pop back to the previous one; False when
    there is no page that way."""
    if delta > 0 and next_after is not None:
        pages.append(next_after)
    elif delta < 0 and len(pages) > 1:
        pages.pop()
    else:
        return False
    return True
