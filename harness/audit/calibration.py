"""Synthetic checks of the headline statistics, where the truth is known.

Scores of K attack variants on S victim models x C audit samples, each sample a member of exactly
half of the models (the audit design), built as

    score_j[s, c] = v u_s + sqrt(rho) g[s, c] + sqrt(1 - rho) e_j[s, c] + mu_j m[s, c],

with u, g, e standard normal: ``v`` a per-victim offset (guesses about one model are correlated,
as in a real run), ``rho`` the correlation between variants (LiRA's variants read the same
outputs), ``mu_j`` the variant's membership signal (m: member). The pooled scores are normal with
variance 1 + v^2 for members and non-members alike, so variant j's true TPR at FPR t is
``1 - Phi(Phi^-1(1 - t) - mu_j / sqrt(1 + v^2))`` (:func:`true_tpr`).

- :func:`flag_rate`: how often the headline test fires when no variant beats the headline
  (``mu`` equal for all: the least favourable null; 0: no signal at all);
- :func:`coverage`: how often the cross-fitted best-of figure's CI, and the plain maximum's,
  cover the true best TPR.

tests/test_headline_calibration.py runs them at small sizes; ``python benchmarks/bench_headline_test.py``
at the sizes docs/protocol.md quotes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from harness.audit.headline import Candidate, LevelFamily, fpr_key, headline_test, select_best, victim_weights
from harness.core.config import ExperimentConfig
from harness.core.metrics import auc, evaluate_scores


def balanced_membership(models: int, samples: int, rng: np.random.Generator) -> np.ndarray:
    """(S, C) membership with each sample a member of exactly half of the models."""
    return np.argsort(rng.random((samples, models)), axis=1).T < models // 2


def true_tpr(mu: float, fpr: float, victim_sd: float) -> float:
    """The true TPR at ``fpr`` of a variant with signal ``mu`` (module docstring)."""
    return float(1 - norm.cdf(norm.ppf(1 - fpr) - mu / np.sqrt(1 + victim_sd ** 2)))


def synthetic_candidates(cfg: ExperimentConfig, strengths: list[float], rng: np.random.Generator, *, models: int,
                         samples: int, rho: float = 0.5, victim_sd: float = 0.5, folds: bool = True) -> list[Candidate]:
    """One :class:`~harness.audit.headline.Candidate` per entry of ``strengths`` (mu_j), evaluated as
    the attack phase evaluates a variant (the run's weights: bootstrap draws and, with ``folds``,
    the cross-fitting folds)."""
    mem = balanced_membership(models, samples, rng)
    base = victim_sd * rng.normal(size=(models, 1)) + np.sqrt(rho) * rng.normal(size=mem.shape)
    weights = victim_weights(cfg, models) if folds else None
    out = []
    for j, mu in enumerate(strengths):
        scores = base + np.sqrt(1 - rho) * rng.normal(size=mem.shape) + mu * mem
        m = evaluate_scores(scores, mem, np.ones(samples, bool), cfg.attack.fprs, bootstrap=cfg.attack.bootstrap,
                            confidence=cfg.attack.confidence, seed=cfg.seed, weights=weights)
        entry = {"name": f"v{j}", "variant": "v", "access": "black-box",
                 "tpr_at_fpr": {fpr_key(t): v for t, v in m.tpr_at_fpr.items()},
                 "tpr_ci": {fpr_key(t): list(v) for t, v in m.tpr_ci.items()},
                 "resolved": {fpr_key(t): v for t, v in m.resolved.items()}, "auc": auc(m.roc),
                 "num_pos": m.num_pos, "num_neg": m.num_neg}
        out.append(Candidate(f"sample-x/v{j}:v", entry, scores, mem, m.samples, m.folds))
    return out


@dataclass(frozen=True)
class FlagRate:
    rate: float
    simulations: int
    p_values: np.ndarray


def flag_rate(cfg: ExperimentConfig, simulations: int, *, variants: int, models: int, samples: int,
              mu: float = 0.0, rho: float = 0.5, victim_sd: float = 0.5, seed: int = 0,
              stronger: float | None = None) -> FlagRate:
    """How often :func:`~harness.audit.headline.headline_test` rejects at ``cfg.attack.alpha`` when
    the headline (variant 0) and all ``variants - 1`` others have the same signal ``mu`` (every
    rejection is a false alarm), or, with ``stronger``, when the last variant has that larger
    signal (power). Each simulation draws new scores and new bootstrap draws."""
    ps = []
    for i in range(simulations):
        sim_cfg = cfg.model_copy(update={"seed": seed + i})
        rng = np.random.default_rng([seed, i])
        strengths = [mu] * variants if stronger is None else [mu] * (variants - 1) + [stronger]
        cands = synthetic_candidates(sim_cfg, strengths, rng, models=models, samples=samples, rho=rho,
                                     victim_sd=victim_sd, folds=False)
        test = headline_test({"sample": LevelFamily(cands[:1], cands)}, sim_cfg)
        ps.append(test["p_value"])
    p = np.array(ps)
    return FlagRate(float(np.mean(p <= cfg.attack.alpha)), simulations, p)


@dataclass(frozen=True)
class Coverage:
    truth: float
    crossfit_mean: float
    crossfit_coverage: float
    max_mean: float
    max_coverage: float
    max_above: float  # how often the plain maximum's whole CI lies above the truth
    simulations: int


def coverage(cfg: ExperimentConfig, simulations: int, *, variants: int, mu: float, fpr: float, models: int,
             samples: int, rho: float = 0.5, victim_sd: float = 0.5, seed: int = 0) -> Coverage:
    """``variants`` equally strong variants (signal ``mu``): how often the cross-fitted best-of
    figure's CI (:func:`~harness.audit.headline.select_best`) and the plain maximum's
    (``optimistic_max``) cover the true best TPR at ``fpr``, and their means."""
    truth = true_tpr(mu, fpr, victim_sd)
    k = fpr_key(fpr)
    cf_in, mx_in, cf_v, mx_v, above = [], [], [], [], []
    for i in range(simulations):
        sim_cfg = cfg.model_copy(update={"seed": seed + i})
        rng = np.random.default_rng([seed, i])
        rec, _ = select_best(synthetic_candidates(sim_cfg, [mu] * variants, rng, models=models, samples=samples,
                                                  rho=rho, victim_sd=victim_sd), sim_cfg)
        lo, hi = rec["tpr_ci"][k]
        cf_in.append(lo <= truth <= hi)
        cf_v.append(rec["tpr_at_fpr"][k])
        mx = rec.get("optimistic_max", rec)
        lo, hi = mx["tpr_ci"][k]
        mx_in.append(lo <= truth <= hi)
        above.append(lo > truth)
        mx_v.append(mx["tpr_at_fpr"][k])
    return Coverage(truth, float(np.mean(cf_v)), float(np.mean(cf_in)), float(np.mean(mx_v)), float(np.mean(mx_in)),
                    float(np.mean(above)), simulations)
