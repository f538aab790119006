"""RMIA (Zarifzadeh et al. 2024) on cases with a known answer."""

import numpy as np
import pytest

from attacks.base import AttackInput
from attacks.rmia import RMIA, label_log_prob, rmia_scores
from harness.core.config import ConfigError
from harness.defense_config import build_config
from harness.core.metrics import auc, roc_curve, tpr_at_fpr

MEM = np.array([[True], [False], [True], [False]])  # one audit sample, exactly half of S = 4 models
P_X = np.log(np.array([[0.8], [0.2], [0.6], [0.3]]))
P_Z = np.log(np.array([[0.5, 0.5, 0.9]] + [[0.5, 0.25, 0.9]] * 3))


def test_hand_computed_online_score():
    # victim 0 (IN): the shadows are 1 (OUT), 2 (IN), 3 (OUT); model 3, the last of the group the
    # victim is not in, is dropped, so P(x) = (0.6 + 0.2) / 2 = 0.4 and p_t(x) / P(x) = 2.
    # P(z) = mean over models 1..3 = (0.5, 0.25, 0.9), so p_t(z) / P(z) = (1, 2, 1) and LR = (2, 1, 2).
    for gamma, expected in ((2.0, 2 / 3), (1.5, 2 / 3), (1.0, 1.0), (2.5, 0.0)):
        s = rmia_scores(P_X, MEM, P_Z, online=True, gamma=gamma, a=0.3)
        assert s[0, 0] == pytest.approx(expected), gamma


def test_hand_computed_offline_score():
    # P_OUT(x) = 0.2 (model 1; model 3 dropped) -> P(x) = (1.3 * 0.2 + 0.7) / 2 = 0.48, ratio 5/3;
    # P(z) = (1.3 * (0.5, 0.25, 0.9) + 0.7) / 2 -> ratios (0.741, 0.976, 0.963) -> LR (2.25, 1.71, 1.73)
    s = rmia_scores(P_X, MEM, P_Z, online=False, gamma=2.0, a=0.3)
    assert s[0, 0] == pytest.approx(1 / 3)
    assert rmia_scores(P_X, MEM, P_Z, online=False, gamma=1.7, a=0.3)[0, 0] == pytest.approx(1.0)


def test_label_log_prob_is_the_tempered_softmax_averaged_over_views():
    logits = np.array([[[[2.0, 0.0], [0.0, 0.0]]]])  # (S=1, N=1, A=2, K=2)
    p1 = 1 / (1 + np.exp(-2.0 / 2))  # softmax at T = 2 of (2, 0), label 0
    assert np.exp(label_log_prob(logits, np.array([0]), 2.0))[0, 0] == pytest.approx((p1 + 0.5) / 2)


def _synthetic(s=16, c=200, z=300, seed=0):
    rng = np.random.default_rng(seed)
    mem = np.zeros((s, c), bool)
    for i in range(c):
        mem[rng.permutation(s)[: s // 2], i] = True
    # two classes, label 0: logit of class 0 = per-sample difficulty + a member bonus + noise
    base = rng.normal(0, 1, c)
    lx = base + 2.0 * mem + rng.normal(0, 0.3, (s, c))
    lz = rng.normal(0, 1, z) + rng.normal(0, 0.3, (s, z))
    logits = np.stack([lx, np.zeros_like(lx)], -1)[:, :, None, :]
    pop = np.stack([lz, np.zeros_like(lz)], -1)[:, :, None, :]
    return AttackInput(signals={"logits": logits, "population_logits": pop}, labels=np.zeros(c, np.int64),
                       membership=mem, population_labels=np.zeros(z, np.int64))


def test_rmia_recovers_membership_when_members_are_more_confident():
    inp = _synthetic()
    attack = RMIA(gamma=1.0)
    out = attack.score(inp)
    assert set(out) == {"online-noaug", "offline-noaug"}  # one query view only
    assert attack.primary(list(out), inp) == "online-noaug"
    roc = roc_curve(out["online-noaug"], inp.membership)
    assert auc(roc) > 0.95 and tpr_at_fpr(roc, 0.01) > 0.5
    null = _synthetic(seed=1)  # same scores, membership shuffled: chance
    shuffled = AttackInput(null.signals, null.labels, np.random.default_rng(5).permuted(null.membership, axis=0),
                           population_labels=null.population_labels)
    assert abs(auc(roc_curve(attack.score(shuffled)["online-noaug"], shuffled.membership)) - 0.5) < 0.05


def test_rmia_views_parameters_and_missing_population():
    inp = _synthetic(s=8, c=20, z=30)
    two = AttackInput({k: np.concatenate([v, v], axis=2) for k, v in inp.signals.items()}, inp.labels, inp.membership,
                      population_labels=inp.population_labels)
    out = RMIA().score(two)
    assert set(out) == {"online-noaug", "offline-noaug", "online-aug2", "offline-aug2"}
    np.testing.assert_allclose(out["online-aug2"], out["online-noaug"])  # identical views: identical average
    assert RMIA().primary(list(out), two) == "online-aug2"
    for bad in ({"gamma": 0}, {"a": 1.5}, {"temperature": -1}, {"gamma": True}):
        with pytest.raises(ValueError):
            RMIA(**bad)
    with pytest.raises(ValueError, match="population samples"):
        RMIA().score(AttackInput({"logits": inp.signals["logits"]}, inp.labels, inp.membership))


def test_a_run_without_population_samples_refuses_rmia_before_training(tmp_path):
    from harness.run.runner import prepare_run

    cfg = build_config("quick", {"audit.population_samples": 0, "run.out": str(tmp_path)})
    with pytest.raises(ConfigError, match="rmia.*population samples"):
        prepare_run(cfg)
    assert not any(tmp_path.iterdir())
    prepare_run(build_config("quick", {"audit.population_samples": 0, "attack.names": ["lira"], "run.out": str(tmp_path)}))


def test_logsumexp_over_models_equals_scipys_and_keeps_empty_columns_at_minus_infinity():
    from scipy.special import logsumexp

    from attacks.rmia import _log_mean, _logsumexp0

    rng = np.random.default_rng(0)
    a = rng.normal(scale=30.0, size=(9, 50)) - 700.0  # far below exp's range: the shift matters
    assert np.allclose(_logsumexp0(a), logsumexp(a, axis=0), rtol=0, atol=1e-12)
    mask = rng.random((9, 50)) < 0.4
    mask[:, 0] = False
    got = _log_mean(a, mask)
    assert got[0] == -np.inf
    with np.errstate(divide="ignore"):
        want = logsumexp(a + np.log(mask), axis=0) - np.log(np.maximum(mask.sum(0), 1))
    assert np.allclose(got[1:], want[1:], rtol=0, atol=1e-12)


def test_augmented_variant_gives_equal_pass_counts_one_score():
    """With A query views the aug variant is (passes summed over views) / (A x Z), divided once:
    guesses with the same number of passing (view, z) pairs tie exactly, whichever views they came
    from (averaging per-view fractions rounds (1, 1, 1) / 10 and (3, 0, 0) / 10 differently)."""
    rng = np.random.default_rng(3)
    s, c, z, views = 8, 120, 10, 3
    mem = np.zeros((s, c), bool)
    for i in range(c):
        mem[rng.permutation(s)[: s // 2], i] = True
    lx = rng.normal(0, 1, (s, c, views)) + 1.0 * mem[..., None]
    lz = rng.normal(0, 1, (s, z, views))
    logits = np.stack([lx, np.zeros_like(lx)], -1)  # (S, C, A, 2)
    pop = np.stack([lz, np.zeros_like(lz)], -1)
    inp = AttackInput(signals={"logits": logits, "population_logits": pop}, labels=np.zeros(c, np.int64),
                      membership=mem, population_labels=np.zeros(z, np.int64))
    out = RMIA(gamma=1.0).score(inp)
    for mode in ("online", "offline"):
        # the integer pass count of each (victim, sample) on each view, from the one-view scores
        per_view = [np.rint(RMIA(gamma=1.0).score(AttackInput(
            signals={"logits": logits[:, :, a : a + 1], "population_logits": pop[:, :, a : a + 1]},
            labels=inp.labels, membership=mem, population_labels=inp.population_labels))[f"{mode}-noaug"] * z)
            for a in range(views)]
        total = np.sum(per_view, axis=0).astype(np.int64)
        score = out[f"{mode}-aug{views}"]
        assert np.array_equal(score, total / (views * z)), mode
        split = [(t, np.unique(score[total == t])) for t in np.unique(total)]
        assert all(len(values) == 1 for _, values in split), [t for t, v in split if len(v) > 1]


def test_counts_at_most_are_searchsorteds():
    """The pass counts looked up in sorted order equal numpy's searchsorted on the needles as given:
    ties with the values, ties among needles, infinities and NaN."""
    from attacks.rmia import _counts_at_most

    rng = np.random.default_rng(4)
    values = np.sort(np.r_[np.round(rng.normal(size=300), 1), -np.inf, np.inf])
    needles = np.r_[np.round(rng.normal(size=5000), 1), values[:50], np.nan, np.inf, -np.inf, np.nan]
    rng.shuffle(needles)
    np.testing.assert_array_equal(_counts_at_most(values, needles), np.searchsorted(values, needles, side="right"))
