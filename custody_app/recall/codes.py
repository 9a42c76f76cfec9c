"""int8 codes of unit vectors for the in-process vector copy above its float32 budget, and the
dot products a search ranks them by (SIMD through numkong where installed, else numpy in
chunks: both give the same exact integer dot products)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

_nk: Any
try:  # a SIMD int8 kernel (VNNI/AVX-512 where the CPU has them); optional
    import numkong as _nk
except ImportError:  # pragma: no cover - numkong is a dependency; numpy is the fallback
    _nk = None

Codes = npt.NDArray[np.int8]
Floats = npt.NDArray[np.float32]
LEVELS = 127.0
CHUNK = 16384


def encode(block: Floats) -> tuple[Codes, Floats]:
    """Per-row int8 codes (each row scaled so its largest component is +-127) and the factor
    that turns a row's code back into its vector (max |component| / 127)."""
    peak = np.abs(block).max(axis=1) if len(block) else np.zeros(0, dtype=np.float32)
    factor = (peak / LEVELS).astype(np.float32)
    safe = np.where(factor > 0, factor, 1.0).astype(np.float32)
    codes = np.clip(np.rint(block / safe[:, None]), -LEVELS, LEVELS).astype(np.int8)
    return codes, factor


def dots(codes: Codes, query: Codes) -> npt.NDArray[np.float64]:
    """The integer dot product of every row of `codes` with `query` (exact: at most 127^2 per
    component, summed in 64 bits by numkong, in float32 within 2^24 by numpy here)."""
    if len(codes) == 0:
        return np.zeros(0, dtype=np.float64)
    if _nk is not None:
        return np.asarray(_nk.cdist(codes, query[None, :], metric="dot", threads=1)).ravel()
    out = np.empty(len(codes), dtype=np.float64)  # pragma: no cover - fallback
    q = query.astype(np.float32)
    for at in range(0, len(codes), CHUNK):
        out[at:at + CHUNK] = codes[at:at + CHUNK].astype(np.float32) @ q
    return out


def simd() -> bool:
    return _nk is not None
