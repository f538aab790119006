import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve

from harness.core.metrics import evaluate_scores, resolvable, roc_curve, thin_roc, tpr_at_fpr


def test_hand_made_roc_with_a_tie_between_member_and_non_member():
    scores = np.array([4.0, 3.0, 3.0, 2.0, 1.0])
    member = np.array([1, 1, 0, 0, 0], bool)
    roc = roc_curve(scores, member)
    # thresholds: inf -> (0,0); 4 -> (0, .5); 3 -> (1/3, 1) since the tie moves together
    assert tpr_at_fpr(roc, 0.0) == 0.5
    assert tpr_at_fpr(roc, 0.3) == 0.5
    assert tpr_at_fpr(roc, 1 / 3) == 1.0


def test_tpr_at_zero_fpr_is_the_members_above_every_non_member():
    scores = np.array([10, 9, 8, 7.5, 7, 1], float)
    member = np.array([1, 1, 1, 0, 1, 0], bool)
    assert tpr_at_fpr(roc_curve(scores, member), 0.0) == 0.75


def test_all_scores_tied_gives_nothing_at_low_fpr():
    roc = roc_curve(np.ones(10), np.arange(10) % 2 == 0)
    assert tpr_at_fpr(roc, 0.0) == 0.0 and tpr_at_fpr(roc, 0.99) == 0.0
    assert tpr_at_fpr(roc, 1.0) == 1.0


def test_perfect_separation():
    roc = roc_curve(np.array([3, 2, 1, 0.0]), np.array([1, 1, 0, 0], bool))
    assert tpr_at_fpr(roc, 0.0) == 1.0


def test_matches_sklearn_on_random_scores_with_ties():
    rng = np.random.default_rng(0)
    member = rng.random(5000) < 0.5
    scores = np.round(rng.normal(size=5000) + member, 1)
    roc = roc_curve(scores, member)
    fpr, tpr, _ = sk_roc_curve(member, scores)
    for t in (0.0, 0.001, 0.01, 0.1, 0.5):
        assert tpr_at_fpr(roc, t) == pytest.approx(tpr[fpr <= t][-1])
    from harness.core.metrics import auc

    assert auc(roc) == pytest.approx(roc_auc_score(member, scores))
    thin = thin_roc(roc)
    assert len(thin.fpr) < len(roc.fpr)
    for t in (0.0, 0.01, 0.1):
        assert tpr_at_fpr(thin, t) == tpr_at_fpr(roc, t)


def test_resolution_flag():
    """One rule: at least 3 expected false positives (t N >= 3); FPR 0 is always read."""
    assert resolvable(0.0, 10)
    assert not resolvable(0.001, 1000)  # one expected false positive: an extreme order statistic
    assert not resolvable(0.001, 2999) and resolvable(0.001, 3000)


def test_bootstrap_ci_brackets_the_estimate_and_shrinks_with_more_models():
    rng = np.random.default_rng(1)

    def ci_width(models):
        mem = rng.random((models, 100)) < 0.5
        sc = rng.normal(size=(models, 100)) + 2 * mem
        m = evaluate_scores(sc, mem, np.ones(100, bool), [0.01], bootstrap=300, confidence=0.95, seed=0)
        lo, hi = m.tpr_ci[0.01]
        assert lo <= m.tpr_at_fpr[0.01] <= hi
        return hi - lo

    assert ci_width(64) < ci_width(8)


def test_a_variants_interval_is_the_level_figures_rule():
    """Each variant's CI at a reported FPR is harness.core.figure.interval on its (paper-style) read,
    its bootstrap replicates and its delete-one-victim reads; none at FPR 0; a perfect attack's is
    degenerate."""
    from harness.core.figure import interval
    from harness.core.metrics import bootstrap_draws, victim_counts, weighted_tpr_samples

    rng = np.random.default_rng(3)
    mem = rng.random((16, 200)) < 0.5
    sc = rng.normal(size=mem.shape) + 1.5 * mem + rng.normal(0, 0.5, (16, 1))
    m = evaluate_scores(sc, mem, np.ones(200, bool), [0.01, 0.1], bootstrap=200, confidence=0.95, seed=4)
    counts = victim_counts(bootstrap_draws(16, 200, 4), 16)
    boot = weighted_tpr_samples(sc, mem, [0.01, 0.1], counts)
    jack = weighted_tpr_samples(sc, mem, [0.01, 0.1], 1.0 - np.eye(16))
    for t in (0.01, 0.1):
        want = interval(m.tpr_at_fpr[t], boot[t], 16, 0.95, t * m.num_neg, jack[t])
        assert m.tpr_ci[t] == pytest.approx(want, abs=1e-12)
        assert m.tpr_ci[t][0] < m.tpr_at_fpr[t] < m.tpr_ci[t][1]
    assert all(np.isnan(m.tpr_ci[0.0]))
    perfect = np.tile(np.array([True, False] * 10), (8, 1))
    p = evaluate_scores(perfect.astype(float), perfect, np.ones(20, bool), [0.1], bootstrap=100, confidence=0.95, seed=0)
    assert p.tpr_ci[0.1] == (1.0, 1.0)


def test_only_evaluated_canaries_are_pooled():
    mem = np.tile(np.array([True, False, True, False]), (4, 1))
    sc = np.where(mem, 1.0, 0.0)
    sc[:, 2] = -5  # the third canary is never detected, but it is not evaluated
    m = evaluate_scores(sc, mem, np.array([True, True, False, True]), [0.01], bootstrap=0, confidence=0.95, seed=0)
    assert m.tpr_at_fpr[0.0] == 1.0 and m.num_pos == 4 and m.num_neg == 8


def test_nan_scores_are_an_error():
    with pytest.raises(ValueError):
        roc_curve(np.array([np.nan, 1.0]), np.array([True, False]))


@pytest.mark.parametrize("c,targets", [(60, [0.0, 0.01, 0.05, 0.2, 0.5]), (1500, [0.0, 0.001, 0.01]),
                                       (1500, [0.0, 0.002, 0.5])])
def test_bootstrap_replicates_equal_the_weighted_pooled_roc_computed_directly(c, targets):
    """Each replicate's TPR@FPR is that of the ROC pooled over its drawn victims (a victim drawn w
    times counts w times), read with tpr_at_fpr: checked replicate by replicate against that
    direct computation, with ties, a strong and a weak attack, and FPR targets from 0 to 0.5 (the
    replicates are computed on a prefix of the sorted guesses, which must not change a value; at
    1 500 samples, 12 000 guesses, the prefix is found on the order's first 4 096 guesses, or,
    at 0.5, on longer heads)."""
    from harness.core.metrics import bootstrap_draws, victim_counts, weighted_tpr_samples

    rng = np.random.default_rng(5)
    s_models = 8
    mem = np.zeros((s_models, c), bool)
    for j in range(c):
        mem[rng.permutation(s_models)[: s_models // 2], j] = True
    for shift in (0.3, 4.0):
        scores = np.round(rng.normal(size=(s_models, c)) + shift * mem, 1)  # rounded: many ties
        draws = bootstrap_draws(s_models, 40, seed=1)
        got = weighted_tpr_samples(scores, mem, targets, victim_counts(draws, s_models), chunk=16)
        for b, d in enumerate(draws):
            rows = np.asarray(d)  # the drawn victims, repeats included
            roc = roc_curve(scores[rows].ravel(), mem[rows].ravel())
            for t in targets:
                assert got[t][b] == tpr_at_fpr(roc, t), (shift, b, t)


@pytest.mark.parametrize("ties,c,targets,skew", [(False, 300, [0.01, 0.05], False), (True, 300, [0.01, 0.05], False),
                                                  (False, 4000, [0.001, 0.01], False),
                                                  (True, 4000, [0.001, 0.01], False), (True, 4000, [0.002], True)])
def test_audit_jackknife_equals_each_group_read_afresh(ties, c, targets, skew):
    """The delete-a-group jackknife over audit samples sorts the guesses once and filters the order
    for each group left out, cut short past the low-FPR start; every read equals the
    plotting-position read of that subset computed from scratch (ties included: equal scores stay in
    index order; at 4 000 samples the order is cut; ``skew`` puts the largest non-member scores in
    the columns of one group, so that leaving it out leaves the cut too few non-members and that
    read uses the whole order)."""
    from harness.core.metrics import AUDIT_GROUPS, audit_jackknife, weighted_tpr_plotting

    rng = np.random.default_rng(3)
    scores = rng.normal(size=(12, c))
    mem = rng.random(scores.shape) < 0.5
    if skew:
        scores[:, ::AUDIT_GROUPS] += 4.0 * ~mem[:, ::AUDIT_GROUPS]
    if ties:
        scores = np.round(scores * 2) / 2
    got = audit_jackknife(scores, mem, targets)
    for g in range(AUDIT_GROUPS):
        keep = np.arange(c) % AUDIT_GROUPS != g
        ref = weighted_tpr_plotting(scores[:, keep], mem[:, keep], targets, np.ones((1, 12)))
        for t in targets:
            assert got[t][g] == ref[t][0]


def test_tpr_at_fpr_is_the_largest_tpr_at_or_below_the_fpr():
    """The bisection reads what the definition says: the largest TPR over the points with FPR <= t,
    on ROCs with ties and at targets on, between and beyond its FPRs."""
    rng = np.random.default_rng(11)
    for _ in range(20):
        scores = np.round(rng.normal(size=400) + rng.random(400), 1)
        roc = roc_curve(scores, rng.random(400) < 0.5)
        for t in [0.0, 1e-9, *roc.fpr[::7], *(roc.fpr[1::9] + 1e-6), 0.5, 1.0]:
            assert tpr_at_fpr(roc, float(t)) == roc.tpr[roc.fpr <= t + 1e-12].max()
