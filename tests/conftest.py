"""Shared fixtures. Tests that read ../shared skip with a reason when it is absent (a user's clone)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
CIFAR_SUBSET = SHARED / "data" / "cifar10-subset"


@pytest.fixture
def cifar_subset() -> Path:
    if not (CIFAR_SUBSET / "cifar-10-batches-py" / "data_batch_1").is_file():
        pytest.skip(f"CIFAR-10 subset not found at {CIFAR_SUBSET} (only CI and developers have ../shared)")
    return CIFAR_SUBSET


def tiny_overrides(**extra) -> dict:
    """A few-second digits experiment: 6 models, 60 audit samples, 4 epochs, few bootstrap draws."""
    base = {
        "audit.models": 6,
        "audit.size": 60,
        "train.epochs": 4,
        "train.width": 64,
        "attack.bootstrap": 50,
        "run.workers": 1,
    }
    base.update(extra)
    return base
