"""FixMatch's hyperparameters (Sohn et al., NeurIPS 2020) as a checked dataclass, without torch: a
defense that trains with FixMatch (defenses/pate.py) builds and checks its recipe when it is named,
before any model trains; defenses/fixmatch.py holds the training itself."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FixMatchRecipe:
    """FixMatch's hyperparameters (Sohn et al.'s CIFAR-10 values as defaults: batch 64, mu 7, lr 0.03,
    Nesterov momentum 0.9, weight decay 5e-4, tau 0.95, lambda_u 1, 2 RandAugment operations,
    Cutout up to half the side)."""

    steps: int
    batch_size: int = 64
    mu: int = 7
    lr: float = 0.03
    momentum: float = 0.9
    weight_decay: float = 5e-4
    confidence: float = 0.95
    lambda_u: float = 1.0
    strong_ops: int = 2
    cutout: float = 0.5

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "mu", "strong_ops"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < (0 if name == "strong_ops" else 1):
                raise ValueError(f"FixMatch {name} must be a {'non-negative' if name == 'strong_ops' else 'positive'} "
                                 f"integer, got {v!r}")
        if not self.lr > 0 or not 0 <= self.momentum < 1 or self.weight_decay < 0 or self.lambda_u < 0:
            raise ValueError("FixMatch needs lr > 0, 0 <= momentum < 1, weight_decay >= 0 and lambda_u >= 0")
        if not 0 < self.confidence <= 1:
            raise ValueError(f"FixMatch confidence (tau) must be in (0, 1], got {self.confidence}")
        if not 0 <= self.cutout <= 1:
            raise ValueError(f"FixMatch cutout must be in [0, 1] (a fraction of the image side), got {self.cutout}")
