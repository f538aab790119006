"""Deterministic CUDA settings (the paper's), switchable; paired seeds across levels."""

import torch

from conftest import tiny_overrides
from harness.defense_config import build_config
from harness.run.runner import TrainJob, configure_determinism, prepare_run, train_one


def test_cuda_determinism_is_on_by_default_and_switchable(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark,
              torch.backends.cudnn.deterministic)
    try:
        configure_determinism("cpu", True)  # CPU: nothing changes
        assert torch.are_deterministic_algorithms_enabled() == before[0]
        configure_determinism("cuda", True)
        assert torch.are_deterministic_algorithms_enabled()
        assert not torch.backends.cudnn.benchmark and torch.backends.cudnn.deterministic
        import os

        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        configure_determinism("cuda:1", False)
        assert not torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.benchmark
    finally:
        torch.use_deterministic_algorithms(before[0])
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[1], before[2]
    cfg = build_config("quick", {})
    assert cfg.run.deterministic is True and "run" not in cfg.model_determining()


def test_model_s_shares_its_seed_at_every_level(tmp_path):
    cfg = build_config("quick", {**tiny_overrides(), "run.out": str(tmp_path), "train.epochs": 1})
    prep = prepare_run(cfg)
    metas = {(lv, i): train_one(TrainJob(str(prep.run.path), lv, i)) for lv in prep.levels for i in (1, 2)}
    assert metas[("population", 1)]["seed"] == metas[("sample-mislabeled", 1)]["seed"]
    assert metas[("population", 1)]["seed"] != metas[("population", 2)]["seed"]
