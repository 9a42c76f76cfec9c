"""Text for recall: normalised, stemmed words, and the keyed hashes the lexical index stores."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from functools import lru_cache
from typing import Any

import snowballstemmer

from custody_app.domain.escaping import READABLE

try:  # the C stemmer (libstemmer) where it is installed: same stems, ~10x faster
    import Stemmer as _pystemmer
except ImportError:  # pragma: no cover - exercised by forcing the fallback in the tests
    _pystemmer = None

_WORD = re.compile(r"\w+", re.UNICODE)
# Words too common to help ranking; dropped from documents and queries alike.
STOPWORDS = frozenset("""a an and are as at be by for from has have in is it its of on or that the
this to was were will with what which who whom does do did how when where why our we you your
they their them he she his her i me my any all there""".split())
_PURE = snowballstemmer.stemmer("english")
_FAST = _pystemmer.Stemmer("english") if _pystemmer is not None else None


def fold(text: str) -> str:
    """Case-folded, with diacritics removed (Zürich -> zurich, São -> sao)."""
    if text.isascii():
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def pure_stem(word: str) -> str:
    """The pure-Python snowball stem (the fallback, and the reference the C stemmer must equal)."""
    return str(_PURE.stemWord(word))


def fast_stem(word: str) -> str | None:
    """The C stemmer's stem; None when PyStemmer is not installed."""
    return None if _FAST is None else str(_FAST.stemWord(word))


@lru_cache(maxsize=200_000)
def _stem(word: str) -> str:
    return str(_FAST.stemWord(word)) if _FAST is not None else pure_stem(word)


def words(text: str, *, stem: bool = True, fold_accents: bool = True) -> list[str]:
    """The words a fact or a query is matched on."""
    base = fold(text) if fold_accents else text.casefold()
    out = [w for w in _WORD.findall(base) if w not in STOPWORDS]
    return [w if w.isdigit() else _stem(w) for w in out] if stem else out


def fact_text(subject: str, predicate: str, value: Any) -> str:
    """What recall indexes for a fact: its subject, predicate and value."""
    shown = value if isinstance(value, str) else READABLE.encode(value)
    return f"{subject} {predicate.replace('_', ' ')} {shown}"


def term(key: bytes, word: str) -> str:
    """A word as the lexical index stores it: a keyed hash, so the index holds no plaintext.
    The leading letter keeps the tokenizer from reading it as a number."""
    return "h" + hashlib.blake2b(word.encode("utf-8"), key=key, digest_size=6).hexdigest()
