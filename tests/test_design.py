import numpy as np
import pytest

from harness.core.config import ConfigError
from harness.core.design import make_design


@pytest.mark.parametrize("models,size", [(4, 10), (32, 200), (64, 500)])
def test_every_audit_sample_is_in_exactly_half_of_the_models(models, size):
    d = make_design(pool_size=1300, audit_size=size, num_models=models, seed=3)
    assert d.membership.shape == (models, size)
    assert (d.membership.sum(axis=0) == models // 2).all()
    assert len(np.unique(d.audit_indices)) == size
    assert d.audit_indices.min() >= 0 and d.audit_indices.max() < 1300


def test_design_is_a_function_of_the_seed_only():
    a = make_design(1000, 100, 16, seed=7)
    b = make_design(1000, 100, 16, seed=7)
    c = make_design(1000, 100, 16, seed=8)
    assert np.array_equal(a.audit_indices, b.audit_indices) and np.array_equal(a.membership, b.membership)
    assert not np.array_equal(a.audit_indices, c.audit_indices)


def test_growing_the_audit_set_keeps_earlier_samples_and_their_membership():
    small = make_design(1000, 50, 16, seed=1)
    big = make_design(1000, 120, 16, seed=1)
    assert np.array_equal(big.audit_indices[:50], small.audit_indices)
    assert np.array_equal(big.membership[:, :50], small.membership)


def test_non_audit_samples_are_the_complement():
    d = make_design(300, 40, 8, seed=0)
    rest = d.non_audit_indices(300)
    assert len(rest) == 260
    assert not set(rest) & set(d.audit_indices.tolist())


def test_impossible_designs_are_refused():
    with pytest.raises(ConfigError):
        make_design(100, 101, 8, seed=0)
    with pytest.raises(ConfigError):
        make_design(100, 10, 7, seed=0)
