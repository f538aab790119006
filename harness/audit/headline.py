"""A level's figure: the leak (ranked), the declared headline (the defense author's claim), the
headline test and the sample/population ratio, all read at one FPR with one estimand.

- The **figure FPR** of a level is the headline FPR (0.1%) where the level's pooled guesses hold at
  least 3 expected false positives there, else the smallest FPR of 1, 2, 5 x 10^k that does
  (:func:`harness.core.figure.figure_fpr`). Every figure of the level is read there, at the
  plotting position (harness.core.figure: the estimand, the reading and the intervals).
- The **leak** is the selection-aware best (:func:`harness.core.figure.best_of`) over *every*
  attack variant that ran on what the deployed model serves (attacks on pre-defense outputs or on
  SELENA's Split-AI ensemble left out: :data:`harness.core.signals.NOT_SERVED`), its point floored
  by the same best over two subsets of that pool (:func:`leak_floors`): the declared headline's
  candidates and the configured attacks' variants. It never reads below the declared headline, and
  no declaration lowers it below what the configured attacks find. It is what the report leads
  with and what the leaderboard ranks.
- The **declared headline** is the same best over the *primary* variants of the defense's adaptive
  attacks (at the sample level over every canary experiment): the author's claim, kept beside it.
- The **headline test** asks whether any variant beats the declared headline: Hansen's SPA over
  every variant, every FPR the level resolves from its figure FPR up, and both levels at once,
  family-wise error at most ``attack.alpha`` (:func:`headline_test`).
- The **ratio** of the two levels' leaks, at the larger of their figure FPRs (:func:`ratio_json`).

docs/protocol.md, Headlines, states the rules and the simulations behind them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.core.config import ExperimentConfig
from harness.core.figure import (FIGURE_GRID, MIN_FALSE_POSITIVES, BestOf, best_of, figure_fpr, floored, fmt_fpr, interval,
                                 ratio_interval, resolves)
from harness.core.signals import NOT_SERVED

HEADLINE_FPR = 0.001

#: the headline test reads an FPR only where it holds this many expected false positives (the one
#: resolution rule of every figure: harness.core.figure.MIN_FALSE_POSITIVES)
TEST_MIN_FALSE_POSITIVES = MIN_FALSE_POSITIVES

#: a ratio needs this many expected true positives in the population figure (below, its CI rests on a
#: handful of guesses and its upper end runs off; the two TPRs are reported instead)
RATIO_MIN_TRUE_POSITIVES = 10

ESTIMAND = ("TPR at the figure FPR of the ROC of the attack's guesses pooled over victim models, in the limit of "
            "many victims trained as the run trains them (each attacked with the other models as shadows), "
            "conditional on the run's audit samples; for a best of several variants, the largest such TPR")
READING = ("plotting position (expected FPR equal to the figure FPR: k* = t (N + 1) - 1 false positives, "
           "interpolated between order statistics, ties at random)")
CI_METHOD = ("bootstrap over victim models (the run's draws, shared by every variant and level) with Hesterberg's "
             "small-sample expansion; one variant: symmetric about its TPR with the larger of the bootstrap's and the "
             "delete-one-victim jackknife's SD; a best of several: plausible set, median-adjusted point (the leak's floored "
             "by the declared headline's and the configured attacks' figures), "
             "Bonferroni-t lower bound over it (harness/core/figure.py)")


def fpr_key(t: float) -> str:
    """JSON key of a target FPR: ``repr`` of the float ("0.0", "0.001", "0.01")."""
    return repr(float(t))


def headline_fpr(cfg: ExperimentConfig) -> float:
    return HEADLINE_FPR if HEADLINE_FPR in cfg.attack.fprs else min(cfg.attack.fprs, default=0.0)


def level_fpr(cfg: ExperimentConfig, num_neg: int) -> float | None:
    """The FPR a level with ``num_neg`` non-member guesses reads its figures at (None: none resolves)."""
    return figure_fpr(headline_fpr(cfg), num_neg)


def level_test_fprs(cfg: ExperimentConfig, num_neg: int) -> list[float]:
    """The FPRs the headline test reads a level at: from its figure FPR up to the largest reported
    FPR, every FPR of the figure grid (1, 2, 5 x 10^k) and every reported FPR there (each resolved:
    at least 3 expected false positives), so that a gap between the declared headline and another
    variant is looked for at the lowest FPRs the design resolves, not only at the reported ones."""
    first = level_fpr(cfg, num_neg)
    if first is None:
        return []
    top = max([first, *cfg.attack.fprs])
    grid = [g for g in FIGURE_GRID if first <= g <= top]
    return sorted({first, *grid, *(t for t in cfg.attack.fprs if t > first and resolves(t, num_neg))})


def reading_fprs(cfg: ExperimentConfig, negatives: dict[str, int]) -> tuple[float, ...]:
    """Every FPR an attack variant is read at (plotting position) in a run whose levels hold
    ``negatives`` non-member guesses: each level's test FPRs, and the ratio's FPR (the larger figure
    FPR of the two levels)."""
    out: set[float] = set()
    figs = []
    for n in negatives.values():
        out.update(level_test_fprs(cfg, n))
        figs.append(level_fpr(cfg, n))
    if figs and all(f is not None for f in figs):
        out.add(max(figs))
    return tuple(sorted(out))


@dataclass(frozen=True)
class Candidate:
    """One attack variant on one experiment, as the level figures read it: ``entry`` (its
    results.json entry), ``reading`` (TPR at each figure FPR, plotting position) and ``samples``
    (the same in every bootstrap replicate of the run's shared draws; None without a bootstrap)."""

    label: str  # "<experiment>/<attack>:<variant>"
    entry: dict[str, Any]
    num_models: int
    reading: dict[float, float]
    samples: dict[float, np.ndarray] | None = None
    jackknife: dict[float, np.ndarray] | None = None  # each victim left out in turn: (S,) per figure FPR

    @property
    def num_neg(self) -> int:
        return int(self.entry["num_neg"])


def _best(cands: list[Candidate], fpr: float, cfg: ExperimentConfig) -> BestOf:
    s = cands[0].num_models
    tprs = np.array([c.reading[fpr] for c in cands])
    if cfg.attack.bootstrap > 0 and all(c.samples is not None for c in cands):
        reps = np.stack([c.samples[fpr] for c in cands])
    else:
        reps = np.full((len(cands), 0), np.nan)
    return best_of(tprs, reps, s, cfg.attack.confidence, false_positives=fpr * min(c.num_neg for c in cands))


def leak_floors(pool: list[Candidate], headline: list[Candidate], cfg: ExperimentConfig) -> dict[str, list[Candidate]]:
    """The subsets of the leak's ``pool`` whose figure the leak's point never reads below
    (:func:`harness.core.figure.floored`):

    - ``declared``: the declared headline's candidates that are in the pool: the leak is never
      below the declared headline it contains;
    - ``configured``: every variant of the attacks the configuration names (``attack.names``: LiRA
      and RMIA in every preset, the same for every defense audited with one preset): no attack a
      defense declares, and no variant it adds to the pool, lowers the leak below what the
      configured attacks find.

    Proper, non-empty, distinct subsets only."""
    labels = {c.label for c in pool}
    subsets = {"declared": [c for c in headline if c.label in labels],
               "configured": [c for c in pool if c.entry["name"] in cfg.attack.names]}
    out: dict[str, list[Candidate]] = {}
    seen: set[tuple[str, ...]] = set()
    for name, sub in subsets.items():
        key = tuple(sorted(c.label for c in sub))
        if sub and len(sub) < len(pool) and key not in seen:
            seen.add(key)
            out[name] = sub
    return out


def leak_best(pool: list[Candidate], floors: dict[str, list[Candidate]], fpr: float, cfg: ExperimentConfig) -> BestOf:
    """The leak at ``fpr``: the best of ``pool`` floored by the best of each of ``floors``."""
    b = _best(pool, fpr, cfg)
    if not floors:
        return b
    index = {c.label: i for i, c in enumerate(pool)}
    return floored(b, {name: ([index[c.label] for c in sub], _best(sub, fpr, cfg)) for name, sub in floors.items()})


def figure_record(cands: list[Candidate], fpr: float, cfg: ExperimentConfig, what: str,
                  floors: dict[str, list[Candidate]] | None = None) -> tuple[dict[str, Any], BestOf]:
    """The record of the best of ``cands`` at ``fpr`` (:func:`harness.core.figure.best_of`, floored by
    ``floors``: :func:`leak_best`): its point ``tpr``, one-sided ``lower`` bound, the variant giving
    the point, the plausible set, the floor that gave the point (``floor``, None: its own); with
    one candidate, also its two-sided ``ci``."""
    b = leak_best(cands, floors or {}, fpr, cfg)
    src = cands[b.source]
    rec: dict[str, Any] = {
        "tpr": b.point, "lower": None if np.isnan(b.lower) else b.lower, "confidence": cfg.attack.confidence,
        "name": src.entry["name"], "variant": src.entry["variant"], "access": src.entry.get("access", "black-box"),
        "source": src.label, "candidates": len(cands), "labels": [c.label for c in cands],
        "plausible": [cands[i].label for i in b.plausible],
        "estimator": "single" if len(cands) == 1 else "best-of",
    }
    if floors:
        rec["floor"] = b.floor  # the subset whose figure gave the point (None: the candidates' own)
        rec["floors"] = sorted(floors)
    if len(cands) == 1 and src.samples is not None and cfg.attack.bootstrap > 0:
        rec["ci"] = list(interval(src.reading[fpr], src.samples[fpr], src.num_models, cfg.attack.confidence,
                                  false_positives=fpr * src.num_neg,
                                  jackknife=None if src.jackknife is None else src.jackknife.get(fpr)))
    rec["what"] = what
    return rec, b


def level_figure(headline: list[Candidate], pool: list[Candidate], num_neg: int, cfg: ExperimentConfig,
                 excluded: dict[str, str]) -> tuple[dict[str, Any], dict[str, BestOf]]:
    """A level's ``figure`` record: its FPR, the leak over ``pool`` (every served variant) and the
    declared headline over ``headline`` (the primary variants of the declared attacks), both there.
    Returns the record and the two :class:`~harness.core.figure.BestOf` (for the ratio)."""
    fpr = level_fpr(cfg, num_neg)
    base: dict[str, Any] = {"fpr": fpr, "num_neg": num_neg, "min_false_positives": MIN_FALSE_POSITIVES,
                            "estimand": ESTIMAND, "reading": READING, "ci_method": CI_METHOD,
                            "excluded_attacks": dict(excluded)}
    if fpr is None:
        base.update({"expected_false_positives": None, "leak": None, "declared": None,
                     "reason": f"{num_neg} non-member guesses resolve no FPR up to 50% with {MIN_FALSE_POSITIVES} "
                               f"expected false positives: train more models (--models) or audit more samples"})
        return base, {}
    leak, b_leak = figure_record(pool, fpr, cfg, "every attack variant that ran on what the deployed model serves",
                                 floors=leak_floors(pool, headline, cfg))
    declared, b_decl = figure_record(headline, fpr, cfg, "the primary variants of the defense's declared adaptive attacks")
    base.update({"expected_false_positives": fpr * num_neg, "leak": leak, "declared": declared})
    return base, {"leak": b_leak, "declared": b_decl}


def best_entry(headline: list[Candidate], declared: dict[str, Any] | None) -> dict[str, Any]:
    """results.json's ``best``: the declared variant that gives the declared figure (the first
    candidate where the level has no figure), with its own values at the reported FPRs as the paper
    reads them (not selection-adjusted: the figure is in ``figure``)."""
    src = next((c for c in headline if declared is not None and c.label == declared["source"]), headline[0])
    e = src.entry
    return {"name": e["name"], "variant": e["variant"], "access": e.get("access", "black-box"), "source": src.label,
            "candidates": [c.label for c in headline], "tpr_at_fpr": e["tpr_at_fpr"], "tpr_ci": e["tpr_ci"],
            "resolved": e["resolved"],
            "note": ("the declared headline variant's own TPRs at the reported FPRs, read as the paper reads them "
                     "(expected FPR (floor(tN) + 1)/(N + 1)) with percentile-bootstrap CIs; the level's figure, "
                     "selection-adjusted and calibrated, is ``figure``")}


#: why an attack is left out of the leak: it reads outputs the deployed model never serves
PRE_DEFENSE = NOT_SERVED["raw_query"]  # lira-raw, HAMP's ablation
SPLIT_AI = NOT_SERVED["splitai_query"]  # lira-neighbour, the paper's splitai_nn on SELENA


@dataclass(frozen=True)
class LevelFamily:
    """What the headline test compares at one level: the declared headline's candidates and every
    variant of the leak's pool, read at ``fprs``."""

    headline: list[Candidate]
    others: list[Candidate]
    fprs: list[float]


TEST_METHOD = ("Hansen's SPA test on logit TPRs, single step over every variant x level x FPR of the figure grid from "
               "the level's figure FPR up to the largest reported FPR (each with at least 3 expected false positives); "
               "studentized by the bootstrap standard deviation, the null re-centred at the replicates' mean, with "
               "t_{S-1} tails (small-sample correction) and widened by sqrt(1 + 1/k) at k expected false positives; "
               "comparisons whose bootstrap puts over half its replicates on one value are untestable and left out; "
               "paired bootstrap over victim models (the run's draws)")

#: what a level without a flag says: the test's power is limited, silence is not proof
NO_FLAG_NOTE = ("no flag is not evidence that the declared headline is the strongest attack: at 16-64 models a 1.5x "
                "gap at 1% FPR is found in about a quarter to two thirds of runs (docs/protocol.md, Headlines); the "
                "leak, not the declared headline, is what ranks")


def _logit(p: Any, eps: float) -> Any:
    """log(p / (1 - p)) with p clipped to [eps, 1 - eps] (eps: half a member guess): the test compares
    TPRs on this scale, where a TPR near 0 or 1 is not squeezed against its bound (the same null
    hypothesis, as the map is increasing)."""
    q = np.clip(p, eps, 1 - eps)
    return np.log(q / (1 - q))


def headline_test(families: dict[str, LevelFamily], cfg: ExperimentConfig) -> dict[str, Any]:
    """Test H0 "no attack variant beats the declared headline", at every level and FPR of its
    family at once, family-wise error at most ``attack.alpha`` (:func:`harness.core.spa.spa_test`).

    Hypothesis (level, variant j, FPR t) for every variant of the level's pool that is not a
    headline candidate: the difference of j's TPR at t and the headline candidates' largest TPR at
    t (plotting position), on all victims and in every bootstrap replicate (the same draws).
    Against a declared headline that is itself a best of several, the largest of its candidates is
    the comparison (biased upward: the test errs towards silence there). Returns results.json's
    ``headline_test``: per level its single-step adjusted p-value, whether it is flagged, and the
    comparison with the largest statistic (the row and FPR the flag comes from)."""
    from harness.core.spa import spa_test

    alpha = cfg.attack.alpha
    out: dict[str, Any] = {"method": TEST_METHOD, "alpha": alpha, "replicates": cfg.attack.bootstrap,
                           "p_value": None, "levels": {}}
    if cfg.attack.bootstrap <= 0:
        out["reason"] = "no bootstrap replicates (attack.bootstrap = 0): the test needs them"
        return out
    diffs, reps, where, info, fps = [], [], [], [], []
    for level, fam in families.items():
        labels = {c.label for c in fam.headline}
        others = [c for c in fam.others if c.label not in labels]
        for t in fam.fprs:
            h_hat = max(c.reading[t] for c in fam.headline)
            with np.errstate(invalid="ignore"):
                h_star = np.nanmax(np.stack([c.samples[t] for c in fam.headline]), axis=0)
            eps = 0.5 / min(int(c.entry["num_pos"]) for c in fam.headline + others)
            for c in others:
                diffs.append(_logit(c.reading[t], eps) - _logit(h_hat, eps))
                reps.append(_logit(c.samples[t], eps) - _logit(h_star, eps))
                where.append(level)
                info.append((c, t, h_hat))
                fps.append(t * min(c.num_neg, fam.headline[0].num_neg))
        out["levels"][level] = {"p_value": 1.0, "flagged": False, "hypotheses": len(fam.fprs) * len(others),
                                "untestable": 0, "fprs": list(fam.fprs), "top": None, "note": NO_FLAG_NOTE}
    out["hypotheses"] = len(diffs)
    if not diffs:
        out["p_value"] = 1.0
        return out
    num_units = next(iter(families.values())).headline[0].num_models
    res = spa_test(np.array(diffs), np.stack(reps), num_units, false_positives=np.array(fps))
    out["p_value"] = res.p_value
    out["statistic"] = res.statistic
    where_arr = np.array(where)
    for level, rec in out["levels"].items():
        mask = where_arr == level
        if not mask.any():
            continue
        rec["untestable"] = int(res.untestable[mask].sum())
        p = res.p_value_of(mask)
        idx = np.flatnonzero(mask)
        ts = np.nan_to_num(res.t_stats[idx], nan=-np.inf)
        rec.update({"p_value": p, "flagged": bool(p <= alpha)})
        if rec["flagged"]:
            rec.pop("note")
        if np.isfinite(ts).any():
            i = int(idx[int(np.argmax(ts))])
            c, t, h_hat = info[i]
            rec["top"] = {"candidate": c.label, "name": c.entry["name"], "variant": c.entry["variant"],
                          "access": c.entry.get("access", "black-box"), "fpr": t, "tpr": c.reading[t],
                          "headline_tpr": h_hat, "statistic": float(res.t_stats[i])}
    return out


def headline_test_warning(level: str, test: dict[str, Any], declared: dict[str, Any]) -> str:
    """The report's line for a level the headline test flags: the comparison with the largest
    statistic (its row and FPR), both TPRs and the adjusted p-value."""
    rec = test["levels"][level]
    top = rec["top"]
    f = top["fpr"]
    return (f"{level} level: {top['name']}:{top['variant']} ({top['access']}; {top['candidate'].split('/')[0]}) finds "
            f"{100 * top['tpr']:.1f}% at {fmt_fpr(f)} FPR where the declared headline ({declared['name']}:"
            f"{declared['variant']}) finds {100 * top['headline_tpr']:.1f}%; the headline test rejects 'no attack "
            f"variant beats the declared headline' (Hansen's SPA, adjusted p = {rec['p_value']:.3f} <= {test['alpha']:g}, "
            f"family-wise over {test['hypotheses']} variant-FPR-level comparisons): the declared headline understates "
            f"the leak")


def ratio_json(pools: dict[str, list[Candidate]], negatives: dict[str, int], cfg: ExperimentConfig,
               headlines: dict[str, list[Candidate]] | None = None) -> dict[str, Any]:
    """The sample level's leak over the population level's, both at the larger of the two levels'
    figure FPRs, with a CI symmetric on the log scale (:func:`harness.core.figure.ratio_interval`: the
    larger of the SD of the paired replicates' log ratio, each replicate the two leaks' replicate
    figures on the same victim draws, :attr:`harness.core.figure.BestOf.replicates`, and the
    delete-one-victim jackknife's SD of the log ratio of the two leaks' source variants).

    A point ratio and its CI only where the population leak's lower bound is above 0 and its point
    rests on at least :data:`RATIO_MIN_TRUE_POSITIVES` expected true positives; elsewhere ``ratio`` is
    None, both TPRs stand and ``lower`` is the sample leak's lower bound over the population leak's
    upper limit (each one-sided at half the error: a joint ``confidence`` statement), where that is finite.
    Both leaks are floored as the levels' figures are (:func:`leak_floors`; ``headlines``: each level's
    declared candidates)."""
    figs = {lv: level_fpr(cfg, n) for lv, n in negatives.items()}
    out: dict[str, Any] = {"fpr": None, "population": None, "sample": None, "ratio": None, "ci": None, "lower": None,
                           "confidence": cfg.attack.confidence}
    if any(f is None for f in figs.values()):
        out["reason"] = "a level resolves no figure FPR"
        return out
    fpr = max(figs.values())
    pop, smp = (leak_best(pools[lv], leak_floors(pools[lv], (headlines or {}).get(lv, []), cfg), fpr, cfg)
                for lv in ("population", "sample"))
    s = pools["sample"][0].num_models
    npos = min(int(c.entry["num_pos"]) for c in pools["population"])
    out.update({"fpr": fpr, "population": pop.point, "sample": smp.point,
                "population_lower": None if np.isnan(pop.lower) else pop.lower,
                "population_true_positives": pop.point * npos})
    defined = (not np.isnan(pop.lower) and pop.lower > 0 and pop.point * npos >= RATIO_MIN_TRUE_POSITIVES)
    if defined:
        out["ratio"] = smp.point / pop.point
        src_s, src_p = pools["sample"][smp.source], pools["population"][pop.source]
        jack = ((src_s.jackknife[fpr], src_p.jackknife[fpr])
                if src_s.jackknife is not None and src_p.jackknife is not None else None)
        lo, hi = ratio_interval(smp.replicates, pop.replicates, s, cfg.attack.confidence, out["ratio"], jack)
        out["ci"] = None if np.isnan(lo) else [lo, hi]
    elif cfg.attack.bootstrap > 0:
        half = 1 - (1 - cfg.attack.confidence) / 2
        s_low = best_of(np.array([c.reading[fpr] for c in pools["sample"]]),
                        np.stack([c.samples[fpr] for c in pools["sample"]]), s, half,
                        false_positives=fpr * min(c.num_neg for c in pools["sample"])).lower
        p_up = _upper(pools["population"], fpr, half)
        if p_up > 0 and not np.isnan(s_low):
            out["lower"] = s_low / p_up
        out["reason"] = (f"the population leak cannot be told from 0 or rests on fewer than {RATIO_MIN_TRUE_POSITIVES} "
                         f"expected true positives: no point ratio; both TPRs, and a lower bound where the population's "
                         f"upper limit is above 0")
    out["method"] = ("sample leak / population leak at the larger figure FPR; symmetric on the log scale with Hesterberg's "
                     "expanded multiplier and the larger of the paired victim bootstrap's SD of the two leaks' replicate "
                     "log ratio and the delete-one-victim jackknife's SD of their source variants' log ratio")
    return out


def _upper(cands: list[Candidate], fpr: float, confidence: float) -> float:
    """A one-sided upper limit of the largest TPR at ``fpr`` over ``cands``: each candidate's
    expanded-percentile upper limit at a Bonferroni share of the error, the largest."""
    from harness.core.figure import expanded_level

    s = cands[0].num_models
    a = expanded_level((1 - confidence) / len(cands), s)
    ups = [float(np.nanquantile(c.samples[fpr], 1 - a)) for c in cands]
    return max(max(ups), max(c.reading[fpr] for c in cands))
