"""Label-DP defenses (ALIBI, AGIBI) and the memorization game as Malek et al. play it."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest
import torch

from defenses.base import FitContext, LabeledImages
from defenses.labeldp import (AGIBI, ALIBI, gaussian_label_epsilon, gaussian_posterior, gaussian_sigma_for,
                              laplace_posterior, laplace_scale)
from defenses.training import train_classifier
from harness.audit.label_flip import alternatives, audit_one_run, play_games
from harness.bounds.empirical import weighted_acgr_game
from harness.core.config import TrainConfig
from harness.defense_config import build_config
from harness.core.data import load_digits


@pytest.fixture(scope="module")
def digits():
    return load_digits(497, 0)


def _brute_posterior(o: np.ndarray, prior: np.ndarray, loglik) -> np.ndarray:
    k = len(o)
    w = np.array([math.exp(loglik(o, np.eye(k)[c])) * prior[c] for c in range(k)])
    return w / w.sum()


def test_laplace_posterior_matches_a_hand_computed_case():
    o = torch.tensor([[0.5, 1.5, -0.2]])
    # (|o_c| - |o_c - 1|) / b with b = 1: (0.5 - 0.5, 1.5 - 0.5, 0.2 - 1.2) = (0, 1, -1)
    want = torch.softmax(torch.tensor([[0.0, 1.0, -1.0]]), 1)
    got = laplace_posterior(o, torch.full((1, 3), -math.log(3)), 1.0)
    torch.testing.assert_close(got, want)
    # and Bayes' rule with the Laplace likelihood exp(-||o - e_k||_1 / b) and a non-uniform prior
    prior = np.array([0.2, 0.3, 0.5])
    brute = _brute_posterior(o[0].numpy().astype(np.float64), prior,
                             lambda x, e: -np.abs(x - e).sum() / 0.7)
    got = laplace_posterior(o.double(), torch.log(torch.from_numpy(prior[None])), 0.7)[0].numpy()
    np.testing.assert_allclose(got, brute, rtol=1e-10)


def test_gaussian_posterior_is_bayes_rule():
    o = np.array([0.3, -0.4, 1.2, 0.1])
    prior = np.array([0.1, 0.2, 0.3, 0.4])
    brute = _brute_posterior(o, prior, lambda x, e: -((x - e) ** 2).sum() / (2 * 0.8**2))
    got = gaussian_posterior(torch.from_numpy(o[None]), torch.log(torch.from_numpy(prior[None])), 0.8)[0].numpy()
    np.testing.assert_allclose(got, brute, rtol=1e-10)


def test_laplace_noise_scale_gives_epsilon_label_dp():
    assert laplace_scale(2.0) == 1.0 and ALIBI(epsilon=4.0).noise_scale() == 0.5
    d = ALIBI(epsilon=1.5)
    noise = d.draw_noise((200_000, 1), np.random.default_rng(0))
    assert abs(np.abs(noise).mean() - 2 / 1.5) < 0.01  # E|Lap(b)| = b
    # the privacy loss between any two labels is at most eps for every noisy vector
    o = np.eye(10)[np.zeros(5000, int)] + d.draw_noise((5000, 10), np.random.default_rng(1))
    b = d.noise_scale()
    loss = (-np.abs(o - np.eye(10)[3]).sum(1) + np.abs(o - np.eye(10)[7]).sum(1)) / b
    assert np.abs(loss).max() <= 1.5 + 1e-9 and np.abs(loss).max() > 1.4


def test_agibi_sigma_is_calibrated_to_its_epsilon():
    for eps in (3.7, 7.7, 19.0):
        s = gaussian_sigma_for(eps, 1e-5)
        assert abs(gaussian_label_epsilon(s, 1e-5) - eps) < 1e-3
        assert gaussian_label_epsilon(0.99 * s, 1e-5) > eps  # the smallest such sigma
    assert gaussian_sigma_for(3.7, 1e-5) > gaussian_sigma_for(19.0, 1e-5)
    rec = AGIBI(epsilon=7.7).privacy_record()
    assert rec["label_delta"] == 1e-5 and rec["label_noise_scale"] == pytest.approx(gaussian_sigma_for(7.7, 1e-5))


@pytest.mark.parametrize("params, message", [({"epsilon": 0}, "epsilon"), ({"epsilon": "8"}, "epsilon"),
                                             ({"prior": 0}, "prior"), ({"prior": "epoch"}, "prior")])
def test_bad_parameters_are_refused(params, message):
    with pytest.raises(ValueError, match=message):
        ALIBI(**params)
    with pytest.raises(ValueError, match="delta"):
        AGIBI(delta=1.0)


def _fit(defense, digits, n=400, epochs=15):
    train = LabeledImages(digits.x_train[:n], digits.y_train[:n], 10, digits.mean, digits.std, digits.augment)
    cfg = TrainConfig(model="mlp", width=64, epochs=epochs, batch_size=32, lr=0.1, schedule="cosine", augment=False)
    served = defense.fit(train, FitContext(seed=5, device="cpu", train=cfg))
    return served, float((served.query(digits.x_test).argmax(1) == digits.y_test).mean())


@pytest.mark.parametrize("prior", ["batch", 3])
def test_accuracy_falls_with_the_label_epsilon_and_the_record_says_which(digits, prior):
    hi, acc_hi = _fit(ALIBI(epsilon=50.0, prior=prior), digits)
    lo, acc_lo = _fit(ALIBI(epsilon=0.3, prior=prior), digits)
    assert acc_hi > 0.85 and acc_lo < acc_hi - 0.3
    info = hi.info()
    assert info["label_epsilon"] == 50.0 and info["label_mechanism"] == "laplace" and info["label_prior"] == prior
    assert lo.info()["noisy_argmax_changed"] > 0.5 > info["noisy_argmax_changed"]
    np.testing.assert_array_equal(_fit(ALIBI(epsilon=50.0, prior=prior), digits)[0].query(digits.x_test[:20]),
                                  hi.query(digits.x_test[:20]))  # deterministic from the seed


def test_epoch_hook_replaces_the_targets(digits):
    train = LabeledImages(digits.x_train[:200], digits.y_train[:200], 10, digits.mean, digits.std, digits.augment)
    cfg = TrainConfig(model="mlp", width=32, epochs=6, batch_size=50, lr=0.1, augment=False)
    from defenses.training import init_network
    seen = []

    def hook(epoch, net):
        seen.append(epoch)
        return np.full(200, 4, dtype=np.int64) if epoch == 2 else None

    ctx = FitContext(seed=0, device="cpu", train=cfg)
    net = train_classifier(init_network(train, ctx), train, ctx, epoch_hook=hook)
    assert seen == list(range(6))
    pred = net(torch.from_numpy((digits.x_test[:100] / 255.0 - digits.mean[0]) / digits.std[0]).float()).argmax(1)
    assert (pred == 4).float().mean() > 0.95  # trained on label 4 from epoch 2 on


def test_alternatives_are_the_other_c_minus_2_labels():
    y, t = np.array([0, 3, 9]), np.array([5, 2, 0])
    alts = alternatives(y, t, 10)
    assert alts.shape == (3, 8)
    for i in range(3):
        assert set(alts[i]) == set(range(10)) - {y[i], t[i]}


def test_weighted_game_hand_computed():
    # canary 0: trained label most confident against all 2 alternatives -> ACGR 1, m = 2
    # canary 1: one alternative above it (wrong), the other below tau with it (abstain) -> ACGR 0, m = 1
    ct = np.array([0.8, 0.3])
    ca = np.array([[0.1, 0.1], [0.6, 0.1]])
    r = weighted_acgr_game(ct, ca, tau=0.5)
    assert (r.num_active, r.num_guesses) == (2, 3) and r.acgr == pytest.approx(2 / 3)
    # weighted variance with reliability weights: sum w (x - m)^2 / (V1 - V2 / V1) = (2/9 + 4/9) / (3 - 5/3)
    s2 = (2 * (1 / 3) ** 2 + (2 / 3) ** 2) / (3 - 5 / 3)
    se = math.sqrt(s2 * 5) / 3
    assert r.acgr_lo == pytest.approx(max(0.0, 2 / 3 - 1.959964 * se), abs=1e-6)
    assert weighted_acgr_game(ct, ca, tau=0.9).num_guesses == 0
    assert r.interval == "normal"


def test_weighted_game_with_every_guess_right_gives_a_finite_exact_bound():
    # 37 canaries, every one of their 296 guesses right: the rates have zero sample variance, so the
    # normal interval would be [1, 1] and claim eps >= inf (the paper's code does). The interval is
    # exact over the canaries instead: P(rate = 1) <= mean rate, Clopper-Pearson on 37 of 37.
    ct = np.full(37, 0.995)
    ca = np.full((37, 8), 0.001)
    r = weighted_acgr_game(ct, ca, tau=0.99)
    assert (r.acgr, r.interval) == (1.0, "exact-canaries")
    assert r.acgr_lo == pytest.approx(0.025 ** (1 / 37)) and r.acgr_hi == 1.0
    assert math.isfinite(r.epsilon_lo) and r.epsilon_lo == pytest.approx(math.log(r.acgr_lo / (1 - r.acgr_lo)))
    assert weighted_acgr_game(ct, ca, tau=0.99, alpha=0.001).epsilon_lo < r.epsilon_lo  # Bonferroni is wider
    # every canary wrong: the mirror image, no lower bound and a finite upper end
    w = weighted_acgr_game(ca[:, 0], np.full((37, 8), 0.995), tau=0.99)
    assert (w.acgr, w.acgr_lo, w.epsilon_lo) == (0.0, 0.0, 0.0)
    assert w.acgr_hi == pytest.approx(1 - 0.025 ** (1 / 37))
    # every canary at the same rate strictly inside (0, 1): no statement rather than a zero-width one
    half = weighted_acgr_game(np.full(4, 0.9), np.array([[0.1, 0.95]] * 4), tau=0.5)
    assert (half.acgr, half.acgr_lo, half.acgr_hi, half.interval) == (0.5, 0.0, 1.0, "exact-canaries")


def _randomized_response_plugin(tmp_path):
    """A trainer with known label-DP: K-ary randomized response on every training label (eps-label-
    DP), then a model that memorizes the randomized label of each training image exactly."""
    f = tmp_path / "rr.py"
    f.write_text(textwrap.dedent('''
        import math
        import numpy as np
        from defenses.base import Defense, ServedModel

        class Memorizer(ServedModel):
            def __init__(self, table, k):
                self.table, self.k = table, k
            def query(self, x):
                out = np.full((len(x), self.k), math.log(0.01 / (self.k - 1)), np.float32)
                for i, img in enumerate(x):
                    r = self.table.get(img.tobytes())
                    if r is None:
                        out[i] = 0.0
                    else:
                        out[i, r] = math.log(0.99)
                return out
            def info(self):
                return {"label_epsilon": 1.5}

        class RandomizedResponse(Defense):
            name = "rr"
            description = "K-ary randomized response on labels, then memorization"
            param_defaults = {"epsilon": 1.5}
            def fit(self, train, ctx):
                rng = np.random.default_rng(ctx.seed)
                k, e = train.num_classes, math.exp(self.params["epsilon"])
                keep = rng.random(len(train.y)) < e / (e + k - 1)
                other = (train.y + rng.integers(1, k, len(train.y))) % k
                r = np.where(keep, train.y, other)
                return Memorizer({img.tobytes(): int(c) for img, c in zip(train.x, r)}, k)
    '''))
    return f"{f}:RandomizedResponse"


def test_the_games_cover_the_epsilon_of_a_trainer_with_known_label_dp(tmp_path):
    cfg = build_config("quick", {"defense": _randomized_response_plugin(tmp_path)})
    out = audit_one_run(cfg, 1000)
    truth = 1.5  # the optimal test on randomized response attains eps exactly: ACGR = e^eps / (1 + e^eps)
    for game, rate in (("weighted", "acgr"), ("clopper-pearson", "cgr")):
        row = out[game]["rows"][0]
        assert row["epsilon_lo"] <= truth <= row["epsilon_hi"], (game, row)
        assert abs(row[rate] - math.exp(truth) / (1 + math.exp(truth))) < 0.06
        assert out[game]["best_epsilon_lo_bonferroni"] <= out[game]["best_epsilon_lo"] <= truth
    assert out["label_epsilon"] == 1.5
    # the weighted game uses all 8 alternatives: each canary that kept its label adds 8 guesses
    assert out["weighted"]["rows"][0]["num_guesses"] > out["clopper-pearson"]["rows"][0]["num_guesses"]


def test_weighted_interval_covers_randomized_response_at_its_nominal_rate():
    """Simulated games of K-ary randomized response (no training): the 95% interval covers eps in at
    least 90% of 300 repetitions."""
    rng = np.random.default_rng(0)
    eps, k, n = 2.0, 10, 400
    p = math.exp(eps) / (math.exp(eps) + k - 1)
    covered = 0
    for _ in range(300):
        u, j = rng.random(n), rng.integers(0, k - 1, n)  # j = 0: the true label, 1..8: an alternative
        ct = np.where(u < p, 0.99, 0.001)
        ca = np.full((n, k - 2), 0.001)
        alt = (u >= p) & (j > 0)
        ca[np.nonzero(alt)[0], j[alt] - 1] = 0.99
        r = weighted_acgr_game(ct, ca, 0.5)
        covered += r.epsilon_lo <= eps <= r.epsilon_hi
    assert covered >= 270


def test_play_games_headline_and_validity_notes():
    prob = np.full((3, 4), 0.1)
    prob[:, 1] = 0.7
    out = play_games(prob, np.array([0, 0, 2]), np.array([1, 1, 1]), np.array([2, 3, 0]), "clopper-pearson", [0.5])
    assert out["game"] == "clopper-pearson"
    assert "independent" in out["weighted"]["validity"] and "exact binomial" in out["clopper-pearson"]["validity"]
    assert out["clopper-pearson"]["rows"][0]["num_correct"] == 3
