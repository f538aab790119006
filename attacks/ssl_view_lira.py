"""LiRA on SSL-augmented views: the paper's non-adaptive black-box baseline against the SSL defenses
(protocol notes section 3.5, the ``confidence`` score of ``self_supervised.py``).

The paper's SSL code scores its black-box baseline on the same views as its contrastive attacks: for
each of R seeded repetitions and each fixed query view, the first of two SSL-augmented copies
(random crop, colour jitter, grayscale). Per copy, the logit-scaled confidence
``log p_y - log(1 - p_y)`` of the served model's output (:func:`attacks.scores.logit_score`) is one
query; online LiRA (per-sample Gaussians, leave-one-out, balanced shadows) averages the per-query
log-likelihood ratios over the A x R copies. Our ``lira`` scores the fixed, unaugmented query views
instead (docs/protocol.md); the SSL defenses run both as headline candidates. At the quick preset
this one is the stronger (docs/defenses.md: the copies are inputs of the kind the probe trained on,
and there are A x R of them).

Variants: ``lira-views`` (all A x R copies; primary) and ``lira-noaug`` (the R copies of the plain
view only).
"""

from __future__ import annotations

import numpy as np

from attacks.base import Attack, AttackInput
from attacks.contrastive import check_repetitions
from attacks.lira import lira_scores
from attacks.scores import logit_score
from harness.core.signals import CONTRASTIVE_REPETITIONS


class SSLViewLiRA(Attack):
    name = "lira-sslview"
    description = "LiRA on the logit-scaled confidence of SSL-augmented views (the paper's SSL black-box baseline)"
    needs = frozenset({"ssl_view_logits"})

    def __init__(self, repetitions: int = CONTRASTIVE_REPETITIONS) -> None:
        self.repetitions = check_repetitions(repetitions)

    def params(self) -> dict[str, object]:
        return {"repetitions": self.repetitions}

    def score(self, inp: AttackInput) -> dict[str, np.ndarray]:
        logits = inp.signals["ssl_view_logits"]  # (S, C, A, R, K)
        if logits.shape[3] < self.repetitions:
            raise ValueError(f"{self.name}: the run saved {logits.shape[3]} repetitions, fewer than {self.repetitions}")
        s, c, a, _, k = logits.shape
        z = logits[:, :, :, : self.repetitions].astype(np.float64).reshape(s, c, a * self.repetitions, k)
        obs = logit_score(z, inp.labels)  # (S, C, A R): view a's copies at a R ... (a + 1) R - 1
        return {
            "lira-views": lira_scores(obs, inp.membership, online=True, global_variance=False),
            "lira-noaug": lira_scores(obs[:, :, : self.repetitions], inp.membership, online=True,
                                      global_variance=False),
        }

    def primary(self, variants: list[str], inp: AttackInput) -> str:
        """``lira-views``: every copy, as the paper's code scores them."""
        return "lira-views"
