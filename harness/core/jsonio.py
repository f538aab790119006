"""JSON files as RFC 8259 allows them: non-finite numbers written as strings.

JSON has no infinity and no NaN; Python's ``json`` writes them as the bare tokens ``Infinity``,
``-Infinity`` and ``NaN``, which strict parsers (JavaScript's ``JSON.parse``, ``jq``, Go, Rust's
serde) refuse. results.json holds such numbers where they are a figure's true value: a bootstrap
CI of the sample / population ratio whose replicates find no population member ends at infinity,
a CI without bootstrap replicates is ``[NaN, NaN]`` (docs/results-json.md, "Numbers").

The harness writes them as the JSON *strings* ``"Infinity"``, ``"-Infinity"`` and ``"NaN"`` (the
convention of Protocol Buffers' JSON mapping; ``float(s)`` in Python and ``Number(s)`` in
JavaScript read them back), and reads both that form and the bare tokens of files written by earlier
versions, so every reader gets the same floats from either. A string that is exactly one of
the three names is read as that number wherever it appears (no other string of a harness file is
one of them).
"""

from __future__ import annotations

import json
import math
from typing import Any

#: the strings that stand for the non-finite numbers in a harness JSON file
NONFINITE = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def _token(x: float) -> str:
    return "NaN" if math.isnan(x) else "Infinity" if x > 0 else "-Infinity"


def encode_nonfinite(obj: Any) -> Any:
    """``obj`` with every non-finite float (Python's or numpy's) replaced by its string
    (:data:`NONFINITE`); dicts, lists and tuples are copied, everything else is returned as is."""
    if isinstance(obj, float):  # numpy's float64 is one too
        return obj if math.isfinite(obj) else _token(obj)
    if isinstance(obj, dict):
        return {k: encode_nonfinite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode_nonfinite(v) for v in obj]
    if type(obj).__module__ == "numpy" and hasattr(obj, "dtype") and obj.dtype.kind == "f" and obj.ndim == 0:
        return encode_nonfinite(float(obj))
    return obj


def decode_nonfinite(obj: Any) -> Any:
    """The inverse of :func:`encode_nonfinite`: the strings of :data:`NONFINITE` become floats."""
    if isinstance(obj, str):
        return NONFINITE.get(obj, obj)
    if isinstance(obj, dict):
        return {k: decode_nonfinite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode_nonfinite(v) for v in obj]
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` of ``obj`` as valid JSON: non-finite numbers as their strings, never the bare
    tokens (``allow_nan=False`` guarantees it)."""
    return json.dumps(encode_nonfinite(obj), allow_nan=False, **kwargs)


def loads(text: str | bytes) -> Any:
    """Parse a harness JSON file: the non-finite numbers' strings and (older files) bare tokens
    both become floats. A ``ValueError`` (``json.JSONDecodeError``) for text that is not JSON."""
    return decode_nonfinite(json.loads(text))


def strict_loads(text: str | bytes) -> Any:
    """Parse ``text`` as RFC 8259 JSON, refusing the bare ``Infinity`` / ``NaN`` tokens (ValueError),
    as a strict parser would; the strings of :data:`NONFINITE` are left as strings."""
    def refuse(token: str) -> Any:
        raise ValueError(f"{token} is not valid JSON (RFC 8259)")

    return json.loads(text, parse_constant=refuse)
