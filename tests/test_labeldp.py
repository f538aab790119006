"""Label-DP defenses (ALIBI, AGIBI) and the memorization game as Malek et al. play it."""

from __future__ import annotations

import json
import math
import textwrap

import numpy as np
import pytest
import torch

from defenses.base import FitContext, LabeledImages
from defenses.labeldp import (AGIBI, ALIBI, gaussian_label_epsilon, gaussian_posterior, gaussian_posterior_authors,
                              gaussian_sigma_for, laplace_posterior, laplace_scale)
from defenses.training import train_classifier
from harness.audit.label_flip import alternatives, audit_one_run, play_games
from harness.bounds.empirical import paper_acgr_game, paper_best, weighted_acgr_game
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


def test_agibi_posterior_forms_each_equal_an_independent_computation():
    o = np.array([[0.3, -0.4, 1.2, 0.1], [1.1, 0.2, -0.3, 0.0]])
    prior = np.array([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    log_p = torch.log(torch.from_numpy(prior))
    for eps in (19.0, 3.7):  # sigma 0.448 and 1.753
        sigma = AGIBI(epsilon=eps).noise_scale()
        derived = np.exp(o / sigma**2) * prior  # Bayes' rule: exp(-||o - e_c||^2 / (2 sigma^2)) p_c, up to a constant
        authors = np.exp(o / sigma) * prior  # the authors' code: e^(o_c / sigma) p_c
        for form, want in (("derived", derived), ("authors", authors)):
            d = AGIBI(epsilon=eps, posterior=form)
            got = d.posterior(torch.from_numpy(o), log_p).numpy()
            np.testing.assert_allclose(got, want / want.sum(1, keepdims=True), rtol=1e-12)
        assert not np.allclose(derived / derived.sum(1, keepdims=True), authors / authors.sum(1, keepdims=True))
    # the two forms agree at sigma = 1 only; the authors' is flatter below it, sharper above it
    x, lp = torch.from_numpy(o), log_p
    torch.testing.assert_close(gaussian_posterior_authors(x, lp, 1.0), gaussian_posterior(x, lp, 1.0))
    assert gaussian_posterior_authors(x, lp, 0.5)[1, 0] < gaussian_posterior(x, lp, 0.5)[1, 0]
    assert gaussian_posterior_authors(x, lp, 2.0)[1, 0] > gaussian_posterior(x, lp, 2.0)[1, 0]


def test_agibi_posterior_parameter_default_record_and_refusal():
    assert AGIBI().params["posterior"] == "derived" and AGIBI().privacy_record()["label_posterior"] == "derived"
    assert AGIBI(posterior="authors").privacy_record()["label_posterior"] == "authors"
    with pytest.raises(ValueError, match="posterior must be 'derived'.*or 'authors'"):
        AGIBI(posterior="bayes")
    with pytest.raises(ValueError, match="no parameter"):
        ALIBI(posterior="authors")  # ALIBI's posterior is the authors' already: no such choice


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
    for game, rate in (("weighted", "acgr"), ("paper", "acgr"), ("clopper-pearson", "cgr")):
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


# --- the authors' estimator (game="paper"), each property against a hand computation ----------------


def test_paper_game_unequal_weights_use_se_over_sqrt_n_eff():
    # three kinds of canary, 10 of each, 4 alternatives, tau 0.5:
    #   all 4 guesses right (m = 4, rate 1); one confident wrong alternative and the trained label
    #   below tau (m = 1, rate 0); one alternative above it (m = 4, rate 3/4)
    ct = np.repeat([0.9, 0.3, 0.7], 10)
    ca = np.repeat([[0.01] * 4, [0.6, 0.01, 0.01, 0.01], [0.8, 0.1, 0.1, 0.1]], 10, axis=0)
    r = paper_acgr_game(ct, ca, tau=0.5)
    assert (r.num_active, r.num_guesses, r.num_ties, r.flipped, r.interval) == (30, 90, 0, False, "normal")
    mean = 70 / 90  # sum correct / sum m
    w, rate = np.repeat([4, 1, 4], 10) / 90, np.repeat([1.0, 0.0, 0.75], 10)
    s2 = (w * (rate - mean) ** 2).sum() / (1 - (w**2).sum() + 1e-8)
    se = math.sqrt(s2 / 30)
    assert r.acgr == pytest.approx(mean) and r.acgr_lo == pytest.approx(mean - 1.96 * se, rel=1e-12)
    assert r.acgr_hi == pytest.approx(mean + 1.96 * se, rel=1e-12)
    assert r.epsilon_lo == pytest.approx(math.log(r.acgr_lo / (1 - r.acgr_lo)))
    # the weighted game: the same s^2, SE s sqrt(V2) / V1 = s sqrt(330) / 90, wider than s / sqrt(30) here
    wg = weighted_acgr_game(ct, ca, tau=0.5)
    s2w = (np.repeat([4, 1, 4], 10) * (rate - mean) ** 2).sum() / (90 - 330 / 90)
    assert wg.acgr_lo == pytest.approx(mean - 1.959964 * math.sqrt(s2w * 330) / 90, abs=1e-6)
    assert wg.acgr_lo < r.acgr_lo - 0.01


def test_paper_game_counts_ties_as_wrong_guesses():
    # canary 0: a tie at 0.5 (the paper: a wrong guess; the weighted game: no guess) and one right guess
    # canary 1: both guesses right
    ct, ca = np.array([0.5, 0.9]), np.array([[0.5, 0.2], [0.05, 0.05]])
    r = paper_acgr_game(ct, ca, tau=0.5)
    assert (r.num_guesses, r.num_ties, r.acgr) == (4, 1, 0.75)
    wg = weighted_acgr_game(ct, ca, tau=0.5)
    assert (wg.num_guesses, wg.acgr) == (3, 1.0)


def test_paper_game_rule_of_three_when_every_guess_is_right():
    ct, ca = np.full(60, 0.995), np.full((60, 8), 0.001)
    r = paper_acgr_game(ct, ca, tau=0.99)
    assert (r.acgr, r.acgr_lo, r.acgr_hi, r.interval) == (1.0, 1 - 3 / 60, 1.0, "rule-of-three")
    assert r.epsilon_lo == pytest.approx(math.log(19)) and r.epsilon_hi == math.inf
    # the weighted game's interval is exact over the canaries there: 0.025^(1/60), a lower bound
    assert weighted_acgr_game(ct, ca, tau=0.99).acgr_lo == pytest.approx(0.025 ** (1 / 60))
    # at another alpha (a Bonferroni-corrected sweep) the constant 3 ~ ln(1/0.05) becomes ln(1/alpha)
    assert paper_acgr_game(ct, ca, tau=0.99, alpha=0.001).acgr_lo == pytest.approx(1 - math.log(1000) / 60)
    # at most 50 active canaries all right: discarded as a fluke (lower end 1/2, no evidence)
    few = paper_acgr_game(ct[:50], ca[:50], tau=0.99)
    assert (few.acgr_lo, few.epsilon_lo, few.interval) == (0.5, 0.0, "all-correct-few")
    # every guess wrong: the rate 0 is flipped to 1 and the same rule applies (the weighted game: 0)
    wrong = paper_acgr_game(np.full(60, 0.001), np.full((60, 8), 0.995), tau=0.99)
    assert (wrong.flipped, wrong.acgr_lo, wrong.interval) == (True, 1 - 3 / 60, "rule-of-three")
    assert weighted_acgr_game(np.full(60, 0.001), np.full((60, 8), 0.995), tau=0.99).epsilon_lo == 0.0


def test_paper_game_flips_a_rate_below_half_and_equals_the_weighted_se_for_equal_weights():
    # 100 canaries with every guess wrong and 100 with 3 of 4 right: rate 0.375, flipped to 0.625
    ct = np.repeat([0.01, 0.7], 100)
    ca = np.repeat([[0.9] * 4, [0.8, 0.1, 0.1, 0.1]], 100, axis=0)
    r = paper_acgr_game(ct, ca, tau=0.5)
    s2 = 0.375**2 / (1 - 200 / 200**2 + 1e-8)  # every canary 0.375 from the mean, weights 1/200
    se = math.sqrt(s2 / 200)
    assert r.flipped and r.acgr == 0.625 and r.acgr_lo == pytest.approx(0.625 - 1.96 * se, rel=1e-12)
    assert r.epsilon_lo == pytest.approx(math.log(r.acgr_lo / (1 - r.acgr_lo))) and r.epsilon_lo > 0.25
    # equal m_i: s / sqrt(N_eff) = s sqrt(V2) / V1, so the weighted game has the same half-width (unflipped)
    wg = weighted_acgr_game(ct, ca, tau=0.5)
    assert wg.acgr == 0.375 and wg.epsilon_lo == 0.0
    assert (wg.acgr_hi - wg.acgr) / 1.959964 == pytest.approx(se, rel=1e-6)


def test_paper_game_one_canary_and_no_guess():
    # one active canary: the authors' variance is 0 / (1 - 1 + 1e-8) = 0, a zero-width interval at its rate
    one = paper_acgr_game(np.array([0.9]), np.array([[0.95, 0.1, 0.1, 0.1]]), tau=0.5)
    assert (one.acgr, one.acgr_lo, one.acgr_hi) == (0.75, 0.75, 0.75) and one.epsilon_lo == pytest.approx(math.log(3))
    assert weighted_acgr_game(np.array([0.9]), np.array([[0.95, 0.1, 0.1, 0.1]]), tau=0.5).epsilon_lo == 0.0
    none = paper_acgr_game(np.array([0.3]), np.array([[0.2, 0.1]]), tau=0.5)
    assert (none.num_guesses, none.interval, none.epsilon_lo, none.epsilon_hi) == (0, "none", 0.0, math.inf)
    assert math.isnan(none.acgr)


def test_paper_best_is_the_authors_choice_of_row():
    t = [0.5, 0.6, 0.7, 0.8]
    assert paper_best([0.5, 1.2, 1.2, 0.9], [2.0, 3.0, 4.0, math.inf], t) == (1.2, 4.0, 0.7)  # tie: larger upper end
    assert paper_best([1.0, 1.0], [math.inf, 3.0], t) == (1.0, math.inf, 0.5)  # the first row's inf stays
    assert paper_best([0.0, 0.0, 0.0], [1.0, math.inf, 2.0], t) == (0.0, 2.0, 0.7)  # no evidence: finite upper ends
    assert paper_best([0.0], [0.0], t) == (0.0, 0.0, None)


def test_play_games_records_the_paper_headline_and_its_estimator():
    prob = np.full((3, 4), 0.1)
    prob[:, 1] = 0.7
    out = play_games(prob, np.array([0, 0, 2]), np.array([1, 1, 1]), np.array([2, 3, 0]), "paper", None)
    assert out["game"] == "paper" and "paper_acgr_game" in out["headline_estimator"]
    assert out["paper"]["taus"] == [0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99] and len(out["weighted"]["taus"]) == 50
    assert out["paper"]["estimator"] == out["headline_estimator"] and "ties count as wrong" in out["headline_estimator"]
    # 3 canaries, all 6 guesses right: fewer than 51, so the authors' code takes no evidence
    assert out["paper"]["rows"][0]["interval"] == "all-correct-few" and out["paper"]["best_epsilon_lo"] == 0.0


def test_audit_one_run_cli_headlines_the_paper_game_and_refuses_an_unknown_game(tmp_path):
    from typer.testing import CliRunner

    from harness.cli import app

    bad = CliRunner().invoke(app, ["audit-one-run", "undefended", "--game", "authors", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "must be one of weighted, paper, clopper-pearson" in " ".join(bad.output.split())
    assert not list(tmp_path.iterdir())  # refused before anything was trained or written
    res = CliRunner().invoke(app, ["audit-one-run", "undefended", "--canaries", "20", "--epochs", "1", "--game",
                                   "paper", "--out", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    assert out["game"] == "paper" and out["headline_estimator"] == out["paper"]["estimator"]
    assert out["best_epsilon_lo"] == out["paper"]["best_epsilon_lo"] and len(out["paper"]["rows"]) == 7
    saved = json.loads(next(tmp_path.glob("audit-one-run-undefended-*.json")).read_text())
    assert saved["game"] == "paper" and "paper_acgr_game" in saved["headline_estimator"]
