import numpy as np

from attacks.scores import hinge_score, logit_score


def test_equal_logits():
    z = np.zeros((1, 3, 1, 10))
    np.testing.assert_allclose(logit_score(z, np.array([0, 4, 9])), -np.log(9))
    np.testing.assert_allclose(hinge_score(z, np.array([0, 4, 9])), 0.0)


def test_logit_score_is_log_odds_and_inputs_are_not_mutated():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(2, 5, 3, 4))
    y = np.array([0, 1, 2, 3, 0])
    z0 = z.copy()
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    py = np.take_along_axis(p, np.broadcast_to(y[None, :, None, None], (2, 5, 3, 1)), -1)[..., 0]
    np.testing.assert_allclose(logit_score(z, y), np.log(py) - np.log1p(-py), rtol=1e-9)
    np.testing.assert_array_equal(z, z0)
    np.testing.assert_allclose(logit_score(z + 7.0, y), logit_score(z, y), rtol=1e-9)
