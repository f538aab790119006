"""DP-SGD's sampling rate is the paper's: q = 1/ceil(N/B), and epsilon matches table 3."""

import math

import pytest
from opacus.accountants import RDPAccountant

from defenses.dpsgd import expected_batch_size, epsilon_of, sample_rate, steps_per_epoch
from harness.bounds import sgm

N = 49_747  # model 0's training set in the paper's design (protocol notes §6)


def _epsilon(q: float, sigma: float, steps: int) -> float:
    acct = RDPAccountant()
    acct.history = [(sigma, q, steps)]
    return epsilon_of(acct, 1e-5)


def test_medium_setting_reproduces_table3_epsilon():
    q = sample_rate(N, 2048)  # default: the paper's rate
    steps = 200 * steps_per_epoch(N, 2048)
    assert steps_per_epoch(N, 2048) == 25 and q == 0.04 and expected_batch_size(N, q) == 1989
    assert _epsilon(q, 0.2, steps) == pytest.approx(3558, abs=1)  # table 3: 3558
    # the expected-batch-size rate B/N gives the larger epsilon the harness reported before (3670)
    assert _epsilon(sample_rate(N, 2048, "b_over_n"), 0.2, steps) == pytest.approx(3670, abs=5)


@pytest.mark.parametrize("batch, epochs, sigma, table", [(64, 16, 0.00625, 1.8e8), (64, 25, 0.003125, 1.1e9)])
def test_high_settings_match_table3(batch, epochs, sigma, table):
    # at these noise levels RDP's optimal order is the smallest of the accountant's grid, so the
    # figure depends on that grid: 1.74e8 and 1.09e9 here, 1.8e8 and 1.1e9 in the paper (5% apart)
    q = sample_rate(N, batch)
    assert steps_per_epoch(N, batch) == 778 and q == pytest.approx(1 / 778)
    assert expected_batch_size(N, q) == 63  # protocol notes §6
    eps = _epsilon(q, sigma, epochs * 778)
    assert eps == pytest.approx(table, rel=0.05)


def test_bound_cli_helper_takes_either_rate():
    assert sgm.dpsgd_params(2048, N, 200, "paper") == (0.04, 5000)
    q, t = sgm.dpsgd_params(2048, N, 200)
    assert q == 2048 / N and t == 5000
    with pytest.raises(ValueError):
        sgm.dpsgd_params(2048, N, 200, "other")
    assert math.isclose(sample_rate(100, 200), 1.0) and sample_rate(100, 200, "b_over_n") == 1.0
