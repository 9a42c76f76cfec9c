"""Model files that ship inside an installed package (the `wordllama` and `minilm-l6`
embedders' weights and tokenizers): the package found without importing it (its own loaders
can download), each file read against the sha256 digest this release was built against."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

from custody_app.domain.errors import LedgerError


def package_dir(package: str, embedder: str, install: str) -> Path:
    """Where the installed `package` lives; `embedder_unavailable` when it is not installed."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise LedgerError("embedder_unavailable",
                          f"the policy asks for the {embedder} embedder but the {package} "
                          f"package is not installed; {install}")
    return Path(next(iter(spec.submodule_search_locations)))


def read_checked(path: Path, sha256: str, embedder: str, install: str) -> bytes:
    """The file's bytes; `embedder_damaged`, naming the file, when it cannot be read or is not
    the one pinned."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LedgerError("embedder_damaged",
                          f"the {embedder} file {path} cannot be read ({exc.strerror or exc}); "
                          f"reinstall it: {install}", file=str(path)) from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise LedgerError("embedder_damaged",
                          f"the {embedder} file {path} is not the one this release was built "
                          f"against (sha256 differs): a damaged or different install; "
                          f"reinstall it: {install}", file=str(path))
    return data
