"""Two defense plugins that break an assumption the harness once made silently (issue 36, defect 2;
tests/test_random_serving.py):

- ``NoisyServing``: undefended training, and every query answered with fresh Gaussian noise
  (``sigma``, default 3) added to the logits. Its accuracy barely moves, but a single noisy answer
  hides most of the membership signal; the same image asked twice gets two answers. The harness
  detects that and adds ``lira-averaged`` (LiRA on the mean of ``audit.repeat_queries`` answers
  per query view) to the headline attacks.
- ``GlobalRNGInit``: the preset's network initialized from torch's *global* RNG (no seed of its
  own), then trained as undefended. Its models are reproducible only because the harness seeds the
  global RNGs from each model's seed right before ``fit``.

    harness evaluate benchmarks/serving_plugins.py:NoisyServing
"""

from __future__ import annotations

import numpy as np

from defenses.base import Defense, ServedModel, TorchClassifier
from defenses.models import build_model
from defenses.training import train_classifier
from defenses.undefended import Undefended


class NoisyAnswers(ServedModel):
    """The classifier's logits plus fresh N(0, sigma^2) noise on every entry of every answer."""

    def __init__(self, classifier: TorchClassifier, sigma: float, seed: int) -> None:
        self.classifier, self.sigma = classifier, sigma
        self.rng = np.random.default_rng(seed)  # advances with every query: no two answers alike

    def query(self, x: np.ndarray) -> np.ndarray:
        z = self.classifier.query(x)
        return (z + self.rng.normal(0.0, self.sigma, size=z.shape)).astype(np.float32)

    def raw_query(self, x: np.ndarray) -> np.ndarray:
        return self.classifier.query(x)

    def model_state(self) -> dict:
        return self.classifier.model_state()


class NoisyServing(Undefended):
    name = "noisy-serving"
    description = "undefended training; fresh Gaussian noise (sigma) added to the logits of every answer"
    param_defaults = {"sigma": 3.0}
    provides = frozenset({"raw_query"})

    def __init__(self, **params) -> None:
        super().__init__(**params)
        if self.params["sigma"] < 0:
            raise ValueError(f"sigma must be >= 0, got {self.params['sigma']}")

    def fit(self, train, ctx):
        return NoisyAnswers(super().fit(train, ctx), float(self.params["sigma"]), ctx.seed)

    def fit_group(self, trains, ctxs):  # the undefended models trained stacked, each served with noise
        served = super().fit_group(trains, ctxs)
        if served is None:
            return None
        return [NoisyAnswers(m, float(self.params["sigma"]), c.seed) for m, c in zip(served, ctxs)]


class GlobalRNGInit(Defense):
    name = "global-rng-init"
    description = "the preset's network initialized from torch's global RNG (no seed of its own), trained as undefended"

    def fit(self, train, ctx):
        net = build_model(ctx.train.model, tuple(train.x.shape[1:]), train.num_classes, ctx.train.width)
        net = train_classifier(net, train, ctx)
        return TorchClassifier(net, train.mean, train.std, ctx.device)
