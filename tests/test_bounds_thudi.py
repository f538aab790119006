"""Thudi et al. accuracy bounds and the earlier prior bounds (oracles: shared/reference/bounds-notes.md)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.bounds import prior, thudi

REL = 1e-5


def close(x: float, y: float, rel: float = REL) -> bool:
    return math.isclose(x, y, rel_tol=rel, abs_tol=0.0)


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_paper_quoted_value_6_9_percent():
    assert close(thudi.pos_acc_upper(2.0, 0.01), 0.0694532)


@pytest.mark.parametrize("eps,want", [(0.5, 0.6224593), (1, 0.7310586), (2, 0.8807971), (3, 0.9525741), (5, 0.9933071)])
def test_pos_acc_upper_at_balanced_prior_is_sigmoid(eps, want):
    assert close(thudi.pos_acc_upper(eps, 0.5), want)
    assert close(thudi.pos_acc_upper(eps, 0.5), sigmoid(eps), rel=1e-12)
    assert close(prior.mahloujifar_pos_acc(eps), want)


@pytest.mark.parametrize("p1,eps,want", [
    (0.1, 1, 0.231969), (0.1, 2, 0.450853), (0.1, 3, 0.690568), (0.1, 5, 0.942826),
    (0.9, 1, 0.960730), (0.9, 2, 0.985186), (0.9, 3, 0.994499), (0.9, 5, 0.999252),
])
def test_pos_acc_upper_table(p1, eps, want):
    assert close(thudi.pos_acc_upper(eps, p1), want, rel=2e-6)


def test_lower_and_negative_accuracy_bounds():
    assert close(thudi.pos_acc_lower(1.0, 0.5), 0.2689414)
    assert close(thudi.neg_acc_upper(1.0, 0.3), 0.8638095)
    assert close(thudi.neg_acc_lower(1.0, 0.3), 0.4618985)


@pytest.mark.parametrize("eps,literal_a,joint,literal_c", [
    (3, 0.9525967, 0.9526193, 0.9525764),
    (2, 0.8808496, 0.8809021, 0.8808023),
    (1, 0.7311569, 0.7312553, 0.7310684),
])
def test_accuracy_targets_of_the_papers(eps, literal_a, joint, literal_c):
    # A: P(S/x) = 1% read literally; the corrected form at TPR 1% equals the literal one at joint 0.5 x 1%
    assert close(thudi.pos_acc_upper_literal(eps, 0.5, 1e-5, 0.01), literal_a)
    assert close(thudi.pos_acc_upper(eps, 0.5, 1e-5, tpr=0.01), joint)
    assert close(thudi.pos_acc_upper_literal(eps, 0.5, 1e-5, 0.5 * 0.01), thudi.pos_acc_upper(eps, 0.5, 1e-5, 0.01), 1e-12)
    assert close(thudi.pos_acc_upper_literal(eps, 0.5, 1e-5, 0.1), literal_c)  # C uses 10%


def test_corrected_bound_is_attained_and_the_literal_one_is_violated():
    """The tight (eps, delta) pair (Kairouz et al.): S = {0, 1} has FPR = e^-eps (TPR - delta)."""
    eps, delta, p1 = 1.0, 0.01, 0.2
    tpr = delta + (1 - delta) * math.exp(eps) / (1 + math.exp(eps))
    fpr = (1 - delta) / (1 + math.exp(eps))
    assert close(fpr, math.exp(-eps) * (tpr - delta), rel=1e-12)
    pos_acc = p1 * tpr / (p1 * tpr + (1 - p1) * fpr)
    assert close(thudi.pos_acc_upper(eps, p1, delta, tpr=tpr), pos_acc, rel=1e-12)
    assert thudi.pos_acc_upper_literal(eps, p1, delta, tpr) < pos_acc - 1e-4  # the erratum
    # the negative side with TNR: the same pair read the other way round
    tnr = 1 - fpr
    neg_acc = (1 - p1) * tnr / ((1 - p1) * tnr + p1 * (1 - tpr))
    assert neg_acc <= thudi.neg_acc_upper(eps, p1, delta, tnr=tnr) + 1e-12
    assert thudi.pos_acc_lower(eps, p1, delta, tpr=tpr) <= pos_acc


def test_delta_without_a_tpr_floor_is_vacuous():
    assert thudi.pos_acc_upper(1.0, 0.3, 1e-5) == 1.0
    assert thudi.pos_acc_upper(1.0, 0.3, 0.02, tpr=0.01) == 1.0  # delta >= TPR
    assert thudi.pos_acc_lower(1.0, 0.3, 1e-5) == 0.0
    assert thudi.neg_acc_upper(1.0, 0.3, 1e-5) == 1.0


def test_epsilon_for_other_priors_less_can_be_more():
    for p1, shift in [(0.1, 2.1972), (0.3, 0.8473), (0.7, -0.8473)]:
        assert math.isclose(thudi.epsilon_for_prior(3.0, p1), 3.0 + shift, abs_tol=1e-4)
        assert close(thudi.epsilon_for_prior(3.0, p1), 3.0 + math.log((1 - p1) / p1), rel=1e-12)
        # exact with delta too, in the corrected form
        assert close(thudi.epsilon_for_prior(3.0, p1, delta=1e-5, tpr=0.01), 3.0 + math.log((1 - p1) / p1), rel=1e-9)
    for p1, want in [(0.1, 5.1976), (0.3, 3.8475), (0.7, 2.1525)]:
        assert math.isclose(thudi.epsilon_for_prior_literal(3.0, p1, 1e-5, 0.01), want, abs_tol=1e-4)
    assert math.isnan(thudi.epsilon_for_prior(1.0, 0.9)) and math.isnan(thudi.epsilon_for_prior(2.0, 0.9))
    assert thudi.epsilon_for_prior(3.0, 0.9) > 0


def test_required_epsilon_inverts_the_bound():
    for p1 in (0.05, 0.3, 0.5):
        for eps in (0.1, 1.0, 4.0):
            target = thudi.pos_acc_upper(eps, p1, 1e-5, tpr=0.2)
            assert close(thudi.required_epsilon(target, p1, 1e-5, tpr=0.2), eps, rel=1e-9)
    assert math.isnan(thudi.required_epsilon(0.2, 0.3))  # below the eps = 0 bound
    assert thudi.required_epsilon(1.0, 0.3) == math.inf


@pytest.mark.parametrize("c,paper,valid", [
    (10, 606.07, 82.119), (100, 60.162, 8.2380), (1000, 5.5699, 0.84548), (5000, 0.71232, 0.16992),
    (9000, 0.15272, 0.068929),
])
def test_deletion_capacity(c, paper, valid):
    assert close(thudi.deletion_capacity_paper(0.8, 10_000, 1.0, c), paper, rel=1e-4)
    assert close(thudi.deletion_capacity(0.8, 10_000, 1.0, c), valid, rel=1e-4)


def test_group_mi_and_positive_advantage():
    assert close(thudi.group_mi_upper(1.0, [0.5, 0.5]), 0.9276705)
    assert close(thudi.group_mi_upper(1.0, [0.5]), thudi.neg_acc_upper(1.0, 0.5), rel=1e-12)  # 1 - (1 + e)^-1
    assert close(thudi.positive_advantage(1.0, 0.5), 0.4621172)
    assert close(thudi.positive_advantage(1.0, 0.5), prior.humphries_advantage(1.0), rel=1e-12)
    assert close(thudi.positive_advantage(2.0, 0.01), 0.1189063, rel=2e-6)


@pytest.mark.parametrize("eps,value,p_star", [(1, 0.4898373, 0.377541), (2, 0.9242343, 0.268941), (5, 1.6965673, 0.075858)])
def test_maximum_positive_advantage(eps, value, p_star):
    v, p = thudi.max_positive_advantage(eps)
    assert close(v, value) and close(p, p_star)
    grid = np.linspace(1e-4, 1 - 1e-4, 20001)
    numeric = max(thudi.positive_advantage(eps, float(x)) for x in grid)
    assert numeric <= v + 1e-12 and numeric > v - 1e-6
    assert close(thudi.positive_advantage(eps, p), v, rel=1e-12)


def test_prior_bounds_at_eps_1():
    assert close(prior.yeom_advantage(1.0, clip=False), 1.718282, rel=1e-6)
    assert prior.yeom_advantage(1.0) == 1.0  # clipped: vacuous
    assert close(prior.advantage_to_accuracy(prior.yeom_advantage(1.0, clip=False)), 1.359141, rel=1e-6)
    assert close(prior.erlingsson_advantage(1.0), 0.6321206)
    assert close(prior.advantage_to_accuracy(prior.erlingsson_advantage(1.0)), 0.8160603)
    assert close(prior.humphries_advantage(1.0), 0.4621172)
    assert prior.sablayrolles_pos_acc(1.0, 0.5) == 0.75
    assert close(prior.humphries_advantage(1.0, 1e-5), 0.4621225)
    assert close(prior.advantage_to_accuracy(prior.humphries_advantage(1.0, 1e-5)), 0.7310613)
    assert close(prior.erlingsson_advantage(1.0, 1e-5), 0.6321242)
    assert prior.sablayrolles_pos_acc(8.0, 0.5) == 1.0
    assert prior.humphries_advantage(1e6) == 1.0  # no overflow


@pytest.mark.parametrize("offset,want", [(-0.5, 0.5492337), (-5, 0.5987229), (-10, 0.6603839), (-20, 0.7758493), (-30, 0.8628400)])
def test_counterexample_positive_accuracy_grows_without_bound(offset, want):
    assert close(thudi.counterexample_pos_acc(offset), want)


def test_counterexample_accuracy_is_maximal_at_the_midpoint():
    assert close(thudi.counterexample_accuracy(-0.5), 0.5492337)
    grid = np.linspace(-5, 4, 901)
    accs = [thudi.counterexample_accuracy(float(o)) for o in grid]
    assert math.isclose(grid[int(np.argmax(accs))], -0.5, abs_tol=1e-9)
    assert thudi.counterexample_pos_acc(-1e4) > 0.999999


def test_invalid_arguments_raise():
    with pytest.raises(ValueError):
        thudi.pos_acc_upper(-1.0, 0.5)
    with pytest.raises(ValueError):
        thudi.pos_acc_upper(1.0, 1.0)
    with pytest.raises(ValueError):
        thudi.pos_acc_upper(1.0, 0.5, delta=1.5)
    with pytest.raises(ValueError):
        thudi.group_mi_upper(1.0, [])
    with pytest.raises(ValueError):
        prior.humphries_advantage(-0.1)


eps_st = st.floats(0.0, 30.0, allow_nan=False)
p_st = st.floats(1e-4, 1 - 1e-4)
delta_st = st.floats(0.0, 0.01)


@settings(max_examples=60, deadline=None)
@given(eps_st, eps_st, p_st, delta_st, st.floats(0.02, 1.0))
def test_bounds_are_monotone_in_epsilon_and_in_unit_interval(e1, e2, p1, delta, tpr):
    lo, hi = sorted((e1, e2))
    for f in (lambda e: thudi.pos_acc_upper(e, p1, delta, tpr), lambda e: thudi.neg_acc_upper(e, p1, delta, tpr),
              lambda e: prior.yeom_advantage(e), lambda e: prior.erlingsson_advantage(e, delta),
              lambda e: prior.humphries_advantage(e, delta), lambda e: prior.sablayrolles_pos_acc(e, p1),
              lambda e: prior.mahloujifar_pos_acc(e), lambda e: thudi.group_mi_upper(e, [p1, 0.5])):
        a, b = f(lo), f(hi)
        assert 0.0 <= a <= 1.0 and 0.0 <= b <= 1.0
        assert a <= b + 1e-12
    for f in (lambda e: thudi.pos_acc_lower(e, p1, delta, tpr), lambda e: thudi.neg_acc_lower(e, p1, delta, tpr)):
        a, b = f(lo), f(hi)
        assert 0.0 <= b <= a + 1e-12 <= 1.0 + 1e-12
    assert thudi.pos_acc_lower(hi, p1, delta, tpr) <= thudi.pos_acc_upper(hi, p1, delta, tpr)
    assert thudi.neg_acc_lower(hi, p1, delta, tpr) <= thudi.neg_acc_upper(hi, p1, delta, tpr)


@settings(max_examples=60, deadline=None)
@given(st.floats(0.0, 10.0), p_st)
def test_positive_advantage_never_exceeds_its_maximum(eps, p1):
    v, _ = thudi.max_positive_advantage(eps)
    assert thudi.positive_advantage(eps, p1) <= v + 1e-12
    # the upper bound is at least the prior: always saying "member" has precision P1
    assert thudi.pos_acc_upper(eps, p1) >= p1 - 1e-15
