"""The eval report: a side-by-side table, and a JSON report signed with Ed25519 and bound to the
digest of the scenarios it was run on."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from custody_app.domain.chain import canonical
from custody_app.domain.errors import LedgerError
from custody_app.domain.timeutil import format_time
from custody_app.evaluation.runner import EvalResult
from custody_app.evaluation.scenarios import load_scenarios
from custody_app.files.output import write_new_files
from custody_app.keys import crypto

REPORT_KIND = "custody-eval-report"
_COLUMNS = ("correct", "stale", "contradictions", "blast_radius", "op_errors")
_SHORT = {"correct": "correct", "stale": "stale", "contradictions": "contra",
          "blast_radius": "blast", "op_errors": "op err"}


def render_table(result: EvalResult) -> str:
    """A markdown table: scenarios down, each system's scores across (correct out of reads)."""
    systems = result.systems
    head = ["scenario"] + [f"{s.system} {_SHORT[c]}" for s in systems for c in _COLUMNS]
    rows = [[sc.name] + _cells([s.scenarios[i] for s in systems])
            for i, sc in enumerate(systems[0].scenarios)]
    rows.append(["**total**"] + _cells(list(systems)))
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))) + " |"

    lines = [line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += [line(r) for r in rows]
    lines.append("")
    for s in systems:
        verdict = "perfect" if s.perfect else "BELOW PERFECT"
        lines.append(f"{s.system}: {s.correct}/{s.reads} correct, {s.stale} stale, "
                     f"{s.contradictions} contradictions, {s.blast_radius} blast radius, "
                     f"{s.op_errors} op errors: {verdict}")
    lines.append(f"scenarios: {result.scenario_count} from {result.scenarios_source} "
                 f"({result.scenarios_digest})")
    return "\n".join(lines)


def _cells(tallies: list[Any]) -> list[str]:
    out: list[str] = []
    for t in tallies:
        out += [f"{t.correct}/{t.reads}"] + [str(getattr(t, c)) for c in _COLUMNS[1:]]
    return out


def _app_version() -> str:
    try:
        return version("custody-app")
    except PackageNotFoundError:
        return "unknown"


def build_report(result: EvalResult) -> dict[str, Any]:
    ledger = next(s for s in result.systems if s.system == "ledger")
    return {"kind": REPORT_KIND, "version": 1, "created_at": format_time(datetime.now(UTC)),
            "custody_app_version": _app_version(), "ledger_perfect": ledger.perfect,
            **result.model_dump(mode="json")}


def _signed_bytes(report: dict[str, Any]) -> bytes:
    body = {k: v for k, v in report.items() if k != "signature"}
    return b"custody-eval-report:v1\n" + canonical(body).encode("utf-8")


def read_private_key(path: str | Path) -> bytes:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise LedgerError("key_unreadable", f"cannot read key {path}: {exc.strerror}") from None
    try:
        return crypto.private_from_pem(text)
    except ValueError as exc:
        raise LedgerError("key_invalid", f"{path} is {exc}") from None


def sign_report(report: dict[str, Any], private_raw: bytes) -> dict[str, Any]:
    pem = crypto.public_pem(private_raw)
    signed = {k: v for k, v in report.items() if k != "signature"}
    signed["signature"] = {"alg": "ed25519", "public_key": pem,
                           "key_fingerprint": crypto.public_fingerprint(pem),
                           "value": crypto.sign(private_raw, _signed_bytes(signed))}
    return signed


def write_key_pair(path: str | Path) -> dict[str, str]:
    """A new Ed25519 key for `eval --sign`: PKCS#8 PEM (mode 0600) and the public PEM beside it."""
    raw = crypto.new_signing_key()
    target = Path(path)
    public = Path(f"{target}.pub")
    write_new_files([(target, crypto.private_pem(raw), False), (public, crypto.public_pem(raw), True)])
    return {"private_key": str(target), "public_key": str(public),
            "key_fingerprint": crypto.public_fingerprint(crypto.public_pem(raw))}


class ReportCheck(BaseModel):
    """What `eval --verify` found."""

    model_config = ConfigDict(frozen=True)
    valid: bool
    signature_ok: bool
    digest_ok: bool
    key_fingerprint: str | None
    scenarios_digest: str | None
    problem: str | None = None


def verify_report(path: str | Path, *, scenarios: str | Path | None = None,
                  public_key: str | None = None) -> ReportCheck:
    """The signature (under `public_key` if given, else the key the report names) and that the
    report was made on exactly these scenarios (the given file, else the built-in ones)."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise LedgerError("report_unreadable", f"cannot read report {path}: "
                          f"{exc.strerror}") from None
    except ValueError as exc:
        raise LedgerError("report_invalid", f"report {path} is not JSON: {exc}") from None
    sig = report.get("signature") if isinstance(report, dict) else None
    if not isinstance(report, dict) or report.get("kind") != REPORT_KIND:
        raise LedgerError("report_invalid", f"{path} is not a custody-app eval report")
    if not isinstance(sig, dict) or not all(isinstance(sig.get(k), str)
                                            for k in ("public_key", "value")):
        return ReportCheck(valid=False, signature_ok=False, digest_ok=False, key_fingerprint=None,
                           scenarios_digest=report.get("scenarios_digest"),
                           problem="the report is not signed (write it with --out and --sign)")
    pem = public_key or sig["public_key"]
    try:
        ok = crypto.verify_signature(pem, _signed_bytes(report), sig["value"])
    except ValueError:
        ok = False
    expected = load_scenarios(scenarios).digest
    digest_ok = report.get("scenarios_digest") == expected
    problem = None
    if not ok:
        problem = ("the signature does not verify under " + ("the given public key" if public_key
                   else "the key the report names") + ": the report was changed or signed by "
                   "another key")
    elif not digest_ok:
        problem = (f"the report was made on scenarios {report.get('scenarios_digest')}, not on "
                   f"these ({expected})")
    return ReportCheck(valid=ok and digest_ok, signature_ok=ok, digest_ok=digest_ok,
                       key_fingerprint=crypto.public_fingerprint(pem),
                       scenarios_digest=report.get("scenarios_digest"), problem=problem)
