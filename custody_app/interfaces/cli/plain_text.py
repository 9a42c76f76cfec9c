"""Text for people from the results that used to print only as JSON (verify, rebuild, init,
checkpoint, hold, release, pack, export): a first line that says what happened, then the
fields one a line. `--json` prints the result itself (DESIGN 11: one grammar)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from custody_app.domain.escaping import escape_text


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "-"
    if isinstance(value, str):
        return escape_text(value)
    return escape_text(json.dumps(value, ensure_ascii=False))


def field_lines(data: dict[str, Any], indent: str = "  ") -> list[str]:
    """`key: value` lines; a list of scalars on one line, anything deeper as compact JSON."""
    lines = []
    for key, value in data.items():
        label = key.replace("_", " ")
        if isinstance(value, list) and all(not isinstance(v, dict | list) for v in value):
            shown = ", ".join(_scalar(v) for v in value) if value else "none"
            lines.append(f"{indent}{label}: {shown}")
        elif isinstance(value, dict) and value:
            lines.append(f"{indent}{label}:")
            lines += field_lines(value, indent + "  ")
        else:
            lines.append(f"{indent}{label}: {_scalar(value)}")
    return lines


def headline(command: str, data: dict[str, Any]) -> str:
    """What the command did, in one line."""
    if "what" in data and "valid" in data:  # an offline check of an export or a pack
        verdict = "valid" if data["valid"] else "NOT valid"
        return (f"{_scalar(data['what'])} {verdict}: {data.get('events', 0):,} event(s) "
                f"checked" + ("" if data["valid"] else
                              f"; {len(data.get('problems') or [])} problem(s)"))
    if command == "verify":
        if data.get("valid") and data.get("keystore_missing"):
            return (f"chain valid: {data.get('events', 0):,} event(s), "
                    f"{data.get('checkpoints', 0)} signed checkpoint(s) checked; values and "
                    f"free text NOT checked ({data.get('values_unchecked', 0):,} value(s)): "
                    f"the key store {_scalar(data['keystore_missing'])} is missing")
        if data.get("valid"):
            return (f"chain valid: {data.get('events', 0):,} event(s), "
                    f"{data.get('checkpoints', 0)} signed checkpoint(s) checked")
        where = f" at seq {data['first_bad_seq']}" if data.get("first_bad_seq") else ""
        return f"chain BROKEN{where}: {_scalar(data.get('problem'))}"
    if command == "rebuild":
        diffs = data.get("differences") or []
        if not diffs:
            return "projection matches the events"
        return (f"{len(diffs)} difference(s) between the projection and the events"
                + ("; repaired" if data.get("repaired") else "; run rebuild --repair"))
    if command == "init":
        return f"ledger ready: {_scalar(data.get('ledger'))}"
    if command == "checkpoint":
        return (f"signed checkpoint of seq {data.get('checkpoint_seq')} written as seq "
                f"{data.get('seq')} (key {_scalar(data.get('key_fingerprint'))})")
    if command in ("hold", "release"):
        past = "held" if command == "hold" else "released"
        return (f"{past} {data.get('fact_id')}; now {data.get('status')} (seq {data.get('seq')}, "
                f"{data.get('tx_at')})")
    if command == "embed":
        if data.get("in_write"):
            return (f"{_scalar(data.get('embedder'))} makes its vectors inside each write: "
                    "no fact waits for one")
        left = data.get("waiting", 0)
        return (f"embedded {data.get('embedded', 0):,} fact(s) with "
                f"{_scalar(data.get('embedder'))}; "
                + (f"{left:,} still waiting" if left else "none waiting"))
    if command in ("pack", "export", "explain"):
        target = data.get("pack") or data.get("path") or data.get("out")
        return f"{command}: wrote {_scalar(target)}" if target else f"{command}: written"
    return f"{command}: done"


def render(command: str, result: BaseModel | dict[str, Any]) -> str:
    data = result.model_dump(mode="json") if isinstance(result, BaseModel) else dict(result)
    return "\n".join([headline(command, data), *field_lines(data)])
