"""A level's figures: the leak (ranked), the declared headline (the defense author's claim), the
headline test and the sample/population ratio, all read at one FPR with one estimand.

- The **figure FPR** of a level is the headline FPR (0.1%) where the level's pooled guesses hold at
  least 3 expected false positives there, else the smallest FPR of 1, 2, 5 x 10^k that does
  (:func:`harness.core.figure.figure_fpr`). Every figure of the level is read there, at the
  plotting position (harness.core.figure: the estimand, the reading and the intervals).
- The **leak** is the plain maximum (:func:`harness.core.figure.best_of`) over a fixed set of
  *primary* reads, one per attack (at the sample level, per canary experiment): the configured
  built-in attacks (``attack.names``, identified by their resolved class), the adaptations the
  harness adds itself (label-only on label outputs, lira-averaged on random or input-keyed
  serving) and the defense's *served* declared attacks. A declaration only adds candidates, so
  it can only raise the leak. It is what the report leads with and what the leaderboard ranks.
- The **declared headline** is the plain maximum over the primary reads of the defense's served
  declared attacks: the author's claim, printed with its CI. Declared attacks that read outputs the
  deployed model never serves (:data:`harness.core.signals.NOT_SERVED`) are ablations.
- The **headline test** asks whether a candidate of the leak beats the printed declared headline,
  at the printed FPR (:func:`headline_test`).
- The **ratio** of the two levels' leaks, at the larger of their figure FPRs (:func:`ratio_json`).

docs/protocol.md, Headlines, states the rules and the simulations behind them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.core.config import ExperimentConfig
from harness.core.figure import (MIN_FALSE_POSITIVES, BestOf, best_of, figure_fpr, fmt_fpr, jackknife_sd, ratio_interval,
                                 read_sd)
from harness.core.signals import NOT_SERVED

HEADLINE_FPR = 0.001

#: a ratio needs this many expected true positives in the population figure (below, its CI rests on a
#: handful of guesses and its upper end runs off; the two TPRs are reported instead)
RATIO_MIN_TRUE_POSITIVES = 10

ESTIMAND = ("the largest, over the figure's candidates, of a candidate's expected read at the figure FPR: its "
            "S-victim read (plotting position) averaged over runs of the design (S victim models trained as the run "
            "trains them, each attacked with the others as shadows), conditional on the run's audit samples; the "
            "headline test's estimand too")
READING = ("plotting position (expected FPR equal to the figure FPR: k* = t (N + 1) - 1 false positives, "
           "interpolated between order statistics, ties at random)")
CI_METHOD = ("the plain maximum of the candidates' reads; Bonferroni over the candidates: each candidate's read "
             "+- sqrt(1 + 1/k) q_S sd, sd the larger of the victim bootstrap's and the delete-one-victim jackknife's, "
             "q_S Hesterberg's expanded t quantile; the declared headline's CI at alpha/(2K) per side, the leak's "
             "one-sided lower bound at alpha/(2 K_own) for the harness's own candidates and alpha/(2 K_declared) for "
             "the defense's other declared ones (harness/core/figure.py, harness/audit/headline.py)")

#: why an attack is left out of the figures: it reads outputs the deployed model never serves
PRE_DEFENSE = NOT_SERVED["raw_query"]  # lira-raw, HAMP's ablation
SPLIT_AI = NOT_SERVED["splitai_query"]  # lira-neighbour, the paper's splitai_nn on SELENA


def fpr_key(t: float) -> str:
    """JSON key of a target FPR: ``repr`` of the float ("0.0", "0.001", "0.01")."""
    return repr(float(t))


def headline_fpr(cfg: ExperimentConfig) -> float:
    return HEADLINE_FPR if HEADLINE_FPR in cfg.attack.fprs else min(cfg.attack.fprs, default=0.0)


def level_fpr(cfg: ExperimentConfig, num_neg: int) -> float | None:
    """The FPR a level with ``num_neg`` non-member guesses reads its figures at (None: none resolves)."""
    return figure_fpr(headline_fpr(cfg), num_neg)


def reading_fprs(cfg: ExperimentConfig, negatives: dict[str, int]) -> tuple[float, ...]:
    """Every FPR a primary variant is read at (plotting position) in a run whose levels hold
    ``negatives`` non-member guesses: each level's figure FPR, and the ratio's (the larger of them)."""
    figs = [level_fpr(cfg, n) for n in negatives.values()]
    return tuple(sorted({f for f in figs if f is not None}))


@dataclass(frozen=True)
class Candidate:
    """One attack's primary variant on one experiment, as the level figures read it: ``entry`` (its
    results.json entry), ``reading`` (TPR at each figure FPR, plotting position), ``samples`` (the
    same in every bootstrap replicate of the run's shared draws; None without a bootstrap) and
    ``jackknife`` (the same with each victim left out in turn)."""

    label: str  # "<experiment>/<attack>:<variant>"
    entry: dict[str, Any]
    num_models: int
    reading: dict[float, float]
    samples: dict[float, np.ndarray] | None = None
    jackknife: dict[float, np.ndarray] | None = None
    audit: dict[float, np.ndarray] | None = None  # each group of audit samples left out in turn: (G,) per FPR

    @property
    def num_neg(self) -> int:
        return int(self.entry["num_neg"])

    def jack(self, fpr: float) -> np.ndarray | None:
        return None if self.jackknife is None else self.jackknife.get(fpr)


def leak_shares(cands: list[Candidate], fixed: set[str] | None) -> np.ndarray:
    """Each leak candidate's share of the lower bound's error (weighted Bonferroni): half over the
    harness's own candidates (``fixed``: the configured built-ins' and the adaptations' labels; None:
    every candidate), half over the defense's other declared ones, whether or not it declares any.
    So no declaration lowers the bound below the harness's own candidates' bound: a declared
    candidate can only add to the maximum."""
    own = np.array([fixed is None or c.label in fixed for c in cands])
    return np.where(own, 0.5 / max(own.sum(), 1), 0.5 / max((~own).sum(), 1))


def best(cands: list[Candidate], fpr: float, cfg: ExperimentConfig, confidence: float | None = None,
         shares: np.ndarray | None = None) -> BestOf:
    """The plain maximum of ``cands``' reads at ``fpr`` with its Bonferroni interval
    (:func:`harness.core.figure.best_of`; ``shares``: each candidate's share of the error)."""
    tprs = np.array([c.reading[fpr] for c in cands])
    if cfg.attack.bootstrap > 0 and all(c.samples is not None for c in cands):
        reps = np.stack([c.samples[fpr] for c in cands])
        jacks = [c.jack(fpr) for c in cands]
        jack = None if any(j is None for j in jacks) else np.stack(jacks)
    else:
        reps, jack = np.full((len(cands), 0), np.nan), None
    return best_of(tprs, reps, cands[0].num_models, cfg.attack.confidence if confidence is None else confidence,
                   false_positives=fpr * min(c.num_neg for c in cands), jackknife=jack, shares=shares)


def figure_record(cands: list[Candidate], fpr: float, cfg: ExperimentConfig, what: str,
                  shares: np.ndarray | None = None) -> dict[str, Any]:
    """The record of the best of ``cands`` at ``fpr``: its point ``tpr`` (the plain maximum), its
    one-sided ``lower`` bound and, for the declared headline (``shares`` None: plain Bonferroni), its
    simultaneous two-sided ``ci``; the variant giving the point."""
    b = best(cands, fpr, cfg, shares=shares)
    src = cands[b.source]
    nan = np.isnan(b.lower)
    se = read_sd(src.samples[fpr], src.jack(fpr)) if src.samples is not None else float("nan")
    se_audit = jackknife_sd(src.audit[fpr]) if src.audit is not None and fpr in src.audit else float("nan")
    return {"tpr": b.point, "lower": None if nan else b.lower,
            "ci": None if nan or shares is not None else list(b.ci),
            "se": None if np.isnan(se) else se, "se_audit": None if np.isnan(se_audit) else se_audit,
            "confidence": cfg.attack.confidence, "name": src.entry["name"], "variant": src.entry["variant"],
            "access": src.entry.get("access", "black-box"), "source": src.label, "candidates": len(cands),
            "labels": [c.label for c in cands], "estimator": "max", "what": what}


LEAK_WHAT = ("the primary variant of every configured built-in attack, every adaptation the harness added and every "
             "served declared attack")
DECLARED_WHAT = "the primary variants of the defense's served declared attacks"


def level_figure(declared: list[Candidate], ranked: list[Candidate], num_neg: int, cfg: ExperimentConfig,
                 ablations: dict[str, str], fixed: set[str] | None = None) -> dict[str, Any]:
    """A level's ``figure`` record: its FPR, the leak over ``ranked`` (its lower bound's error shared
    by :func:`leak_shares`, ``fixed`` the harness's own candidates) and the declared headline over
    ``declared`` (None where the defense declares no served attack), both there; ``ablations``: the
    attacks left out of both (name -> why)."""
    fpr = level_fpr(cfg, num_neg)
    base: dict[str, Any] = {"fpr": fpr, "num_neg": num_neg, "min_false_positives": MIN_FALSE_POSITIVES,
                            "estimand": ESTIMAND, "reading": READING, "ci_method": CI_METHOD,
                            "excluded_attacks": dict(ablations)}
    if fpr is None:
        base.update({"expected_false_positives": None, "leak": None, "declared": None,
                     "reason": f"{num_neg} non-member guesses resolve no FPR up to 50% with {MIN_FALSE_POSITIVES} "
                               f"expected false positives: train more models (--models) or audit more samples"})
        return base
    leak = figure_record(ranked, fpr, cfg, LEAK_WHAT, shares=leak_shares(ranked, fixed))
    base.update({"expected_false_positives": fpr * num_neg, "leak": leak,
                 "declared": figure_record(declared, fpr, cfg, DECLARED_WHAT) if declared else None})
    return base


def best_entry(declared: list[Candidate], record: dict[str, Any] | None, fallback: list[Candidate]) -> dict[str, Any]:
    """results.json's ``best``: the declared variant that gives the declared figure (the first
    declared candidate where the level has no figure; the first of ``fallback``, the leak's
    candidates, where the defense declares no served attack), with its own values at the reported
    FPRs as the paper reads them."""
    pool = declared or fallback
    src = next((c for c in pool if record is not None and c.label == record["source"]), pool[0])
    e = src.entry
    return {"name": e["name"], "variant": e["variant"], "access": e.get("access", "black-box"), "source": src.label,
            "candidates": [c.label for c in pool], "tpr_at_fpr": e["tpr_at_fpr"], "tpr_ci": e["tpr_ci"],
            "resolved": e["resolved"],
            "note": ("the declared headline variant's own TPRs at the reported FPRs, read as the paper reads them "
                     "(expected FPR (floor(tN) + 1)/(N + 1)) with the figures' one-variant CI; the level's figures are "
                     "``figure``")}


@dataclass(frozen=True)
class LevelFamily:
    """What the headline test compares at one level: the leak's candidates (``ranked``) against the
    declared headline's (``declared``), at the figure FPR ``fpr``."""

    declared: list[Candidate]
    ranked: list[Candidate]
    fpr: float


TEST_ESTIMAND = ("H0: no candidate of the leak has a larger expected read than the declared headline at the figure FPR, "
                 "the expectation taken over runs of the design (S victim models on the run's audit samples, each "
                 "attacked with the others as shadows)")
TEST_METHOD = ("each leak candidate's read minus the declared headline's (the largest declared read), d, on the same "
               "victims; one-sided p-value from the paired victim bootstrap's percentile: (1 + the replicates whose "
               "difference is at or below 0) / (1 + the replicates); Bonferroni over every comparison of every level "
               "(family-wise error at most alpha)")

#: what a level without a flag says: the test's power is limited, silence is not proof
NO_FLAG_NOTE = ("no flag is not evidence that the declared headline is the strongest attack: the test finds a 1.5x gap "
                "in about a third to two thirds of runs at 16-64 models (docs/protocol.md, Headlines); the leak, not the "
                "declared headline, is what ranks")


def comparison(c: Candidate, declared: list[Candidate], fpr: float) -> tuple[float, np.ndarray]:
    """(d, replicates): candidate ``c``'s read minus the declared headline's at ``fpr``, and the same
    difference in every paired victim-bootstrap replicate (the declared headline's replicate is the
    largest declared read in it; replicates that weigh no member or non-member guess left out)."""
    d = c.reading[fpr] - max(h.reading[fpr] for h in declared)
    with np.errstate(invalid="ignore"):
        reps = c.samples[fpr] - np.nanmax(np.stack([h.samples[fpr] for h in declared]), axis=0)
    return float(d), reps[np.isfinite(reps)]


def percentile_p(replicates: np.ndarray) -> float:
    """The one-sided bootstrap percentile p-value of "the expected difference is at most 0":
    ``(1 + #{d*_b <= 0}) / (1 + B)`` over the B finite replicates (Efron and Tibshirani, An
    Introduction to the Bootstrap, 1993, sec. 16.4: the achieved significance level of the
    percentile interval). No standard error enters: a read that a few victims can swing (the
    threshold's false positives held by three of 16 victims) is judged by how often the replicates
    that resample those victims reverse the difference, not by a jackknife SD that a non-smooth read
    inflates (docs/protocol.md, Headlines: its size and power by simulation)."""
    r = np.asarray(replicates, np.float64)
    return float((1 + np.sum(r <= 0)) / (1 + len(r)))


def headline_test(families: dict[str, LevelFamily], cfg: ExperimentConfig) -> dict[str, Any]:
    """Test :data:`TEST_ESTIMAND` at every level at once, family-wise error at most ``attack.alpha``.

    Each comparison j (a leak candidate that is not a declared one): d_j and its paired replicates
    (:func:`comparison`), one-sided ``p_j`` = :func:`percentile_p`; a level's adjusted p-value is
    ``min(1, m min_j p_j)`` over its comparisons, m the run's comparisons (Bonferroni). A comparison
    with fewer than 2 finite replicates, or whose difference is 0 in every replicate and the run (a
    twin), is untestable and left out. With B replicates the smallest adjusted p-value is
    ``m / (B + 1)``: where that exceeds alpha the record says the test cannot flag. Returns
    results.json's ``headline_test``."""
    alpha = cfg.attack.alpha
    out: dict[str, Any] = {"estimand": TEST_ESTIMAND, "method": TEST_METHOD, "alpha": alpha,
                           "replicates": cfg.attack.bootstrap, "p_value": None, "levels": {}}
    if cfg.attack.bootstrap <= 0:
        out["reason"] = "no bootstrap replicates (attack.bootstrap = 0): the test needs them"
        return out
    rows: list[tuple[str, Candidate, float, float]] = []  # level, candidate, d, p
    for level, fam in families.items():
        labels = {c.label for c in fam.declared}
        others = [c for c in fam.ranked if c.label not in labels]
        untestable = 0
        for c in others:
            d, reps = comparison(c, fam.declared, fam.fpr)
            if len(reps) < 2 or (d == 0 and not np.any(reps)):
                untestable += 1
                continue
            rows.append((level, c, d, percentile_p(reps)))
        out["levels"][level] = {"p_value": 1.0, "flagged": False, "comparisons": len(others),
                                "untestable": untestable, "fpr": fam.fpr, "top": None, "note": NO_FLAG_NOTE}
    m = len(rows)
    out["comparisons"] = m
    if not m:
        out["p_value"] = 1.0
        return out
    smallest = m / (cfg.attack.bootstrap + 1)
    if smallest > alpha:
        out["reason"] = (f"with {cfg.attack.bootstrap} bootstrap replicates and {m} comparisons the smallest adjusted "
                         f"p-value is {smallest:.3g} > alpha = {alpha:g}: the test cannot flag; raise attack.bootstrap "
                         f"to at least {int(np.ceil(m / alpha))}")
    out["p_value"] = float(min(1.0, m * min(r[3] for r in rows)))
    for level, rec in out["levels"].items():
        mine = [r for r in rows if r[0] == level]
        if not mine:
            continue
        _, c, d, p = min(mine, key=lambda r: (r[3], -r[2]))
        fam = families[level]
        rec.update({"p_value": float(min(1.0, m * p)), "flagged": bool(m * p <= alpha)})
        if rec["flagged"]:
            rec.pop("note")
        rec["top"] = {"candidate": c.label, "name": c.entry["name"], "variant": c.entry["variant"],
                      "access": c.entry.get("access", "black-box"), "fpr": fam.fpr, "tpr": c.reading[fam.fpr],
                      "headline_tpr": c.reading[fam.fpr] - d, "difference": float(d), "p_value_one": float(p)}
    return out


def headline_test_warning(level: str, test: dict[str, Any], declared: dict[str, Any]) -> str:
    """The report's line for a level the headline test flags: the comparison with the smallest
    p-value, both TPRs and the adjusted p-value."""
    rec = test["levels"][level]
    top = rec["top"]
    f = top["fpr"]
    return (f"{level} level: {top['name']}:{top['variant']} ({top['access']}; {top['candidate'].split('/')[0]}) finds "
            f"{100 * top['tpr']:.1f}% at {fmt_fpr(f)} FPR where the declared headline ({declared['name']}:"
            f"{declared['variant']}) finds {100 * top['headline_tpr']:.1f}%; the headline test rejects 'no candidate "
            f"beats the declared headline' (adjusted p = {rec['p_value']:.3f} <= {test['alpha']:g}, Bonferroni over "
            f"{test['comparisons']} comparisons): the declared headline understates the leak")


def ratio_json(pools: dict[str, list[Candidate]], negatives: dict[str, int], cfg: ExperimentConfig,
               fixed: set[str] | None = None) -> dict[str, Any]:
    """The sample level's leak over the population level's, both at the larger of the two levels'
    figure FPRs, with a CI symmetric on the log scale (:func:`harness.core.figure.ratio_interval`: the
    larger of the SD of the paired replicates' log ratio, each replicate the two leaks' replicate
    figures on the same victim draws, and the delete-one-victim jackknife's SD of the log ratio of
    the two leaks' source candidates).

    A point ratio and its CI only where the population leak's lower bound is above 0 and its point
    rests on at least :data:`RATIO_MIN_TRUE_POSITIVES` expected true positives; elsewhere ``ratio`` is
    None, both TPRs stand and ``lower`` is the sample leak's lower bound over the population leak's
    upper limit (each one-sided at half the error: a joint ``confidence`` statement), where finite."""
    figs = {lv: level_fpr(cfg, n) for lv, n in negatives.items()}
    out: dict[str, Any] = {"fpr": None, "population": None, "sample": None, "ratio": None, "ci": None, "lower": None,
                           "confidence": cfg.attack.confidence}
    if any(f is None for f in figs.values()):
        out["reason"] = "a level resolves no figure FPR"
        return out
    fpr = max(figs.values())
    pop, smp = (best(pools[lv], fpr, cfg, shares=leak_shares(pools[lv], fixed)) for lv in ("population", "sample"))
    npos = min(int(c.entry["num_pos"]) for c in pools["population"])
    out.update({"fpr": fpr, "population": pop.point, "sample": smp.point,
                "population_lower": None if np.isnan(pop.lower) else pop.lower,
                "population_true_positives": pop.point * npos})
    if not np.isnan(pop.lower) and pop.lower > 0 and pop.point * npos >= RATIO_MIN_TRUE_POSITIVES:
        out["ratio"] = smp.point / pop.point
        src_s, src_p = pools["sample"][smp.source], pools["population"][pop.source]
        js, jp = src_s.jack(fpr), src_p.jack(fpr)
        lo, hi = ratio_interval(smp.replicates, pop.replicates, src_s.num_models, cfg.attack.confidence, out["ratio"],
                                None if js is None or jp is None else (js, jp))
        out["ci"] = None if np.isnan(lo) else [lo, hi]
    elif cfg.attack.bootstrap > 0:
        half = 1 - (1 - cfg.attack.confidence) / 2
        s_low = best(pools["sample"], fpr, cfg, confidence=half, shares=leak_shares(pools["sample"], fixed)).lower
        p_up = best(pools["population"], fpr, cfg).ci[1]  # one-sided at half the error
        if p_up > 0 and not np.isnan(s_low):
            out["lower"] = s_low / p_up
        out["reason"] = (f"the population leak cannot be told from 0 or rests on fewer than {RATIO_MIN_TRUE_POSITIVES} "
                         f"expected true positives: no point ratio; both TPRs, and a lower bound where the population's "
                         f"upper limit is above 0")
    out["method"] = ("sample leak / population leak at the larger figure FPR; symmetric on the log scale with Hesterberg's "
                     "expanded multiplier and the larger of the paired victim bootstrap's SD of the two leaks' replicate "
                     "log ratio and the delete-one-victim jackknife's SD of their source candidates' log ratio")
    return out

