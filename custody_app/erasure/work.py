"""What one erasure transaction did, and the byte strings its scan must not find."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from custody_app.domain.canonical import parse
from custody_app.erasure.certificate import ErasedFact, PlaceCheck
from custody_app.recall import text as recall_text

# A value this short could match bytes by chance, so a byte scan cannot prove it absent.
MIN_SCAN_BYTES = 8


@dataclass
class ErasureWork:
    """What one erasure transaction did, for its certificate: the byte strings the scan must
    not find, each with a label naming where it came from (never its bytes)."""

    erased: list[ErasedFact] = field(default_factory=list)
    needles: list[bytes] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    short_values: int = 0
    # forget_subject: the plaintext subject id, so rows still naming it are classified as leaks
    subject: str | None = None
    # Checks the operation adds itself (forget_subject: the plaintext subject id).
    notes: list[PlaceCheck] = field(default_factory=list)
    # An earlier certificate of the same erasure (a forget_subject retried) found leaks: no
    # hit can be called shared now (DESIGN 14), whatever rows hold it.
    leaked_before: bool = False
    # The keyed forms of the erased strings (the word index's hashed words and the subject's
    # scope token), each with its label: scanned for too, once those a live row still holds
    # (a common word) are left out (`keyed_needles`).
    keyed: dict[bytes, str] = field(default_factory=dict)

    def add(self, data: bytes, label: str) -> None:
        self.needles.append(data)
        self.labels.append(label)


def _leaves(node: Any, path: str, out: list[tuple[str, str]]) -> None:
    if isinstance(node, str):
        out.append((path, node))
    elif isinstance(node, dict):
        # Keys are the value's field names (its shape, like a predicate), not its content.
        for k, v in node.items():
            _leaves(v, f"{path}.{k}", out)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _leaves(v, f"{path}[{i}]", out)


def add_needles(sealed: bytes | None, text: str | None, work: ErasureWork,
                is_name: Callable[[str], bool], fact_id: str = "", predicate: str = "") -> None:
    """The byte strings a scan must not find: the sealed value, its JSON and each long string
    (but not a string that names a subject or space, or is the fact's own predicate:
    identifiers stay in the file by design)."""
    of = f" of {fact_id}" if fact_id else ""
    if sealed:
        work.add(bytes(sealed), f"sealed value{of}")
    if text is None:
        return
    data = text.encode("utf-8")
    if len(data) >= MIN_SCAN_BYTES:
        work.add(data, f"value JSON{of}")
    else:
        work.short_values += 1
    leaves: list[tuple[str, str]] = []
    _leaves(parse(text), "value", leaves)
    seen: set[str] = {text}
    for path, leaf in leaves:
        raw = leaf.encode("utf-8")
        if leaf in seen or len(raw) < MIN_SCAN_BYTES or leaf == predicate or is_name(leaf):
            continue
        seen.add(leaf)
        work.add(raw, f"string {path}{of}")


def add_text_needles(sealed: bytes | None, texts: dict[str, str] | None, work: ErasureWork,
                     is_name: Callable[[str], bool], fact_id: str, seq: int) -> None:
    """The byte strings of one event's sealed free text (DESIGN 13): the sealed bytes and each
    text of 8 bytes or more (not one that names a subject or space)."""
    where = f" of {fact_id} (seq {seq})"
    if sealed:
        work.add(bytes(sealed), f"sealed free text{where}")
    for path, text in sorted((texts or {}).items()):
        raw = text.encode("utf-8")
        if len(raw) >= MIN_SCAN_BYTES and not is_name(text):
            work.add(raw, f"{path}{where}")


def add_keyed_words(work: ErasureWork, key: bytes, subject: str, predicate: str,
                    text: str | None, fact_id: str) -> None:
    """The word index's keyed words of an erased fact (its subject, predicate and value, as the
    index hashed them) and its subject's scope token (DESIGN 14: keyed residue)."""
    words = recall_text.words(recall_text.fact_text(
        subject, predicate, parse(text) if text is not None else ""))
    for word in dict.fromkeys(words):
        work.keyed.setdefault(recall_text.term(key, word).encode("ascii"),
                              f"keyed word (word index) of {fact_id}")
    work.keyed.setdefault(recall_text.term(key, "subject:" + subject).encode("ascii"),
                          f"keyed subject token (word index) of {fact_id}")


def keyed_needles(work: ErasureWork, held: Callable[[str], bool]) -> None:
    """Add the keyed words no live index row holds (`held`) to the needles: a word another
    live fact has is in the index by design, and its presence gives nothing away."""
    for data, label in work.keyed.items():
        if not held(data.decode("ascii")):
            work.add(data, label)
    work.keyed = {}
