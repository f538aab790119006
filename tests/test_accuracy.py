"""The accuracy estimate over models and images (harness.core.accuracy): its formula, its coverage by
simulation, the paired difference, and the packed answers models store."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.core.accuracy import confidence, difference, estimate, pack_correct, table_of, unpack_correct


def _draw(rng: np.random.Generator, models: int, images: int, mu: float, model_sd: float) -> np.ndarray:
    """Right answers from a logistic model: a model's logit offset ~ N(0, model_sd), an image's
    difficulty 2 x Student t(3) (heavy tails: some images nearly always right, some nearly never)."""
    a = rng.normal(0.0, model_sd, models)
    b = 2.0 * rng.standard_t(3, images)
    p = 1.0 / (1.0 + np.exp(-(mu + a[:, None] + b[None, :])))
    return rng.random((models, images)) < p


def _truth(rng: np.random.Generator, mu: float, model_sd: float) -> float:
    a = rng.normal(0.0, model_sd, 1500)[:, None]
    b = 2.0 * rng.standard_t(3, 20000)[None, :]
    return float((1.0 / (1.0 + np.exp(-(mu + a + b)))).mean())


def test_pack_round_trip_and_length_check():
    rng = np.random.default_rng(0)
    for n in (1, 7, 8, 9, 1017):
        c = rng.random(n) < 0.5
        assert np.array_equal(unpack_correct(pack_correct(c), n), c)
    with pytest.raises(ValueError, match="holds no"):
        unpack_correct(pack_correct(np.ones(9, bool)), 20)


def test_estimate_is_the_two_variance_terms():
    c = np.array([[1, 1, 0, 1], [1, 0, 0, 1], [1, 1, 1, 0]], dtype=bool)
    e = estimate(c)
    rows, cols = c.mean(1), c.mean(0)
    assert e.mean == pytest.approx(c.mean())
    assert e.se == pytest.approx(math.sqrt(rows.var(ddof=1) / 3 + cols.var(ddof=1) / 4))
    one = estimate(c[:1])  # one model: the image term only
    assert one.se_models == 0 and one.se == pytest.approx(math.sqrt(c[0].astype(float).var(ddof=1) / 4))


@pytest.mark.parametrize("models,images,model_sd", [(4, 500, 1.0), (8, 200, 0.3), (32, 1000, 0.3), (4, 300, 0.1)])
def test_interval_covers_the_recipes_accuracy(models, images, model_sd):
    """The 95% interval covers the expected accuracy (over models and the image distribution) in
    92-98% of 600 simulated tables. Dropping either variance term fails a case: the model term
    dominates at (4, 500, 1.0), the image term at (32, 1000, 0.3)."""
    rng = np.random.default_rng(models * 1000 + images)
    truth = _truth(rng, 0.2, model_sd)
    hits = 0
    for _ in range(600):
        lo, hi = estimate(_draw(rng, models, images, 0.2, model_sd)).interval()
        hits += lo <= truth <= hi
    assert 0.92 <= hits / 600 <= 0.98


def test_paired_difference_cancels_image_difficulty():
    """Two recipes on the same images: the paired SE is well below the unpaired one (the images'
    difficulty is shared), and it covers the true difference."""
    rng = np.random.default_rng(5)
    b = 2.0 * rng.standard_t(3, 500)
    hits, ratios = 0, []
    for _ in range(300):
        p_a = 1 / (1 + np.exp(-(0.4 + rng.normal(0, 0.1, 6)[:, None] + b)))
        p_b = 1 / (1 + np.exp(-(0.2 + rng.normal(0, 0.1, 6)[:, None] + b)))
        ta, tb = rng.random(p_a.shape) < p_a, rng.random(p_b.shape) < p_b
        d, se, df = difference(ta, tb)
        truth = float((1 / (1 + np.exp(-(0.4 + b)))).mean() - (1 / (1 + np.exp(-(0.2 + b)))).mean())
        hits += abs(d - truth) <= 1.96 * se  # b fixed: the difference on these images
        ratios.append(se / math.hypot(estimate(ta).se, estimate(tb).se))
    assert hits / 300 >= 0.92
    assert np.median(ratios) < 0.75  # about 0.62 here


def test_confidence_edges():
    assert confidence(0.0, 0.0, math.inf) == 0.5
    assert confidence(0.01, 0.0, math.inf) == 1.0 and confidence(-0.01, 0.0, 3) == 0.0
    assert confidence(0.02, 0.01, math.inf) == pytest.approx(0.97725, abs=1e-4)


def test_table_of_needs_every_model():
    c = np.array([True, False, True])
    metas = [{"test_correct": pack_correct(c)}, {"test_correct": pack_correct(~c)}]
    assert table_of(metas, "test_correct", 3).tolist() == [[True, False, True], [False, True, False]]
    assert table_of([*metas, {}], "test_correct", 3) is None
