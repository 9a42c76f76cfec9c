"""Redaction of every free-text field a command stores beside the value: the cause's ref and
detail, a reason, an action's ref and outcome, the llm block's model name. Same detectors as
the value, and a value-free report ({field, kind, start, end}) for the event."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from custody_app.domain.redaction import find

M = TypeVar("M", bound=BaseModel)

# Dotted paths into a command's fields; a missing or non-string one is skipped. Reason codes
# (forget, sweep) are fixed words, never free text, so they are not listed.
FREE_TEXT = ("cause.ref", "cause.detail", "reason", "ref", "outcome", "llm.model")


def _mask(text: str, detectors: Sequence[str]) -> tuple[str, list[tuple[int, int, str]]]:
    spans = [(f.start, f.end, f.kind) for f in find(text, detectors)]
    out: list[str] = []
    last = 0
    for start, end, kind in spans:
        out += (text[last:start], f"[{kind}]")
        last = end
    out.append(text[last:])
    return "".join(out), spans


_PARTS = tuple(tuple(path.split(".")) for path in FREE_TEXT)
# (model class, name) -> True when no instance of the class can have that attribute: a model
# that forbids extra fields and keeps pydantic's __getattr__, with no such field, private
# attribute or class attribute. (getattr of a missing name goes through pydantic's
# __getattr__, which raises and catches: most of the cost of reading an assert's free text.)
_NEVER: dict[tuple[type, str], bool] = {}
_PYDANTIC_GETATTR = getattr(BaseModel, "__getattr__", None)


def _never_there(cls: type, name: str) -> bool:
    never = _NEVER.get((cls, name))
    if never is None:
        never = _NEVER[(cls, name)] = (
            issubclass(cls, BaseModel) and getattr(cls, "__getattr__", None) is _PYDANTIC_GETATTR
            and cls.model_config.get("extra") == "forbid"
            and name not in cls.model_fields and name not in cls.__private_attributes__
            and not hasattr(cls, name))
    return never


def _member(node: Any, name: str) -> Any:
    if isinstance(node, dict):
        return node.get(name)
    return None if _never_there(type(node), name) else getattr(node, name, None)


def _anything_found(cmd: BaseModel, detectors: Sequence[str]) -> bool:
    """Whether any free-text field holds an identifier, read off the model itself (most
    commands hold none, and dumping one copies its whole value)."""
    for parts in _PARTS:
        node: Any = cmd
        for name in parts:
            node = None if node is None else _member(node, name)
        if isinstance(node, str) and find(node, detectors):
            return True
    return False


def redact_fields(cmd: M, detectors: Sequence[str]) -> tuple[M, list[dict[str, Any]]]:
    """The command with every identifier in its free-text fields masked, and the findings
    (field, kind, span in the original text: never the text itself)."""
    if not _anything_found(cmd, detectors):
        return cmd, []
    data = cmd.model_dump()
    findings: list[dict[str, Any]] = []
    changed = False
    for path in FREE_TEXT:
        *parents, leaf = path.split(".")
        node: Any = data
        for name in parents:
            node = node.get(name) if isinstance(node, dict) else None
        if not isinstance(node, dict) or not isinstance(node.get(leaf), str):
            continue
        masked, spans = _mask(node[leaf], detectors)
        if spans:
            node[leaf] = masked
            changed = True
            findings += [{"field": path, "kind": k, "start": s, "end": e} for s, e, k in spans]
    if not changed:
        return cmd, []
    return type(cmd).model_validate(data), findings
