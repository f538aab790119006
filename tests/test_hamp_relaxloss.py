"""HAMP and RelaxLoss: the mechanisms themselves, on tiny real models."""

import numpy as np
import pytest
import torch

from conftest import tiny_overrides
from defenses.base import FitContext, LabeledImages
from defenses.hamp import HAMP, rank_remap, soft_label_confidence
from defenses.models import build_model
from defenses.relaxloss import relaxloss_loss
from harness.defense_config import build_config
from harness.core.data import load_digits


@pytest.mark.parametrize("gamma,p,rest", [(0.95, 0.269814, 0.081132), (0.99, 0.170038, 0.092218),
                                          (0.9996837722339832, 0.111640, 0.098707)])
def test_hamp_soft_labels_hit_the_entropy_threshold(gamma, p, rest):
    got = soft_label_confidence(gamma, 10)
    assert got == pytest.approx(p, abs=2e-6) and (1 - got) / 9 == pytest.approx(rest, abs=2e-6)


def test_rank_remap_keeps_the_order_and_the_argmax_even_with_ties():
    rng = np.random.default_rng(0)
    real = rng.integers(0, 4, size=(500, 10)).astype(np.float64)  # many ties
    rand = rng.normal(size=(500, 10))
    out = rank_remap(real, rand)
    assert (out.argmax(1) == real.argmax(1)).all()
    for r, o in zip(real, out):
        # strict order of real logits is kept; scores are the sorted random ones
        i, j = np.nonzero(r[:, None] < r[None, :])
        assert (o[i] < o[j]).all()
    np.testing.assert_allclose(np.sort(out, 1)[:, :-1], np.sort(rand, 1)[:, :-1])


def _digits_train(n=400):
    d = load_digits(497, seed=0)
    return d, LabeledImages(d.x_train[:n], d.y_train[:n], 10, d.mean, d.std, d.augment)


def test_hamp_served_output_keeps_the_raw_ranking_and_has_high_entropy():
    d, train = _digits_train(n=1300)
    cfg = build_config("quick", {**tiny_overrides(), "defense": "hamp", "train.epochs": 20, "train.width": 256})
    served = HAMP().fit(train, FitContext(seed=0, device="cpu", train=cfg.train))
    raw = served.raw_query(d.x_test)
    out = served.query(d.x_test)
    assert (out.argmax(1) == raw.argmax(1)).all()
    assert (np.argsort(out, 1, kind="stable") == np.argsort(raw, 1, kind="stable")).mean() > 0.99
    p = torch.softmax(torch.tensor(out, dtype=torch.float64), 1).numpy()
    entropy = -(p * np.log(p)).sum(1) / np.log(10)
    assert entropy.min() > 0.9  # near-uniform scores: HAMP's training makes outputs on noise flat
    assert not np.allclose(out, raw)
    assert (raw.argmax(1) == d.y_test).mean() > 0.5  # it still classifies


def test_hamp_with_a_random_image_bank_draws_each_querys_scores_from_the_banks_logits():
    from defenses.hamp import HAMPServed, random_bank
    from defenses.base import TorchClassifier

    d, _ = _digits_train(n=200)
    torch.manual_seed(0)
    model = TorchClassifier(build_model("mlp", (1, 8, 8), 10, 32).eval(), d.mean, d.std, "cpu")
    bank = random_bank(5, (1, 8, 8))
    assert np.array_equal(bank, random_bank(5, (1, 8, 8)))  # one bank for every model
    served = HAMPServed(model, (1, 8, 8), seed=1, bank=bank)
    out = served.query(d.x_test[:300])
    sorted_bank = {tuple(np.sort(row).round(5)) for row in model.query(bank)}
    used = {tuple(np.sort(row).round(5)) for row in out}
    assert used <= sorted_bank and len(used) == 5  # every answer's scores are one bank image's logits
    assert (out.argmax(1) == served.raw_query(d.x_test[:300]).argmax(1)).all()
    with pytest.raises(ValueError, match="random_images"):
        HAMP(random_images=0)


def _ce_after_one_step(alpha: float, epoch: int) -> tuple[float, float]:
    torch.manual_seed(0)
    d, _ = _digits_train()
    x = torch.tensor(d.x_train[:256], dtype=torch.float32) / 255.0
    y = torch.tensor(d.y_train[:256])
    net = build_model("mlp", (1, 8, 8), 10, 64)
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    for _ in range(200):  # fit until the loss is well below 1
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    before = torch.nn.functional.cross_entropy(net(x), y).item()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    opt.zero_grad()
    relaxloss_loss(net(x), y, epoch, alpha).backward()
    opt.step()
    return before, torch.nn.functional.cross_entropy(net(x), y).item()


@pytest.mark.parametrize("epoch", [0, 1])
def test_relaxloss_ascends_when_the_loss_is_under_the_target(epoch):
    before, after = _ce_after_one_step(alpha=5.0, epoch=epoch)
    assert before < 5.0 and after > before


@pytest.mark.parametrize("epoch", [0, 1])
def test_relaxloss_descends_when_the_loss_is_above_the_target(epoch):
    before, after = _ce_after_one_step(alpha=1e-4, epoch=epoch)
    assert before > 1e-4 and after < before
