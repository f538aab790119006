"""Stacked CNNs (defenses/grouped.py, the grouped engine of defenses/stacked.py): G convolutional models
in one grouped network equal one-at-a-time training, for the undefended, HAMP and RelaxLoss losses."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from defenses.base import FitContext, LabeledImages, Normalizer
from defenses.grouped import GroupedBatchNorm2d, from_grouped, group_networks, groupable, to_grouped, ungroup_into
from defenses.stacked import StackOptions, stackable, train_stacked
from defenses.training import init_network, train_classifier
from harness.core.config import TrainConfig
from harness.core.data import DataConfig, load_dataset


@pytest.fixture(scope="module")
def cifar():
    from tests.conftest import CIFAR_SUBSET

    if not (CIFAR_SUBSET / "cifar-10-batches-py" / "data_batch_1").is_file():
        pytest.skip(f"CIFAR-10 subset not found at {CIFAR_SUBSET} (only CI and developers have ../shared)")
    return load_dataset(DataConfig(name="cifar10", path=str(CIFAR_SUBSET)), seed=0)


def _subset(data, start: int, n: int) -> LabeledImages:
    return LabeledImages(x=data.x_train[start : start + n], y=data.y_train[start : start + n],
                         num_classes=data.num_classes, mean=data.mean, std=data.std, augment=data.augment)


#: 40, 56 and 47 images at batch 16: 3, 4 and 3 steps per epoch, last batches of 8, 8 and 15 rows, so
#: models 0 and 2 sit out the fourth step (weights, momentum and BatchNorm statistics kept) and every
#: epoch ends with ragged batches (each model's BatchNorm statistics over its own real rows)
SIZES = [40, 56, 47]


def _recipe(model: str, **kw) -> TrainConfig:
    base = dict(model=model, width=4, epochs=2, batch_size=16, lr=0.05, momentum=0.9, weight_decay=5e-4,
                schedule="step", milestones=[0.5], gamma=0.1, warmup_epochs=1, augment=True)
    return TrainConfig(**{**base, **kw})


def _setup(data, cfg: TrainConfig):
    trains = [_subset(data, 50 * g, n) for g, n in enumerate(SIZES)]
    ctxs = [FitContext(seed=100 + g, device="cpu", train=cfg) for g in range(len(SIZES))]
    nets = [init_network(t, c) for t, c in zip(trains, ctxs)]
    return trains, ctxs, nets


def _gap(a: nn.Module, b: nn.Module, x: torch.Tensor) -> float:
    """Largest logit difference relative to the logits' scale."""
    with torch.no_grad():
        za, zb = a(x), b(x)
    return float((za - zb).abs().max()) / max(float(zb.abs().max()), 1e-3)


def _queries(data) -> torch.Tensor:
    return Normalizer(data.mean, data.std, "cpu")(torch.from_numpy(data.x_test[:100]))


@pytest.mark.slow
def test_stacked_cnn_equals_alone_and_catches_swapped_seeds(cifar):
    """Stacked training of the cifar10 preset's CNN (ragged sizes, augmentation, warm-up and a step
    schedule) gives each model the weights, running statistics and step count it gets alone; the
    same check fails when two models' seeds (their data order and augmentation draws) are swapped."""
    cfg = _recipe("cnn")
    trains, ctxs, nets = _setup(cifar, cfg)
    stacked = train_stacked([copy.deepcopy(n) for n in nets], trains, ctxs)
    alone = [train_classifier(copy.deepcopy(n), t, c) for n, t, c in zip(nets, trains, ctxs)]
    x = _queries(cifar)
    for s, a, n0 in zip(stacked, alone, nets):
        assert _gap(a, n0.eval(), x) > 0.3  # training moved the model (else the comparison proves nothing)
        assert _gap(s, a, x) < 1e-4
        sa, sb = s.state_dict(), a.state_dict()
        for k in sb:
            if k.endswith("num_batches_tracked"):
                assert int(sa[k]) == int(sb[k])  # 3 or 4 steps a epoch, as alone
            else:
                torch.testing.assert_close(sa[k], sb[k], rtol=1e-4, atol=1e-5)
    swapped = [dataclasses.replace(ctxs[0], seed=ctxs[1].seed), dataclasses.replace(ctxs[1], seed=ctxs[0].seed),
               ctxs[2]]
    wrong = train_stacked([copy.deepcopy(n) for n in nets], trains, swapped)
    assert _gap(wrong[0], alone[0], x) > 100 * 1e-4
    assert _gap(wrong[1], alone[1], x) > 100 * 1e-4
    assert _gap(wrong[2], alone[2], x) < 1e-4


@pytest.mark.slow
def test_stacked_airbench_equals_alone(cifar):
    """The airbench network (GELU, BatchNorm after max-pooling, a bias-free head), one epoch."""
    cfg = _recipe("airbench", epochs=1)
    trains, ctxs, nets = _setup(cifar, cfg)
    stacked = train_stacked([copy.deepcopy(n) for n in nets], trains, ctxs)
    x = _queries(cifar)
    for s, n, t, c in zip(stacked, nets, trains, ctxs):
        a = train_classifier(copy.deepcopy(n), t, c)
        assert _gap(a, n.eval(), x) > 0.3
        assert _gap(s, a, x) < 1e-4


def test_stacked_cnn_layouts_agree(cifar):
    """Channels-last (the CPU's default) and the plain layout train the same models to float rounding,
    stacked and alone."""
    cfg = _recipe("cnn", epochs=1, augment=False)
    trains, ctxs, nets = _setup(cifar, cfg)
    x = _queries(cifar)
    plain = train_stacked([copy.deepcopy(n) for n in nets], trains, ctxs, options=StackOptions(channels_last=False))
    last = train_stacked([copy.deepcopy(n) for n in nets], trains, ctxs, options=StackOptions(channels_last=True))
    alone = train_classifier(copy.deepcopy(nets[1]), trains[1], ctxs[1], channels_last=False)
    for p, q in zip(plain, last):
        assert _gap(p, q, x) < 1e-4
    assert _gap(plain[1], alone, x) < 1e-4


@pytest.mark.parametrize("defense,params", [pytest.param("hamp", {}, marks=pytest.mark.slow),
                                            ("relaxloss", {"target_loss": 2.5})])
def test_stacked_defense_losses_equal_alone(cifar, defense, params):
    """HAMP (soft labels, entropy regularizer) and RelaxLoss (target 2.5, above the initial loss, so
    that epoch 0 ascends and epoch 1 flattens posteriors) trained stacked equal their own ``fit``."""
    from harness.plugins import resolve

    d = resolve("defenses", defense)(**params)
    cfg = _recipe("cnn", augment=False)
    trains, ctxs, _ = _setup(cifar, cfg)
    assert d.can_group(cfg)
    group = d.fit_group(trains, ctxs)
    q = cifar.x_test[:100]
    raw = (lambda m: m.raw_query(q)) if defense == "hamp" else (lambda m: m.query(q))
    for s, t, c in zip(group, trains, ctxs):
        a = d.fit(t, c)
        za, zs = raw(a), raw(s)
        assert np.abs(za - zs).max() < 1e-4 * max(1.0, float(np.abs(za).max()))
    assert d.fit_group(trains[:1], ctxs[:1]) is None  # a lone CNN trains by its own fit


def test_grouped_batchnorm_with_row_mask_is_each_models_own():
    """With a row mask, model g's channels are normalized over its own real rows only, and its running
    statistics move as BatchNorm2d's alone on those rows; a model without real rows keeps them."""
    torch.manual_seed(0)
    g, c, b = 3, 4, 6
    bns = [nn.BatchNorm2d(c) for _ in range(g)]
    for bn in bns:
        nn.init.uniform_(bn.weight)
        nn.init.uniform_(bn.bias)
    grouped = GroupedBatchNorm2d(g, c, 1e-5, 0.1)
    with torch.no_grad():
        for attr in ("weight", "bias", "running_mean", "running_var"):
            getattr(grouped, attr).copy_(torch.cat([getattr(bn, attr) for bn in bns]))
    x = torch.randn(g, b, c, 5, 5) * 3 + 1
    counts = [6, 2, 0]
    grouped.row_mask = torch.arange(b)[:, None] < torch.tensor(counts)[None, :]
    out = from_grouped(grouped(to_grouped(x)).flatten(1), g).view(g, b, c, 5, 5)
    for i, (bn, k) in enumerate(zip(bns, counts)):
        sl = slice(i * c, (i + 1) * c)
        if k:
            torch.testing.assert_close(out[i, :k], bn(x[i, :k]), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(grouped.running_var[sl], bn.running_var, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(grouped.running_mean[sl], bn.running_mean, rtol=1e-5, atol=1e-6)
        else:
            assert torch.equal(grouped.running_mean[sl], torch.zeros(c))
            assert torch.equal(grouped.running_var[sl], torch.ones(c))


def test_group_and_ungroup_round_trip_and_refusals():
    """Grouping copies each model's weights into its own channels (the grouped forward gives each
    model's own logits), ungrouping copies them back; a layer without a grouped form is refused."""
    from defenses.models import build_model

    torch.manual_seed(0)
    for kind in ("cnn", "airbench", "mlp"):
        nets = [build_model(kind, (3, 32, 32), 10, 4).eval() for _ in range(3)]
        grouped = group_networks(nets).eval()
        x = torch.randn(3, 5, 3, 32, 32)
        with torch.no_grad():
            z = from_grouped(grouped(to_grouped(x)), 3)
            for i, n in enumerate(nets):
                torch.testing.assert_close(z[i], n(x[i]), rtol=1e-4, atol=1e-5)
        fresh = [build_model(kind, (3, 32, 32), 10, 4) for _ in range(3)]
        ungroup_into(grouped, fresh)
        for a, b in zip(nets, fresh):
            for (k, v), w in zip(a.state_dict().items(), b.state_dict().values()):
                assert torch.equal(v, w), k
    assert groupable(build_model("cnn-gn", (3, 32, 32), 10, 4)) is not None  # GroupNorm: not grouped
    assert not stackable(TrainConfig(model="cnn-gn")) and not stackable(TrainConfig(model="wrn16-4"))
    assert stackable(TrainConfig(model="cnn")) and stackable(TrainConfig(model="airbench"))
    with pytest.raises(ValueError, match="no grouped form"):
        group_networks([build_model("mlp-bn", (3, 8, 8), 10, 4)] * 2)
