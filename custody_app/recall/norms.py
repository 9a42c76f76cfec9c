"""Scaling an embedder's rows to unit length, the one way every embedder here does it."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def unit_rows(rows: npt.NDArray[np.floating]) -> npt.NDArray[np.float32]:
    """Each row divided by its L2 norm, as float32; a zero row (a text with nothing to embed)
    stays zero rather than becoming NaN."""
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: npt.NDArray[np.float32] = (rows / norms).astype(np.float32)
    return out
