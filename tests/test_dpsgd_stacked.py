"""DP-SGD for several models in one loop (defenses/dpsgd_stacked.py): their per-sample gradients in one
nested vmap, everything else each model's own, equal to one-at-a-time DP-SGD."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from defenses.base import FitContext, LabeledImages
from defenses.dpsgd import DPSGDHigh
from harness.core.config import TrainConfig
from harness.core.data import DataConfig, load_dataset


@pytest.fixture(scope="module")
def digits():
    return load_dataset(DataConfig(name="digits", test_size=497), seed=0)


def _subset(data, start: int, n: int) -> LabeledImages:
    return LabeledImages(x=data.x_train[start : start + n], y=data.y_train[start : start + n],
                         num_classes=data.num_classes, mean=data.mean, std=data.std, augment=data.augment)


@pytest.mark.slow
def test_stacked_dpsgd_equals_alone_and_catches_swapped_seeds(digits):
    """Three MLPs (96, 130 and 100 samples: 6, 9 and 7 logical steps per epoch, Poisson batches of
    different sizes, two physical chunks for the largest) trained in one loop give each the served
    logits, step count and epsilon it gets alone; swapping two models' seeds (their Poisson batches,
    augmentations and noise) breaks the equality."""
    d = DPSGDHigh(epochs=2, batch_size=16, augmult=2, physical_batch_size=12, noise_multiplier=0.5)
    cfg = TrainConfig(model="mlp", width=32, augment=True)
    trains = [_subset(digits, 0, 96), _subset(digits, 100, 130), _subset(digits, 250, 100)]
    ctxs = [FitContext(seed=7 + g, device="cpu", train=cfg) for g in range(3)]
    assert d.can_group(cfg) and not d.can_group(cfg.model_copy(update={"model": "wrn16-4-gn"}))
    group = d.fit_group(trains, ctxs)
    q = digits.x_test[:100]
    for s, t, c in zip(group, trains, ctxs):
        a = d.fit(t, c)
        za, zs = a.query(q), s.query(q)
        assert np.abs(za - zs).max() < 1e-4 * max(1.0, float(np.abs(za).max()))
        assert s.info()["steps"] == a.info()["steps"] and s.info()["epsilon"] == a.info()["epsilon"]
    swapped = [dataclasses.replace(ctxs[0], seed=ctxs[2].seed), ctxs[1], dataclasses.replace(ctxs[2], seed=ctxs[0].seed)]
    wrong = d.fit_group(trains, swapped)
    alone0 = d.fit(trains[0], ctxs[0]).query(q)
    assert np.abs(wrong[0].query(q) - alone0).max() > 1e-2
    assert d.fit_group(trains[:1], ctxs[:1]) is None  # a lone model trains by its own fit
