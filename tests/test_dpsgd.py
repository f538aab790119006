"""DP-SGD baselines (defenses/dpsgd.py): clipping, augmult, the noiseless update, accounting, EMA,
the GroupNorm WRN and the served model. Tiny MLPs on real digits; each test takes about a second."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from opacus.accountants import PRVAccountant, RDPAccountant
from opacus.accountants.utils import get_noise_multiplier
from torch import nn

from defenses.base import FitContext, LabeledImages
from defenses.dpsgd import (
    DPSGD,
    DPSGDHigh,
    DPSGDMedium,
    DPSGDSettings,
    DPSGDTrainer,
    DPSGDVeryHigh,
    check_accountant,
    clip_per_sample,
    ema_decay_at,
    epsilon_of,
    make_accountant,
    sum_clipped,
)
from defenses.models import build_model
from harness.core.config import TrainConfig
from harness.defense_config import build_config
from harness.core.data import load_digits
from harness.plugins import resolve

INFO_KEYS = {"epsilon", "delta", "noise_multiplier", "sample_rate", "steps", "accountant", "batch_size", "epochs",
             "augmult", "max_grad_norm"}


@pytest.fixture(scope="module")
def digits() -> tuple[LabeledImages, np.ndarray, np.ndarray]:
    d = load_digits(497, 0)
    train = LabeledImages(d.x_train[:300], d.y_train[:300], 10, d.mean, d.std, d.augment)
    return train, d.x_test, d.y_test


def settings(**kw) -> DPSGDSettings:
    base = dict(noise_multiplier=0.5, max_grad_norm=1.0, batch_size=32, epochs=1, lr=1.0, augmult=4,
                ema_decay=0.9999, delta=1e-5, accountant="rdp", physical_batch_size=16)
    base.update(kw)
    return DPSGDSettings(**base)


def tiny_net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return build_model("mlp", (1, 8, 8), 10, 16)


def normalize(train: LabeledImages, x: torch.Tensor) -> torch.Tensor:
    return (x.float() / 255.0 - train.mean[0]) / train.std[0]


def autograd_grad(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """Plain autograd gradient of the mean cross-entropy over the batch x (reference)."""
    net.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(net(x), y).backward()
    return [p.grad.detach().clone() for p in net.parameters()]


def test_per_sample_gradient_is_the_average_over_augmented_copies_and_is_clipped(digits):
    train = digits[0]
    tr = DPSGDTrainer(tiny_net(), train, settings(augmult=4), seed=3, device="cpu", augment=True)
    idx = torch.arange(10)
    gen_state = tr.sample_gen.get_state()
    x = tr._inputs(idx)  # (10, 4, 1, 8, 8), normalized, 4 random shifts per sample
    assert x.shape == (10, 4, 1, 8, 8)
    assert not torch.equal(x[:, 0], x[:, 1])  # the copies are augmented independently
    params = {k: p.detach() for k, p in tr.net.named_parameters()}
    grads = tr._grad_fn(params, {}, x, tr._y[idx].view(-1, 1))
    names = [k for k, _ in tr.net.named_parameters()]
    for i in range(10):  # per-sample gradient = mean over its K copies (= autograd on the K-batch)
        ref = autograd_grad(tr.net, x[i], tr._y[idx[i]].repeat(4))
        for k, r in zip(names, ref):
            torch.testing.assert_close(grads[k][i], r, rtol=1e-5, atol=1e-6)

    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in grads.values()))
    c = float(norms.median())  # half the samples above the bound, half at or below
    clipped, before = clip_per_sample(grads, c)
    torch.testing.assert_close(before, norms)
    after = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in clipped.values()))
    assert (after <= c * (1 + 1e-5)).all()
    big = norms > c
    assert big.any() and (~big).any()
    torch.testing.assert_close(after[big], torch.full_like(after[big], c))
    for k in names:
        assert torch.equal(clipped[k][~big], grads[k][~big])  # unclipped gradients are unchanged
        scale = (c / norms[big]).view(-1, *[1] * (grads[k].dim() - 1))
        torch.testing.assert_close(clipped[k][big], grads[k][big] * scale)
    for k, s in sum_clipped(grads, c).items():  # the training path's contraction = sum of the clipped
        torch.testing.assert_close(s, clipped[k].sum(0), rtol=1e-5, atol=1e-6)
    # the same generator state gives the same augmented copies (determinism)
    tr.sample_gen.set_state(gen_state)
    assert torch.equal(tr._inputs(idx), x)


@pytest.mark.parametrize("kind,width", [("cnn-gn", 4), ("wrn16-4-gn", 0)])
def test_per_sample_gradients_of_the_groupnorm_convnets(digits, kind, width):
    train = digits[0]
    torch.manual_seed(0)
    net = build_model(kind, (1, 8, 8), 10, width)
    tr = DPSGDTrainer(net, train, settings(augmult=2), seed=0, device="cpu", augment=True)
    idx = torch.arange(2)
    x = tr._inputs(idx)
    params = {k: p.detach() for k, p in net.named_parameters()}
    grads = tr._grad_fn(params, {}, x, tr._y[idx].view(-1, 1))
    names = [k for k, _ in net.named_parameters()]
    for i in range(2):
        ref = autograd_grad(net, x[i], tr._y[idx[i]].repeat(2))
        for k, r in zip(names, ref):
            torch.testing.assert_close(grads[k][i], r, rtol=1e-4, atol=1e-5)  # float32 through 16 layers


def test_noiseless_full_batch_step_equals_the_mean_clipped_gradient(digits):
    train = digits[0]
    n = len(train)
    s = settings(noise_multiplier=0.0, augmult=1, batch_size=n, lr=0.5, max_grad_norm=0.3)
    tr = DPSGDTrainer(tiny_net(1), train, s, seed=0, device="cpu", augment=False)
    assert tr.q == 1.0 and tr.expected_batch == n
    ref_net = tiny_net(1)
    before = [p.detach().clone() for p in ref_net.parameters()]
    xs = normalize(train, torch.from_numpy(train.x))
    ys = torch.from_numpy(train.y)
    mean_clipped = [torch.zeros_like(p) for p in before]
    for i in range(n):  # reference: per-sample autograd, clip by hand, average
        g = autograd_grad(ref_net, xs[i : i + 1], ys[i : i + 1])
        norm = math.sqrt(sum(float(t.pow(2).sum()) for t in g))
        f = min(1.0, 0.3 / norm)
        for acc, t in zip(mean_clipped, g):
            acc += f * t / n
    batch = tr.poisson_batch()
    assert len(batch) == n  # q = 1: every sample
    tr.step(batch)
    for p, b, g in zip(tr.net.parameters(), before, mean_clipped):
        torch.testing.assert_close(p.detach(), b - 0.5 * g, rtol=1e-4, atol=1e-6)
    assert tr.step_count == 1 and tr.info()["steps"] == 1


def test_noise_is_added_with_std_sigma_c_over_the_expected_batch(digits):
    train = digits[0]
    s = settings(noise_multiplier=2.0, max_grad_norm=0.5, batch_size=30)
    tr = DPSGDTrainer(tiny_net(), train, s, seed=0, device="cpu", augment=True)
    g = tr.noisy_gradient(torch.zeros(0, dtype=torch.long))  # empty batch: pure noise
    flat = torch.cat([t.flatten() for t in g.values()])
    expected = 2.0 * 0.5 / tr.expected_batch
    assert abs(float(flat.std()) / expected - 1) < 0.05 and abs(float(flat.mean())) < 0.05 * expected


def test_empty_poisson_batch_still_steps(digits):
    train = digits[0]
    tr = DPSGDTrainer(tiny_net(), train, settings(noise_multiplier=0.0, batch_size=1), seed=0, device="cpu",
                      augment=True)
    before = [p.detach().clone() for p in tr.net.parameters()]
    tr.step(torch.zeros(0, dtype=torch.long))
    assert tr.empty_batches == 1 and tr.step_count == 1 and len(tr.accountant.history) == 1
    for p, b in zip(tr.net.parameters(), before):
        assert torch.equal(p.detach(), b)  # no data, no noise: no change


@pytest.mark.filterwarnings("ignore:Optimal order is the")  # Opacus's RDP search hitting an end of its orders
def test_epsilon_matches_opacus_accountants():
    q, sigma, steps = 0.04, 0.2, 600
    acct = make_accountant("rdp")
    for _ in range(steps):
        acct.step(noise_multiplier=sigma, sample_rate=q)
    eps = epsilon_of(acct, 1e-5)
    ref = RDPAccountant()
    ref.history = [(sigma, q, steps)]
    assert eps == pytest.approx(ref.get_epsilon(delta=1e-5), rel=1e-12)
    # inverse relation: the noise Opacus needs for this epsilon is sigma again
    assert get_noise_multiplier(target_epsilon=eps, target_delta=1e-5, sample_rate=q, steps=steps,
                                accountant="rdp", epsilon_tolerance=0.01) == pytest.approx(sigma, rel=1e-3)
    # the paper's medium setting (N = 49,747, q = 1/25, 5000 steps): table 3 reports 3558
    paper = make_accountant("rdp")
    paper.history = [(0.2, 1 / 25, 5000)]
    assert epsilon_of(paper, 1e-5) == pytest.approx(3558, rel=1e-3)
    # PRV for a moderate setting; refused (before training) where its grid would not fit in memory
    prv = make_accountant("prv")
    prv.history = [(1.0, q, 200)]
    ref_prv = PRVAccountant()
    ref_prv.history = [(1.0, q, 200)]
    assert epsilon_of(prv, 1e-5) == pytest.approx(ref_prv.get_epsilon(delta=1e-5), rel=1e-9)
    check_accountant("prv", 1.0, q, 200, 1e-5)
    with pytest.raises(ValueError, match="PRV accountant would need"):
        check_accountant("prv", 0.2, 1 / 25, 5000, 1e-5)
    assert epsilon_of(make_accountant("rdp"), 1e-5) == 0.0
    with pytest.raises(ValueError):
        make_accountant("gdp")


def test_ema_decay_schedule_and_update(digits):
    assert ema_decay_at(1, 0.9999) == pytest.approx(2 / 11)
    assert ema_decay_at(2, 0.9999) == pytest.approx(3 / 12)
    assert ema_decay_at(10**6, 0.9999) == 0.9999
    train = digits[0]
    tr = DPSGDTrainer(tiny_net(), train, settings(noise_multiplier=0.1), seed=0, device="cpu", augment=True)
    init = [p.detach().clone() for p in tr.ema.parameters()]
    tr.step(tr.poisson_batch())
    for e, p, i in zip(tr.ema.parameters(), tr.net.parameters(), init):
        torch.testing.assert_close(e, 2 / 11 * i + 9 / 11 * p.detach())
        assert not torch.equal(e, p)


def test_gn_wrn_has_the_papers_parameter_count_and_init():
    torch.manual_seed(0)
    net = build_model("wrn16-4-gn", (3, 32, 32), 10, width=0)
    assert sum(p.numel() for p in net.parameters()) == 2_751_562
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in net.modules())
    gns = [m for m in net.modules() if isinstance(m, nn.GroupNorm)]
    assert all(m.num_groups == min(16, m.num_channels) for m in gns)
    assert all(torch.equal(m.weight, torch.ones_like(m.weight)) and not m.bias.any() for m in gns)
    convs = [m for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    assert all(not m.bias.any() for m in convs)
    w = net.blocks[2].conv_in.weight.detach()  # 64 -> 128, 3x3: std 1/sqrt(576)
    assert float(w.std()) == pytest.approx(1 / math.sqrt(64 * 9), rel=0.05)
    assert net(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    assert build_model("cnn-gn", (3, 32, 32), 10, 8)(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_served_model_is_the_ema_model_and_info_has_a_finite_epsilon(digits):
    train, x_test, y_test = digits
    params = dict(noise_multiplier=0.5, batch_size=32, epochs=3, lr=2.0, augmult=2)
    ctx = FitContext(seed=5, device="cpu", train=TrainConfig(model="mlp", width=32, augment=True))
    served = DPSGDMedium(**params).fit(train, ctx)
    info = served.info()
    assert INFO_KEYS <= set(info)
    assert math.isfinite(info["epsilon"]) and info["epsilon"] > 0
    n = len(train)
    q = 1 / math.ceil(n / 32)  # the paper's rate (Opacus's DataLoader), poisson_rate "paper"
    assert info["sample_rate"] == pytest.approx(q) and info["poisson_rate"] == "paper"
    assert info["steps"] == 3 * math.ceil(n / 32)
    assert (info["noise_multiplier"], info["augmult"], info["delta"], info["accountant"]) == (0.5, 2, 1e-5, "rdp")
    ref = RDPAccountant()
    ref.history = [(0.5, q, info["steps"])]
    assert info["epsilon"] == pytest.approx(ref.get_epsilon(delta=1e-5))
    acc = float((served.query(x_test).argmax(1) == y_test).mean())
    assert acc > 0.5  # it learns

    # the same training by hand: the served outputs are the EMA model's, not the last iterate's
    from defenses.training import seeded_init

    net = seeded_init(lambda: build_model("mlp", (1, 8, 8), 10, 32), 5)
    s = DPSGDMedium(**params).settings
    tr = DPSGDTrainer(net, train, s, seed=5, device="cpu", augment=True)
    ema = tr.train()
    xq = x_test[:50]
    xt = normalize(train, torch.from_numpy(xq))
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(served.query(xq)), ema(xt))
        assert not torch.allclose(ema(xt), tr.net(xt), atol=1e-3)


def test_training_is_deterministic_from_the_seed(digits):
    train = digits[0]
    ctx = FitContext(seed=9, device="cpu", train=TrainConfig(model="mlp", width=16, augment=True))
    d = DPSGDHigh(batch_size=64, epochs=1, augmult=2)
    a, b = d.fit(train, ctx), d.fit(train, ctx)
    assert np.array_equal(a.query(train.x[:20]), b.query(train.x[:20]))
    other = d.fit(train, FitContext(seed=10, device="cpu", train=ctx.train))
    assert not np.array_equal(a.query(train.x[:20]), other.query(train.x[:20]))


def test_batchnorm_models_and_bad_params_are_refused(digits):
    train = digits[0]
    with pytest.raises(ValueError, match="BatchNorm"):
        DPSGDTrainer(build_model("cnn", (1, 8, 8), 10, 4), train, settings(), seed=0, device="cpu", augment=True)
    with pytest.raises(ValueError, match="no parameter"):
        DPSGDMedium(momentum=0.9)
    with pytest.raises(ValueError, match="accountant"):
        DPSGDMedium(accountant="moments")
    with pytest.raises(ValueError, match="augmult"):
        DPSGDMedium(augmult=0)


def test_registry_presets_and_table3_defaults():
    for name, cls, (sigma, b, e) in [("dpsgd-medium", DPSGDMedium, (0.2, 2048, 200)),
                                     ("dpsgd-high", DPSGDHigh, (0.00625, 64, 16)),
                                     ("dpsgd-veryhigh", DPSGDVeryHigh, (0.003125, 64, 25))]:
        assert resolve("defenses", name) is cls and issubclass(cls, DPSGD)
        p = cls.param_defaults
        assert (p["noise_multiplier"], p["batch_size"], p["epochs"]) == (sigma, b, e)
        assert (p["lr"], p["augmult"], p["max_grad_norm"], p["delta"]) == (4.0, 8, 1.0, 1e-5)
        assert cls.default_canary == ("mislabeled", "ood", "blank") and cls.adaptive_attacks == ("lira",)
        paper = build_config("paper", {"defense": name})
        assert paper.train.model == "wrn16-4-gn" and paper.train.augment
        assert {k: paper.defense_params[k] for k in ("noise_multiplier", "batch_size", "epochs", "lr", "augmult")} \
            == {"noise_multiplier": sigma, "batch_size": b, "epochs": e, "lr": 4.0, "augmult": 8}
        for preset in ("quick", "cifar10"):
            cfg = build_config(preset, {"defense": name})
            assert cfg.train.model in ("mlp", "cnn-gn") and cfg.train.augment
            assert cfg.defense_params["noise_multiplier"] == sigma
            cls(**cfg.defense_params)  # valid parameters


@pytest.mark.filterwarnings("ignore:Optimal order is the")
@pytest.mark.parametrize("target,q,steps,accountant", [(3.0, 0.0528, 570, "rdp"), (0.7, 0.01, 2000, "rdp"),
                                                       (50.0, 1 / 19, 570, "rdp"), (3.0, 0.0528, 570, "prv")])
def test_target_epsilon_is_the_smallest_noise_the_accountant_allows(target, q, steps, accountant):
    """noise_for_epsilon: its noise gives at most the target by the run's accountant, 0.1% less noise
    gives more; Opacus's get_noise_multiplier (its own tolerance 0.01) lands within 1% of it."""
    from defenses.dpsgd import epsilon_for_noise, noise_for_epsilon

    sigma = noise_for_epsilon(target, q, steps, 1e-5, accountant)
    assert epsilon_for_noise(accountant, sigma, q, steps, 1e-5) <= target
    assert epsilon_for_noise(accountant, sigma * 0.999, q, steps, 1e-5) > target
    ref = get_noise_multiplier(target_epsilon=target, target_delta=1e-5, sample_rate=q, steps=steps,
                               accountant=accountant)
    assert sigma == pytest.approx(ref, rel=0.01)


def test_target_epsilon_trains_at_the_solved_noise_and_records_both(digits):
    """defense_params.target_epsilon: the model's record holds the target, the solved noise (for its own
    training set size) and the epsilon the accountant reports (at most the target)."""
    from defenses.dpsgd import noise_for_epsilon

    train = digits[0]
    ctx = FitContext(seed=3, device="cpu", train=TrainConfig(model="mlp", width=16, augment=False))
    info = DPSGD(target_epsilon=4.0, batch_size=64, epochs=2, lr=2.0, augmult=1).fit(train, ctx).info()
    n = len(train)
    q, steps = 1 / math.ceil(n / 64), 2 * math.ceil(n / 64)
    assert info["target_epsilon"] == 4.0 and info["steps"] == steps
    assert info["noise_multiplier"] == noise_for_epsilon(4.0, q, steps, 1e-5, "rdp")
    assert 3.9 < info["epsilon"] <= 4.0
    assert "target_epsilon" not in DPSGD(batch_size=64, epochs=1, augmult=1).fit(train, ctx).info()


def test_target_epsilon_mistakes_are_refused_before_training(tmp_path):
    from harness.api import evaluate
    from harness.core.errors import ConfigError

    with pytest.raises(ConfigError, match="replaces defense_params.noise_multiplier"):
        build_config("quick", {"defense": "dpsgd", "defense_params.target_epsilon": 3.0,
                               "defense_params.noise_multiplier": 1.0})
    with pytest.raises(ValueError, match="target_epsilon must be a positive number"):
        DPSGD(target_epsilon=-1.0)
    with pytest.raises(ConfigError, match="below what the rdp accountant certifies"):
        evaluate("dpsgd", "quick", {"defense_params.target_epsilon": 0.001, "run.out": str(tmp_path)})
    assert not any(tmp_path.iterdir())  # nothing written
