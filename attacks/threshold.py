"""The global-threshold baseline (Yeom et al. 2018; the paper's ``global`` attack).

Score = the victim's own logit-scaled confidence or hinge on the unaugmented query; one threshold
for all samples is swept by the ROC. Nothing is fitted, so no shadow model is used. Primary
variant: ``logit``.
"""

from __future__ import annotations

import numpy as np

from attacks.base import Attack, AttackInput
from attacks.scores import SCORE_FUNCTIONS, both_scores

#: audit samples scored at once (float64 temporaries S x CHUNK x K)
CHUNK = 4096


class GlobalThreshold(Attack):
    name = "threshold"
    description = "one global threshold on the victim's confidence (LOSS-style baseline)"
    needs = frozenset({"logits"})

    def score(self, inp: AttackInput) -> dict[str, np.ndarray]:
        logits = inp.signals["logits"]
        num_models, num_samples = logits.shape[:2]
        out = {name: np.empty((num_models, num_samples)) for name in SCORE_FUNCTIONS}
        for i in range(0, num_samples, CHUNK):  # per sample: the values of one call on the whole level
            for name, v in both_scores(logits[:, i : i + CHUNK, :1], inp.labels[i : i + CHUNK]).items():
                out[name][:, i : i + CHUNK] = v[:, :, 0]
        return out
