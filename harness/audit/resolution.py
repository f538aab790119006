"""Which reported FPRs a run's design can resolve, known before any model trains.

A level pools every victim model's guesses: each of the ``C_eval`` evaluated audit samples is a
non-member of exactly S/2 of the S models (the balanced design, paper section 5.2), so a level has

    N_neg = S x C_eval / 2   non-member guesses   (S times the C_eval / 2 non-members of a model).

Three kinds of figure need a number of them at a target FPR t (docs/protocol.md, Headlines):

- a TPR at t is *resolved* only when N_neg >= 1/t (:func:`harness.core.metrics.resolvable`): below,
  one false positive already exceeds t, and the TPR is reported as "unresolved";
- a cross-fitted best-of figure (the strongest figure; a headline over several attacks) reads each
  choice on the victims outside one of F = ``attack.crossfit_folds`` folds, so it needs the fewest
  non-members of such a read to reach 1/t: about F / ((F - 1) t) guesses in all (2/t with the
  default 2 folds), a little more since the folds' counts differ. :func:`fewest_read_negatives`
  counts them exactly, on the run's own design and partitions
  (:func:`harness.audit.headline.victim_weights`, as :func:`harness.core.crossfit.crossfit` does);
- the headline test looks at t only where t x N_neg >= 3 expected false positives
  (:data:`harness.audit.headline.TEST_MIN_FALSE_POSITIVES`).

:func:`resolution_note` turns the FPRs a run falls short at into one line naming the ``--models``
that would do (the smallest even S; for the best-of figures, the design that S would draw with the
same seed), which ``harness evaluate`` shows as a ``note`` progress event before training.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from harness.audit.headline import TEST_MIN_FALSE_POSITIVES, victim_weights
from harness.core.config import ExperimentConfig
from harness.core.design import make_design
from harness.core.metrics import resolvable

#: the smallest S the config accepts (harness.core.config.AuditConfig)
MIN_MODELS = 6
#: how far past the first estimate the search for a best-of figure's S goes (steps of 2 models)
SEARCH_STEPS = 200


def negatives(num_models: int, num_evaluated: int) -> int:
    """N_neg = S x C_eval / 2: a level's pooled non-member guesses (the design is balanced)."""
    return num_models * num_evaluated // 2


def fewest_read_negatives(cfg: ExperimentConfig, membership: np.ndarray) -> int:
    """The fewest non-member guesses any read of a cross-fitted best-of figure gets, for a level's
    membership (S, C_eval) of its evaluated samples: the smallest ``read_negatives`` of
    :class:`harness.core.crossfit.FoldSamples` under the run's partitions."""
    weights = victim_weights(cfg, membership.shape[0])
    return int(np.min(weights.reads @ (~np.asarray(membership, bool)).sum(axis=1).astype(np.float64)))


@dataclass(frozen=True)
class FprNeeds:
    """What a level gives at FPR ``fpr``: its ``negatives`` (N_neg), whether the TPR is resolved,
    whether a cross-fitted best-of figure is, whether the headline test looks at it; and where the
    run falls short, the smallest even S that would do (``models_*``: None where the run's S does,
    and for the best-of figures where no S up to the search's end does)."""

    fpr: float
    negatives: int
    resolved: bool
    best_of: bool
    tested: bool
    models_resolved: int | None
    models_best_of: int | None
    models_tested: int | None


def _smallest_models(ok: Callable[[int], bool], num_evaluated: int, needed: float) -> int | None:
    """The smallest even S >= MIN_MODELS with ``ok(S)``, searched upward from S = 2 needed / C_eval
    (the S whose N_neg is ``needed``, a lower bound of every rule here), so that the answer follows
    ``ok``'s own rounding; None past :data:`SEARCH_STEPS`."""
    s = max(MIN_MODELS, 2 * math.ceil(needed / num_evaluated - 1e-9))
    while s - 2 >= MIN_MODELS and ok(s - 2):
        s -= 2
    for _ in range(SEARCH_STEPS):
        if ok(s):
            return s
        s += 2
    return None


def fpr_needs(cfg: ExperimentConfig, fpr: float, membership: Callable[[int], np.ndarray]) -> FprNeeds:
    """:class:`FprNeeds` of one level at ``fpr``; ``membership(S)``: the level's membership (S, C_eval)
    of its evaluated samples in the design S models would have (the run's own for ``cfg.audit.models``)."""
    s = cfg.audit.models
    c = membership(s).shape[1]

    def resolved(k: int) -> bool:
        return resolvable(fpr, negatives(k, c))

    def best_of(k: int) -> bool:
        return resolvable(fpr, fewest_read_negatives(cfg, membership(k)))

    def tested(k: int) -> bool:
        return fpr * negatives(k, c) >= TEST_MIN_FALSE_POSITIVES

    folds = min(cfg.attack.crossfit_folds, s)
    rules = {"resolved": (resolved, 1 / fpr), "best_of": (best_of, folds / ((folds - 1) * fpr)),
             "tested": (tested, TEST_MIN_FALSE_POSITIVES / fpr)}
    now = {name: ok(s) for name, (ok, _) in rules.items()}
    more = {f"models_{name}": None if now[name] else _smallest_models(ok, c, needed)
            for name, (ok, needed) in rules.items()}
    return FprNeeds(fpr=fpr, negatives=negatives(s, c), **now, **more)


def level_needs(cfg: ExperimentConfig, membership: np.ndarray, evaluated: np.ndarray, pool_size: int,
                num_classes: int) -> list[FprNeeds]:
    """:class:`FprNeeds` at every reported FPR (``attack.fprs``) of one level: its design's
    ``membership`` (S, C) and ``evaluated`` mask (C,); other S are drawn as ``--models S`` would
    draw them (:func:`harness.core.design.make_design`, same seed and RNG tree)."""
    ev = np.asarray(evaluated, bool)
    cache: dict[int, np.ndarray] = {cfg.audit.models: np.asarray(membership, bool)[:, ev]}

    def of(k: int) -> np.ndarray:
        if k not in cache:
            design = make_design(pool_size, cfg.audit.size, k, cfg.seed, cfg.audit.rng, num_classes)
            cache[k] = design.membership[:, ev]
        return cache[k]

    return [fpr_needs(cfg, t, of) for t in cfg.attack.fprs]


def _larger(ok_a: bool, a: int | None, ok_b: bool, b: int | None) -> int | None:
    """The S two levels need for one rule: the one that falls short, the larger where both do (None:
    neither falls short, or one that does found no S)."""
    if ok_a or ok_b:
        return b if ok_a else a
    return None if a is None or b is None else max(a, b)


def _merge(a: FprNeeds, b: FprNeeds) -> FprNeeds:
    """Two levels' needs at one FPR: the run falls short where either does, and needs the larger S."""
    return FprNeeds(a.fpr, min(a.negatives, b.negatives), a.resolved and b.resolved, a.best_of and b.best_of,
                    a.tested and b.tested, _larger(a.resolved, a.models_resolved, b.resolved, b.models_resolved),
                    _larger(a.best_of, a.models_best_of, b.best_of, b.models_best_of),
                    _larger(a.tested, a.models_tested, b.tested, b.models_tested))


def run_needs(cfg: ExperimentConfig, designs: Sequence, pool_size: int, num_classes: int) -> list[FprNeeds]:
    """The needs of a planned run (its :class:`~harness.run.runstore.LevelDesign` s), level by level
    merged: at each reported FPR, short wherever one level is."""
    out: list[FprNeeds] | None = None
    for ld in designs:
        needs = level_needs(cfg, ld.design.membership, ld.canaries.evaluated, pool_size, num_classes)
        out = needs if out is None else [_merge(a, b) for a, b in zip(out, needs)]
    return out or []


def _pct(t: float) -> str:
    return f"{100 * t:g}% FPR"


def resolution_note(cfg: ExperimentConfig, needs: list[FprNeeds], num_evaluated: int) -> str | None:
    """One line on the reported FPRs the run falls short at and the ``--models`` that would do;
    None when every figure resolves every reported FPR. ``num_evaluated``: the fewest evaluated
    audit samples of a level (C_eval)."""
    s = cfg.audit.models
    f = min(cfg.attack.crossfit_folds, s)
    read = "half" if f == 2 else f"{f - 1}/{f}"
    parts = []
    for n in needs:
        t, said = n.fpr, []
        if not n.resolved:
            said.append(f"TPR unresolved (it needs N_neg >= 1/FPR = {math.ceil(1 / t - 1e-9)}: --models "
                        f"{n.models_resolved})")
        if not n.best_of:
            more = f"--models {n.models_best_of}" if n.models_best_of is not None else "far more models"
            said.append(f"cross-fitted best-of figures unresolved (each reads {read} of the victims: about "
                        f"{math.ceil(f / ((f - 1) * t) - 1e-9)} guesses in all, {more})")
        if not n.tested:
            said.append(f"left out of the headline test (it needs FPR x N_neg >= {TEST_MIN_FALSE_POSITIVES} expected "
                        f"false positives, N_neg >= {math.ceil(TEST_MIN_FALSE_POSITIVES / t - 1e-9)}: --models "
                        f"{n.models_tested})")
        if said:
            parts.append(f"at {_pct(t)}: " + ", ".join(said))
    if not parts:
        return None
    return (f"S = {s} models x {num_evaluated / 2:g} non-members each give N_neg = {negatives(s, num_evaluated)} "
            "non-member guesses per level, too few for some reported FPRs; " + "; ".join(parts) +
            ". A larger --audit-size (audit.size) also raises N_neg (docs/protocol.md, Headlines).")


def plan_note(cfg: ExperimentConfig, designs: Sequence, pool_size: int, num_classes: int) -> str | None:
    """:func:`resolution_note` of a planned run (:class:`harness.run.runner.RunPlan`'s designs)."""
    if not designs or not cfg.attack.fprs:
        return None
    fewest = min(int(np.asarray(ld.canaries.evaluated, bool).sum()) for ld in designs)
    return resolution_note(cfg, run_needs(cfg, designs, pool_size, num_classes), fewest)
