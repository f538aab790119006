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

    Z*_k = (d*_k - mean*(d*_k) + d_k 1{T_k < -sqrt(2 log log n)}) / w_k,    T* = max(0, max_k Z*_k),

(Hansen centres at d_k, the same for a smooth statistic; here at the replicates' own mean, which
corrects the bootstrap's pull of d*_k towards 0 at a threshold read off the pooled guesses:
benchmarks/bench_headline_test.py measured the test over its size with d_k)

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


#: a hypothesis whose paired replicates put more than this share on one value is untestable: its
#: bootstrap distribution is a point mass plus a tail (a tie group at the operating point, a TPR
#: pinned at 0 or 1), which studentizing misreads
DEGENERATE_SHARE = 0.5


@dataclass(frozen=True)
class SpaResult:
    """``statistic`` T, its ``p_value``, the studentized statistic of every hypothesis (``t_stats``,
    NaN where it is untestable), which hypotheses were ``untestable`` (no spread in the replicates,
    or more than :data:`DEGENERATE_SHARE` of them on one value) and the replicates' maxima ``null``
    (for adjusted p-values of subsets, :meth:`p_value_of`)."""

    statistic: float
    p_value: float
    t_stats: np.ndarray
    null: np.ndarray
    untestable: np.ndarray

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


def degenerate(replicates: np.ndarray) -> np.ndarray:
    """Per row of (m, B) ``replicates`` (NaN left out): no spread, or more than
    :data:`DEGENERATE_SHARE` of the finite replicates on one value."""
    out = np.zeros(len(replicates), bool)
    for i, row in enumerate(replicates):
        r = row[~np.isnan(row)]
        if len(r) < 2:
            out[i] = True
            continue
        _, counts = np.unique(r, return_counts=True)
        out[i] = counts.max() > DEGENERATE_SHARE * len(r) or np.ptp(r) <= 1e-12
    return out


def spa_test(differences: np.ndarray, replicates: np.ndarray, num_units: int, small_sample: bool = True,
             false_positives: np.ndarray | None = None, recentre: str = "mean") -> SpaResult:
    """Hansen's consistent SPA test of H0: every E d_k <= 0.

    ``differences`` (m,): each hypothesis' observed difference d_k; ``replicates`` (m, B): its
    paired bootstrap replicates (NaN where a replicate cannot compute it: left out of that
    hypothesis' spread and maximum). Untestable hypotheses (:func:`degenerate`) are left out: a
    gap the bootstrap cannot spread is not evidence (it never gives p = 0).

    ``small_sample``: with n = ``num_units`` resampled units, the bootstrap standard deviation is
    the plug-in one (a factor sqrt((n-1)/n) below the unbiased) and a studentized difference has
    t_{n-1} tails, not normal ones. The observed statistics are taken with the unbiased standard
    deviation (T_k sqrt((n-1)/n)) and the null replicates Z* are mapped to t_{n-1} tails through
    their normal quantile (``t_{n-1}^-1(Phi(Z*))``, which keeps their dependence across
    hypotheses): for one hypothesis and normal differences the test is then the paired t-test.

    ``recentre``: "mean" (the replicates' mean, the default) or "observed" (Hansen's d_k, which the
    calibration simulations show over its size: kept to show it).

    ``false_positives`` (m,): the expected false positives k_k of each hypothesis' read. A TPR read
    at a threshold among the k largest non-member scores carries the threshold's own noise (its
    FPR's relative variance is about 1/k), which the victim bootstrap reproduces in part; each null
    replicate is widened by sqrt(1 + 1/k_k). Without it the test fired in 6.7-7.7% of least-favourable
    simulations at 32 models x 20 samples (3.2 expected false positives); with it, at most 5%
    (benchmarks/bench_headline_test.py, docs/protocol.md)."""
    from scipy.stats import norm
    from scipy.stats import t as student_t

    d = np.asarray(differences, np.float64)
    dstar = np.asarray(replicates, np.float64).reshape(len(d), -1)
    bad = degenerate(dstar) if dstar.shape[1] else np.ones(len(d), bool)
    with np.errstate(invalid="ignore"):
        w = np.nanstd(dstar, axis=1) if dstar.shape[1] else np.zeros(len(d))
    keep = ~bad
    t_stats = np.full(len(d), np.nan)
    scale = np.sqrt((num_units - 1) / num_units) if small_sample and num_units > 1 else 1.0
    t_stats[keep] = d[keep] / w[keep]
    if not keep.any():
        return SpaResult(0.0, 1.0, t_stats, np.zeros(dstar.shape[1]), bad)
    raw_stat = max(0.0, float(np.nanmax(t_stats)))
    dk, ws, tk, ds = d[keep], w[keep], t_stats[keep], dstar[keep]
    # the null replicates, re-centred at the replicates' own mean (not at d_k: at a threshold read off
    # the pooled guesses the bootstrap mean of d*_k is pulled towards 0 from d_k, more the larger d_k
    # is, so replicates centred at d_k make the null too short and the test too eager); a hypothesis
    # below Hansen's threshold keeps its observed negative mean
    mean = np.nanmean(ds, axis=1) if recentre == "mean" else dk  # "observed": Hansen's own centring, at d_k
    centre = np.where(tk >= recentring_threshold(num_units), mean, mean - dk)
    z = (ds - centre[:, None]) / ws[:, None]
    if false_positives is not None:  # the threshold's own order-statistic noise (see the docstring)
        z = z * np.sqrt(1 + 1 / np.maximum(np.asarray(false_positives, np.float64)[keep], 1.0))[:, None]
    with np.errstate(invalid="ignore"):
        zmax = np.nanmax(np.where(np.isnan(z), -np.inf, z), axis=0)
    null = np.maximum(0.0, np.nan_to_num(zmax, neginf=0.0, posinf=np.inf))
    if small_sample and num_units > 2:
        null = np.maximum(0.0, student_t.ppf(norm.cdf(null), num_units - 1))
    t_stats = t_stats * scale
    stat = raw_stat * scale
    p = 1.0 if stat <= 0 else float(np.mean(null >= stat))
    return SpaResult(stat, p, t_stats, null, bad)
