"""An ascending order of float64 values by one sort of packed 64-bit keys.

numpy sorts unsigned 64-bit integers with its vectorized sort, several times faster than an argsort
of the same number of floats. A key packs a value's order-preserving bit pattern (a negative
float's bits inverted, a non-negative one's with the sign bit set: unsigned order is then the
floats' order, -0.0 below 0.0) into its high bits and the value's index into its low b bits
(b = bits of the largest index). Sorting the keys sorts the values by their high bits, ties by
index. Two values share their high bits only where they agree to about 2^-(52 - b) relative (or
are equal): the returned ``same`` marks those neighbours, so a caller that needs the exact order
re-sorts only them (:func:`harness.core.metrics.descending_order`).
"""

from __future__ import annotations

import numpy as np

#: the index takes at most this many low bits of a key (2^32 values); more values: no packed order
MAX_INDEX_BITS = 32
_SIGN = np.uint64(1 << 63)


def packed_ascending(values: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(order, same)`` for flat float64 ``values``: ``order`` (intp) sorts them ascending by their
    high bits and, among equal high bits, by index; ``same[i]`` is True where positions i and i + 1
    of that order share their high bits (length n - 1). So ``order`` is exact (equal values in index
    order) wherever ``values[order][i] == values[order][i + 1]`` or ``not same[i]``. NaN patterns
    sort by their bits (a positive NaN above +inf, a negative one below -inf). None where the
    indices need more than :data:`MAX_INDEX_BITS` bits."""
    v = np.ascontiguousarray(values, dtype=np.float64).ravel()
    n = len(v)
    b = max((n - 1).bit_length(), 1)
    if b > MAX_INDEX_BITS:
        return None
    shift = np.uint64(b)
    key = (v.view(np.int64) >> 63).view(np.uint64)  # all ones where the sign bit is set
    key |= _SIGN
    key ^= v.view(np.uint64)
    key >>= shift
    key <<= shift
    key |= np.arange(n, dtype=np.uint64)
    key.sort()
    order = (key & np.uint64((1 << b) - 1)).astype(np.intp)
    key >>= shift
    return order, key[1:] == key[:-1]
