"""Simulations where the truth is known: the size of the headline test and the coverage of every
printed interval, through the harness's own code (:func:`~harness.core.metrics.evaluate_scores`,
:func:`~harness.audit.headline.level_figure`, :func:`~harness.audit.headline.headline_test`,
:func:`~harness.audit.headline.ratio_json`).

**The toy audit (leave-one-out LiRA with heterogeneous victims).** C audit samples, each with a
difficulty d_c ~ N(0, 1) and a memorization m_c = |N(mu_m, sd_m)|; S models, each sample a member
of exactly half of them (the balanced design); model s answers sample c with

    x[s, c] = d_c + u_s + m_c in[s, c] + e_sd exp(v_s) z[s, c],

u_s ~ N(0, u_sd^2) a per-model offset, v_s ~ N(0, scale_sd^2) a per-model noise scale, z standard
normal. The attack is online LiRA with per-sample Gaussians fitted on the *other* S - 1 models
(each victim attacked with the rest as shadows, as the harness attacks). Variants: LiRA plus
independent N(0, tau^2) noise per guess (K equally strong, correlated variants: the least
favourable null of the headline test), or a stronger one with less noise (power); ``ties`` rounds
every score to a grid of 0.5 (tied scores at the operating point, as RMIA's pass fractions or
label-only scores give).

**The truth.** The estimand (harness.core.figure) is conditional on the audit samples: the world
(d, m) is drawn once per configuration and kept, and the truth is the TPR at the FPR of the
guesses pooled over ``worlds`` independent runs of the S models on it (a million-guess ROC).

tests/test_headline_calibration.py runs this at small sizes; ``python benchmarks/bench_headline_test.py``
at the sizes docs/protocol.md quotes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import norm

from harness.core.config import ExperimentConfig
from harness.core.metrics import evaluate_scores, weighted_tpr_plotting


def balanced_membership(models: int, samples: int, rng: np.random.Generator) -> np.ndarray:
    """(S, C) membership with each sample a member of exactly half of the models."""
    return np.argsort(rng.random((samples, models)), axis=1).T < models // 2


@dataclass(frozen=True)
class ToyWorld:
    """The audit samples of the toy (module docstring) and how models vary."""

    difficulty: np.ndarray
    memorization: np.ndarray
    u_sd: float = 0.3
    scale_sd: float = 0.15
    e_sd: float = 0.7

    @classmethod
    def draw(cls, samples: int, seed: int, mem_mean: float = 1.5, mem_sd: float = 1.0, **kw: float) -> "ToyWorld":
        rng = np.random.default_rng([seed, 0x70F])
        return cls(rng.normal(size=samples), np.abs(rng.normal(mem_mean, mem_sd, samples)), **kw)

    @property
    def samples(self) -> int:
        return len(self.difficulty)

    def outputs(self, models: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(x, membership) of one run of ``models`` models on these samples."""
        mem = balanced_membership(models, self.samples, rng)
        u = rng.normal(0, self.u_sd, (models, 1))
        scale = np.exp(rng.normal(0, self.scale_sd, (models, 1)))
        x = self.difficulty[None] + u + self.memorization[None] * mem + self.e_sd * scale * rng.normal(size=mem.shape)
        return x, mem


def lira_loo(x: np.ndarray, membership: np.ndarray) -> np.ndarray:
    """Online LiRA of every (victim, sample): the log-likelihood ratio of x under Gaussians fitted
    per sample on the victim's S - 1 *other* models' member and non-member answers (unbiased
    variances)."""
    m = membership.astype(np.float64)
    n_in, n_out = m.sum(0)[None] - m, (1 - m).sum(0)[None] - (1 - m)
    s_in, s_out = (x * m).sum(0)[None] - x * m, (x * (1 - m)).sum(0)[None] - x * (1 - m)
    q_in, q_out = (x ** 2 * m).sum(0)[None] - x ** 2 * m, (x ** 2 * (1 - m)).sum(0)[None] - x ** 2 * (1 - m)
    mu_in, mu_out = s_in / n_in, s_out / n_out
    var_in = np.maximum(q_in - n_in * mu_in ** 2, 1e-9) / np.maximum(n_in - 1, 1)
    var_out = np.maximum(q_out - n_out * mu_out ** 2, 1e-9) / np.maximum(n_out - 1, 1)
    return norm.logpdf(x, mu_in, np.sqrt(var_in)) - norm.logpdf(x, mu_out, np.sqrt(var_out))


@dataclass(frozen=True)
class Variants:
    """K attack variants of the toy: LiRA plus independent noise of ``noise[j]`` per guess; ``ties``
    rounds the scores to a grid of 0.5."""

    noise: tuple[float, ...]
    ties: bool = False

    def scores(self, x: np.ndarray, membership: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
        base = lira_loo(x, membership)
        out = [base + tau * rng.normal(size=base.shape) for tau in self.noise]
        return [np.round(s * 2) / 2 for s in out] if self.ties else out


def truth(world: ToyWorld, models: int, variants: Variants, fprs: list[float], worlds: int = 300,
          seed: int = 12345) -> dict[float, float]:
    """The best variant's true TPR at each FPR (module docstring): each variant's pooled ROC over
    ``worlds`` runs; equally strong variants share one truth."""
    best = {t: 0.0 for t in fprs}
    distinct = sorted(set(range(len(variants.noise))), key=lambda j: variants.noise[j])
    for j in dict.fromkeys(variants.noise[j] for j in distinct):
        one = Variants((j,), variants.ties)
        rng = np.random.default_rng([seed, models, world.samples])
        sc, mm = [], []
        for _ in range(worlds):
            x, mem = world.outputs(models, rng)
            sc.append(one.scores(x, mem, rng)[0].ravel())
            mm.append(mem.ravel())
        got = weighted_tpr_plotting(np.concatenate(sc)[None], np.concatenate(mm)[None], fprs, np.ones((1, 1)))
        best = {t: max(best[t], float(got[t][0])) for t in fprs}
    return best


def toy_candidates(cfg: ExperimentConfig, world: ToyWorld, models: int, variants: Variants, rng: np.random.Generator,
                   level: str = "sample-x", scores: list[np.ndarray] | None = None) -> list[Any]:
    """One run of the toy as the attack phase sees it: each variant a
    :class:`~harness.audit.headline.Candidate`, evaluated by :func:`evaluate_scores` with the run's
    draws (``cfg.seed``) at the run's reading FPRs."""
    from harness.audit.headline import Candidate, fpr_key, reading_fprs

    x, mem = world.outputs(models, rng)
    scores = scores if scores is not None else variants.scores(x, mem, rng)
    n_neg = int((~mem).sum())
    reading = reading_fprs(cfg, {"level": n_neg})
    out = []
    for j, sc in enumerate(scores):
        m = evaluate_scores(sc, mem, np.ones(mem.shape[1], bool), cfg.attack.fprs, bootstrap=cfg.attack.bootstrap,
                            confidence=cfg.attack.confidence, seed=cfg.seed, reading_fprs=reading)
        entry = {"name": f"v{j}", "variant": "v", "access": "black-box", "num_pos": m.num_pos, "num_neg": m.num_neg,
                 "tpr_at_fpr": {fpr_key(t): v for t, v in m.tpr_at_fpr.items()},
                 "tpr_ci": {fpr_key(t): list(v) for t, v in m.tpr_ci.items()},
                 "resolved": {fpr_key(t): v for t, v in m.resolved.items()}}
        cand = Candidate(f"{level}/v{j}:v", entry, models, m.reading or {}, m.reading_samples,
                         m.reading_jackknife)
        object.__setattr__(cand, "paper_samples", m.samples)  # the paper's reading, for the rule it replaced
        out.append(cand)
    return out


@dataclass(frozen=True)
class SizeResult:
    """How often a test fired over ``simulations`` runs, and its p-values."""

    rate: float
    simulations: int
    p_values: np.ndarray
    untestable: float = 0.0


def old_rule_p(cands: list[Any], cfg: ExperimentConfig) -> float:
    """The rule this replaced (harness 0.3): Hansen's SPA without the small-sample correction and
    the degenerate guard, on the paper's reading (FPR <= t) at every reported FPR with 3 expected
    false positives."""
    from harness.audit.headline import fpr_key
    from harness.core.spa import spa_test

    head, others = cands[0], cands[1:]
    diffs, reps = [], []
    for t in cfg.attack.fprs:
        if t * head.num_neg < 3:
            continue
        k = fpr_key(t)
        for c in others:
            diffs.append(c.entry["tpr_at_fpr"][k] - head.entry["tpr_at_fpr"][k])
            reps.append(c.paper_samples[t] - head.paper_samples[t])
    if not diffs:
        return 1.0
    d, r = np.array(diffs), np.stack(reps)
    w = np.nanstd(r, axis=1)
    ok = w > 1e-12
    if not ok.any():
        return 1.0 if (d <= 0).all() else 0.0
    res = spa_test(d[ok], r[ok], head.num_models, small_sample=False)
    return res.p_value


def flag_rate(cfg: ExperimentConfig, simulations: int, *, models: int, samples: int, variants: Variants,
              seed: int = 0, rule: str = "harness") -> SizeResult:
    """How often the headline test rejects at ``cfg.attack.alpha`` with variant 0 as the declared
    headline: a false-alarm rate where no variant is stronger (``variants`` with equal noise: the
    least favourable null), the power where one is. ``rule``: "harness" (:func:`headline_test`) or
    "old" (:func:`old_rule_p`). Each simulation draws new models and new bootstrap draws; the world
    (the audit samples) is drawn once per call."""
    from harness.audit.headline import LevelFamily, headline_test, level_test_fprs

    world = ToyWorld.draw(samples, seed)
    ps, unt = [], []
    for i in range(simulations):
        sim_cfg = cfg.model_copy(update={"seed": seed * 100_003 + i})
        cands = toy_candidates(sim_cfg, world, models, variants, np.random.default_rng([seed, i, 1]))
        if rule == "old":
            ps.append(old_rule_p(cands, sim_cfg))
            continue
        fam = LevelFamily(cands[:1], cands, level_test_fprs(sim_cfg, cands[0].num_neg))
        test = headline_test({"sample": fam}, sim_cfg)
        ps.append(test["p_value"] if test["p_value"] is not None else 1.0)
        lv = test["levels"].get("sample") or {}
        unt.append(lv.get("untestable", 0) / max(lv.get("hypotheses", 0), 1))
    p = np.array(ps)
    return SizeResult(float(np.mean(p <= cfg.attack.alpha)), simulations, p, float(np.mean(unt)) if unt else 0.0)


@dataclass
class Coverage:
    """Coverage of the printed intervals over ``simulations`` runs at the figure FPR ``fpr``: the
    declared headline's two-sided CI (a single variant), the leak's one-sided lower bound (a best of
    K), each against the truth; their means; and, for the rule it replaced, the paper reading's
    percentile interval."""

    fpr: float
    truth: float
    simulations: int
    declared_mean: float
    declared_covers: float
    declared_below: float  # the truth below the interval: an interval too high
    leak_mean: float
    leak_lower_covers: float
    old_covers: float
    max_mean: float = float("nan")  # the plain maximum of the variants' own reads (what selection inflates)
    rows: dict[str, Any] = field(default_factory=dict)


def coverage(cfg: ExperimentConfig, simulations: int, *, models: int, samples: int, variants: Variants,
             seed: int = 0, worlds: int = 300) -> Coverage:
    """Coverage of the declared headline's CI (variant 0 alone) and of the leak's lower bound (the
    best of every variant) at the level's figure FPR, against :func:`truth`; the paper's reading
    with its percentile interval at the same FPR beside them (the rule it replaced, where the FPR is
    a reported one)."""
    from harness.audit.headline import fpr_key, level_figure, level_fpr

    world = ToyWorld.draw(samples, seed)
    fpr = level_fpr(cfg, models * samples // 2)
    if fpr is None:
        raise ValueError("the design resolves no figure FPR")
    tr_all = truth(world, models, variants, [fpr], worlds=worlds)[fpr]
    tr_head = truth(world, models, Variants(variants.noise[:1], variants.ties), [fpr], worlds=worlds)[fpr]
    d_in, d_below, d_v, l_in, l_v, old_in, m_v = [], [], [], [], [], [], []
    k = fpr_key(fpr)
    for i in range(simulations):
        sim_cfg = cfg.model_copy(update={"seed": seed * 100_003 + i})
        cands = toy_candidates(sim_cfg, world, models, variants, np.random.default_rng([seed, i, 2]))
        fig, _ = level_figure(cands[:1], cands, cands[0].num_neg, sim_cfg, {})
        lo, hi = fig["declared"]["ci"]
        d_in.append(lo <= tr_head <= hi)
        d_below.append(tr_head < lo)
        d_v.append(fig["declared"]["tpr"])
        l_in.append(fig["leak"]["lower"] <= tr_all)
        l_v.append(fig["leak"]["tpr"])
        m_v.append(max(c.reading[fpr] for c in cands))
        if k in cands[0].entry["tpr_ci"]:
            olo, ohi = cands[0].entry["tpr_ci"][k]
            old_in.append(olo <= tr_head <= ohi)
    return Coverage(fpr, tr_all, simulations, float(np.mean(d_v)), float(np.mean(d_in)), float(np.mean(d_below)),
                    float(np.mean(l_v)), float(np.mean(l_in)), float(np.mean(old_in)) if old_in else float("nan"),
                    float(np.mean(m_v)), {"truth_declared": tr_head})


def ratio_coverage(cfg: ExperimentConfig, simulations: int, *, models: int, samples: int, seed: int = 0,
                   worlds: int = 300, variants: Variants = Variants((1.0,))) -> tuple[float, float, float, int]:
    """Coverage of the sample/population ratio's CI: a sample world (strongly memorized samples:
    canaries) and a population world (weakly memorized) audited by the same S models' seeds and the
    run's shared draws. Returns (coverage, true ratio, mean ratio, simulations with a point ratio)."""
    from harness.audit.headline import level_fpr, ratio_json

    smp = ToyWorld.draw(samples, seed, mem_mean=2.5, mem_sd=1.0)
    pop = ToyWorld.draw(samples, seed + 1, mem_mean=0.8, mem_sd=0.8)
    fpr = level_fpr(cfg, models * samples // 2)
    true = truth(smp, models, variants, [fpr], worlds)[fpr] / truth(pop, models, variants, [fpr], worlds)[fpr]
    hits, vals = [], []
    for i in range(simulations):
        sim_cfg = cfg.model_copy(update={"seed": seed * 100_003 + i})
        rng = np.random.default_rng([seed, i, 3])
        pools = {"sample": toy_candidates(sim_cfg, smp, models, variants, rng),
                 "population": toy_candidates(sim_cfg, pop, models, variants, rng, level="population")}
        n = pools["sample"][0].num_neg
        r = ratio_json(pools, {"population": n, "sample": n}, sim_cfg)
        if r["ci"] is None:
            continue
        hits.append(r["ci"][0] <= true <= r["ci"][1])
        vals.append(r["ratio"])
    return (float(np.mean(hits)) if hits else float("nan"), float(true),
            float(np.mean(vals)) if vals else float("nan"), len(hits))
