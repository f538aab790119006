"""PATE-FM (defenses/pate.py): Confident-GNMax, who sees which labels, the accounting against an
independent RDP accountant, the label-flip game on the quick preset, and refused parameters."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import norm

import defenses.pate as pate
from defenses.base import FitContext, LabeledImages
from defenses import fixmatch
from defenses.fixmatch import FixMatchRecipe, strong_augment, train_fixmatch
from defenses.pate_accounting import (RDP_ORDERS, account, data_dependent_rdp, data_independent_rdp, epsilon_from_rdp,
                                      epsilon_from_rdp_classic, log_q_gnmax, rdp_theorem6)
from harness.core.config import TrainConfig
from harness.core.data import load_digits

TINY = dict(num_teachers=4, sigma1=2.0, sigma2=0.5, threshold=2.0, queries=30, teacher_steps=3, student_steps=4,
            batch_size=8, mu=2, teacher_width=16)


@pytest.fixture(scope="module")
def digits():
    return load_digits(497, 0)


def _train(digits, n=300, y=None):
    return LabeledImages(digits.x_train[:n], digits.y_train[:n] if y is None else y, 10, digits.mean, digits.std,
                         digits.augment)


def _ctx(seed=3):
    return FitContext(seed=seed, device="cpu", train=TrainConfig(model="mlp", width=32, epochs=1))


class RecordingRNG:
    """A numpy Generator that records every normal draw (its scale, its size and the values)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.calls: list[tuple[float, float, tuple, np.ndarray]] = []

    def normal(self, loc, scale, size):
        out = self.rng.normal(loc, scale, size=size)
        self.calls.append((loc, scale, tuple(np.atleast_1d(size)), out))
        return out


# --- Confident-GNMax -----------------------------------------------------------------------------------

def test_confident_gnmax_answers_only_above_the_noisy_threshold_with_the_configured_noise():
    rng = np.random.default_rng(0)
    votes = rng.multinomial(20, [0.5, 0.2, 0.1, 0.1, 0.1], size=400)
    rec = RecordingRNG(1)
    res = pate.confident_gnmax(votes, threshold=11.0, sigma1=3.0, sigma2=1.5, max_answers=60, rng=rec)
    (l1, s1, size1, sel), (l2, s2, size2, rel) = rec.calls
    assert (l1, s1, size1) == (0.0, 3.0, (400,)) and (l2, s2, size2) == (0.0, 1.5, (400, 5))
    noisy_top = votes[:res.asked].max(axis=1) + sel[:res.asked]
    np.testing.assert_array_equal(res.answered, noisy_top >= 11.0)  # answered exactly when the noisy top clears T
    assert res.answered.sum() == 60 == len(res.labels) and res.answered[-1]  # stops at the 60th answer
    assert 60 < res.asked < 400
    np.testing.assert_array_equal(res.labels, np.argmax(votes[:res.asked][res.answered] + rel[:res.asked][res.answered], 1))


def test_confident_gnmax_answer_rate_and_label_noise_follow_sigma1_and_sigma2():
    n = 40000
    votes = np.tile([7, 4], (n, 1))
    res = pate.confident_gnmax(votes, threshold=10.0, sigma1=5.0, sigma2=2.0, max_answers=n,
                               rng=np.random.default_rng(2))
    assert res.asked == n
    rate, want = res.answered.mean(), norm.sf((10 - 7) / 5.0)  # 0.274 (0.382 at sigma1 10, 0.193 at 2.5)
    assert abs(rate - want) < 4 * math.sqrt(want * (1 - want) / n)
    top, want = (res.labels == 0).mean(), norm.cdf(3 / (math.sqrt(2) * 2.0))  # Pr[7 + e0 > 4 + e1]
    m = len(res.labels)
    assert abs(top - want) < 4 * math.sqrt(want * (1 - want) / m)


def test_confident_gnmax_with_too_few_confident_queries_asks_all_of_them():
    votes = np.array([[5, 0], [1, 4], [0, 5]])
    res = pate.confident_gnmax(votes, threshold=4.5, sigma1=1e-9, sigma2=1e-9, max_answers=10,
                               rng=np.random.default_rng(0))
    assert res.asked == 3 and res.answered.tolist() == [True, False, True] and res.labels.tolist() == [0, 1]


# --- who sees which labels -----------------------------------------------------------------------------

def test_teachers_see_only_their_own_partition_and_the_student_only_the_answers(digits, monkeypatch):
    calls = []

    def spy(nets, labeled_x, labeled_y, unlabeled_x, **kw):
        calls.append((len(nets), [x.copy() for x in labeled_x], [y.copy() for y in labeled_y], unlabeled_x))
        return train_fixmatch(nets, labeled_x, labeled_y, unlabeled_x, **kw)

    monkeypatch.setattr(fixmatch, "train_fixmatch", spy)  # pate imports it from there when it trains
    train = _train(digits)
    fit = pate.PATEFM(**TINY).fit_all(train, _ctx())
    (n_t, tx, ty, tu), (n_s, sx, sy, su) = calls
    assert n_t == 4 and n_s == 1
    owners = fit.owner
    assert sorted(np.bincount(owners).tolist()) == [75, 75, 75, 75]  # disjoint, covering, balanced
    for k in range(4):  # teacher k: the images and labels of its own partition, nothing else
        np.testing.assert_array_equal(tx[k], train.x[owners == k])
        np.testing.assert_array_equal(ty[k], train.y[owners == k])
    for u in (tu, su):  # the unlabeled pool: the training images, no labels
        assert u.dtype == np.uint8 and u.shape == train.x.shape and np.array_equal(u, train.x)
    ans = fit.answers
    answered_idx = fit.query_order[:ans.asked][ans.answered]
    np.testing.assert_array_equal(sx[0], train.x[answered_idx])
    np.testing.assert_array_equal(sy[0], ans.labels)  # the released labels, not the private ones
    assert len(ans.labels) == fit.student.info()["queries_answered"] <= 30


def test_the_student_is_the_same_whatever_the_private_labels_given_the_same_votes(digits, monkeypatch):
    fixed = np.random.default_rng(4).multinomial(4, [0.7, 0.1, 0.1, 0.05, 0.05, 0, 0, 0, 0, 0], size=300)
    monkeypatch.setattr(pate, "teacher_votes", lambda teachers, x, *a, **k: fixed[:len(x)])
    train = _train(digits)
    shuffled = np.random.default_rng(5).permutation(train.y)
    a = pate.PATEFM(**TINY).fit_all(train, _ctx())
    b = pate.PATEFM(**TINY).fit_all(_train(digits, y=shuffled), _ctx())
    assert not np.array_equal(shuffled, train.y)
    np.testing.assert_array_equal(a.answers.labels, b.answers.labels)
    for (ka, va), (kb, vb) in zip(a.student.net.state_dict().items(), b.student.net.state_dict().items()):
        assert ka == kb and torch.equal(va, vb), ka  # private labels reach the student only through the answers
    # while the teachers did see the changed labels
    assert any(not torch.equal(p, q) for p, q in zip(a.teachers[0].parameters(), b.teachers[0].parameters()))


def test_fit_is_deterministic_and_records_its_privacy(digits):
    train = _train(digits)
    a = pate.PATEFM(**TINY).fit(train, _ctx())
    b = pate.PATEFM(**TINY).fit(train, _ctx())
    np.testing.assert_array_equal(a.query(digits.x_test[:30]), b.query(digits.x_test[:30]))
    info = a.info()
    assert info["label_mechanism"] == "confident-gnmax" and info["label_delta"] == 1e-5
    assert info["queries_answered"] <= info["queries_asked"] and info["queries_answered"] <= 30
    want = account(np.zeros((info["queries_asked"], 10)), np.r_[np.ones(info["queries_answered"], bool),
                   np.zeros(info["queries_asked"] - info["queries_answered"], bool)], 2.0, 2.0, 0.5, 1e-5)
    assert info["label_epsilon"] == pytest.approx(want.epsilon, rel=1e-12)
    assert info["label_epsilon_data_dependent"] <= info["label_epsilon"] + 1e-9
    assert 0 <= info["ensemble_accuracy"] <= 1 and 0 <= info["teacher_accuracy_mean"] <= 1


# --- accounting ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("sigma1, sigma2, asked, answered", [(160.0, 20.0, 700, 500), (800.0, 300.0, 600, 250),
                                                             (20.0, 2.5, 145, 100), (25.0, 15.625, 81, 50),
                                                             (3.0, 1.0, 1, 1), (5.0, 2.0, 40, 0)])
def test_data_independent_epsilon_equals_dp_accounting(sigma1, sigma2, asked, answered):
    from dp_accounting import GaussianDpEvent, SelfComposedDpEvent
    from dp_accounting.rdp import RdpAccountant

    acc = RdpAccountant(orders=list(RDP_ORDERS))
    acc.compose(SelfComposedDpEvent(GaussianDpEvent(sigma1), asked))  # selection: sensitivity 1
    if answered:  # release: sensitivity sqrt(2), so noise multiplier sigma2 / sqrt(2)
        acc.compose(SelfComposedDpEvent(GaussianDpEvent(sigma2 / math.sqrt(2)), answered))
    eps, _ = epsilon_from_rdp(data_independent_rdp(sigma1, sigma2, asked, answered), 1e-5)
    assert eps == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    # Mironov's conversion is never the smaller one
    assert epsilon_from_rdp_classic(data_independent_rdp(sigma1, sigma2, asked, answered), 1e-5)[0] >= eps


def test_data_independent_rdp_is_alpha_over_sigma_squared_per_answer():
    a = np.array([2.0, 10.0])
    np.testing.assert_allclose(data_independent_rdp(4.0, 2.0, 3, 1, a), 3 * a / 32 + a / 4)


def test_data_dependent_bound_is_below_the_independent_one_and_small_for_unanimous_votes():
    unanimous = np.tile(np.r_[200, np.zeros(9)], (50, 1))
    split = np.tile(np.r_[101, 99, np.zeros(8)], (50, 1))
    ind = data_independent_rdp(150.0, 40.0, 50, 50)
    dep_u = data_dependent_rdp(unanimous, np.ones(50, bool), 100.0, 150.0, 40.0)
    dep_s = data_dependent_rdp(split, np.ones(50, bool), 100.0, 150.0, 40.0)
    assert np.all(dep_u <= ind * (1 + 1e-12)) and np.all(dep_s <= ind * (1 + 1e-12))
    assert epsilon_from_rdp(dep_u, 1e-5)[0] < 0.5 * epsilon_from_rdp(ind, 1e-5)[0]
    assert epsilon_from_rdp(dep_s, 1e-5)[0] == pytest.approx(epsilon_from_rdp(ind, 1e-5)[0], rel=0.05)
    # Theorem 6 at a small q: below alpha / sigma^2 at low orders, equal to it where it does not apply
    logq = log_q_gnmax(np.r_[200, np.zeros(9)], 40.0)
    assert logq < -5
    t6 = rdp_theorem6(logq, 40.0, np.array([2.0, 1e4]))
    assert t6[0] < 2.0 / 40.0**2 and t6[1] == pytest.approx(1e4 / 40.0**2)


# --- FixMatch pieces -------------------------------------------------------------------------------------

def test_strong_augmentation_stays_in_range_changes_images_and_follows_its_generator():
    x = torch.rand(64, 1, 8, 8)
    a = strong_augment(x, torch.Generator().manual_seed(0))
    b = strong_augment(x, torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.shape == x.shape and a.min() >= 0 and a.max() <= 1
    assert (a - x).abs().flatten(1).amax(1).gt(0.05).float().mean() > 0.9  # nearly every image changed


def test_fixmatch_group_trains_each_network_on_its_own_labels(digits):
    x, y = digits.x_train[:200], digits.y_train[:200]
    torch.manual_seed(0)  # the networks' initialization: the same test every run
    nets = [torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)) for _ in range(2)]
    out = train_fixmatch(nets, [x, x], [y, (y + 1) % 10], digits.x_train, recipe=FixMatchRecipe(steps=60, batch_size=32,
                         mu=1, lr=0.1), augment=digits.augment, mean=digits.mean, std=digits.std, seed=0, device="cpu")
    with torch.no_grad():
        z = [net(((torch.from_numpy(x).float() / 255 - digits.mean[0]) / digits.std[0])).argmax(1).numpy() for net in out]
    assert (z[0] == y).mean() > 0.8 and (z[1] == (y + 1) % 10).mean() > 0.8


# --- the game on the quick preset ----------------------------------------------------------------------

@pytest.mark.slow
def test_label_flip_game_stays_below_the_claimed_epsilon_on_the_quick_preset(tmp_path):
    from harness.api import audit_one_run

    res, _ = audit_one_run("pate-fm", "quick", {"run.out": str(tmp_path)}, canaries=200)
    claimed = res["label_epsilon"]
    assert claimed == res["defense_info"]["label_epsilon"] and claimed > 0
    for game in ("weighted", "paper", "clopper-pearson"):
        assert res[game]["best_epsilon_lo"] <= claimed and res[game]["best_epsilon_lo_bonferroni"] <= claimed
    best = max(res["weighted"]["rows"], key=lambda r: r["epsilon_lo"])
    assert best["epsilon_lo"] <= best["epsilon_hi"] and best["epsilon_lo"] < claimed
    assert res["test_accuracy"] > 0.6 and res["defense_info"]["queries_answered"] == 100


# --- refused before training ----------------------------------------------------------------------------

@pytest.mark.parametrize("setting, message", [
    ("defense_params.sigma1=0", "sigma1 must be positive"),
    ("defense_params.sigma2=-2.5", "sigma2 must be positive"),
    ("defense_params.threshold=-1", "threshold must be >= 0"),
    ("defense_params.queries=0", "queries (answered queries) must be >= 1"),
    ("defense_params.num_teachers=5000", "num_teachers (5000) is larger than the labeled training set"),
    ("defense_params.confidence=1.5", "error: defense_params: FixMatch confidence (tau) must be in (0, 1]"),
    ("defense_params.student_steps=0", "student_steps must be a positive integer"),
])
@pytest.mark.parametrize("command", ["evaluate", "audit-one-run"])
def test_bad_input_is_one_error_line_before_training(tmp_path, setting, message, command):
    from typer.testing import CliRunner

    from harness.cli import app

    res = CliRunner().invoke(app, [command, "pate-fm", "--set", setting, "--out", str(tmp_path)])
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), res.output
    assert message in lines[0] and "Traceback" not in res.output
    assert not any(tmp_path.iterdir())  # nothing trained, nothing written
