"""Hansen's test for superior predictive ability (SPA), on paired bootstrap replicates over victims.

Used for the question "does any attack variant beat the headline?" (harness.audit.headline), where
the harness looks at many variants, several FPRs and two levels at once: a test whose family-wise
error rate over all of them is at most alpha.

Hansen, "A Test for Superior Predictive Ability", J. Business & Economic Statistics 23(4), 2005.
For hypotheses k = 1..m with relative performance d_k (here: a variant's TPR at an FPR minus the
headline's, on the same victims), H0: E d_k <= 0 for every k. With the studentized statistics
``T_k = d_k / w_k`` (w_k: the bootstrap standard deviation of d_k),

    T = max(0, max_k T_k),

and its null distribution from the paired bootstrap replicates d*_k (the same victim draws for the
headline and every variant), re-centred by Hansen's consistent rule

    Z*_k = (d*_k - d_k 1{T_k >= -sqrt(2 log log n)}) / w_k,    T* = max(0, max_k Z*_k),

where n is the number of independent units (victim models). A hypothesis far inside the null
(T_k below the threshold) keeps its negative mean in the replicates instead of being moved to the
boundary: unlike White's reality check (which re-centres every k at 0, i.e. treats the hopeless
variants as if they were as good as the headline), that keeps the many weak variants of a run
from diluting the power, while the size at the least favourable null (every variant exactly as
good as the headline: the no-signal case) stays alpha. p = the fraction of replicates with
``T* >= T``. Single-step adjusted p-values of any subset (a level) compare the subset's largest T_k
with the same T*, so a rejection anywhere keeps the family-wise error at most alpha.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SpaResult:
    """``statistic`` T, its ``p_value``, the studentized statistic of every hypothesis (``t_stats``,
    NaN where a hypothesis has no spread in the replicates and no positive difference) and the
    replicates' maxima ``null`` (for adjusted p-values of subsets, :meth:`p_value_of`)."""

    statistic: float
    p_value: float
    t_stats: np.ndarray
    null: np.ndarray

    def p_value_of(self, subset: np.ndarray) -> float:
        """Single-step adjusted p-value of the hypotheses in boolean ``subset``: the fraction of
        replicates whose maximum over *all* hypotheses reaches the subset's largest statistic
        (1 when the subset has none above 0)."""
        t = self.t_stats[subset]
        t = t[~np.isnan(t)]
        top = max(0.0, float(t.max())) if len(t) else 0.0
        return 1.0 if top <= 0 or not len(self.null) else float(np.mean(self.null >= top))


def recentring_threshold(num_units: int) -> float:
    """Hansen's -sqrt(2 log log n): hypotheses with T_k below it keep their mean in the null."""
    return -float(np.sqrt(2 * max(np.log(np.log(num_units)), 0.0))) if num_units > 1 else 0.0


def spa_test(differences: np.ndarray, replicates: np.ndarray, num_units: int) -> SpaResult:
    """Hansen's consistent SPA test of H0: every E d_k <= 0.

    ``differences`` (m,): each hypothesis' observed difference d_k; ``replicates`` (m, B): its
    paired bootstrap replicates (NaN where a replicate cannot compute it: that replicate is left
    out of that hypothesis' spread and maximum). A hypothesis whose replicates do not vary is
    dropped when d_k <= 0 (it can never reject) and has T_k = +inf otherwise (every replicate
    shows the same positive gap)."""
    d = np.asarray(differences, np.float64)
    dstar = np.asarray(replicates, np.float64).reshape(len(d), -1)
    with np.errstate(invalid="ignore"):
        w = np.nanstd(dstar, axis=1) if dstar.shape[1] else np.zeros(len(d))
    w = np.nan_to_num(w, nan=0.0)
    flat = w <= 1e-12
    keep = ~(flat & (d <= 0))
    t_stats = np.full(len(d), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_stats[keep] = np.where(flat[keep], np.inf, d[keep] / np.where(flat[keep], 1.0, w[keep]))
    if not keep.any() or not dstar.shape[1]:
        return SpaResult(0.0, 1.0, t_stats, np.zeros(dstar.shape[1]))
    stat = max(0.0, float(np.nanmax(t_stats)))
    dk, ws, tk, ds = d[keep], np.where(flat[keep], 1.0, w[keep]), t_stats[keep], dstar[keep]
    centre = np.where(tk >= recentring_threshold(num_units), dk, 0.0)
    z = (ds - centre[:, None]) / ws[:, None]
    z[flat[keep]] = 0.0  # no spread: no null variation
    with np.errstate(invalid="ignore"):
        null = np.maximum(0.0, np.nan_to_num(np.nanmax(np.where(np.isnan(z), -np.inf, z), axis=0), neginf=0.0))
    p = 1.0 if stat <= 0 else float(np.mean(null >= stat))
    return SpaResult(stat, p, t_stats, null)
