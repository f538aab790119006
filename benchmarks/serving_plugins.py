"""Two defense plugins that break an assumption the harness once made silently (issue 36, defect 2;
tests/test_random_serving.py):

- ``NoisyServing``: undefended training, and every query answered with fresh Gaussian noise
  (``sigma``, default 3) added to the logits. Its accuracy barely moves, but a single noisy answer
  hides most of the membership signal; the same image asked twice gets two answers. The harness
  detects that and adds ``lira-averaged`` (LiRA on the mean of ``audit.repeat_queries`` answers
  per query view) to the headline attacks.
- ``KeyedNoiseServing``: undefended training, and every answer's logits plus N(0, sigma^2) noise
  (``sigma``, default 3) drawn from a seed that hashes the queried image's bytes and the model's
  seed (issue 48). The same image gets the same answer, so the random-serving check passes it; a
  copy one grey level off in one pixel gets fresh noise, which the input-keyed check detects and
  ``lira-averaged`` averages away over perturbed copies.
- ``CoarseKeyedNoiseServing``: the same noise keyed instead to the image normalized as the model
  reads it and rounded to ``decimals`` (default 1: about 10 grey levels per step on digits), a key
  that one grey level rarely changes (issue 54); the input-keyed check finds it at the scale where
  the key changes, and ``lira-averaged`` averages over copies at that scale.
- ``HAMPFixedMask``: HAMP whose rank-preserving masking takes its random image from one fixed
  seed on every query, a deterministic HAMP: the input-keyed check's measurement of rank masking
  (HAMP itself draws a fresh image per query, which the random-serving check flags).
- ``GlobalRNGInit``: the preset's network initialized from torch's *global* RNG (no seed of its
  own), then trained as undefended. Its models are reproducible only because the harness seeds the
  global RNGs from each model's seed right before ``fit``.

    harness evaluate benchmarks/serving_plugins.py:NoisyServing
    harness evaluate benchmarks/serving_plugins.py:KeyedNoiseServing
    harness evaluate benchmarks/serving_plugins.py:CoarseKeyedNoiseServing
"""

from __future__ import annotations

import hashlib

import numpy as np

from defenses.base import Defense, ServedModel, TorchClassifier
from defenses.hamp import HAMP, HAMPServed, rank_remap
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


def keyed_noise(x: np.ndarray, model_seed: int, num_classes: int, sigma: float) -> np.ndarray:
    """(N, num_classes) N(0, sigma^2) noise, each row drawn from a seed that is the SHA-256 of the
    model's seed and the row's image bytes: a function of the image, fresh for any other image."""
    out = np.empty((len(x), num_classes), np.float64)
    for i, img in enumerate(np.ascontiguousarray(x)):
        h = hashlib.sha256(int(model_seed).to_bytes(8, "little", signed=True) + img.tobytes()).digest()
        out[i] = np.random.default_rng(int.from_bytes(h[:8], "little")).normal(0.0, sigma, num_classes)
    return out


class KeyedAnswers(NoisyAnswers):
    """The classifier's logits plus N(0, sigma^2) noise keyed to the queried image (:func:`keyed_noise`)."""

    def __init__(self, classifier: TorchClassifier, sigma: float, seed: int) -> None:
        super().__init__(classifier, sigma, seed)
        self.seed = seed

    def query(self, x: np.ndarray) -> np.ndarray:
        z = self.classifier.query(x)
        return (z + keyed_noise(x, self.seed, z.shape[1], self.sigma)).astype(np.float32)


class KeyedNoiseServing(NoisyServing):
    name = "keyed-noise-serving"
    description = ("undefended training; Gaussian noise (sigma) added to the logits, seeded by a hash of the queried "
                   "image and the model's seed")

    def fit(self, train, ctx):
        return KeyedAnswers(Undefended.fit(self, train, ctx), float(self.params["sigma"]), ctx.seed)

    def fit_group(self, trains, ctxs):
        served = Undefended.fit_group(self, trains, ctxs)
        if served is None:
            return None
        return [KeyedAnswers(m, float(self.params["sigma"]), c.seed) for m, c in zip(served, ctxs)]


class CoarseKeyedAnswers(KeyedAnswers):
    """The classifier's logits plus N(0, sigma^2) noise keyed to the queried image normalized with the
    classifier's mean and std and rounded to ``decimals`` (:func:`keyed_noise` of the rounded image):
    every image in one rounding cell gets the same noise."""

    def __init__(self, classifier: TorchClassifier, sigma: float, seed: int, decimals: int) -> None:
        super().__init__(classifier, sigma, seed)
        self.decimals = decimals
        shape = (1, -1, 1, 1)
        self.mean = np.asarray(classifier.mean, np.float64).reshape(shape)
        self.std = np.asarray(classifier.std, np.float64).reshape(shape)

    def key(self, x: np.ndarray) -> np.ndarray:
        # + 0.0: -0.0 and 0.0 are one cell (their bytes differ)
        return np.round((x.astype(np.float64) / 255.0 - self.mean) / self.std, self.decimals) + 0.0

    def query(self, x: np.ndarray) -> np.ndarray:
        z = self.classifier.query(x)
        return (z + keyed_noise(self.key(x), self.seed, z.shape[1], self.sigma)).astype(np.float32)


class CoarseKeyedNoiseServing(NoisyServing):
    name = "coarse-keyed-noise-serving"
    description = ("undefended training; Gaussian noise (sigma) added to the logits, seeded by a hash of the queried "
                   "image normalized and rounded to `decimals`, and the model's seed")
    param_defaults = {"sigma": 3.0, "decimals": 1}

    def _served(self, model: TorchClassifier, seed: int) -> CoarseKeyedAnswers:
        return CoarseKeyedAnswers(model, float(self.params["sigma"]), seed, int(self.params["decimals"]))

    def fit(self, train, ctx):
        return self._served(Undefended.fit(self, train, ctx), ctx.seed)

    def fit_group(self, trains, ctxs):
        served = Undefended.fit_group(self, trains, ctxs)
        if served is None:
            return None
        return [self._served(m, c.seed) for m, c in zip(served, ctxs)]


class FixedMaskServed(HAMPServed):
    """HAMP's served model with one random image, drawn once from the model's seed, behind the
    masking of every answer: the scores depend on the query through its ranking only, the same for
    every query (HAMP draws a fresh image per query and row)."""

    def __init__(self, model: TorchClassifier, image_shape: tuple[int, ...], seed: int) -> None:
        super().__init__(model, image_shape, seed)
        self.mask_image = self.rng.integers(0, 256, size=(1, *image_shape), dtype=np.uint8)

    def query(self, x: np.ndarray) -> np.ndarray:
        real = self.model.query(x)
        fixed = np.repeat(self.model.query(self.mask_image), len(x), axis=0)
        return rank_remap(real, fixed).astype(np.float32)


class HAMPFixedMask(HAMP):
    name = "hamp-fixed-mask"
    description = "HAMP with one fixed random image behind its rank-preserving masking (deterministic serving)"

    def fit(self, train, ctx):
        served = super().fit(train, ctx)
        return FixedMaskServed(served.model, served.image_shape, ctx.seed + 1)


class GlobalRNGInit(Defense):
    name = "global-rng-init"
    description = "the preset's network initialized from torch's global RNG (no seed of its own), trained as undefended"

    def fit(self, train, ctx):
        net = build_model(ctx.train.model, tuple(train.x.shape[1:]), train.num_classes, ctx.train.width)
        net = train_classifier(net, train, ctx)
        return TorchClassifier(net, train.mean, train.std, ctx.device)
