"""Two runs side by side (``harness compare RUN_A RUN_B``, ``harness.compare``).

For each level, the headline and the strongest figure of both runs at the headline FPR, and for
every attack variant both runs have, its TPR in each: the difference (B - A) and whether the two
95% CIs overlap (disjoint CIs: the runs differ beyond their bootstrap uncertainty). The config keys
that differ between the runs are listed, so a difference can be traced to what changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from harness.audit.headline import fpr_key
from harness.audit.report import experiments
from harness.audit.results import Results


@dataclass(frozen=True)
class Comparison:
    """``headlines``: one row per (level, figure); ``attacks``: one row per attack variant present in
    both runs; ``config_differences``: dotted keys whose values differ (``a -> b``); ``fpr``: the FPR
    compared (run A's headline FPR)."""

    a: Results
    b: Results
    fpr: float
    headlines: pd.DataFrame
    attacks: pd.DataFrame
    config_differences: dict[str, tuple[Any, Any]] = field(default_factory=dict)


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _overlap(ci_a: list[float] | None, ci_b: list[float] | None) -> bool | None:
    """Whether two intervals share a point; None when either is missing or NaN."""
    if not ci_a or not ci_b or any(v != v for v in (*ci_a, *ci_b)):
        return None
    return bool(ci_a[0] <= ci_b[1] and ci_b[0] <= ci_a[1])


def _cell(rec: dict[str, Any] | None, k: str) -> tuple[Any, Any, Any]:
    """(label, TPR or None when unresolved or absent, CI)."""
    if rec is None:
        return None, None, None
    label = f"{rec['name']}:{rec['variant']}"
    if not rec.get("resolved", {}).get(k, True) or k not in rec["tpr_at_fpr"]:
        return label, None, None
    return label, float(rec["tpr_at_fpr"][k]), list(rec["tpr_ci"].get(k) or []) or None


def _row(base: dict[str, Any], ra: dict[str, Any] | None, rb: dict[str, Any] | None, k: str) -> dict[str, Any]:
    la, ta, ca = _cell(ra, k)
    lb, tb, cb = _cell(rb, k)
    return {**base, "attack_a": la, "tpr_a": ta, "ci_a": ca, "attack_b": lb, "tpr_b": tb, "ci_b": cb,
            "difference": tb - ta if ta is not None and tb is not None else None, "cis_overlap": _overlap(ca, cb)}


def compare_results(a: Results, b: Results) -> Comparison:
    """The :class:`Comparison` of two runs' results (module docstring)."""
    fpr = a.headline_fpr
    k = fpr_key(fpr)
    heads = []
    for lv in ("population", "sample"):
        if lv not in a.data and lv not in b.data:
            continue
        for which in ("best", "strongest"):
            heads.append(_row({"level": lv, "figure": "headline" if which == "best" else "strongest"},
                              (a.data.get(lv) or {}).get(which), (b.data.get(lv) or {}).get(which), k))
    rows = []
    ea, eb = dict(experiments(a.data)), dict(experiments(b.data))
    for exp in [e for e in ea if e in eb]:
        in_b = {(x["name"], x["variant"]): x for x in eb[exp]["attacks"]}
        for x in ea[exp]["attacks"]:
            y = in_b.get((x["name"], x["variant"]))
            if y is not None:
                rows.append(_row({"experiment": exp, "attack": x["name"], "variant": x["variant"],
                                  "primary": bool(x.get("primary"))}, x, y, k))
    fa, fb = _flat(a.data.get("config", {})), _flat(b.data.get("config", {}))
    diffs = {key: (fa.get(key), fb.get(key)) for key in sorted(set(fa) | set(fb))
             if fa.get(key) != fb.get(key) and not key.startswith("run.")}
    return Comparison(a=a, b=b, fpr=fpr, headlines=pd.DataFrame(heads), attacks=pd.DataFrame(rows),
                      config_differences=diffs)
