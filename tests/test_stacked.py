"""Stacked training (defenses/stacked.py): G models in one batched loop equal one-at-a-time training."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from defenses.base import FitContext, LabeledImages, Normalizer
from defenses.stacked import stackable, train_stacked
from defenses.training import init_network, train_classifier
from harness.core.config import TrainConfig
from harness.core.data import DataConfig, load_dataset
from harness.run.runner import AUTO_GROUP_SIZE, TrainGroup, TrainJob, group_size, make_defense, make_groups


@pytest.fixture(scope="module")
def digits():
    return load_dataset(DataConfig(name="digits", test_size=497), seed=0)


def _subset(data, start: int, n: int, augment: bool = False) -> LabeledImages:
    return LabeledImages(x=data.x_train[start : start + n], y=data.y_train[start : start + n],
                         num_classes=data.num_classes, mean=data.mean, std=data.std, augment=data.augment)


def _compare(data, sizes: list[int], cfg: TrainConfig, tol: float) -> None:
    trains = [_subset(data, 37 * g, n) for g, n in enumerate(sizes)]
    ctxs = [FitContext(seed=100 + g, device="cpu", train=cfg) for g in range(len(sizes))]
    nets = [init_network(t, c) for t, c in zip(trains, ctxs)]
    stacked = train_stacked([copy.deepcopy(n) for n in nets], trains, ctxs)
    alone = [train_classifier(copy.deepcopy(n), t, c) for n, t, c in zip(nets, trains, ctxs)]
    x = Normalizer(data.mean, data.std, "cpu")(torch.from_numpy(data.x_test))
    with torch.no_grad():
        for a, b, n0 in zip(stacked, alone, nets):
            za, zb = a(x), b(x)
            moved = float((zb - n0(x)).abs().max())
            assert moved > 0.1  # training changed the model (else the comparison proves nothing)
            assert float((za - zb).abs().max()) < tol * max(1.0, float(zb.abs().max()))


def test_stacked_equals_alone_same_sizes(digits):
    cfg = TrainConfig(model="mlp", width=64, epochs=2, batch_size=32, lr=0.1, momentum=0.9,
                      weight_decay=1e-4, schedule="cosine", augment=False)
    _compare(digits, [256, 256, 256], cfg, 1e-4)


def test_stacked_equals_alone_ragged_sizes_and_step_schedule(digits):
    # 40 and 70 samples at batch 32: 2 and 3 steps per epoch, so the first model sits out the third
    # step of every epoch (no momentum or weight decay then) and keeps its own schedule length
    cfg = TrainConfig(model="mlp", width=64, epochs=3, batch_size=32, lr=0.05, momentum=0.9,
                      weight_decay=5e-4, schedule="step", milestones=[0.5], gamma=0.1, augment=False)
    _compare(digits, [40, 70, 65], cfg, 1e-4)


@pytest.mark.parametrize("momentum,weight_decay", [(0.0, 0.0), (0.0, 5e-4), (0.9, 0.0)])
def test_stacked_equals_alone_without_momentum_or_weight_decay(digits, momentum, weight_decay):
    # momentum 0: the weight gradient's product overwrites the buffer (beta 0) instead of adding to it
    cfg = TrainConfig(model="mlp", width=64, epochs=2, batch_size=32, lr=0.1, momentum=momentum,
                      weight_decay=weight_decay, schedule="cosine", augment=False)
    _compare(digits, [100, 70, 64], cfg, 1e-4)


def test_stacked_with_augmentation_draws_like_alone(digits):
    cfg = TrainConfig(model="mlp", width=64, epochs=2, batch_size=32, lr=0.05, momentum=0.9,
                      weight_decay=1e-4, schedule="constant", augment=True)
    _compare(digits, [100, 90], cfg, 1e-4)


def test_stacked_rejects_other_architectures(digits):
    cfg = TrainConfig(model="mlp-bn", width=32, epochs=1)
    train = _subset(digits, 0, 64)
    ctx = FitContext(seed=0, device="cpu", train=cfg)
    assert not stackable(cfg) and stackable(TrainConfig(model="mlp"))
    with pytest.raises(ValueError, match="no grouped form"):
        train_stacked([init_network(train, ctx)], [train], [ctx])


def test_groups_keep_levels_apart_and_respect_size():
    jobs = [TrainJob("r", "population", i) for i in (0, 1, 2, 5)] + [TrainJob("r", "sample-x", i) for i in (0, 1)]
    groups = make_groups(jobs, 3)
    assert groups == [TrainGroup("r", "population", (0, 1, 2)), TrainGroup("r", "population", (5,)),
                      TrainGroup("r", "sample-x", (0, 1))]
    assert make_groups(jobs, 1) == [TrainGroup("r", j.level, (j.index,)) for j in jobs]
    # fixed blocks of 3 per level: [0, 3) and [3, 6); with the run's S, a block's finished models train again
    jobs = [TrainJob("r", "population", i) for i in (1, 3, 4, 5)]
    assert make_groups(jobs, 3) == [TrainGroup("r", "population", (1,)), TrainGroup("r", "population", (3, 4, 5))]
    assert make_groups(jobs, 3, 6) == [TrainGroup("r", "population", (1,), (0, 2)),
                                       TrainGroup("r", "population", (3, 4, 5))]
    assert make_groups([TrainJob("r", "population", 6)], 4, 7) == [TrainGroup("r", "population", (6,), (4, 5))]


def test_auto_group_size_only_for_stackable_recipes():
    from harness.core.config import validate_config

    def cfg(defense: str, **train):
        return validate_config({"preset": "quick", "defense": defense, "data": {"name": "digits"},
                                "train": {"model": "mlp", **train}})

    c = cfg("undefended")
    assert group_size(c, make_defense(c)) == AUTO_GROUP_SIZE
    c = cfg("undefended", model="mlp-bn")
    assert group_size(c, make_defense(c)) == 1
    c = cfg("relaxloss")
    assert group_size(c, make_defense(c)) == AUTO_GROUP_SIZE  # its own loss, stacked (the grouped engine)
    c = cfg("dpsgd-medium")
    assert group_size(c, make_defense(c)) == AUTO_GROUP_SIZE  # per-sample gradients of the group in one vmap
    c = cfg("selena")
    assert group_size(c, make_defense(c)) == 1  # its own loop: one at a time
    c = cfg("undefended", model="cnn")
    assert group_size(c, make_defense(c)) == 1  # a stacked CNN is slower than one alone on the CPU
    from defenses.undefended import Undefended

    class Wrapped(Undefended):  # overrides fit: its own fit must run, not the inherited fit_group
        def fit(self, train, ctx):
            return super().fit(train, ctx)

    assert Undefended().can_group(c.train.model_copy(update={"model": "mlp"}))
    assert not Wrapped().can_group(c.train.model_copy(update={"model": "mlp"}))
    c = validate_config({"preset": "quick", "data": {"name": "digits"}, "run": {"group_size": 4}})
    assert group_size(c, make_defense(c)) == 4


def test_grouped_run_writes_every_model(tmp_path):
    """A run trained in groups saves one signals file per model, with its own seed and test accuracy."""
    from harness.defense_config import build_config
    from harness.run.executors import LocalExecutor
    from harness.run.runner import prepare_run, train_all
    from tests.conftest import tiny_overrides

    cfg = build_config("quick", tiny_overrides(**{"run.out": str(tmp_path), "run.group_size": 4,
                                                  "run.level": "population"}))
    prep = prepare_run(cfg)
    metas = train_all(prep, LocalExecutor(1))
    assert sorted(m["model_index"] for m in metas) == list(range(cfg.audit.models))
    assert len({m["seed"] for m in metas}) == cfg.audit.models
    assert all(0.5 < m["test_accuracy"] <= 1.0 for m in metas)
    assert prep.run.finished_models("population", cfg.audit.models) == list(range(cfg.audit.models))
    assert np.isclose(sum(m["train_seconds"] for m in metas[:4]) / 4, metas[0]["train_seconds"])


def test_stacked_training_is_bit_identical_whatever_the_group_size(digits):
    """What makes resume exact: model 2 trained in a group of 3, of 2 and alone gives the same weights."""
    cfg = TrainConfig(model="mlp", width=64, epochs=2, batch_size=32, lr=0.1, momentum=0.9,
                      weight_decay=1e-4, schedule="cosine", augment=False)
    trains = [_subset(digits, 37 * g, 100 + 7 * g) for g in range(3)]
    ctxs = [FitContext(seed=100 + g, device="cpu", train=cfg) for g in range(3)]

    def fit(idx):
        return train_stacked([init_network(trains[i], ctxs[i]) for i in idx], [trains[i] for i in idx],
                             [ctxs[i] for i in idx])[-1]

    weights = [torch.cat([p.detach().ravel() for p in fit(idx).parameters()]) for idx in ([0, 1, 2], [1, 2], [2])]
    assert torch.equal(weights[0], weights[1]) and torch.equal(weights[0], weights[2])


def test_one_written_out_step_equals_autograd_and_torch_sgd():
    """_StackedMLP's hand-written backward and fused SGD step against autograd + torch.optim.SGD on each
    model, with a ragged batch (model 1 has 5 real rows of 8) and model 2 sitting the step out."""
    from defenses.models import MLP
    from defenses.stacked import _StackedMLP

    torch.manual_seed(0)
    nets = [MLP(12, 16, 4) for _ in range(3)]
    x, y = torch.randn(3, 8, 12), torch.randint(0, 4, (3, 8))
    counts = torch.tensor([8, 5, 0])
    mask = torch.arange(8)[None, :] < counts[:, None]
    lrs, momentum, wd = torch.tensor([0.1, 0.05, 0.1]), 0.9, 1e-2
    layers = [[m for m in n.body if isinstance(m, nn.Linear)] + [n.head] for n in nets]
    tensors = []
    for i in range(3):
        tensors.append(torch.stack([ls[i].weight.detach() for ls in layers]).clone())
        tensors.append(torch.stack([ls[i].bias.detach() for ls in layers]).unsqueeze(1).clone())
    stack = _StackedMLP(tensors, 3, 8, momentum, wd)
    before = [t.clone() for t in tensors]
    for _ in range(2):  # the second step uses the momentum buffers of the first
        stack.sgd_step(x, y, (mask / counts.clamp(min=1)[:, None]).float(), lrs, counts > 0)
    for g in range(2):
        opt = torch.optim.SGD(nets[g].parameters(), lr=float(lrs[g]), momentum=momentum, weight_decay=wd)
        for _ in range(2):
            opt.zero_grad()
            k = int(counts[g])
            nn.functional.cross_entropy(nets[g](x[g, :k]), y[g, :k]).backward()
            opt.step()
        for i, lin in enumerate(layers[g]):
            torch.testing.assert_close(tensors[2 * i][g], lin.weight.detach(), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(tensors[2 * i + 1][g, 0], lin.bias.detach(), rtol=1e-5, atol=1e-6)
            assert not torch.equal(tensors[2 * i][g], before[2 * i][g])
    for t, t0 in zip(tensors, before):  # the inactive model kept its weights
        assert torch.equal(t[2], t0[2])
    assert all(float(b[2].abs().max()) == 0.0 for b in stack.bufs)  # and its (zero) momentum


@pytest.mark.slow
def test_resumed_group_retrains_its_block_for_identical_models(tmp_path):
    """RelaxLoss trains stacked through the grouped engine, whose rounding depends on the group: a
    model retrained after an interruption trains beside its block's finished models again, so its
    signals equal an uninterrupted run's bit for bit, and the finished models are not saved again."""
    from harness.defense_config import build_config
    from harness.run.executors import LocalExecutor
    from harness.run.runner import prepare_run, train_all
    from tests.conftest import tiny_overrides

    cfg = build_config("quick", tiny_overrides(**{"defense": "relaxloss", "run.out": str(tmp_path),
                                                  "run.group_size": 3, "run.level": "population"}))
    prep = prepare_run(cfg)
    train_all(prep, LocalExecutor(1))
    run = prep.run
    before = {i: run.read_signals("population", i) for i in range(6)}
    files = {i: run.signals_path("population", i).read_bytes() for i in range(6)}
    run.signals_path("population", 1).unlink()
    metas = train_all(prep, LocalExecutor(1))
    assert [m["model_index"] for m in metas] == [1]
    after = run.read_signals("population", 1)
    for name, arr in before[1].arrays.items():
        assert np.array_equal(arr, after.arrays[name]), name
    for i in (0, 2, 3, 4, 5):
        assert run.signals_path("population", i).read_bytes() == files[i]
