"""Headline figures: the pre-declared headline, the strongest figure and the sample/population ratio.

- The **headline** of a level is the best *primary* variant of the defense's adaptive attacks at
  the headline FPR (ties: TPR at FPR 0, then AUC, then attack order), at the sample level over every
  canary experiment; its CI re-makes that choice in every bootstrap replicate (:func:`select_best`).
- The **strongest figure** is the best of every attack variant that ran on what the deployed model
  serves (attacks on pre-defense outputs or on SELENA's Split-AI ensemble left out:
  :data:`harness.core.signals.NOT_SERVED`), by the same rule and with the same kind of CI
  (:func:`strongest_figure`); it is flagged when its CI lies above the headline
  (:func:`strongest_warning`).
- The **ratio** of the sample- to the population-level headline gets a paired bootstrap CI over
  victim models (:func:`ratio_json`).

docs/protocol.md, Headlines, states the rules and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.core.config import ExperimentConfig
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


@dataclass(frozen=True)
class Candidate:
    """One candidate of a best-of figure: an attack variant on one experiment, with its scores and,
    when the run bootstraps, its per-replicate TPRs (the run's shared draws)."""

    label: str  # "<experiment>/<attack>:<variant>"
    entry: dict[str, Any]
    scores: np.ndarray  # (S, C_e), evaluated canaries only
    membership: np.ndarray  # (S, C_e)
    samples: dict[float, np.ndarray] | None = None  # AttackMetrics.samples


def select_best(candidates: list[Candidate], cfg: ExperimentConfig, what: str = "candidate") -> tuple[
        dict[str, Any], Any]:
    """The best of ``candidates`` by :func:`_headline_key` (ties: the earlier candidate), with a
    selection-aware bootstrap CI that re-makes the selection in every replicate; returns the record
    and the :class:`~harness.core.metrics.Selection` (None without a bootstrap). ``what`` names the
    candidates in ``ci_method``."""
    from harness.core.metrics import bootstrap_selection, select_from_samples

    hk = fpr_key(headline_fpr(cfg))
    key = _headline_key(hk)
    best = candidates[0]
    for c in candidates[1:]:  # max() keeps the first of equals too; spelled out for the tie rule
        if key(c.entry) > key(best.entry):
            best = c
    e = best.entry
    targets = [0.0, *cfg.attack.fprs]
    selection = None
    if cfg.attack.bootstrap > 0:
        if all(c.samples is not None for c in candidates):  # computed with the run's draws already
            selection = select_from_samples([c.samples for c in candidates], targets, select_at=headline_fpr(cfg),
                                            confidence=cfg.attack.confidence)
        else:
            selection = bootstrap_selection([(c.scores, c.membership) for c in candidates], targets,
                                            select_at=headline_fpr(cfg), replicates=cfg.attack.bootstrap,
                                            confidence=cfg.attack.confidence, seed=cfg.seed)
        ci_json = {fpr_key(t): list(v) for t, v in selection.ci.items()}
    else:
        ci_json = {fpr_key(t): [float("nan"), float("nan")] for t in targets}
    record = {
        "name": e["name"],
        "variant": e["variant"],
        "access": e.get("access", "black-box"),
        "tpr_at_fpr": e["tpr_at_fpr"],
        "tpr_ci": ci_json,
        "tpr_ci_variant": e["tpr_ci"],
        "resolved": e["resolved"],
        "source": best.label,
        "candidates": [c.label for c in candidates],
        "ci_method": (f"percentile bootstrap over victim models; the selection of the best of the "
                      f"{len(candidates)} {what}(s) at the headline FPR is re-made in every replicate"),
    }
    return record, selection


def select_headline(candidates: list[Candidate], cfg: ExperimentConfig) -> dict[str, Any]:
    """The headline over ``candidates`` (primary variants of the defense's adaptive attacks):
    :func:`select_best`'s record."""
    return select_best(candidates, cfg)[0]


#: why an attack is left out of the strongest figure: it reads outputs the deployed model never serves
PRE_DEFENSE = NOT_SERVED["raw_query"]  # lira-raw, HAMP's ablation
SPLIT_AI = NOT_SERVED["splitai_query"]  # lira-neighbour, the paper's splitai_nn on SELENA


def strongest_figure(pool: list[Candidate], headline: dict[str, Any], cfg: ExperimentConfig,
                     excluded: dict[str, str]) -> dict[str, Any]:
    """The strongest figure of a level: the best of *every* attack variant that ran on what the
    deployed model serves (``pool``: the headline's candidates first, so that a tie keeps the
    headline's), with a CI that re-makes that choice over all of them in every replicate.

    Beside the pre-declared headline, it cannot understate the leak by which attacks a defense
    declares; being a maximum over many variants, it is biased upward, which its CI carries.
    ``beats_headline``: its CI's lower limit lies above the headline's TPR (the gap exceeds its
    uncertainty) at the headline FPR; where the run has too few guesses to resolve the headline FPR,
    at any reported FPR both figures resolve (FPR 0, 1%: :func:`beats_at`), so that an unresolved
    headline FPR never hides the gap."""
    record, _ = select_best(pool, cfg, what="attack variant")
    record["excluded_attacks"] = dict(excluded)
    record["beats_headline"] = bool(beats_at(record, headline, headline_fpr(cfg)))
    return record


def beats_at(strongest: dict[str, Any], headline: dict[str, Any], fpr: float) -> list[float]:
    """The reported FPRs at which both figures are resolved and the strongest figure's CI lower limit
    lies above the headline's TPR: the headline FPR alone where both resolve it, else every other
    reported FPR where the gap shows (ascending, FPR 0 last)."""
    hk = fpr_key(fpr)
    resolved_at_headline = bool(strongest["resolved"].get(hk) and headline["resolved"].get(hk))
    keys = [hk] if resolved_at_headline else sorted((k for k in strongest["tpr_at_fpr"] if k != hk),
                                                    key=lambda k: (float(k) == 0, float(k)))  # FPR 0 last
    out = []
    for k in keys:
        if not (strongest["resolved"].get(k) and headline["resolved"].get(k)) or k not in headline["tpr_at_fpr"]:
            continue
        lo, head = strongest["tpr_ci"][k][0], headline["tpr_at_fpr"][k]
        if strongest["tpr_at_fpr"][k] > head and lo == lo and lo > head:
            out.append(float(k))
    return out


def strongest_warning(level: str, strongest: dict[str, Any], headline: dict[str, Any], fpr: float) -> str:
    """The report's line when the strongest figure beats the headline by more than its CI, at the
    first FPR of :func:`beats_at` (the headline FPR where it does there)."""
    at = beats_at(strongest, headline, fpr)
    f = at[0] if at else fpr
    k = fpr_key(f)
    lo, hi = strongest["tpr_ci"][k]
    where = "" if f == fpr else f" (the run's guesses cannot resolve the headline FPR, {100 * fpr:g}%)"
    return (f"{level} level: {strongest['name']}:{strongest['variant']} ({strongest['access']}; "
            f"{strongest['source'].split('/')[0]}) finds {100 * strongest['tpr_at_fpr'][k]:.1f}% "
            f"[{100 * lo:.1f}, {100 * hi:.1f}] at {100 * f:g}% FPR, above the headline's "
            f"{100 * headline['tpr_at_fpr'][k]:.1f}% ({headline['name']}:{headline['variant']}) by more than its CI"
            f"{where}: the headline, taken over the defense's declared adaptive attacks, understates the leak")


def ratio_json(results: dict[str, Any], selections: dict[str, Any], cfg: ExperimentConfig) -> dict[str, Any]:
    """Sample-level over population-level headline TPR at the headline FPR, with a percentile
    bootstrap CI over victim models: both levels share the S model indices and the run's draws, so
    each replicate's ratio pairs the two levels' re-selected headlines on the same victims
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
                     "victims once, re-selects both levels' headlines on them and takes the ratio; a replicate whose "
                     "population figure is 0 has an infinite ratio (0 / 0 replicates are left out)")
    return out
