"""A defense against DP-SGD at its accuracy (harness.audit.matched): reading the frontier only between
neighbours at most 2 points apart, the leak ratio's Bonferroni interval (coverage by simulation) and
its verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.audit.matched import FrontierPoint, leak_ratio, read_frontier, sample_point

FRONTIER = [FrontierPoint(0.50, 0.002, 0.001, "a"), FrontierPoint(0.52, 0.010, 0.002, "b"),
            FrontierPoint(0.535, 0.04, 0.01, "c"), FrontierPoint(0.58, 0.30, 0.03, "d")]


def test_reading_interpolates_between_close_neighbours_only():
    r = read_frontier(0.51, FRONTIER)
    assert r.leak == pytest.approx(0.006) and [p.label for p in r.points] == ["a", "b"]
    assert r.se == pytest.approx(math.hypot(0.5 * 0.001, 0.5 * 0.002))
    assert read_frontier(0.535, FRONTIER).leak == 0.04  # on a point: its own read
    gap = read_frontier(0.55, FRONTIER)  # c and d are 4.5 points apart
    assert gap.leak is None and "4.5 points apart" in gap.why
    assert read_frontier(0.6, FRONTIER).why == "outside the frontier: DP-SGD's points span 50.0-58.0%"
    assert read_frontier(0.49, FRONTIER).leak is None
    assert read_frontier(0.5, []).why == "outside the frontier: no DP-SGD point"
    assert read_frontier(0.55, FRONTIER, max_gap=0.05).leak == pytest.approx(0.04 + (0.30 - 0.04) / 3)


def test_ratio_interval_covers_at_least_95_percent():
    """Both leaks drawn around their truths with their SEs (2 000 draws per case): the Bonferroni box
    covers the true ratio in at least 95% of draws, also where the DP-SGD leak is near 0."""
    rng = np.random.default_rng(0)
    for (ld, sd), (lp, sp) in [((0.30, 0.04), (0.02, 0.008)), ((0.05, 0.01), (0.05, 0.01)),
                               ((0.15, 0.03), (0.003, 0.002))]:
        truth = ld / lp
        hits = 0
        for _ in range(2000):
            r = leak_ratio(max(0.0, rng.normal(ld, sd)), sd, max(0.0, rng.normal(lp, sp)), sp)
            hits += r.low <= truth <= r.high
        assert hits / 2000 >= 0.95


def test_verdicts():
    assert leak_ratio(0.30, 0.03, 0.01, 0.003).verdict == "leaks more than DP-SGD at its utility"
    assert leak_ratio(0.01, 0.002, 0.30, 0.03).verdict == "leaks less than DP-SGD at its utility"
    r = leak_ratio(0.05, 0.02, 0.04, 0.02)
    assert r.verdict == "not told apart from DP-SGD at its utility" and r.low < 1 < r.high
    assert leak_ratio(0.2, 0.02, 0.001, 0.001).high == math.inf  # DP-SGD's interval reaches 0


def test_sample_point_reads_a_results_json():
    r = {"sample": {"test_accuracy": {"mean": 0.55}, "figure": {"leak": {"tpr": 0.2, "se": 0.01}}}}
    assert sample_point(r, "x") == FrontierPoint(0.55, 0.2, 0.01, "x")
    assert sample_point({"sample": {"test_accuracy": {"mean": 0.5}, "figure": {}}}) is None
