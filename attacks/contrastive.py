"""The contrastive-similarity attack against self-supervised encoders (the paper's section 6.4;
protocol notes section 3.5).

An encoder pre-trained with a contrastive objective maps two augmented views of a *training*
image closer together than views of an image it never saw. Per audit sample and per fixed query
view, the signal (:func:`harness.run.signals.contrastive_similarity`) holds the Fisher-transformed
cosine similarity ``log((1 + s) / (1 - s))`` of two SSL-augmented copies, for R seeded
repetitions that are identical for every model. The attack averages the first ``repetitions``
(default 6, the paper's) and scores the per-view values with leave-one-out online LiRA
(per-sample Gaussians fitted on the shadow models only, log-likelihood ratios averaged over the
views; :func:`attacks.lira.lira_scores`).

- ``contrastive`` (white-box): similarity of the encoder's features (the paper's ``backbone``);
- ``contrastive-blackbox``: similarity of the served logits (the paper's black-box ``similarity``).

Variants: ``lira-augA`` (all A query views; primary), ``lira-noaug`` (the plain view only) and
``threshold`` (the mean similarity over views and repetitions, one global threshold, no shadows).
"""

from __future__ import annotations

import numpy as np

from attacks.base import Attack, AttackInput
from attacks.lira import lira_scores
from harness.core.signals import CONTRASTIVE_REPETITIONS


def check_repetitions(repetitions: object) -> int:
    """``repetitions``, an integer between 1 and the views saved per model, or a clear ValueError."""
    if not isinstance(repetitions, int) or isinstance(repetitions, bool) or not 1 <= repetitions <= CONTRASTIVE_REPETITIONS:
        raise ValueError(f"repetitions must be an integer between 1 and {CONTRASTIVE_REPETITIONS} (the views "
                         f"saved per model), got {repetitions!r}")
    return repetitions


def check_shadows(shadows: object) -> bool:
    """``shadows``, 'balanced' (True) or 'all' (False, the paper's S - 1), or a clear ValueError."""
    if shadows not in ("balanced", "all"):
        raise ValueError(f"shadows must be 'balanced' or 'all', got {shadows!r}")
    return shadows == "balanced"


def repetition_means(per_copy: np.ndarray, repetitions: int, who: str) -> np.ndarray:
    """(S, C, A) float64: the mean over the first ``repetitions`` of per-copy scores (S, C, A, R), as
    the paper's SSL attack averages its 6 repetitions per view before LiRA (``self_supervised.py``,
    ``_run_attack``: ``np.mean(aug_scores[:num_aug], axis=0)``)."""
    if per_copy.shape[-1] < repetitions:
        raise ValueError(f"{who}: the run saved {per_copy.shape[-1]} repetitions, fewer than {repetitions}")
    return per_copy[..., :repetitions].astype(np.float64).mean(axis=-1)


def view_lira(obs: np.ndarray, membership: np.ndarray, balanced: bool) -> dict[str, np.ndarray]:
    """Online LiRA (per-sample variance, leave-one-out) on per-view scores ``obs`` (S, C, A): the
    paper's ``lira`` on the plain view only (``lira-noaug``) and its ``lira_da`` over all A views
    (``lira-augA``, when A > 1)."""
    out = {"lira-noaug": lira_scores(obs[:, :, :1], membership, online=True, global_variance=False,
                                     balanced=balanced)}
    num_views = obs.shape[2]
    if num_views > 1:
        out[f"lira-aug{num_views}"] = lira_scores(obs, membership, online=True, global_variance=False,
                                                   balanced=balanced)
    return out


def primary_view_variant(variants: list[str]) -> str:
    """``lira-augA`` (every query view, the paper's ``lira_da``) where there is one, else ``lira-noaug``."""
    return next((v for v in variants if v.startswith("lira-aug")), "lira-noaug")


class Contrastive(Attack):
    name = "contrastive"
    description = "similarity of two SSL views in the encoder's feature space (white-box), LiRA over the views"
    needs = frozenset({"contrastive_features"})
    signal = "contrastive_features"

    def __init__(self, repetitions: int = CONTRASTIVE_REPETITIONS, shadows: str = "balanced") -> None:
        check_repetitions(repetitions)
        check_shadows(shadows)
        self.repetitions = repetitions
        self.shadows = shadows

    def params(self) -> dict[str, object]:
        return {"repetitions": self.repetitions, "shadows": self.shadows}

    def score(self, inp: AttackInput) -> dict[str, np.ndarray]:
        obs = repetition_means(inp.signals[self.signal], self.repetitions, self.name)  # (S, C, A, R) -> (S, C, A)
        return {"threshold": obs.mean(axis=2), **view_lira(obs, inp.membership, self.shadows == "balanced")}

    def primary(self, variants: list[str], inp: AttackInput) -> str:
        """``lira-augA``: every query view (the paper's ``lira_da``). SSL pre-training augments every
        image, so the shifted and flipped views are inputs of the kind the encoder trained on."""
        return primary_view_variant(variants)


class ContrastiveBlackBox(Contrastive):
    name = "contrastive-blackbox"
    description = "similarity of two SSL views in the served logits (black-box), LiRA over the views"
    needs = frozenset({"contrastive_logits"})
    signal = "contrastive_logits"
