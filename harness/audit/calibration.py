"""Simulations where the truth is known: the size and power of the headline test and the coverage
and bias of every printed figure, through the harness's own code
(:func:`~harness.core.metrics.evaluate_scores`, :func:`~harness.audit.headline.level_figure`,
:func:`~harness.audit.headline.headline_test`, :func:`~harness.audit.headline.ratio_json`).

**The toy audit (leave-one-out LiRA with heterogeneous victims).** C audit samples, each with a
difficulty d_c ~ N(0, 1) and a memorization m_c = |N(mu_m, sd_m)|; S models, each sample a member
of exactly half of them (the balanced design); model s answers sample c with

    x[s, c] = d_c + u_s + m_c w_s in[s, c] + e_sd exp(v_s) z[s, c],

u_s ~ N(0, u_sd^2) a per-model offset, v_s ~ N(0, scale_sd^2) a per-model noise scale, w_s =
exp(N(0, mem_sd_victim^2)) how much model s memorizes, z standard normal (Student t with ``df``
degrees of freedom, rescaled to unit variance, for heavy tails). The attack is online LiRA with
per-sample Gaussians fitted on the *other* S - 1 models (each victim attacked with the rest as
shadows, as the harness attacks). A variant (:class:`Variants`) is LiRA plus its own noise per
guess, ``tau_j exp(g_s) e[s, c] + o_s`` with a per-victim scale g_s ~ N(0, victim_scale_j^2) and
offset o_s ~ N(0, victim_offset_j^2) (victims that differ more for one variant than another),
e normal or Student t; ``ties`` rounds every score to a grid of 0.5.

**The truth.** One estimand for every figure and the headline test (harness.core.figure): a
variant's **expected read** at the run's design, conditional on the audit samples: the world (d, m)
is drawn once per configuration and kept, and the truth is the mean over independent runs of the S
models on it of the variant's S-victim read at the figure FPR (:func:`expected_reads`); a figure
over candidates estimates the largest of them. A null with victims that differ for one variant only
is built by tuning that variant's noise until the two expected reads are equal (:func:`tune_noise`).
Beside it, for the record, the **many-victim ROC**: the TPR of the variant's guesses pooled over
many runs (:func:`truths`); the expected read differs from it by the S-victim read's own finite-S
gap, which the simulations report and no figure corrects.

tests/test_headline_calibration.py runs this at small sizes; ``python benchmarks/bench_headline_test.py``
at the sizes docs/protocol.md quotes, into one JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.stats import norm

from harness.core.config import ExperimentConfig
from harness.core.metrics import evaluate_scores, weighted_tpr_plotting


def balanced_membership(models: int, samples: int, rng: np.random.Generator) -> np.ndarray:
    """(S, C) membership with each sample a member of exactly half of the models."""
    return np.argsort(rng.random((samples, models)), axis=1).T < models // 2


def _noise(rng: np.random.Generator, shape: tuple[int, ...], df: float | None) -> np.ndarray:
    """Unit-variance noise: normal, or Student t with ``df`` > 2 degrees of freedom rescaled."""
    if df is None:
        return rng.normal(size=shape)
    return rng.standard_t(df, size=shape) / np.sqrt(df / (df - 2))


@dataclass(frozen=True)
class ToyWorld:
    """The audit samples of the toy (module docstring) and how models vary."""

    difficulty: np.ndarray
    memorization: np.ndarray
    u_sd: float = 0.3
    scale_sd: float = 0.15
    e_sd: float = 0.7
    mem_sd_victim: float = 0.0
    df: float | None = None

    @classmethod
    def draw(cls, samples: int, seed: int, mem_mean: float = 1.5, mem_sd: float = 1.0, **kw: Any) -> "ToyWorld":
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
        w = np.exp(rng.normal(0, self.mem_sd_victim, (models, 1)))
        x = (self.difficulty[None] + u + self.memorization[None] * w * mem
             + self.e_sd * scale * _noise(rng, mem.shape, self.df))
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
    """K attack variants of the toy (module docstring): LiRA plus noise of ``noise[j]`` per guess,
    scaled per victim by exp(N(0, victim_scale[j]^2)) and shifted per victim by N(0,
    victim_offset[j]^2) (both 0 by default); ``df``: Student-t noise; ``ties``: scores rounded to 0.5."""

    noise: tuple[float, ...]
    ties: bool = False
    victim_scale: tuple[float, ...] = ()
    victim_offset: tuple[float, ...] = ()
    df: float | None = None

    def __len__(self) -> int:
        return len(self.noise)

    def one(self, j: int) -> "Variants":
        """Variant ``j`` alone."""
        pick = (lambda v: (v[j],) if v else ())
        return Variants((self.noise[j],), self.ties, pick(self.victim_scale), pick(self.victim_offset), self.df)

    def with_noise(self, j: int, tau: float) -> "Variants":
        return replace(self, noise=tuple(tau if i == j else t for i, t in enumerate(self.noise)))

    def scores(self, x: np.ndarray, membership: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
        base = lira_loo(x, membership)
        s = base.shape[0]
        out = []
        for j, tau in enumerate(self.noise):
            g = rng.normal(0, self.victim_scale[j] if self.victim_scale else 0.0, (s, 1))
            o = rng.normal(0, self.victim_offset[j] if self.victim_offset else 0.0, (s, 1))
            out.append(base + tau * np.exp(g) * _noise(rng, base.shape, self.df) + o)
        return [np.round(v * 2) / 2 for v in out] if self.ties else out


def truths(world: ToyWorld, models: int, variants: Variants, fprs: list[float], worlds: int = 300,
           seed: int = 12345) -> list[dict[float, float]]:
    """Each variant's true TPR at each FPR (module docstring): its ROC pooled over ``worlds`` runs."""
    out = []
    for j in range(len(variants)):
        one = variants.one(j)
        rng = np.random.default_rng([seed, models, world.samples])
        sc, mm = [], []
        for _ in range(worlds):
            x, mem = world.outputs(models, rng)
            sc.append(one.scores(x, mem, rng)[0].ravel())
            mm.append(mem.ravel())
        got = weighted_tpr_plotting(np.concatenate(sc)[None], np.concatenate(mm)[None], fprs, np.ones((1, 1)))
        out.append({t: float(got[t][0]) for t in fprs})
    return out


def read_draws(world: ToyWorld, models: int, variants: Variants, fpr: float, runs: int = 300,
               seed: int = 777) -> np.ndarray:
    """Each variant's S-victim read at ``fpr`` in ``runs`` independent runs of the design, (runs, K)
    (common random numbers: the same seed for every call)."""
    rng = np.random.default_rng([seed, models, world.samples])
    reads = np.zeros((runs, len(variants)))
    for r in range(runs):
        x, mem = world.outputs(models, rng)
        for j, sc in enumerate(variants.scores(x, mem, rng)):
            reads[r, j] = weighted_tpr_plotting(sc, mem, [fpr], np.ones((1, models)))[fpr][0]
    return reads


def expected_reads(world: ToyWorld, models: int, variants: Variants, fpr: float, runs: int = 300,
                   seed: int = 777) -> np.ndarray:
    """Each variant's expected S-victim read at ``fpr`` (the estimand): the mean of
    :func:`read_draws`."""
    return read_draws(world, models, variants, fpr, runs, seed).mean(0)


def tune_noise(world: ToyWorld, models: int, variants: Variants, j: int, fpr: float, runs: int = 300,
               steps: int = 14, ratio: float = 1.0, reference: int | None = None) -> Variants:
    """``variants`` with variant ``j``'s noise set so that its expected read at ``fpr`` is the
    expected read of variant ``reference`` (default: 0, or 1 where j is 0) divided by ``ratio``
    (:func:`expected_reads`; bisection on the noise, which lowers the read): ``ratio`` 1 builds a
    null, 1.5 or 3 a gap of that size. The bracket's upper end doubles until its read is below the
    target (a fixed end left a 3x gap at 16 models at 2x); a target below what any noise reaches
    (the read of pure noise) is an error."""
    ref = reference if reference is not None else (1 if j == 0 else 0)
    target = expected_reads(world, models, variants.one(ref), fpr, runs)[0] / ratio
    lo, hi = 0.0, 12.0 * max(variants.noise[ref], 0.5)

    def read(tau: float) -> float:
        return float(expected_reads(world, models, variants.one(j).with_noise(0, tau), fpr, runs)[0])

    while read(hi) > target:
        if hi > 1e4:
            raise ValueError(f"no noise brings variant {j}'s expected read to {target:.4g} (the reference's over "
                             f"{ratio:g}): the read of noise alone is above it")
        lo, hi = hi, 2 * hi
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if read(mid) > target else (lo, mid)
    return variants.with_noise(j, (lo + hi) / 2)


def toy_candidates(cfg: ExperimentConfig, world: ToyWorld, models: int, variants: Variants, rng: np.random.Generator,
                   level: str = "sample-x", scores: list[np.ndarray] | None = None) -> list[Any]:
    """One run of the toy as the attack phase sees it: each variant a primary
    :class:`~harness.audit.headline.Candidate`, evaluated by :func:`evaluate_scores` with the run's
    draws (``cfg.seed``) at the run's reading FPRs."""
    from harness.audit.headline import Candidate, fpr_key, reading_fprs

    x, mem = world.outputs(models, rng)
    scores = scores if scores is not None else variants.scores(x, mem, rng)
    reading = reading_fprs(cfg, {"level": int((~mem).sum())})
    out = []
    for j, sc in enumerate(scores):
        m = evaluate_scores(sc, mem, np.ones(mem.shape[1], bool), cfg.attack.fprs, bootstrap=cfg.attack.bootstrap,
                            confidence=cfg.attack.confidence, seed=cfg.seed, reading_fprs=reading)
        entry = {"name": f"v{j}", "variant": "v", "access": "black-box", "num_pos": m.num_pos, "num_neg": m.num_neg,
                 "tpr_at_fpr": {fpr_key(t): v for t, v in m.tpr_at_fpr.items()},
                 "tpr_ci": {fpr_key(t): list(v) for t, v in m.tpr_ci.items()},
                 "resolved": {fpr_key(t): v for t, v in m.resolved.items()}}
        out.append(Candidate(f"{level}/v{j}:v", entry, models, m.reading or {}, m.reading_samples, m.reading_jackknife,
                             m.reading_audit))
    return out


@dataclass(frozen=True)
class SizeResult:
    """How often the headline test fired over ``simulations`` runs, and its p-values."""

    rate: float
    simulations: int
    p_values: np.ndarray
    untestable: float = 0.0
    #: the same rate for each rule of ``flag_rate(also=...)`` on the same simulations
    also: dict[str, float] = field(default_factory=dict)


def flag_rate(cfg: ExperimentConfig, simulations: int, *, models: int, samples: int, variants: Variants,
              seed: int = 0, world: ToyWorld | None = None, also: dict[str, Any] | None = None) -> SizeResult:
    """How often the headline test rejects at ``cfg.attack.alpha`` with variant 0 as the declared
    headline and every variant a candidate of the leak: a false-alarm rate where no variant has a
    larger expected read (the null), the power where one has. Each simulation draws new models and
    new bootstrap draws; the world (the audit samples) is drawn once per call. ``also``: other rules
    (name -> ``f(family, cfg) -> p``) measured on the same simulations (a rule a review compares)."""
    from harness.audit.headline import LevelFamily, headline_test, level_fpr

    world = world if world is not None else ToyWorld.draw(samples, seed)
    fpr = level_fpr(cfg, models * samples // 2)
    ps, unt, other = [], [], {k: [] for k in (also or {})}
    for i in range(simulations):
        sim_cfg = cfg.model_copy(update={"seed": seed * 100_003 + i})
        cands = toy_candidates(sim_cfg, world, models, variants, np.random.default_rng([seed, i, 1]))
        fam = LevelFamily(cands[:1], cands, fpr)
        test = headline_test({"sample": fam}, sim_cfg)
        ps.append(test["p_value"] if test["p_value"] is not None else 1.0)
        lv = test["levels"]["sample"]
        unt.append(lv["untestable"] / max(lv["comparisons"], 1))
        for k, rule in (also or {}).items():
            other[k].append(rule(fam, sim_cfg))
    p = np.array(ps)
    return SizeResult(float(np.mean(p <= cfg.attack.alpha)), simulations, p, float(np.mean(unt)),
                      {k: float(np.mean(np.array(v) <= cfg.attack.alpha)) for k, v in other.items()})


@dataclass
class Coverage:
    """The printed figures over ``simulations`` runs at the figure FPR ``fpr``: the declared headline
    (variant 0 alone: its two-sided CI's coverage, how often the truth is below it) and the leak
    (the plain maximum over every variant, all of them the harness's own: its mean, bias against the
    largest expected read, which is the maximum's selection bias, and its one-sided lower bound's
    coverage)."""

    fpr: float
    truth: float
    simulations: int
    declared_truth: float
    declared_mean: float
    declared_covers: float
    declared_below: float  # the truth below the interval: an interval too high
    leak_mean: float
    leak_lower_covers: float
    rows: dict[str, Any] = field(default_factory=dict)

    @property
    def leak_bias(self) -> float:
        return self.leak_mean - self.truth


def coverage(cfg: ExperimentConfig, simulations: int, *, models: int, samples: int, variants: Variants,
             seed: int = 0, worlds: int = 300, world: ToyWorld | None = None) -> Coverage:
    """The declared headline's CI (variant 0 alone) and the leak (every variant) at the level's
    figure FPR, against the expected reads (:func:`expected_reads` over ``worlds`` runs: the
    estimand); ``rows`` keeps them, each variant's many-victim ROC TPR (:func:`truths`), the
    leak's SD over the simulations and the largest expected read's Monte Carlo SE."""
    from harness.audit.headline import level_figure, level_fpr

    world = world if world is not None else ToyWorld.draw(samples, seed)
    fpr = level_fpr(cfg, models * samples // 2)
    if fpr is None:
        raise ValueError("the design resolves no figure FPR")
    draws = read_draws(world, models, variants, fpr, runs=worlds)
    reads = draws.mean(0)
    tr_all, tr_head = float(reads.max()), float(reads[0])
    per = truths(world, models, variants, [fpr], worlds=worlds)
    d_in, d_below, d_v, l_in, l_v = [], [], [], [], []
    for i in range(simulations):
        sim_cfg = cfg.model_copy(update={"seed": seed * 100_003 + i})
        cands = toy_candidates(sim_cfg, world, models, variants, np.random.default_rng([seed, i, 2]))
        fig = level_figure(cands[:1], cands, cands[0].num_neg, sim_cfg, {})
        lo, hi = fig["declared"]["ci"]
        d_in.append(lo <= tr_head <= hi)
        d_below.append(tr_head < lo)
        d_v.append(fig["declared"]["tpr"])
        l_in.append(fig["leak"]["lower"] <= tr_all)
        l_v.append(fig["leak"]["tpr"])
    return Coverage(fpr, tr_all, simulations, tr_head, float(np.mean(d_v)), float(np.mean(d_in)),
                    float(np.mean(d_below)), float(np.mean(l_v)), float(np.mean(l_in)),
                    {"truths": [float(r) for r in reads], "roc_truths": [p[fpr] for p in per],
                     "leak_sd": float(np.std(l_v, ddof=1)),
                     "truth_se": float(np.std(draws[:, int(reads.argmax())], ddof=1) / np.sqrt(worlds))})


@dataclass(frozen=True)
class VariantCoverage:
    """One variant's own printed TPR at a reported FPR (the paper's reading, attacks.csv) and its CI
    over ``simulations`` runs: the truth (its expected read at the design), the reads' mean, the CI's
    coverage and how often the truth lies below or above it."""

    fpr: float
    truth: float
    simulations: int
    mean: float
    covers: float
    below: float
    above: float
    percentile_covers: float  # the percentile bootstrap interval of the same replicates (the rule replaced)


def variant_coverage(cfg: ExperimentConfig, simulations: int, *, models: int, samples: int, variants: Variants,
                     fpr: float, seed: int = 0, worlds: int = 300, world: ToyWorld | None = None) -> VariantCoverage:
    """The CI :func:`~harness.core.metrics.evaluate_scores` prints beside variant 0's paper-style TPR
    at ``fpr`` (``tpr[fpr <= t][-1]``), against that read's expectation over ``worlds`` runs of the
    design (the same estimand as the figures', for this reading)."""
    from harness.core.metrics import roc_curve, tpr_at_fpr

    world = world if world is not None else ToyWorld.draw(samples, seed)
    one = variants.one(0)
    rng = np.random.default_rng([seed, models, samples, 1])
    reads = []
    for _ in range(worlds):
        x, mem = world.outputs(models, rng)
        reads.append(tpr_at_fpr(roc_curve(one.scores(x, mem, rng)[0].ravel(), mem.ravel()), fpr))
    truth = float(np.mean(reads))
    rng = np.random.default_rng([seed, models, samples, 2])
    got, inside, below, above, pct = [], 0, 0, 0, 0
    a = (1 - cfg.attack.confidence) / 2
    for i in range(simulations):
        x, mem = world.outputs(models, rng)
        m = evaluate_scores(one.scores(x, mem, rng)[0], mem, np.ones(world.samples, bool), [fpr],
                            bootstrap=cfg.attack.bootstrap, confidence=cfg.attack.confidence, seed=seed * 100_003 + i)
        lo, hi = m.tpr_ci[fpr]
        got.append(m.tpr_at_fpr[fpr])
        inside, below, above = inside + (lo <= truth <= hi), below + (truth < lo), above + (truth > hi)
        p_lo, p_hi = np.quantile(m.samples[fpr][np.isfinite(m.samples[fpr])], [a, 1 - a])
        pct += p_lo <= truth <= p_hi
    return VariantCoverage(fpr, truth, simulations, float(np.mean(got)), inside / simulations, below / simulations,
                           above / simulations, pct / simulations)


@dataclass
class RatioCoverage:
    """The sample/population ratio over ``simulations`` runs, unconditionally: how often a point
    ratio is printed (``defined``), its CI's coverage and mean where it is, and where it is not,
    how often the fallback lower bound is printed and holds."""

    truth: float
    simulations: int
    defined: float
    covers: float
    mean: float
    fallback_printed: float
    fallback_holds: float


def ratio_coverage(cfg: ExperimentConfig, simulations: int, *, models: int, samples: int, seed: int = 0,
                   worlds: int = 300, variants: Variants = Variants((1.0,)), pop_mem: float = 0.8) -> RatioCoverage:
    """The ratio (:func:`~harness.audit.headline.ratio_json`) on a sample world (strongly memorized
    samples: canaries) and a population world (memorization ``pop_mem``) audited by the same S
    models' seeds and the run's shared draws."""
    from harness.audit.headline import level_fpr, ratio_json

    smp = ToyWorld.draw(samples, seed, mem_mean=2.5, mem_sd=1.0)
    pop = ToyWorld.draw(samples, seed + 1, mem_mean=pop_mem, mem_sd=0.8)
    fpr = level_fpr(cfg, models * samples // 2)
    true = expected_reads(smp, models, variants, fpr, worlds).max() / expected_reads(pop, models, variants, fpr,
                                                                                    worlds).max()
    hits, vals, fb, fb_ok = [], [], [], []
    for i in range(simulations):
        sim_cfg = cfg.model_copy(update={"seed": seed * 100_003 + i})
        rng = np.random.default_rng([seed, i, 3])
        pools = {"sample": toy_candidates(sim_cfg, smp, models, variants, rng),
                 "population": toy_candidates(sim_cfg, pop, models, variants, rng, level="population")}
        n = pools["sample"][0].num_neg
        r = ratio_json(pools, {"population": n, "sample": n}, sim_cfg)
        if r["ci"] is not None:
            hits.append(r["ci"][0] <= true <= r["ci"][1])
            vals.append(r["ratio"])
        else:
            fb.append(r["lower"] is not None)
            if r["lower"] is not None:
                fb_ok.append(r["lower"] <= true)
    m = lambda v: float(np.mean(v)) if v else float("nan")  # noqa: E731
    return RatioCoverage(float(true), simulations, len(hits) / simulations, m(hits), m(vals), m(fb), m(fb_ok))


@dataclass
class Verification:
    """The leaderboard's re-run verification (:func:`harness.core.figure.runs_agree`) in the toy:
    how often an honest entry is refused (``false_rejection``) and how often a seed-shopped entry
    (the lowest leak of ``shop`` seeds) is accepted (``shopped_accepted``), over ``pairs`` pairs of
    runs; and how often the rule it replaced (each leak at or above the other's lower bound)
    refused an honest entry (``old_false_rejection``)."""

    pairs: int
    shop: int
    false_rejection: float
    shopped_accepted: float
    old_false_rejection: float


def _leak_of(cfg: ExperimentConfig, models: int, samples: int, variants: Variants, seed: int) -> dict[str, Any]:
    """The leak record of one run of the toy whose audit samples (the world) are drawn with ``seed``."""
    from harness.audit.headline import level_figure

    sim_cfg = cfg.model_copy(update={"seed": seed})
    world = ToyWorld.draw(samples, seed)
    cands = toy_candidates(sim_cfg, world, models, variants, np.random.default_rng([seed, 4]))
    return level_figure(cands[:1], cands, cands[0].num_neg, sim_cfg, {})["leak"]


def rerun_verification(cfg: ExperimentConfig, pairs: int, *, models: int, samples: int, variants: Variants,
                       shop: int = 10, seed: int = 0) -> Verification:
    """Pairs of independent runs (other canaries, other models) of one configuration, through the
    verification rule; the seed-shopped entry is the lowest of ``shop`` runs' leaks."""
    from harness.core.figure import runs_agree

    def triple(r: dict[str, Any]) -> tuple[float, float, float]:
        return float(r["tpr"]), float(r["se"]), float(r["se_audit"])

    honest, old, shopped = [], [], []
    for i in range(pairs):
        base = 1_000_003 * (seed + 1) + 1000 * i
        a, b = _leak_of(cfg, models, samples, variants, base), _leak_of(cfg, models, samples, variants, base + 1)
        honest.append(not runs_agree(triple(a), triple(b))[0])
        old.append(a["lower"] > b["tpr"] or b["lower"] > a["tpr"])
        if shop > 1 and i < max(pairs // 4, 1):  # seed shopping costs `shop` runs a pair: fewer pairs
            runs = [a] + [_leak_of(cfg, models, samples, variants, base + 2 + k) for k in range(shop - 1)]
            low = min(runs, key=lambda r: r["tpr"])
            shopped.append(runs_agree(triple(low), triple(b))[0])
    return Verification(pairs, shop, float(np.mean(honest)), float(np.mean(shopped)) if shopped else float("nan"),
                        float(np.mean(old)))
