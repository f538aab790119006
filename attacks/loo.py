"""Leave-one-out shadow models: which models score a victim.

Every one of the S models is the victim once; the others are its shadows (reference models).
With the paper's design every audit sample is in exactly S/2 models, so the shadows of a member
victim hold one IN model fewer than those of a non-member victim. An attack whose estimates use
all S - 1 shadows therefore sees the victim's membership in the precision of its own estimates
(at S = 6 online LiRA with per-sample variances scored *non-members* higher: AUC 0.10). Dropping
one model from the larger group makes the shadow set the same size for every victim.
"""

from __future__ import annotations

import numpy as np


def dropped_shadow(membership: np.ndarray) -> np.ndarray:
    """(S, C) model indices: for victim t and sample i, the highest-index model of the group
    (IN or OUT at i) that t is *not* in.

    With exactly S/2 members per sample, the S - 1 shadows of a member victim hold S/2 - 1 IN and
    S/2 OUT models, and those of a non-member victim S/2 IN and S/2 - 1 OUT: the shadow counts
    reveal the victim's membership. Dropping this one model leaves S/2 - 1 of each for every
    victim, so the attack's estimates have the same precision whatever the victim's membership.
    """
    s = membership.shape[0]
    idx = np.arange(s)[:, None]
    last_in = np.where(membership, idx, -1).max(axis=0)
    last_out = np.where(~membership, idx, -1).max(axis=0)
    return np.where(membership, last_out[None, :], last_in[None, :])
