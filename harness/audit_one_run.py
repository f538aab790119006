"""One-run audit with the label-flip memorization game (Malek et al. 2021, "Antipodes of label
differential privacy: PATE and ALIBI", Game 3).

N training samples become canaries. Each gets two candidate labels, both different from its true
label, and is trained with one of them chosen by a fair coin. After training ONE model, the auditor
sees the served probabilities of both candidates, guesses the higher one and abstains when neither
reaches tau. A correct-guess rate CGR over the guesses implies eps >= ln(CGR / (1 - CGR)) for an
eps-(label-)DP trainer; the Clopper-Pearson interval of CGR gives the 95% interval of that bound
(``harness.bounds.empirical.label_flip_game``). Reporting several tau values and their maximum is
optimistic (the best tau is chosen after seeing the outcome); each row on its own is valid.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import numpy as np
from scipy.special import softmax

from defenses.base import FitContext, LabeledImages
from harness.bounds.empirical import LABEL_FLIP_THRESHOLDS, label_flip_game
from harness.config import ConfigError, ExperimentConfig
from harness.data import load_dataset
from harness.runner import make_defense, resolve_device


def two_wrong_labels(y: np.ndarray, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """(N, 2) distinct labels, both different from ``y``: uniform over ordered pairs of wrong classes."""
    if num_classes < 3:
        raise ConfigError("the label-flip game needs at least 3 classes (two wrong candidate labels)")
    a = rng.integers(0, num_classes - 1, size=len(y))
    a = np.where(a < y, a, a + 1)
    b = rng.integers(0, num_classes - 2, size=len(y))
    lo, hi = np.minimum(a, y), np.maximum(a, y)
    b = np.where(b < lo, b, np.where(b + 1 < hi, b + 1, b + 2))
    return np.stack([a, b], axis=1).astype(np.int64)


def audit_one_run(cfg: ExperimentConfig, num_canaries: int, taus: list[float] | None = None) -> dict[str, Any]:
    """Train one model of ``cfg.defense`` with ``num_canaries`` label-flip canaries and play the game."""
    taus = taus or list(LABEL_FLIP_THRESHOLDS)
    data = load_dataset(cfg.data, cfg.seed)
    n = len(data.y_train)
    if not 0 < num_canaries <= n:
        raise ConfigError(f"--canaries must be between 1 and the training pool size {n}, got {num_canaries}")
    rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, 0xA11B1]))
    idx = rng.permutation(n)[:num_canaries]
    pairs = two_wrong_labels(data.y_train[idx], data.num_classes, rng)
    coin = rng.integers(0, 2, size=num_canaries)
    trained = pairs[np.arange(num_canaries), coin]
    other = pairs[np.arange(num_canaries), 1 - coin]
    y = data.y_train.copy()
    y[idx] = trained
    train = LabeledImages(data.x_train, y, data.num_classes, data.mean, data.std, data.augment)
    defense = make_defense(cfg)
    device = resolve_device(cfg.run.device)
    seed = int(np.random.SeedSequence([cfg.seed, 0xA11B2]).generate_state(1)[0])
    t0 = time.perf_counter()
    served = defense.fit(train, FitContext(seed=seed, device=device, train=cfg.train, params=defense.params))
    train_s = time.perf_counter() - t0
    prob = softmax(served.query(data.x_train[idx]).astype(np.float64), axis=1)
    rows = np.arange(num_canaries)
    games = [asdict(label_flip_game(prob[rows, trained], prob[rows, other], tau)) for tau in taus]
    test_acc = float((served.query(data.x_test).argmax(1) == data.y_test).mean())
    return {
        "defense": cfg.defense,
        "preset": cfg.preset,
        "dataset": cfg.data.name,
        "seed": cfg.seed,
        "num_canaries": num_canaries,
        "test_accuracy": test_acc,
        "train_seconds": train_s,
        "device": device,
        "defense_info": served.info(),
        "games": games,
        "best_epsilon_lo": max(g["epsilon_lo"] for g in games),
        "config": cfg.model_dump(mode="json"),
    }
