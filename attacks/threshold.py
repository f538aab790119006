"""The global-threshold baseline (Yeom et al. 2018; the paper's ``global`` attack).

Score = the victim's own logit-scaled confidence or hinge on the unaugmented query; one threshold
for all samples is swept by the ROC. Nothing is fitted, so no shadow model is used. Primary
variant: ``logit``.
"""

from __future__ import annotations

import numpy as np

from attacks.base import Attack, AttackInput
from attacks.scores import SCORE_FUNCTIONS


class GlobalThreshold(Attack):
    name = "threshold"
    description = "one global threshold on the victim's confidence (LOSS-style baseline)"
    needs = frozenset({"logits"})

    def score(self, inp: AttackInput) -> dict[str, np.ndarray]:
        logits = inp.signals["logits"][:, :, :1]
        return {name: fn(logits, inp.labels)[:, :, 0] for name, fn in SCORE_FUNCTIONS.items()}
