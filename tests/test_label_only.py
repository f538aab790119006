import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from attacks.base import AttackInput
from attacks.label_only import LabelOnly, fit_logistic_batched
from harness.core.metrics import auc, roc_curve, tpr_at_fpr


def _synthetic(p_nonmember_correct: float, s=32, c=100, a=18, k=10, seed=0):
    rng = np.random.default_rng(seed)
    mem = np.zeros((s, c), bool)
    for i in range(c):
        mem[rng.permutation(s)[: s // 2], i] = True
    labels = rng.integers(0, k, c)
    correct = mem[:, :, None] | (rng.random((s, c, a)) < p_nonmember_correct)
    logits = rng.normal(size=(s, c, a, k))
    idx = np.broadcast_to(labels[None, :, None, None], (s, c, a, 1))
    np.put_along_axis(logits, idx, np.where(correct, 10.0, -10.0)[..., None], axis=-1)
    return AttackInput(signals={"logits": logits}, labels=labels, membership=mem)


def test_members_always_correct_are_recovered():
    inp = _synthetic(p_nonmember_correct=0.8)  # a non-member is right on all 18 queries w.p. 1.8%
    (scores,) = LabelOnly().score(inp).values()
    roc = roc_curve(scores, inp.membership)
    assert tpr_at_fpr(roc, 0.05) > 0.9


def test_uninformative_correctness_gives_chance():
    inp = _synthetic(p_nonmember_correct=1.0)  # everyone always correct: nothing to learn
    (scores,) = LabelOnly().score(inp).values()
    roc = roc_curve(scores, inp.membership)
    assert auc(roc) == pytest.approx(0.5, abs=0.02)
    assert tpr_at_fpr(roc, 0.01) < 0.05


def test_batched_newton_matches_scikit_learn():
    rng = np.random.default_rng(1)
    x = (rng.random((5, 31, 18)) < 0.6).astype(float)
    y = rng.random((5, 31)) < 0.5
    theta = fit_logistic_batched(x, y, c=1.0)
    for b in range(5):
        ref = LogisticRegression(C=1.0, class_weight="balanced", tol=1e-10, max_iter=10000).fit(x[b], y[b])
        np.testing.assert_allclose(theta[b, :18], ref.coef_[0], atol=1e-5)
        assert theta[b, 18] == pytest.approx(ref.intercept_[0], abs=1e-5)
