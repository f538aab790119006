"""LiRA on synthetic Gaussian scores, where the optimal ROC is known in closed form."""

import numpy as np
import pytest
from scipy.stats import norm

from attacks.base import AttackInput
from attacks.lira import LiRA, LiRAOffline, lira_scores, loo_gaussian_stats
from attacks.loo import dropped_shadow
from harness.core.metrics import roc_curve, tpr_at_fpr


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


@pytest.mark.parametrize("balanced", [True, False])
def test_leave_one_out_statistics_match_brute_force(balanced):
    rng = np.random.default_rng(4)
    obs = rng.normal(5, 2, size=(10, 7, 3))
    mem = np.zeros((10, 7), bool)
    for c in range(7):
        mem[rng.permutation(10)[:5], c] = True
    st = loo_gaussian_stats(obs, mem, balanced=balanced)
    drop = dropped_shadow(mem)
    for t in range(10):
        for c in range(7):
            use = np.arange(10) != t
            if balanced:  # the highest-index model of the group t is not in is left out too
                other = ~mem[:, c] if mem[t, c] else mem[:, c]
                assert drop[t, c] == np.flatnonzero(other).max()
                use &= np.arange(10) != drop[t, c]
                assert (use & mem[:, c]).sum() == (use & ~mem[:, c]).sum() == 4  # S/2 - 1 of each
            xin = obs[use & mem[:, c], c]
            xout = obs[use & ~mem[:, c], c]
            np.testing.assert_allclose(st["mu_in"][t, c], xin.mean(0), rtol=1e-10)
            np.testing.assert_allclose(st["var_in"][t, c], xin.var(0, ddof=1), rtol=1e-8)
            np.testing.assert_allclose(st["mu_out"][t, c], xout.mean(0), rtol=1e-10)
            np.testing.assert_allclose(st["var_out"][t, c], xout.var(0, ddof=1), rtol=1e-8)


def test_balanced_shadows_remove_the_design_artifact_at_small_s():
    # No membership signal at all, S = 6: with all S - 1 shadows, a member victim's IN estimates
    # come from 2 models and a non-member's from 3, and per-sample Gaussians fitted to 2 points
    # score members systematically lower (AUC far below 0.5). Balanced shadows score at chance.
    from harness.core.metrics import auc

    obs, mem = _synthetic(models=6, samples=3000, d=0.0, seed=7)
    obs = np.repeat(obs, 9, axis=2) + np.random.default_rng(8).normal(0, 1, (6, 3000, 9))  # 9 noisy views
    paper = auc(roc_curve(lira_scores(obs, mem, online=True, global_variance=False, balanced=False), mem))
    ours = auc(roc_curve(lira_scores(obs, mem, online=True, global_variance=False, balanced=True), mem))
    assert paper < 0.4 and abs(ours - 0.5) < 0.02, (paper, ours)


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
    inp = AttackInput(signals={"logits": logits}, labels=np.zeros(50, int), membership=mem)
    out = LiRA().score(inp)
    assert len(out) == 2 * 2 * 2 and all(v.startswith("online-") for v in out)  # {logit, hinge} x {noaug, aug} x var
    assert all(v.shape == (64, 50) and np.isfinite(v).all() for v in out.values())
    primary = LiRA().primary(list(out), inp)
    assert primary == "online-logit-aug2-persample"
    assert tpr_at_fpr(roc_curve(out[primary], mem), 0.01) == pytest.approx(norm.cdf(norm.ppf(0.01) + 3.0), abs=0.1)
    # models trained without augmentation: the primary reads the plain query only
    plain = AttackInput(signals={"logits": logits}, labels=np.zeros(50, int), membership=mem,
                        trained_with_augmentation=False)
    assert LiRA().primary(list(out), plain) == "online-logit-noaug-persample"
    few = AttackInput(signals={"logits": logits[:16]}, labels=np.zeros(50, int), membership=mem[:16])
    assert LiRA().primary(list(out), few) == "online-logit-aug2-persample"  # whatever S: fixed in advance
    off = LiRAOffline().score(inp)
    assert len(off) == 8 and all(v.startswith("offline-") for v in off)
    assert LiRAOffline().primary(list(off), inp) == "offline-logit-aug2-global"
    with pytest.raises(ValueError, match="shadows"):
        LiRA(shadows="some")
