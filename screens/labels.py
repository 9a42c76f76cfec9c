"""Status and provenance labels: the word itself (never colour alone), styled by the
`status--*` and `prov--*` classes of app.tcss, for table cells, tree nodes and markup."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from custody_app.domain.models import PROVENANCES, STATUSES

# `held` is a legal hold on top of a status; `believed` marks a blast-radius fact still in use;
# `not_asserted` is a time-travel row before the fact existed.
EXTRA = ("held", "believed", "not_asserted")
COMPONENT_CLASSES = ({f"status--{s}" for s in (*STATUSES, *EXTRA)}
                     | {f"prov--{p}" for p in PROVENANCES})


class Labels:
    """The label styles of one screen, read from its stylesheet once per use."""

    def __init__(self, node: Widget) -> None:
        self.node = node
        self._styles: dict[str, Style] = {}

    def style(self, kind: str, word: str) -> Style:
        name = f"{kind}--{word}"
        if name not in COMPONENT_CLASSES:
            return Style()
        if name not in self._styles:
            self._styles[name] = self.node.get_component_rich_style(name, partial=True)
        return self._styles[name]

    def status(self, word: str, shown: str | None = None, extra: Style | None = None) -> Text:
        """`shown` (default: the status word) in the status's style."""
        style = self.style("status", word)
        return Text(shown if shown is not None else word, style=style + extra if extra else style)

    def provenance(self, word: str, extra: Style | None = None) -> Text:
        style = self.style("prov", word)
        return Text(word, style=style + extra if extra else style)

    def markup(self, kind: str, word: str, shown: str | None = None) -> str:
        """Console markup of the label, for a Static (the word is a known status: no escape)."""
        style = self.style(kind, word)
        text = shown if shown is not None else word
        return f"[{style}]{text}[/]" if style else text


def styled(cells: list[str | Text], style: str) -> list[str | Text]:
    """Every cell of a row in `style` too (over the labels' own styles)."""
    out: list[str | Text] = []
    for c in cells:
        text = c.copy() if isinstance(c, Text) else Text(c)
        text.stylize(style)
        out.append(text)
    return out
