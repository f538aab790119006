"""A defense against DP-SGD at the same utility (the paper's third principle, Aerni et al. section 4,
Figure 7): the DP-SGD leak at the defense's accuracy, read off a frontier of DP-SGD runs, and the
ratio of the two leaks.

**The DP-SGD leak at accuracy a**: the frontier is a list of DP-SGD runs of one recipe at several
noise levels, each an (accuracy, leak, leak SE) point. The two neighbouring points whose accuracies
bracket ``a`` and lie at most :data:`MAX_GAP` apart are interpolated linearly in accuracy (a point at
``a`` itself is read as it is); where no such pair exists, ``a`` is *outside the frontier* and no
DP-SGD leak is given (a line across a wider gap would be a guess, not a measurement).

**The ratio** ``R = L_defense / L_dpsgd`` with a 95% interval by Bonferroni: each leak gets a two-sided
97.5% normal interval (``L +- 2.24 SE``, clipped at 0; the interpolated DP-SGD leak's SE from its two
independent runs, ``sqrt(w^2 SE_1^2 + (1 - w)^2 SE_2^2)``); where both intervals cover, R lies in
``[lo_d / hi_p, hi_d / lo_p]``, so that box covers with probability at least 95% (an upper end of
inf where the DP-SGD interval reaches 0). The verdict: the defense leaks *more* than DP-SGD at its
utility where the interval's lower end exceeds 1, *less* where its upper end is below 1, else *not
told apart*. The leaks are each run's ranked sample-level figure (the plain maximum of its fixed
set of primary attacks at the figure FPR) and their SE is the figure's; the accuracies are each
run's sample-level test accuracy (as the leaderboard's x axis).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

#: the widest accuracy gap (a fraction: 2 points) between the two frontier points a reading interpolates
MAX_GAP = 0.02
#: the two-sided level of each leak's interval in the ratio's Bonferroni box (two intervals: 95% jointly)
EACH_LEVEL = 0.975
_Z = 2.241402727604947  # the standard normal's 0.9875 quantile (scipy.stats.norm.ppf(0.9875))


@dataclass(frozen=True)
class FrontierPoint:
    """One DP-SGD run on the frontier: its sample-level accuracy, leak and the leak's SE, and a label."""

    accuracy: float
    leak: float
    se: float
    label: str = ""


@dataclass(frozen=True)
class FrontierReading:
    """The DP-SGD leak at an accuracy: the value, its SE and the points it was read from; ``leak`` None
    where the accuracy is outside the frontier (``why`` says how)."""

    leak: float | None
    se: float | None
    points: tuple[FrontierPoint, ...]
    why: str = ""


def read_frontier(accuracy: float, frontier: Sequence[FrontierPoint], max_gap: float = MAX_GAP) -> FrontierReading:
    """The DP-SGD leak at ``accuracy`` (the module docstring's rule)."""
    pts = sorted(frontier, key=lambda p: p.accuracy)
    for p in pts:
        if p.accuracy == accuracy:
            return FrontierReading(p.leak, p.se, (p,))
    for a, b in zip(pts, pts[1:]):
        if a.accuracy < accuracy < b.accuracy:
            gap = b.accuracy - a.accuracy
            if gap > max_gap + 1e-9:  # a gap of exactly max_gap (up to float rounding) is read
                return FrontierReading(None, None, (a, b), f"outside the frontier: its neighbours ({100 * a.accuracy:.1f}% "
                                                           f"and {100 * b.accuracy:.1f}%) are {100 * gap:.1f} points "
                                                           f"apart (at most {100 * max_gap:g})")
            w = (b.accuracy - accuracy) / gap  # the weight of the lower point
            leak = w * a.leak + (1 - w) * b.leak
            return FrontierReading(leak, math.hypot(w * a.se, (1 - w) * b.se), (a, b))
    if not pts:
        return FrontierReading(None, None, (), "outside the frontier: no DP-SGD point")
    lo, hi = pts[0].accuracy, pts[-1].accuracy
    return FrontierReading(None, None, (), f"outside the frontier: DP-SGD's points span {100 * lo:.1f}-{100 * hi:.1f}%")


@dataclass(frozen=True)
class Ratio:
    """``L_defense / L_dpsgd`` with its Bonferroni-box 95% interval and the verdict."""

    value: float
    low: float
    high: float
    verdict: str


def _interval(value: float, se: float) -> tuple[float, float]:
    return max(0.0, value - _Z * se), value + _Z * se


def leak_ratio(leak: float, se: float, dp_leak: float, dp_se: float) -> Ratio:
    """The ratio of the module docstring."""
    lo_d, hi_d = _interval(leak, se)
    lo_p, hi_p = _interval(dp_leak, dp_se)
    value = leak / dp_leak if dp_leak > 0 else math.inf
    low = lo_d / hi_p if hi_p > 0 else math.inf
    high = hi_d / lo_p if lo_p > 0 else math.inf
    verdict = ("leaks more than DP-SGD at its utility" if low > 1 else
               "leaks less than DP-SGD at its utility" if high < 1 else "not told apart from DP-SGD at its utility")
    return Ratio(value, low, high, verdict)


def sample_point(results: dict[str, Any], label: str = "") -> FrontierPoint | None:
    """A run's (sample-level test accuracy, ranked leak, its SE), or None where the level has no leak."""
    lv = results.get("sample") or {}
    leak = (lv.get("figure") or {}).get("leak") or {}
    if "tpr" not in leak or leak.get("se") is None:
        return None
    return FrontierPoint(float(lv["test_accuracy"]["mean"]), float(leak["tpr"]), float(leak["se"]), label)
