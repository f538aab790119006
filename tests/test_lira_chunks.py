"""The attack phase in chunks of audit samples gives the one-pass scores."""

import numpy as np
import pytest

from attacks.lira import chunked_scores, lira_scores
from attacks.scores import SCORE_FUNCTIONS
from harness.core.design import balanced_membership


@pytest.mark.parametrize("online", [True, False])
def test_chunked_lira_equals_one_pass(online):
    rng = np.random.default_rng(3)
    s, c, a, k = 8, 23, 3, 5
    membership = balanced_membership(rng.uniform(size=(s, c)))
    logits = rng.normal(size=(s, c, a, k)).astype(np.float32) + membership[:, :, None, None] * np.eye(k)[0]
    labels = rng.integers(0, k, c)
    for fn in SCORE_FUNCTIONS.values():
        obs = chunked_scores(fn, logits, labels, chunk=4)
        np.testing.assert_array_equal(obs, fn(logits, labels))
        per_one = lira_scores(obs, membership, online=online, global_variance=False, chunk=c)
        per_chunks = lira_scores(obs, membership, online=online, global_variance=False, chunk=4)
        np.testing.assert_array_equal(per_chunks, per_one)  # every statistic is per sample
        glob_one = lira_scores(obs, membership, online=online, global_variance=True, chunk=c)
        glob_chunks = lira_scores(obs, membership, online=online, global_variance=True, chunk=5)
        np.testing.assert_allclose(glob_chunks, glob_one, rtol=1e-12, atol=1e-12)
        assert not np.allclose(glob_one, per_one)  # the pooled variance is really used
