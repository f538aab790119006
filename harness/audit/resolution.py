"""Which reported FPRs a run's design can resolve, known before any model trains.

A level pools every victim model's guesses: each of the ``C_eval`` evaluated audit samples is a
non-member of exactly S/2 of the S models (the balanced design, paper section 5.2), so a level has

    N_neg = S x C_eval / 2   non-member guesses   (S times the C_eval / 2 non-members of a model).

Every figure follows one resolution rule (docs/protocol.md, Headlines): a TPR at a target FPR t is
read only with at least 3 expected false positives, t x N_neg >= 3
(:data:`harness.core.figure.MIN_FALSE_POSITIVES`); this holds for a variant's TPR, the level's
figures (leak and declared headline) and the headline test alike. A level whose N_neg falls short
at the headline FPR reads its figures at the smallest FPR of 1, 2, 5 x 10^k that resolves
(:func:`harness.core.figure.figure_fpr`).

:func:`resolution_note` turns the FPRs a run falls short at into one line naming the ``--models``
that would do (the smallest even S), and the FPR the figures are read at instead, which ``harness
evaluate`` (and ``harness plan``) shows before training.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from harness.core.config import ExperimentConfig
from harness.core.figure import MIN_FALSE_POSITIVES, figure_fpr, fmt_fpr, resolves

#: the smallest S the config accepts (harness.core.config.AuditConfig)
MIN_MODELS = 6


def negatives(num_models: int, num_evaluated: int) -> int:
    """N_neg = S x C_eval / 2: a level's pooled non-member guesses (the design is balanced)."""
    return num_models * num_evaluated // 2


@dataclass(frozen=True)
class FprNeeds:
    """What a run gives at FPR ``fpr``: its fewest ``negatives`` (N_neg) over levels, whether every
    read there resolves (3 expected false positives), and where it does not the smallest even S that
    would (``models``)."""

    fpr: float
    negatives: int
    resolved: bool
    models: int | None


def fpr_needs(cfg: ExperimentConfig, fpr: float, num_evaluated: int) -> FprNeeds:
    """:class:`FprNeeds` at ``fpr`` for levels of ``num_evaluated`` evaluated samples (the fewest)."""
    s = cfg.audit.models
    n = negatives(s, num_evaluated)
    ok = resolves(fpr, n)
    need = None
    if not ok:
        need = max(MIN_MODELS, 2 * math.ceil(MIN_FALSE_POSITIVES / (fpr * num_evaluated) - 1e-9))
        while not resolves(fpr, negatives(need, num_evaluated)):
            need += 2
    return FprNeeds(fpr=fpr, negatives=n, resolved=ok, models=need)


def run_needs(cfg: ExperimentConfig, num_evaluated: int) -> list[FprNeeds]:
    """The needs of a run whose levels evaluate at least ``num_evaluated`` samples, per reported FPR."""
    return [fpr_needs(cfg, t, num_evaluated) for t in cfg.attack.fprs]


def _pct(t: float) -> str:
    return f"{100 * t:g}% FPR"


def resolution_note(cfg: ExperimentConfig, needs: list[FprNeeds], num_evaluated: int) -> str | None:
    """One line on the reported FPRs the run falls short at, the ``--models`` that would do, and the
    FPR the level figures are read at instead; None when every reported FPR resolves.
    ``num_evaluated``: the fewest evaluated audit samples of a level (C_eval)."""
    from harness.audit.headline import headline_fpr

    s = cfg.audit.models
    short = [n for n in needs if not n.resolved]
    if not short:
        return None
    n_neg = negatives(s, num_evaluated)
    parts = [f"at {fmt_fpr(n.fpr)} FPR every TPR is unresolved (it needs FPR x N_neg >= {MIN_FALSE_POSITIVES} "
             f"expected false positives, N_neg >= {math.ceil(MIN_FALSE_POSITIVES / n.fpr - 1e-9)}: --models "
             f"{n.models})" for n in short]
    fig = figure_fpr(headline_fpr(cfg), n_neg)
    where = (f"the level figures (leak, declared headline, test) are read at {fmt_fpr(fig)} FPR instead"
             if fig is not None else "no FPR up to 50% resolves: the run has no level figure")
    return (f"S = {s} models x {num_evaluated / 2:g} non-members each give N_neg = {n_neg} non-member guesses per "
            "level, too few for some reported FPRs; " + "; ".join(parts) + f"; {where}. A larger --audit-size "
            "(audit.size) also raises N_neg (docs/protocol.md, Headlines).")


def plan_note(cfg: ExperimentConfig, designs: Sequence, pool_size: int = 0, num_classes: int = 0) -> str | None:
    """:func:`resolution_note` of a planned run (:class:`harness.run.runner.RunPlan`'s designs)."""
    if not designs or not cfg.attack.fprs:
        return None
    fewest = min(int(np.asarray(ld.canaries.evaluated, bool).sum()) for ld in designs)
    return resolution_note(cfg, run_needs(cfg, fewest), fewest)
