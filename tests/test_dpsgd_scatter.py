"""Training on fixed scattering features (defenses/scatter_models.py): the loops compute the training
set's features once and train the head, the same arithmetic as through the network; DP-SGD's linear
head clips its per-sample gradients in closed form (defenses/dpsgd_trainer.py, linear_clipped_sum)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from defenses.base import FitContext, LabeledImages
from defenses.dpsgd_trainer import DPSGDSettings, DPSGDTrainer, linear_clipped_sum, per_sample_grad_fn, sum_clipped
from defenses.models import build_model
from defenses.scatter_models import FeatureNet, ScatterLinear
from defenses.training import train_classifier
from harness.core.augment import AugmentSpec
from harness.core.config import TrainConfig


pytestmark = pytest.mark.usefixtures("scatter_cache")


def _images(n: int, seed: int = 0) -> LabeledImages:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
    y = rng.integers(0, 10, size=n).astype(np.int64)
    return LabeledImages(x=x, y=y, num_classes=10, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25),
                         augment=AugmentSpec(flip=True, shift=4))


def test_the_linear_heads_closed_form_clipped_sum_equals_the_per_sample_gradients():
    torch.manual_seed(0)
    head = ScatterLinear(243, 64, 10)
    x = torch.randn(12, 243, 8, 8) * 0.3
    y = torch.randint(0, 10, (12,))
    params = {k: p.detach() for k, p in head.named_parameters()}
    grads = per_sample_grad_fn(head)(params, {}, x.unsqueeze(1), y.view(-1, 1))
    for c in (1e-3, 0.1, 1e3):  # every sample clipped, some, none
        want = sum_clipped(grads, c)
        got = linear_clipped_sum(head.fc, x.flatten(1), y, c)
        assert set(got) == set(want)
        for k in want:
            assert torch.allclose(got[k], want[k], rtol=1e-4, atol=1e-6), (c, k)


def test_training_on_cached_features_equals_training_through_the_network():
    """train_classifier on a FeatureNet (features computed once, head trained) gives the weights that
    the same steps through the full network give (the cache and the map are the same arithmetic)."""
    train = _images(40)
    cfg = TrainConfig(model="scatter-linear", epochs=2, batch_size=16, lr=0.05, augment=False)
    ctx = FitContext(seed=3, device="cpu", train=cfg)
    torch.manual_seed(1)
    fast = build_model("scatter-linear", (3, 32, 32), 10, 1)
    slow = FeatureNet(ScatterLinear(243, 64, 10))
    slow.load_state_dict(fast.state_dict())
    init = fast.head.fc.weight.detach().clone()
    train_classifier(fast, train, ctx)
    # the reference: the loop with the network itself (what train_classifier did before it split off the head)
    from defenses.base import Normalizer

    opt = torch.optim.SGD(slow.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(ctx.seed)
    norm = Normalizer(train.mean, train.std, "cpu")
    x_all, y_all = torch.from_numpy(train.x), torch.from_numpy(train.y)
    from defenses.training import lr_factor

    step, steps = 0, 3
    for _ in range(cfg.epochs):
        perm = torch.randperm(len(train), generator=gen)
        for i in range(0, len(train), cfg.batch_size):
            idx = perm[i : i + cfg.batch_size]
            for g in opt.param_groups:
                g["lr"] = cfg.lr * lr_factor(step, steps * cfg.epochs, steps, cfg)
            loss = torch.nn.functional.cross_entropy(slow(norm(x_all[idx])), y_all[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
    for (k, a), (_, b) in zip(fast.state_dict().items(), slow.state_dict().items()):
        assert torch.allclose(a, b, atol=1e-6), k
    assert (fast.head.fc.weight - init).abs().max() > 1e-3  # it trained


@pytest.mark.parametrize("kind", ["scatter-linear", "scatter-cnn"])
def test_dpsgd_trains_the_head_and_serves_a_network_on_images(kind):
    train = _images(30)
    settings = DPSGDSettings(noise_multiplier=1.0, max_grad_norm=0.1, batch_size=10, epochs=2, lr=1.0, augmult=1,
                             ema_decay=0.0, delta=1e-5, accountant="rdp", physical_batch_size=64)
    torch.manual_seed(0)
    net = build_model(kind, (3, 32, 32), 10, 8)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    trainer = DPSGDTrainer(net, train, settings, seed=0, device="cpu", augment=False)
    assert trainer._x.shape[1:] == (243, 8, 8)  # the features, computed once
    assert trainer._linear_head == (kind == "scatter-linear")
    served = trainer.train()
    assert isinstance(served, FeatureNet)
    assert set(served.state_dict()) == set(before)
    assert any(not torch.equal(served.state_dict()[k], before[k]) for k in before)
    with torch.no_grad():
        out = served(torch.rand(3, 3, 32, 32))
    assert out.shape == (3, 10) and torch.isfinite(out).all()
    assert trainer.info()["steps"] == 2 * 3 and np.isfinite(trainer.info()["epsilon"])


def test_row_gather_returns_the_rows_asked_for_through_one_reused_buffer():
    """RowGather(x)(idx) equals x[idx] for batches of varying size (Poisson batches), growing its
    buffer when a batch is larger and writing every batch into the same storage."""
    from defenses.training import RowGather

    x = torch.randn(50, 3, 4)
    rows = RowGather(x)
    gen = torch.Generator().manual_seed(0)
    ptrs = set()
    for n in (10, 7, 12, 3, 30, 30, 1):
        idx = torch.randperm(50, generator=gen)[:n]
        got = rows(idx)
        assert got.shape == (n, 3, 4) and torch.equal(got, x[idx])
        ptrs.add(got.data_ptr())
    assert len(ptrs) == 2  # one buffer of 13 rows (10 x 1.25 + 1), grown once for 30 (to 38)
