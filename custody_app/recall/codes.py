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


def dots(codes: npt.NDArray[Any], query: Codes) -> npt.NDArray[np.float64]:
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


# Sign bits: above the int8 budget (1M vectors of minilm-l6's 384 dimensions are 384 MB of int8
# codes, 48 MB of bits) each row keeps one bit a dimension, the sign of its difference from a
# centre (the mean of the k-means centroids: a component most vectors share says nothing), and
# the mean size of those differences. A search ranks every row by the Hamming distance of its
# bits to the query's, re-ranks a shortlist by the bits' signs against the query's floats, and
# re-scores the best exactly from the stored float32 rows.
Bits = npt.NDArray[np.uint8]
HAMMING_CHUNK = 65536


def pack(block: Floats, centre: Floats) -> tuple[Bits, Floats]:
    """Each row's sign bits against `centre` (packed, one bit a dimension) and the mean
    |component - centre| that turns a row's signs back into an estimate of it."""
    diff = block - centre
    factor = (np.abs(diff).mean(axis=1) if len(block) else np.zeros(0)).astype(np.float32)
    return np.packbits(diff > 0, axis=1), factor


def hamming(bits: npt.NDArray[Any], query: Bits) -> npt.NDArray[np.int32]:
    """How many bits of each row differ from the query's (popcount of the xor, in chunks)."""
    out = np.empty(len(bits), dtype=np.int32)
    words = bits.shape[1] // 8 if bits.shape[1] % 8 == 0 else 0
    rows, q = (bits.view(np.uint64), query.view(np.uint64)) if words else (bits, query)
    for at in range(0, len(bits), HAMMING_CHUNK):
        out[at:at + HAMMING_CHUNK] = np.bitwise_count(
            np.bitwise_xor(rows[at:at + HAMMING_CHUNK], q)).sum(axis=1, dtype=np.int32)
    return out


def signed_dots(bits: npt.NDArray[Any], query: Floats) -> Floats:
    """Each row's signs (+1 / -1) dotted with the query's float components (minus the centre):
    the shortlist's finer ranking, times the row's factor."""
    signs = np.unpackbits(bits, axis=1, count=len(query)).astype(np.float32)
    signs *= 2
    signs -= 1
    return np.asarray(signs @ query, dtype=np.float32)
