"""The int8 codes of the in-process vector copy (issue 17, recall at 1M): numkong's SIMD dot
products equal numpy's exact integer ones (the fallback when numkong is absent) for any
dimension count, and a row's codes decode to within half a step of its vector."""

from __future__ import annotations

import numpy as np
import pytest

from custody_app.recall import codes


@pytest.mark.parametrize("dims", [7, 256, 384, 1024])
def test_simd_dots_equal_numpys_exact_integers(dims: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(dims)
    rows = rng.standard_normal((3000, dims)).astype(np.float32)
    rows[5] = 0  # an all-zero row: factor 0, codes 0
    rows[6, :] = 0
    rows[6, 3 % dims] = -1.0  # one component at -1: code -127
    block, factor = codes.encode(rows)
    query = codes.encode(rng.standard_normal((1, dims)).astype(np.float32))[0][0]
    exact = block.astype(np.int64) @ query.astype(np.int64)
    assert codes.simd()
    got = codes.dots(block, query)
    assert np.array_equal(got, exact.astype(np.float64))
    monkeypatch.setattr(codes, "_nk", None)  # the numpy fallback
    assert np.array_equal(codes.dots(block, query), exact.astype(np.float64))
    assert codes.dots(block[:0], query).shape == (0,)
    # codes within [-127, 127], the largest component of each row at +-127
    assert block.min() >= -127 and block.max() <= 127
    assert factor[5] == 0 and not block[5].any()
    assert block[6, 3 % dims] == -127
    peak = np.abs(block[10:]).max(axis=1)
    assert (peak == 127).all()
    err = np.abs(block[10:] * factor[10:, None] - rows[10:])
    assert (err <= factor[10:, None] / 2 + 1e-6).all()
