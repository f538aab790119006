"""Headline figures: the pre-declared headline, the strongest figure, the headline test and the
sample/population ratio.

- The **headline** of a level is the best *primary* variant of the defense's adaptive attacks at
  the headline FPR (ties: TPR at FPR 0, then AUC, then attack order), at the sample level over every
  canary experiment. With one candidate it is that variant's TPR; with several, a best-of, it is
  **cross-fitted** over victim models (harness.core.crossfit: chosen on one fold of the victims,
  read on the others), so that the choice does not inflate it, and the plain maximum stays beside it
  as ``optimistic_max`` (:func:`select_best`).
- The **strongest figure** is the same cross-fitted best-of over *every* attack variant that ran on
  what the deployed model serves (attacks on pre-defense outputs or on SELENA's Split-AI ensemble
  left out: :data:`harness.core.signals.NOT_SERVED`; :func:`strongest_figure`).
- The **headline test** asks whether any variant beats the headline: Hansen's SPA test over every
  variant, FPR and level at once, family-wise error at most ``attack.alpha`` (:func:`headline_test`);
  its rejection is the ``beats_headline`` flag and the report's warning.
- The **ratio** of the sample- to the population-level headline gets a paired bootstrap CI over
  victim models (:func:`ratio_json`).

docs/protocol.md, Headlines, states the rules and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.core.config import ExperimentConfig
from harness.core.crossfit import FoldSamples, VictimWeights, crossfit
from harness.core.metrics import weighted_tpr_samples
from harness.core.signals import NOT_SERVED

HEADLINE_FPR = 0.001


def fpr_key(t: float) -> str:
    """JSON key of a target FPR: ``repr`` of the float ("0.0", "0.001", "0.01")."""
    return repr(float(t))


def headline_fpr(cfg: ExperimentConfig) -> float:
    return HEADLINE_FPR if HEADLINE_FPR in cfg.attack.fprs else min(cfg.attack.fprs, default=0.0)


def _headline_key(hk: str):
    """Order of candidates for a headline: TPR at the headline FPR, then at FPR 0, then AUC; a
    remaining tie goes to the earlier candidate (attacks in run order)."""
    return lambda e: (e["tpr_at_fpr"][hk], e["tpr_at_fpr"].get(fpr_key(0.0), 0), e["auc"])


def victim_weights(cfg: ExperimentConfig, num_models: int) -> VictimWeights:
    """The run's victim weightings (bootstrap draws and cross-fitting halves), shared by every variant."""
    return VictimWeights.make(num_models, cfg.attack.bootstrap, cfg.attack.crossfit_splits, cfg.seed,
                              min(cfg.attack.crossfit_folds, num_models))


#: the headline test looks at an FPR t only where t N_neg >= this: below, the threshold is among the
#: few largest non-member scores, an extreme order statistic that the bootstrap does not reproduce (the
#: bootstrap standard deviation of a TPR difference at one expected false positive was 11% too small
#: in benchmarks/bench_headline_test.py's simulations, within 4% at three)
TEST_MIN_FALSE_POSITIVES = 3


def selection_fpr(cfg: ExperimentConfig, num_neg: int) -> float:
    """The FPR a cross-fitted figure's choices are made at: the headline FPR where one fold of the
    victims holds at least :data:`TEST_MIN_FALSE_POSITIVES` expected false positives there, else the
    smallest FPR that does (3 / the fold's non-member guesses, ``num_neg`` the fewest of the
    candidates'). A choice at one or two false positives is decided by the few largest non-member
    scores of a fold, which picks among near-equal variants by chance."""
    t = headline_fpr(cfg)
    fold = num_neg / max(2, min(cfg.attack.crossfit_folds, cfg.audit.models))
    if t == 0.0 or fold <= 0 or t * fold >= TEST_MIN_FALSE_POSITIVES:
        return t
    return min(1.0, TEST_MIN_FALSE_POSITIVES / fold)


@dataclass(frozen=True)
class Candidate:
    """One candidate of a best-of figure: an attack variant on one experiment, with its scores and,
    when the run bootstraps, its per-replicate TPRs (the run's shared draws) and its TPRs on the
    cross-fitting folds (:class:`~harness.core.crossfit.VictimWeights`)."""

    label: str  # "<experiment>/<attack>:<variant>"
    entry: dict[str, Any]
    #: (S, C_e), evaluated canaries only; None once ``samples`` and ``folds`` hold everything the
    #: figures read (the attack phase drops each variant's scores as soon as it is measured)
    scores: np.ndarray | None
    membership: np.ndarray  # (S, C_e)
    samples: dict[float, np.ndarray] | None = None  # AttackMetrics.samples
    folds: FoldSamples | None = None  # AttackMetrics.folds


@dataclass(frozen=True)
class Selection:
    """A figure's bootstrap: per target, each replicate's value of the figure as reported (the
    candidate's own TPR for a single candidate, the cross-fitted value for a best-of), paired with
    every other figure of the run by the shared draws."""

    samples: dict[float, np.ndarray]


def _targets(cfg: ExperimentConfig) -> list[float]:
    return [0.0, *cfg.attack.fprs]


def _fold_targets(cfg: ExperimentConfig, select_at: float) -> list[float]:
    """The FPRs a candidate's fold TPRs are computed at: the reported ones and the selection FPR."""
    return sorted({*_targets(cfg), select_at})


def _filled(candidates: list[Candidate], cfg: ExperimentConfig, folds: bool = True,
            select_at: float | None = None) -> list[Candidate]:
    """The candidates with their replicate TPRs and (``folds``) their fold TPRs at the reported FPRs
    and ``select_at``, computed from their scores with the run's weights where a caller built them
    without."""
    boot = cfg.attack.bootstrap > 0
    want = _fold_targets(cfg, headline_fpr(cfg) if select_at is None else select_at)

    def complete(c: Candidate) -> bool:
        return ((not folds or (c.folds is not None and all(t in c.folds.picks for t in want)))
                and (c.samples is not None or not boot))

    if all(complete(c) for c in candidates):
        return candidates
    weights = victim_weights(cfg, candidates[0].membership.shape[0])
    out = []
    for c in candidates:
        if complete(c):
            out.append(c)
            continue
        if c.scores is None:
            raise ValueError(f"{c.label}: its scores were dropped before its bootstrap and cross-fitting TPRs "
                             f"at FPRs {want} were computed")
        if folds:
            samples, fs = weights.evaluate(c.scores, c.membership, want)
            samples = {t: samples[t] for t in _targets(cfg)}
        else:
            samples, fs = weighted_tpr_samples(c.scores, c.membership, _targets(cfg), weights.replicates), c.folds
        out.append(Candidate(c.label, c.entry, c.scores, c.membership, samples if boot else None, fs))
    return out


def select_best(candidates: list[Candidate], cfg: ExperimentConfig, what: str = "candidate",
                select_at: float | None = None) -> tuple[dict[str, Any], Selection | None]:
    """The best of ``candidates`` at the headline FPR, reported without the selection's bias.

    One candidate: its TPRs and CIs as they are. Several: the cross-fitted best-of
    (:func:`harness.core.crossfit.crossfit`; ``tpr_at_fpr``, ``tpr_ci``, ``resolved``), with the
    plain maximum beside it as ``optimistic_max`` (the best candidate on all victims, :func:`_headline_key`,
    and the percentile interval of the maximum re-made in every replicate): biased upward by the
    choice among K. ``name``/``variant``/``source`` name the candidate best on all victims;
    ``chosen`` the share of the cross-fit's choices each candidate won; its choices are made at
    ``select_at`` (default :func:`selection_fpr` of the candidates' fewest non-member guesses;
    ``selected_at``). Returns the record and the figure's :class:`Selection` (None without a
    bootstrap). ``what`` names the candidates."""
    from harness.core.metrics import select_from_samples

    if any(c.membership.shape[0] != candidates[0].membership.shape[0] for c in candidates):
        raise ValueError("every candidate must have the same victim models")
    hk, sel_at = fpr_key(headline_fpr(cfg)), headline_fpr(cfg)
    key = _headline_key(hk)
    best = candidates[0]
    for c in candidates[1:]:  # max() keeps the first of equals too; spelled out for the tie rule
        if key(c.entry) > key(best.entry):
            best = c
    e = best.entry
    targets = _targets(cfg)
    boot = cfg.attack.bootstrap > 0
    record: dict[str, Any] = {"name": e["name"], "variant": e["variant"], "access": e.get("access", "black-box"),
                              "source": best.label, "candidates": [c.label for c in candidates]}
    if len(candidates) == 1:
        record.update({"tpr_at_fpr": e["tpr_at_fpr"], "tpr_ci": e["tpr_ci"], "tpr_ci_variant": e["tpr_ci"],
                       "resolved": e["resolved"], "estimator": "single",
                       "ci_method": "percentile bootstrap over victim models"})
        c = candidates[0]
        samples = _filled(candidates, cfg, folds=False)[0].samples if boot else None
        return record, Selection(samples) if samples is not None else None
    choose_at = select_at if select_at is not None else selection_fpr(cfg, min(int((~c.membership).sum()) for c in candidates))
    filled = _filled(candidates, cfg, select_at=choose_at)
    cf = crossfit([c.folds for c in filled], _fold_targets(cfg, choose_at), select_at=choose_at,
                  confidence=cfg.attack.confidence)
    nan = [float("nan"), float("nan")]
    if boot:
        mx = select_from_samples([c.samples for c in filled], targets, select_at=sel_at, confidence=cfg.attack.confidence)
        max_ci = {fpr_key(t): list(v) for t, v in mx.ci.items()}
    else:
        max_ci = {fpr_key(t): nan for t in targets}
    record.update({
        "tpr_at_fpr": {fpr_key(t): cf.estimate[t] for t in targets},
        "tpr_ci": {fpr_key(t): (list(cf.ci[t]) if boot else nan) for t in targets},
        "tpr_ci_variant": e["tpr_ci"],
        "resolved": {fpr_key(t): cf.resolved[t] for t in targets},
        "selected_at": choose_at,
        "estimator": "cross-fitted",
        "folds": min(cfg.attack.crossfit_folds, candidates[0].membership.shape[0]),
        "splits": cfg.attack.crossfit_splits,
        "chosen": {c.label: float(s) for c, s in zip(candidates, cf.shares) if s > 0},
        "ci_method": (f"cross-fitted best of the {len(candidates)} {what}s: chosen at {100 * choose_at:.3g}% FPR on one fold "
                      f"of a random partition of the victim models and read on the other folds, averaged over the "
                      f"folds and {cfg.attack.crossfit_splits} partitions; percentile bootstrap over victim models "
                      f"that re-does the whole procedure in every replicate"),
        "optimistic_max": {
            "tpr_at_fpr": e["tpr_at_fpr"], "tpr_ci": max_ci, "resolved": e["resolved"],
            "note": (f"the plain maximum over the {len(candidates)} {what}s on all victims: biased upward by the "
                     f"choice (its CI re-makes the choice in every replicate and carries the same bias)"),
        },
    })
    return record, Selection({t: cf.replicates[t] for t in targets}) if boot else None


def select_headline(candidates: list[Candidate], cfg: ExperimentConfig) -> dict[str, Any]:
    """The headline over ``candidates`` (primary variants of the defense's adaptive attacks):
    :func:`select_best`'s record."""
    return select_best(candidates, cfg)[0]


#: why an attack is left out of the strongest figure: it reads outputs the deployed model never serves
PRE_DEFENSE = NOT_SERVED["raw_query"]  # lira-raw, HAMP's ablation
SPLIT_AI = NOT_SERVED["splitai_query"]  # lira-neighbour, the paper's splitai_nn on SELENA


def strongest_figure(pool: list[Candidate], cfg: ExperimentConfig, excluded: dict[str, str],
                     select_at: float | None = None) -> dict[str, Any]:
    """The strongest figure of a level: the best of *every* attack variant that ran on what the
    deployed model serves (``pool``: the headline's candidates first, so that a tie keeps the
    headline's), cross-fitted like a best-of headline (:func:`select_best`), so that looking at
    many variants does not inflate it. Whether it beats the headline is :func:`headline_test`'s
    question (``beats_headline``, set there; False until then)."""
    record, _ = select_best(pool, cfg, what="attack variant", select_at=select_at)
    record["excluded_attacks"] = dict(excluded)
    record["beats_headline"] = False
    return record


@dataclass(frozen=True)
class LevelFamily:
    """What the headline test compares at one level: the headline's candidates and every other
    variant of the strongest figure's pool."""

    headline: list[Candidate]
    others: list[Candidate]



TEST_METHOD = ("Hansen's SPA test (consistent re-centring), studentized by the bootstrap standard deviation, "
               "single step over every variant x level x positive FPR with at least 3 expected false positives; paired "
               "bootstrap over "
               "victim models (the run's draws, shared by the headline and every variant)")


def headline_test(families: dict[str, LevelFamily], cfg: ExperimentConfig) -> dict[str, Any]:
    """Test H0 "no attack variant beats the headline", at every level and positive reported FPR at
    once, with family-wise error at most ``attack.alpha`` (:func:`harness.core.spa.spa_test`).

    Hypothesis (level, variant j, FPR t), for every variant of the level's strongest pool that is
    not a headline candidate, at every positive reported FPR with at least
    :data:`TEST_MIN_FALSE_POSITIVES` expected false positives (t N_neg >= 3): the difference
    of j's TPR at t and the headline candidates' largest TPR at t, on all victims and in every
    bootstrap replicate (the same draws). Against a best-of headline, the maximum of its candidates
    is the comparison (biased upward, so the test stays conservative there). FPR 0, and FPRs with
    fewer expected false positives, are left out: their threshold is an extreme order statistic,
    which the bootstrap does not reproduce. Returns results.json's ``headline_test``: per level its
    single-step adjusted p-value, whether it is flagged (p <= alpha) and the hypothesis with the
    largest statistic."""
    from harness.core.spa import spa_test

    alpha = cfg.attack.alpha
    out: dict[str, Any] = {"method": TEST_METHOD, "alpha": alpha, "replicates": cfg.attack.bootstrap,
                           "p_value": None, "levels": {}}
    if cfg.attack.bootstrap <= 0:
        out["reason"] = "no bootstrap replicates (attack.bootstrap = 0): the test needs them"
        return out
    diffs, reps, where, info = [], [], [], []
    for level, fam in families.items():
        heads = _filled(fam.headline, cfg, folds=False)
        labels = {c.label for c in heads}
        others = _filled([c for c in fam.others if c.label not in labels], cfg, folds=False)
        negatives = min(c.entry["num_neg"] for c in heads + others)
        fprs = [t for t in cfg.attack.fprs if t * negatives >= TEST_MIN_FALSE_POSITIVES]
        for t in fprs:
            k = fpr_key(t)
            h_hat = max(c.entry["tpr_at_fpr"][k] for c in heads)
            with np.errstate(invalid="ignore"):
                h_star = np.nanmax(np.stack([c.samples[t] for c in heads]), axis=0) if len(heads) > 1 else heads[0].samples[t]
            for c in others:
                diffs.append(c.entry["tpr_at_fpr"][k] - h_hat)
                reps.append(c.samples[t] - h_star)
                where.append(level)
                info.append((c, t, h_hat))
        out["levels"][level] = {"p_value": 1.0, "flagged": False, "hypotheses": len(fprs) * len(others),
                                "fprs": fprs, "top": None}
    out["hypotheses"] = len(diffs)
    if not diffs:
        out["p_value"] = 1.0
        return out
    num_units = next(iter(families.values())).headline[0].membership.shape[0]
    res = spa_test(np.array(diffs), np.stack(reps), num_units)
    out["p_value"] = res.p_value
    out["statistic"] = res.statistic
    where_arr = np.array(where)
    for level, rec in out["levels"].items():
        mask = where_arr == level
        if not mask.any():
            continue
        p = res.p_value_of(mask)
        idx = np.flatnonzero(mask)
        ts = np.nan_to_num(res.t_stats[idx], nan=-np.inf)
        i = int(idx[int(np.argmax(ts))])
        c, t, h_hat = info[i]
        rec.update({"p_value": p, "flagged": bool(p <= alpha), "top": {
            "candidate": c.label, "name": c.entry["name"], "variant": c.entry["variant"],
            "access": c.entry.get("access", "black-box"), "fpr": t, "tpr": c.entry["tpr_at_fpr"][fpr_key(t)],
            "headline_tpr": h_hat, "statistic": float(res.t_stats[i])}})
    return out


def headline_test_warning(level: str, test: dict[str, Any], headline: dict[str, Any]) -> str:
    """The report's line for a level the headline test flags: the variant with the largest
    statistic, its TPR and the headline's at that FPR, and the test's p-value."""
    rec = test["levels"][level]
    top = rec["top"]
    f = top["fpr"]
    return (f"{level} level: {top['name']}:{top['variant']} ({top['access']}; {top['candidate'].split('/')[0]}) finds "
            f"{100 * top['tpr']:.1f}% at {100 * f:g}% FPR where the headline ({headline['name']}:{headline['variant']}) "
            f"finds {100 * top['headline_tpr']:.1f}%; the headline test rejects 'no attack variant beats the headline' "
            f"(Hansen's SPA, p = {rec['p_value']:.3f} <= {test['alpha']:g}, family-wise over {test['hypotheses']} "
            f"variant-FPR-level comparisons): the headline, taken over the defense's declared adaptive attacks, "
            f"understates the leak")


def ratio_json(results: dict[str, Any], selections: dict[str, Any], cfg: ExperimentConfig) -> dict[str, Any]:
    """Sample-level over population-level headline TPR at the headline FPR, with a percentile
    bootstrap CI over victim models: both levels share the S model indices and the run's draws, so
    each replicate's ratio pairs the two levels' headlines, each re-computed as reported (cross-fitted
    where it is a best-of), on the same victims
    (:func:`harness.core.metrics.ratio_interval`). ``ratio`` is None when the population headline is 0
    (infinite) or either figure is unresolved; ``ci`` is None without a bootstrap."""
    from harness.core.metrics import ratio_interval

    fpr = headline_fpr(cfg)
    k = fpr_key(fpr)
    p, s = results["population"]["best"], results["sample"]["best"]
    resolved = bool(p["resolved"][k] and s["resolved"][k])
    pv, sv = p["tpr_at_fpr"][k], s["tpr_at_fpr"][k]
    out: dict[str, Any] = {"fpr": fpr, "population": pv, "sample": sv, "resolved": resolved,
                           "ratio": sv / pv if resolved and pv > 0 else None, "ci": None, "replicates_used": 0}
    pop, smp = selections.get("population"), selections.get("sample")
    if resolved and pop is not None and smp is not None:
        lo, hi, used = ratio_interval(smp.samples[fpr], pop.samples[fpr], cfg.attack.confidence)
        if used:
            out["ci"] = [lo, hi]
        out["replicates_used"] = used
    out["method"] = ("percentile bootstrap over victim models (inverted-CDF quantiles): each replicate draws the S "
                     "victims once, re-computes both levels' headlines on them as reported (cross-fitted where a best-of) and "
                     "takes the ratio; a replicate whose "
                     "population figure is 0 has an infinite ratio (0 / 0 replicates are left out)")
    return out
