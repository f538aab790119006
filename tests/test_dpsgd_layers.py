"""DP-SGD's clipped sum layer by layer (defenses/dpsgd_layers.py) against the per-sample gradients of
the vmap path (defenses/dpsgd_trainer.py: per_sample_grad_fn, sum_clipped)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from defenses.base import LabeledImages
from defenses.dpsgd_layers import LayerClipper, supports
from defenses.dpsgd_trainer import DPSGDSettings, DPSGDTrainer, per_sample_grad_fn, sum_clipped
from defenses.models import build_model
from defenses.scatter_models import ScatterCNN
from harness.core.augment import AugmentSpec


def _want(net: nn.Module, x: torch.Tensor, y: torch.Tensor, c: float) -> dict[str, torch.Tensor]:
    params = {k: p.detach() for k, p in net.named_parameters()}
    return sum_clipped(per_sample_grad_fn(net)(params, {}, x, y.view(-1, 1)), c)


def _close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> float:
    assert list(got) == list(want)  # every parameter, in the network's order (the noise's order)
    return max(float((got[k] - want[k]).abs().max() / want[k].abs().max()) for k in want)


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("which", ["scatter-cnn", "mlp"])
def test_the_layerwise_clipped_sum_equals_the_per_sample_gradients(which, k):
    """Every sample clipped, some, none; K augmented copies per sample (their mean gradient is the
    sample's, so its norm is not the copies' norms)."""
    torch.manual_seed(0)
    if which == "scatter-cnn":
        net, shape = ScatterCNN(243, 8, 10), (243, 8, 8)
    else:
        net, shape = build_model("mlp", (1, 8, 8), 10, 32), (1, 8, 8)
    x, y = torch.randn(20, k, *shape) * 0.5, torch.randint(0, 10, (20,))
    clipper = LayerClipper(net)
    params = {n: p.detach() for n, p in net.named_parameters()}
    g = per_sample_grad_fn(net)(params, {}, x, y.view(-1, 1))
    norms = torch.linalg.vector_norm(torch.stack([v.flatten(1).norm(dim=1) for v in g.values()]), dim=0)
    mid = float(norms.median())  # clips about half
    assert (norms > mid).any() and (norms < mid).any()
    for c in (1e-3, mid, 1e3):
        assert _close(clipper.clipped_sum(x, y, c), _want(net, x, y, c)) < 1e-5, c


def test_the_first_layers_patch_products_computed_once_give_the_same_sum():
    """The first convolution on fixed rows: A_i A_i^T computed once per row and looked up by index
    (repeated indices included) gives the sum of the unfolded path."""
    torch.manual_seed(1)
    net = ScatterCNN(243, 8, 10)
    rows, labels = torch.randn(40, 243, 8, 8) * 0.5, torch.randint(0, 10, (40,))
    clipper = LayerClipper(net, fixed_inputs=rows)
    assert clipper._gram_layer == 0 and clipper._grams.shape == (40, 64, 64)
    idx = torch.tensor([3, 7, 7, 20, 39, 0])
    x, y = rows[idx].unsqueeze(1), labels[idx]
    for c in (1e-3, 0.05, 1e3):
        assert _close(clipper.clipped_sum(x, y, c, idx), _want(net, x, y, c)) < 1e-5
    # the wrong rows' products give a wrong sum: the lookup is used
    wrong = clipper.clipped_sum(x, y, 0.05, torch.flip(idx, [0]))
    assert _close(wrong, _want(net, x, y, 0.05)) > 1e-3


class _Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.tanh(self.fc(x)))


class _InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(nn.functional.relu(self.a(x), inplace=True))


def test_networks_outside_the_covered_form_are_refused_not_summed_wrong():
    x, y = torch.randn(5, 1, 4), torch.randint(0, 3, (5,))
    with pytest.raises(RuntimeError, match="ran 2 times"):
        LayerClipper(_Twice()).clipped_sum(x, y % 3, 1.0)
    with pytest.raises(RuntimeError, match="modified in place"):
        LayerClipper(_InPlace()).clipped_sum(x, y, 1.0)
    gn = build_model("cnn-gn", (3, 32, 32), 10, 8)  # GroupNorm's affine parameters: not covered
    assert not supports(gn)
    with pytest.raises(ValueError, match="outside Linear and Conv2d"):
        LayerClipper(gn)


@pytest.mark.usefixtures("scatter_cache")
def test_the_dpsgd_trainer_of_the_cnn_head_takes_the_layerwise_sum():
    """DPSGDTrainer on scatter-cnn (fixed features, no augmentation): the layer path with the first
    layer's products computed once, equal to the vmap path's sum over physical chunks."""
    rng = np.random.default_rng(0)
    train = LabeledImages(x=rng.integers(0, 256, (30, 3, 32, 32), dtype=np.uint8),
                          y=rng.integers(0, 10, 30).astype(np.int64), num_classes=10, mean=(0.5,) * 3,
                          std=(0.25,) * 3, augment=AugmentSpec(flip=True, shift=4))
    net = build_model("scatter-cnn", (3, 32, 32), 10, 64)
    s = DPSGDSettings(noise_multiplier=0.0, max_grad_norm=0.01, batch_size=8, epochs=1, lr=1.0, augmult=1,
                      ema_decay=0.0, delta=1e-5, accountant="rdp", physical_batch_size=4)
    t = DPSGDTrainer(net, train, s, seed=0, device="cpu", augment=False)
    assert t._layers is not None and t._layers._grams is not None
    idx = torch.tensor([0, 5, 9, 11, 29, 2, 17])
    got = t.clipped_sum(idx)
    want = _want(t.net, t._inputs(idx), t._y[idx], s.max_grad_norm)
    assert _close(got, want) < 1e-5
    assert all(float(v.abs().max()) == 0 for v in t.clipped_sum(idx[:0]).values())  # an empty Poisson batch
