"""Labels a user gives (``harness import --name``) and names the pages show: no character that
reorders the text around it.

The Unicode bidirectional controls (embeddings, overrides, isolates and the directional marks,
Unicode Standard Annex #9, section 2) change the display order of what follows them: a name holding
U+202E (right-to-left override) shows the rest of a terminal line, a page title or a tooltip
reversed, so a label can pass for another. :func:`bidi_controls` finds them; names that hold one are
refused where they are given, and cut from names read back from older files
(:func:`without_bidi_controls`).
"""

from __future__ import annotations

#: LRM, RLM, ALM; LRE, RLE, PDF, LRO, RLO; LRI, RLI, FSI, PDI
BIDI_CONTROLS = frozenset("\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def bidi_controls(text: str) -> list[str]:
    """The bidirectional control characters in ``text``, as ``U+XXXX`` (in order, each once)."""
    return list(dict.fromkeys(f"U+{ord(c):04X}" for c in text if c in BIDI_CONTROLS))


def without_bidi_controls(text: str) -> str:
    """``text`` with every bidirectional control character removed."""
    return "".join(c for c in text if c not in BIDI_CONTROLS)
