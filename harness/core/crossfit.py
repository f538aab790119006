"""Cross-fitted best-of figures: the TPR of the best of K attack variants without the selection's
upward bias.

The maximum of K noisy TPRs estimates the largest true TPR with an upward bias that grows with K
(on pure noise, the best of 20 equally strong variants reads far above every one of them), and a
percentile bootstrap of that maximum inherits the bias. Cross-fitting separates choosing from
measuring (sample splitting, as in double/debiased machine learning, Chernozhukov et al. 2018):

- partition the S victim models at random into ``folds`` folds;
- for each fold, choose the variant with the largest TPR at the selection FPR on that fold's pooled
  guesses (ties: the larger TPR at FPR 0, then the earlier candidate) and read *its* TPR at every
  reported FPR on the guesses of the other folds; average over the folds;
- average over ``splits`` random partitions (the estimate does not depend on one coin).

Each read uses guesses that played no part in the choice it reads, so it estimates without bias the
TPR of the variant the procedure selects, which is at most the best true TPR: the figure can be
conservative, never inflated by the selection. Choosing on one fold and reading on the rest (not
the reverse) keeps the reads at (folds - 1) / folds of the non-member guesses, so that low FPRs
stay resolved (a read resolves FPRs down to about folds / ((folds - 1) N_neg): :attr:`CrossFit.resolved`);
a choice made on fewer victims errs more often, which can only lower the figure.

Its confidence interval resamples the whole procedure: each bootstrap replicate draws S victims
with replacement (the run's draws, shared by every variant), partitions the *distinct* drawn
victims into folds (a victim drawn twice never sits on both sides of a choice) and re-does the
choices and the reads.

``python benchmarks/bench_headline_test.py`` measures bias and coverage (docs/protocol.md, Headlines).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.core.metrics import (bootstrap_draws, choose_best, percentile_interval, resolvable, victim_counts,
                                  weighted_tpr_samples)


def _partition(counts: np.ndarray, folds: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Partition each row's drawn victims (count > 0) at random into ``folds`` folds of distinct
    victims (sizes differing by at most one): the weights of each fold, (folds, rows, S), and of
    the rest of each row, (folds, rows, S)."""
    drawn = counts > 0
    keys = np.where(drawn, rng.random(counts.shape), np.inf)
    ranks = np.argsort(np.argsort(keys, axis=1, kind="stable"), axis=1, kind="stable")
    fold = ranks * folds // np.maximum(drawn.sum(axis=1, keepdims=True), 1)  # in [0, folds) where drawn
    pick = np.stack([np.where(drawn & (fold == f), counts, 0.0) for f in range(folds)])
    return pick, counts[None] - pick


@dataclass(frozen=True)
class VictimWeights:
    """Every weighting of the S victim models a run evaluates each attack variant under, shared by
    all variants of both levels so that choices can be re-made on the same victims:

    - ``replicates`` (B, S): bootstrap draw counts (:func:`~harness.core.metrics.bootstrap_draws`
      with the run's seed: the per-variant CIs are unchanged by cross-fitting);
    - ``picks`` / ``reads`` (F, R, S): the estimate's R random partitions into F folds (0/1): each
      fold, and the rest of the victims;
    - ``replicate_picks`` / ``replicate_reads`` (F, B, S): each replicate's partition of its drawn
      victims (draw counts).
    """

    replicates: np.ndarray
    picks: np.ndarray
    reads: np.ndarray
    replicate_picks: np.ndarray
    replicate_reads: np.ndarray

    @classmethod
    def make(cls, num_models: int, replicates: int, splits: int, seed: int, folds: int = 4) -> "VictimWeights":
        if not 2 <= folds <= num_models:
            raise ValueError(f"cross-fitting needs 2 <= folds <= the number of models ({num_models}), got {folds}")
        counts = victim_counts(bootstrap_draws(num_models, replicates, seed), num_models)
        rng = np.random.default_rng([seed, num_models, 0xC5F])  # its own stream: the draws above are unchanged
        picks, reads = _partition(np.ones((splits, num_models)), folds, rng)
        rpicks, rreads = _partition(counts, folds, rng)
        return cls(counts, picks, reads, rpicks, rreads)

    @property
    def folds(self) -> int:
        return self.picks.shape[0]

    @property
    def splits(self) -> int:
        return self.picks.shape[1]

    def evaluate(self, scores: np.ndarray, membership: np.ndarray, targets: list[float],
                 groups: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[dict[float, np.ndarray], "FoldSamples"]:
        """One variant's TPR at ``targets`` under every weighting, in one pass over its sorted
        guesses (``groups``: their :func:`~harness.core.metrics.sorted_groups`, when already sorted):
        its bootstrap replicates {t: (B,)} and its :class:`FoldSamples`."""
        s = scores.shape[0]
        parts = [self.replicates, self.picks, self.reads, self.replicate_picks, self.replicate_reads]
        out = weighted_tpr_samples(scores, membership, targets, np.vstack([p.reshape(-1, s) for p in parts]),
                                   groups=groups)
        sizes = np.cumsum([0, *(p.size // s for p in parts)])

        def part(i: int) -> dict[float, np.ndarray]:
            return {t: v[sizes[i] : sizes[i + 1]].reshape(parts[i].shape[:-1]) for t, v in out.items()}

        negatives = (~np.asarray(membership, bool)).sum(axis=1).astype(np.float64)
        halves = FoldSamples(picks=part(1), reads=part(2), replicate_picks=part(3), replicate_reads=part(4),
                             read_negatives=self.reads @ negatives)
        return part(0), halves


@dataclass(frozen=True)
class FoldSamples:
    """One variant's TPRs under the cross-fitting weights of :class:`VictimWeights`: ``picks[t]``
    and ``reads[t]`` (F, R), ``replicate_picks[t]`` and ``replicate_reads[t]`` (F, B); and the
    non-member guesses of each estimate read, ``read_negatives`` (F, R)."""

    picks: dict[float, np.ndarray]
    reads: dict[float, np.ndarray]
    replicate_picks: dict[float, np.ndarray]
    replicate_reads: dict[float, np.ndarray]
    read_negatives: np.ndarray


@dataclass(frozen=True)
class CrossFit:
    """A cross-fitted best-of figure: ``estimate`` and its percentile ``ci`` per target,
    ``replicates`` (each bootstrap replicate's cross-fitted value, paired with every other figure of
    the run by the shared draws), ``resolved`` (every read resolves the FPR) and ``shares``: the
    fraction of the estimate's choices (one per fold and partition) that fell on each candidate."""

    estimate: dict[float, float]
    ci: dict[float, tuple[float, float]]
    replicates: dict[float, np.ndarray]
    resolved: dict[float, bool]
    shares: np.ndarray


def _fold(picks: list[dict[float, np.ndarray]], reads: list[dict[float, np.ndarray]], targets: list[float],
          select_at: float) -> tuple[dict[float, np.ndarray], np.ndarray]:
    """Choose on each fold, read on the rest, averaged over the folds: ``picks[j][t]`` and
    ``reads[j][t]`` are candidate j's (F, ...) TPRs. Returns {t: (...)} and the choices (F, ...)."""
    chosen = choose_best(np.stack([p[select_at] for p in picks]), np.stack([p[0.0] for p in picks]))  # (F, ...)
    return {t: np.take_along_axis(np.stack([r[t] for r in reads]), chosen[None], axis=0)[0].mean(axis=0)
            for t in targets}, chosen


def crossfit(halves: list[FoldSamples], targets: list[float], *, select_at: float, confidence: float) -> CrossFit:
    """The cross-fitted best of the candidates whose :class:`FoldSamples` are ``halves`` (all from
    one :class:`VictimWeights`), at each of ``targets`` (FPR 0 and ``select_at`` among them)."""
    if not halves:
        raise ValueError("no candidates")
    est, chosen = _fold([h.picks for h in halves], [h.reads for h in halves], targets, select_at)
    replicates, _ = _fold([h.replicate_picks for h in halves], [h.replicate_reads for h in halves], targets, select_at)
    fewest = min(float(h.read_negatives.min()) for h in halves)
    return CrossFit(
        estimate={t: float(np.mean(est[t])) for t in targets},
        ci={t: percentile_interval(replicates[t], confidence) for t in targets},
        replicates=replicates,
        resolved={t: resolvable(t, int(fewest)) if fewest >= 1 else t == 0.0 for t in targets},
        shares=np.bincount(chosen.ravel(), minlength=len(halves)) / chosen.size,
    )
