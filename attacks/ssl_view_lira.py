"""LiRA on SSL-augmented views: the paper's non-adaptive black-box baseline against the SSL defenses
(protocol notes section 3.5, the ``confidence`` score of ``self_supervised.py``).

The paper's SSL code scores its black-box baseline on the same views as its contrastive attacks: for
each of R = 6 seeded repetitions and each fixed query view a, the first of two SSL-augmented copies
(random crop, colour jitter, grayscale). Per copy, the logit-scaled confidence
``x[a, r] = log p_y - log(1 - p_y)`` of the served model's output (:func:`attacks.scores.logit_score`,
in float64, with the sample's label). As the paper's ``_run_attack`` does with this score and its
contrastive ones, the attack then averages the **confidence scores** (not the logits or the
probabilities) over the first ``repetitions`` copies of each view, ``xbar[a] = mean_r x[a, r]``, and
runs online LiRA (per-sample Gaussians, leave-one-out; :func:`attacks.contrastive.view_lira`) on the
A per-view means. Our ``lira`` scores the fixed, unaugmented query views instead (docs/protocol.md);
the SSL defenses run both as headline candidates.

Variants:

- ``lira-augA`` (primary; the paper's ``lira_da``): LiRA over the A per-view means;
- ``lira-noaug`` (the paper's ``lira``): the plain view's mean only;
- ``lira-copies`` (not the paper's): every one of the A x R copies its own LiRA query (the
  per-query log-likelihood ratios averaged over A x R Gaussians fitted per copy); this attack's
  primary before it followed the paper;
- ``lira-copies-noaug``: the same over the plain view's R copies.
"""

from __future__ import annotations

import numpy as np

from attacks.base import Attack, AttackInput
from attacks.contrastive import check_repetitions, check_shadows, primary_view_variant, repetition_means, view_lira
from attacks.lira import chunked_scores, lira_scores
from attacks.scores import logit_score
from harness.core.signals import CONTRASTIVE_REPETITIONS


def copy_confidences(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(S, C, A, R) float64 logit-scaled confidences of outputs (S, C, A, R, K) with labels (C,)."""
    s, c, a, r, k = logits.shape
    return chunked_scores(logit_score, logits.reshape(s, c, a * r, k), labels).reshape(s, c, a, r)


class SSLViewLiRA(Attack):
    name = "lira-sslview"
    description = ("LiRA on the logit-scaled confidence of SSL-augmented views, averaged over repetitions per view "
                   "(the paper's SSL black-box baseline)")
    needs = frozenset({"ssl_view_logits"})

    def __init__(self, repetitions: int = CONTRASTIVE_REPETITIONS, shadows: str = "balanced") -> None:
        self.repetitions = check_repetitions(repetitions)
        check_shadows(shadows)
        self.shadows = shadows

    def params(self) -> dict[str, object]:
        return {"repetitions": self.repetitions, "shadows": self.shadows}

    def score(self, inp: AttackInput) -> dict[str, np.ndarray]:
        logits = inp.signals["ssl_view_logits"]  # (S, C, A, R, K)
        if logits.shape[3] < self.repetitions:
            raise ValueError(f"{self.name}: the run saved {logits.shape[3]} repetitions, fewer than {self.repetitions}")
        per_copy = copy_confidences(logits[:, :, :, : self.repetitions], inp.labels)  # (S, C, A, R)
        balanced = self.shadows == "balanced"
        out = view_lira(repetition_means(per_copy, self.repetitions, self.name), inp.membership, balanced)
        s, c, a, r = per_copy.shape
        out["lira-copies"] = lira_scores(per_copy.reshape(s, c, a * r), inp.membership, online=True,
                                         global_variance=False, balanced=balanced)
        out["lira-copies-noaug"] = lira_scores(per_copy[:, :, 0], inp.membership, online=True,
                                               global_variance=False, balanced=balanced)
        return out

    def primary(self, variants: list[str], inp: AttackInput) -> str:
        """``lira-augA``: the repetitions' mean confidence per view, LiRA over every view, as the
        paper's code scores them (its ``lira_da``; ``lira-noaug`` where the dataset has one view)."""
        return primary_view_variant(variants)
