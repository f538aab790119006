"""LiRA on synthetic Gaussian scores, where the optimal ROC is known in closed form."""

import numpy as np
import pytest
from scipy.stats import norm

from attacks.base import AttackInput
from attacks.lira import LiRA, lira_scores, loo_gaussian_stats
from harness.metrics import roc_curve, tpr_at_fpr


def _synthetic(models: int, samples: int, d: float, seed: int = 0):
    """Per-sample means differ; IN = OUT + d*sigma with a per-sample sigma; exactly half IN."""
    rng = np.random.default_rng(seed)
    membership = np.zeros((models, samples), bool)
    for c in range(samples):
        membership[rng.permutation(models)[: models // 2], c] = True
    mu_out = rng.normal(0, 3, size=samples)
    sigma = rng.uniform(0.5, 2.0, size=samples)
    obs = mu_out + sigma * (rng.standard_normal((models, samples)) + d * membership)
    return obs[:, :, None], membership


@pytest.mark.parametrize("d", [1.0, 2.0])
def test_online_lira_reaches_the_analytic_roc(d):
    # With equal variances, the likelihood ratio is monotone in the standardized score, so the
    # pooled ROC is binormal: TPR = Phi(Phi^-1(FPR) + d).
    obs, mem = _synthetic(models=256, samples=200, d=d)
    scores = lira_scores(obs, mem, online=True, global_variance=False)
    roc = roc_curve(scores, mem)
    for fpr in (0.001, 0.01, 0.1):
        expected = norm.cdf(norm.ppf(fpr) + d)
        assert tpr_at_fpr(roc, fpr) == pytest.approx(expected, abs=0.035), fpr


def test_offline_lira_also_reaches_the_analytic_roc():
    obs, mem = _synthetic(models=256, samples=200, d=2.0, seed=1)
    roc = roc_curve(lira_scores(obs, mem, online=False, global_variance=False), mem)
    assert tpr_at_fpr(roc, 0.01) == pytest.approx(norm.cdf(norm.ppf(0.01) + 2.0), abs=0.035)


def test_global_variance_loses_to_per_sample_variance_when_variances_differ():
    obs, mem = _synthetic(models=128, samples=200, d=2.0, seed=2)
    per = tpr_at_fpr(roc_curve(lira_scores(obs, mem, online=True, global_variance=False), mem), 0.01)
    glob = tpr_at_fpr(roc_curve(lira_scores(obs, mem, online=True, global_variance=True), mem), 0.01)
    assert per > glob + 0.05


def test_no_signal_gives_chance():
    obs, mem = _synthetic(models=128, samples=200, d=0.0, seed=3)
    roc = roc_curve(lira_scores(obs, mem, online=True, global_variance=False), mem)
    assert tpr_at_fpr(roc, 0.1) == pytest.approx(0.1, abs=0.03)


def test_leave_one_out_statistics_match_brute_force():
    rng = np.random.default_rng(4)
    obs = rng.normal(5, 2, size=(10, 7, 3))
    mem = np.zeros((10, 7), bool)
    for c in range(7):
        mem[rng.permutation(10)[:5], c] = True
    st = loo_gaussian_stats(obs, mem)
    for t in range(10):
        others = np.arange(10) != t
        for c in range(7):
            xin = obs[others & mem[:, c], c]
            xout = obs[others & ~mem[:, c], c]
            np.testing.assert_allclose(st["mu_in"][t, c], xin.mean(0), rtol=1e-10)
            np.testing.assert_allclose(st["var_in"][t, c], xin.var(0, ddof=1), rtol=1e-8)
            np.testing.assert_allclose(st["mu_out"][t, c], xout.mean(0), rtol=1e-10)
            np.testing.assert_allclose(st["var_out"][t, c], xout.var(0, ddof=1), rtol=1e-8)


def test_victim_score_does_not_leak_into_its_own_gaussians():
    obs, mem = _synthetic(models=16, samples=20, d=1.0)
    a = lira_scores(obs, mem, online=True, global_variance=False)
    obs2 = obs.copy()
    obs2[3] += 100.0  # change only victim 3's observations
    b = lira_scores(obs2, mem, online=True, global_variance=False)
    # victim 3 is scored against the same Gaussians, so only its own observation moved
    st = loo_gaussian_stats(obs, mem)
    st2 = loo_gaussian_stats(obs2, mem)
    np.testing.assert_allclose(st["mu_in"][3], st2["mu_in"][3])
    assert not np.allclose(a[3], b[3])


def test_swapping_in_and_out_negates_the_online_score():
    obs, mem = _synthetic(models=16, samples=20, d=1.0)
    a = lira_scores(obs, mem, online=True, global_variance=False)
    b = lira_scores(obs, ~mem, online=True, global_variance=False)
    np.testing.assert_allclose(a, -b, atol=1e-9)


def test_lira_attack_runs_every_variant_from_logits():
    # two classes with logits (x, 0) and label 0: logit score = hinge score = x
    obs, mem = _synthetic(models=64, samples=50, d=3.0)
    aug = np.concatenate([obs, obs + np.random.default_rng(0).normal(0, 0.1, obs.shape)], axis=2)  # A = 2
    logits = np.stack([aug, np.zeros_like(aug)], axis=-1)
    out = LiRA().score(AttackInput(signals={"logits": logits}, labels=np.zeros(50, int), membership=mem))
    assert len(out) == 2 * 2 * 2 * 2  # {logit, hinge} x {noaug, aug} x {online, offline} x {persample, global}
    assert all(v.shape == (64, 50) and np.isfinite(v).all() for v in out.values())
    best = max(tpr_at_fpr(roc_curve(v, mem), 0.01) for v in out.values())
    assert best == pytest.approx(norm.cdf(norm.ppf(0.01) + 3.0), abs=0.1)  # 0.75: the analytic optimum
