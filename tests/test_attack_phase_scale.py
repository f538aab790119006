"""The attack phase at population scale computes the numbers it computed before (issue 38).

The faster forms (plain-numpy log-sum-exp, LiRA streamed over chunks, RMIA's reference means once per
sample, the bootstrap by bisection, the epsilon bound by branch and bound) are compared bit for bit
with the forms they replace, kept here or in the code as references; and the whole phase on a
synthetic run is compared with the results.json the code of commit c8b0d8b wrote for the same run
(``tests/data/attack_phase_c8b0d8b.json.gz``, made by :func:`golden_results` with that commit's
code on the path). ROC files stay bounded, and neither ``harness attack`` nor ``harness report``
imports torch.
"""

from __future__ import annotations

import gzip
import math
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from scipy.special import log_softmax, logsumexp

import attacks.lira as lira
import attacks.rmia as rmia
import harness.bounds.empirical as empirical
from attacks.base import AttackInput
from attacks.scores import hinge_score, logit_score
from harness.core.design import balanced_membership
from harness.core.metrics import (ROC_FILE_EXACT_POINTS, ROC_FILE_GRID, roc_curve, roc_file_curve, sorted_groups,
                                  thin_roc, victim_counts, weighted_tpr_samples)

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_attack_phase import build_run  # noqa: E402

GOLDEN = REPO / "tests" / "data" / "attack_phase_c8b0d8b.json.gz"


# --- the forms the faster code replaces -----------------------------------------------------------
def ref_split(logits, labels):
    z = np.array(logits, dtype=np.float64, copy=True)
    onehot = np.broadcast_to(np.arange(z.shape[-1]) == labels[:, None, None], z.shape)
    z_y = np.where(onehot, z, 0.0).sum(-1)
    z[onehot] = -np.inf
    return z_y, z


def ref_logit(logits, labels):
    z_y, rest = ref_split(logits, labels)
    return z_y - logsumexp(rest, axis=-1)


def ref_hinge(logits, labels):
    z_y, rest = ref_split(logits, labels)
    return z_y - rest.max(axis=-1)


def ref_lira(logits, labels, membership, online, balanced=True):
    """LiRA.score as it was: each score function over the whole level, then every variant."""
    mode = "online" if online else "offline"
    out = {}
    for name, fn in (("logit", ref_logit), ("hinge", ref_hinge)):
        obs_all = fn(logits, labels)
        sets = [("noaug", obs_all[:, :, :1])] + ([(f"aug{obs_all.shape[2]}", obs_all)] if obs_all.shape[2] > 1 else [])
        for q, obs in sets:
            for glob in (False, True):
                out[f"{mode}-{name}-{q}-{'global' if glob else 'persample'}"] = lira.lira_scores(
                    obs, membership, online=online, global_variance=glob, balanced=balanced)
    return out


def ref_label_log_prob(logits, labels, temperature):
    lp = log_softmax(np.asarray(logits, dtype=np.float64) / temperature, axis=-1)
    picked = np.take_along_axis(lp, labels[None, :, None, None].astype(np.int64), axis=-1)[..., 0]
    return logsumexp(picked, axis=-1) - np.log(picked.shape[-1])


def ref_rmia(inp, gamma, a, temperature):
    """RMIA.score as it was: per view and mode, every victim's references one victim at a time."""
    x, z = inp.signals["logits"], inp.signals["population_logits"]
    num_aug, out = x.shape[2], {}
    lp_x = [ref_label_log_prob(x[:, :, v : v + 1], inp.labels, temperature) for v in range(num_aug)]
    lp_z = [ref_label_log_prob(z[:, :, v : v + 1], inp.population_labels, temperature) for v in range(num_aug)]
    for mode in ("online", "offline"):
        counts = [rmia._loop_pass_counts(lx, inp.membership, lz, online=mode == "online", gamma=gamma, a=a)
                  for lx, lz in zip(lp_x, lp_z)]
        out[f"{mode}-noaug"] = counts[0] / z.shape[1]
        if num_aug > 1:
            out[f"{mode}-aug{num_aug}"] = np.sum(counts, axis=0) / (num_aug * z.shape[1])
    return out


def ref_weighted_tpr_samples(scores, membership, targets, weights):
    """weighted_tpr_samples as it was: every row's FPR over the whole low-FPR prefix, a matrix product."""
    s_models = scores.shape[0]
    flat = scores.ravel().astype(np.float64)
    y = membership.ravel().astype(bool)
    victim = np.repeat(np.arange(s_models), scores.shape[1])
    order, ends = sorted_groups(flat)
    y_o, v_o = y[order], victim[order]
    tot_pos = np.bincount(victim[y], minlength=s_models).astype(np.float64)
    tot_neg = np.bincount(victim[~y], minlength=s_models).astype(np.float64)
    pos_at = [np.flatnonzero((v_o == v) & y_o) for v in range(s_models)]
    neg_at = [np.flatnonzero((v_o == v) & ~y_o) for v in range(s_models)]

    def cumulative(cols):
        e = ends[cols]
        return (np.stack([np.searchsorted(at, e, side="right") for at in pos_at]).astype(np.float64),
                np.stack([np.searchsorted(at, e, side="right") for at in neg_at]).astype(np.float64))

    t_max = max(targets)
    w = np.asarray(weights, dtype=np.float64)
    npos, nneg = w @ tot_pos, w @ tot_neg
    defined = (npos > 0) & (nneg > 0)
    unweighted_fp = np.cumsum(~y_o)[ends]
    width = min(len(ends), max(256, int(np.searchsorted(unweighted_fp, 2 * t_max * tot_neg.sum(), side="right")) + 1))
    while width < len(ends):
        fp_last = w @ cumulative(np.array([width - 1]))[1][:, 0]
        if np.all(~defined | (fp_last / np.where(defined, nneg, 1.0) > t_max + 1e-12)):
            break
        width = min(len(ends), 2 * width)
    pos_cum, neg_cum = cumulative(np.arange(width))
    fpr = (w @ neg_cum) / np.where(nneg > 0, nneg, 1.0)[:, None]
    out = {}
    for t in targets:
        last = (fpr <= t + 1e-12).sum(axis=1) - 1
        tp = np.einsum("bs,sb->b", w, pos_cum[:, np.maximum(last, 0)])
        with np.errstate(invalid="ignore", divide="ignore"):
            v = np.where(last >= 0, tp / npos, 0.0)
        out[t] = np.where(~defined, np.nan, v)
    return out


def _logits(rng, s, c, a, k, membership, dtype=np.float16):
    x = rng.normal(size=(s, c, a, k)) * 2 + 1.5 * membership[:, :, None, None] * np.eye(k)[0]
    x[:, :3] = 0.0  # rows of equal logits: tied maxima
    x[:, 3:5] = np.round(x[:, 3:5])
    return x.astype(dtype)


# --- unit comparisons ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_score_functions_are_scipys_bit_for_bit(dtype):
    rng = np.random.default_rng(0)
    mem = balanced_membership(rng.uniform(size=(6, 40)))
    x = _logits(rng, 6, 40, 3, 7, mem, dtype)
    labels = rng.integers(0, 7, 40)
    np.testing.assert_array_equal(logit_score(x, labels), ref_logit(x, labels))
    np.testing.assert_array_equal(hinge_score(x, labels), ref_hinge(x, labels))


@pytest.mark.parametrize("k", [2, 5, 10, 100, 200])
def test_both_scores_with_the_classes_first_are_scipys_bit_for_bit(k):
    from attacks.scores import _row_sum_kind, both_scores

    rng = np.random.default_rng(k)
    mem = balanced_membership(rng.uniform(size=(4, 30)))
    for dtype in (np.float16, np.float32, np.float64):
        x = _logits(rng, 4, 30, 3, k, mem, dtype)
        labels = rng.integers(0, k, 30)
        # infinite logits (float16 overflows at 65 504): every other class -inf, a +inf maximum, two
        # tied +inf, a +inf label, one -inf class, a -inf label
        x[0, 5, 0] = -np.inf
        x[0, 5, 0, labels[5]] = 1.0
        x[1, 6, 1, (labels[6] + 1) % k] = np.inf
        x[2, 7, 2, (labels[7] + 1) % k] = np.inf
        x[2, 7, 2, (labels[7] + 2) % k] = np.inf if k > 2 else x[2, 7, 2, (labels[7] + 2) % k]
        x[3, 8, 0, labels[8]] = np.inf
        x[0, 9, 1, (labels[9] + 1) % k] = -np.inf
        x[1, 10, 2, labels[10]] = -np.inf
        before = x.copy()
        with np.errstate(invalid="ignore"):
            got = both_scores(x, labels)
        np.testing.assert_array_equal(x, before)  # the caller's logits are not touched
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(got["logit"], ref_logit(x, labels))
            np.testing.assert_array_equal(got["hinge"], ref_hinge(x, labels))
    assert _row_sum_kind(k) != "numpy"  # numpy's summation order was found: the fast form ran


def test_descending_order_is_the_stable_argsort():
    from harness.core.metrics import descending_order

    rng = np.random.default_rng(8)
    x = rng.normal(size=5000)
    few_ties = x.copy()
    few_ties[::37] = 0.25
    for v in (x, few_ties, np.round(x * 4) / 4, np.zeros(50), np.r_[0.0, -0.0, 1.0, -0.0, 0.0, np.inf, -np.inf, 1.0],
              np.zeros(0)):
        np.testing.assert_array_equal(descending_order(v), np.argsort(-v, kind="stable"))


def test_descending_order_where_different_scores_share_a_packed_key():
    """The packed key keeps 52 - 13 mantissa bits at 5 000 scores: scores 1e-13 apart share it and must
    be re-sorted (a few of them among distinct scores: the re-sort of their runs; most of them: the
    stable argsort); the run starts must be those of the scores themselves."""
    from harness.core.metrics import _descending, descending_order

    rng = np.random.default_rng(9)
    x = rng.normal(size=5000)
    few = x.copy()
    few[:300] = 1 + rng.integers(0, 7, 300) * 1e-13  # 300 near-equal scores, runs of equal ones among them
    many = 1 + rng.integers(0, 50, 5000) * 1e-13
    for v in (few, many, -few):
        want = np.argsort(-v, kind="stable")
        np.testing.assert_array_equal(descending_order(v), want)
        s = -v[want]
        np.testing.assert_array_equal(_descending(v)[1], np.r_[True, s[1:] != s[:-1]])


def ref_p_value(m, r, v, eps, delta):
    """one_run.p_value as it was: every window of the CDF."""
    from scipy.special import betainc

    from harness.bounds.one_run import _binom_cdf

    if v == 0:
        return 1.0
    q = 1.0 / (1.0 + math.exp(-eps))
    tail = float(betainc(v, r - v + 1, q))
    if delta > 0:
        cdf = np.r_[0.0, _binom_cdf(np.arange(v, dtype=np.float64), r, q)]
        window = cdf[-1] - cdf[v - np.arange(1, v + 1)]
        tail += 2 * m * delta * float(np.max(window / np.arange(1, v + 1)))
    return min(tail, 1.0)


def test_one_run_p_values_are_the_full_window_maximum_bit_for_bit():
    from harness.bounds.one_run import p_value

    rng = np.random.default_rng(9)
    for _ in range(150):
        m = int(rng.integers(10, 40_000))
        r = int(rng.integers(1, m + 1))
        v = int(rng.integers(0, r + 1))
        eps = float(rng.choice([0.0, rng.uniform(0, 0.3), rng.uniform(0, 6)]))
        delta = float(rng.choice([0.0, 1e-5, 1e-3]))
        assert p_value(m, r, v, eps, delta) == ref_p_value(m, r, v, eps, delta), (m, r, v, eps, delta)


def test_threshold_attack_in_chunks_is_one_call_bit_for_bit(monkeypatch):
    import attacks.threshold as threshold

    rng = np.random.default_rng(7)
    mem = balanced_membership(rng.uniform(size=(6, 50)))
    x = _logits(rng, 6, 50, 3, 5, mem)
    labels = rng.integers(0, 5, 50)
    monkeypatch.setattr(threshold, "CHUNK", 16)
    got = threshold.GlobalThreshold().score(AttackInput(signals={"logits": x}, labels=labels, membership=mem))
    assert list(got) == ["logit", "hinge"]
    np.testing.assert_array_equal(got["logit"], ref_logit(x[:, :, :1], labels)[:, :, 0])
    np.testing.assert_array_equal(got["hinge"], ref_hinge(x[:, :, :1], labels)[:, :, 0])


@pytest.mark.parametrize("online", [True, False])
def test_streamed_lira_is_the_variant_by_variant_computation_bit_for_bit(monkeypatch, online):
    rng = np.random.default_rng(1)
    s, a, k = 8, 3, 5
    # one pass; several chunks (global variances pooled first), pieces of a chunk that would leave one
    # sample alone (numpy sums a (S, 1, 1) array in another order), a last chunk one sample wide
    for c, chunk, sub in ((61, 1024, 128), (61, 16, 5), (49, 16, 3), (33, 16, 5), (64, 1024, 7), (1, 1024, 128)):
        mem = balanced_membership(rng.uniform(size=(s, c)))
        x = _logits(rng, s, c, a, k, mem)
        labels = rng.integers(0, k, c)
        monkeypatch.setattr(lira, "LIRA_CHUNK", chunk)
        monkeypatch.setattr(lira, "SCORE_CHUNK", sub)
        got = lira.lira_variants(x, labels, mem, online=online)
        want = ref_lira(x, labels, mem, online)
        assert list(got) == list(want)
        for v in want:
            np.testing.assert_array_equal(got[v], want[v], err_msg=f"{v}, {c} samples, chunk {chunk}, pieces {sub}")


@pytest.mark.parametrize("kind", ["random", "ties", "one-hot"])
def test_leave_one_out_means_are_the_masked_means_bit_for_bit(kind):
    rng = np.random.default_rng(2)
    s, c = 12, 300
    mem = balanced_membership(rng.uniform(size=(s, c)))
    lp = {"random": rng.normal(size=(s, c)) * 3, "ties": np.round(rng.normal(size=(s, c))),
          "one-hot": np.full((s, c), -0.25)}[kind]
    m = s // 2
    order = np.argsort(~mem, axis=0, kind="stable")
    means = rmia._leave_one_out_log_means(np.take_along_axis(lp, order[:m], axis=0))
    for j in range(m):
        mask = mem.copy()
        mask[order[j], np.arange(c)] = False
        np.testing.assert_array_equal(means[j], rmia._log_mean(lp, mask))


@pytest.mark.parametrize("kind", ["random", "one-hot"])
def test_rmia_is_the_victim_by_victim_computation_bit_for_bit(kind):
    rng = np.random.default_rng(3)
    s, c, z, a, k = 8, 70, 25, 3, 5
    mem = balanced_membership(rng.uniform(size=(s, c)))
    if kind == "one-hot":  # labels only: equal ratios everywhere, so every comparison is a tie
        x = np.eye(k, dtype=np.float32)[rng.integers(0, k, (s, c, a))]
        pop = np.eye(k, dtype=np.float32)[rng.integers(0, k, (s, z, a))]
    else:
        x = _logits(rng, s, c, a, k, mem, np.float32)
        pop = rng.normal(size=(s, z, a, k)).astype(np.float32)
    inp = AttackInput(signals={"logits": x, "population_logits": pop}, labels=rng.integers(0, k, c), membership=mem,
                      population_labels=rng.integers(0, k, z))
    for gamma in (1.0, 2.0):
        got = rmia.RMIA(gamma=gamma).score(inp)
        want = ref_rmia(inp, gamma, 0.3, 2.0)
        assert list(got) == list(want)
        for v in want:
            np.testing.assert_array_equal(got[v], want[v], err_msg=f"{v}, gamma {gamma}")


def test_bootstrap_by_bisection_is_the_matrix_computation_bit_for_bit():
    rng = np.random.default_rng(4)
    for s, c, shift, ties in ((8, 400, 0.2, False), (16, 300, 3.0, False), (6, 200, 0.5, True), (4, 50, 0.0, True)):
        mem = balanced_membership(rng.uniform(size=(s, c)))
        scores = rng.normal(size=(s, c)) + shift * mem
        if ties:
            scores = np.round(scores * 2) / 2
        draws = rng.integers(0, s, size=(300, s))
        w = np.vstack([victim_counts(draws, s), (rng.uniform(size=(20, s)) < 0.5).astype(float), np.zeros((1, s))])
        targets = [0.0, 0.001, 0.01, 0.037]
        got, want = weighted_tpr_samples(scores, mem, targets, w), ref_weighted_tpr_samples(scores, mem, targets, w)
        for t in targets:
            np.testing.assert_array_equal(got[t], want[t])


def test_epsilon_bound_search_is_the_full_maximum_bit_for_bit(monkeypatch):
    rng = np.random.default_rng(5)
    cases = []
    for s, c, shift in ((16, 2000, 0.1), (16, 2000, 3.0), (8, 3000, -0.5), (32, 1000, 8.0)):
        mem = balanced_membership(rng.uniform(size=(s, c)))
        cases.append((rng.normal(size=(s, c)) + shift * mem, mem))
    mem = balanced_membership(rng.uniform(size=(8, 2000)))
    cases += [(np.zeros((8, 2000)), mem), (np.round(rng.normal(size=(8, 2000)) * 20) / 20 + mem, mem)]
    for scores, mem in cases:  # the search on every ROC (the small ones too), against every point's limits
        roc = roc_curve(scores, mem)
        for bonferroni in (True, False):
            monkeypatch.setattr(empirical, "SEARCH_MIN_POINTS", 16)
            got = empirical.epsilon_lower_bound_roc(scores, mem, 1e-5, 0.05, bonferroni, roc=roc)
            monkeypatch.setattr(empirical, "SEARCH_MIN_POINTS", 10**9)
            want = empirical.epsilon_lower_bound_roc(scores, mem, 1e-5, 0.05, bonferroni)
            assert asdict(got) == asdict(want)


def test_roc_files_keep_the_low_fpr_corners_and_stay_bounded():
    rng = np.random.default_rng(6)
    small_mem = balanced_membership(rng.uniform(size=(8, 300)))
    small = roc_curve(rng.normal(size=(8, 300)) + small_mem, small_mem)
    kept = roc_file_curve(small)  # small: the exact staircase, as before
    np.testing.assert_array_equal(kept.fpr, thin_roc(small).fpr)
    np.testing.assert_array_equal(kept.thresholds, thin_roc(small).thresholds)
    mem = balanced_membership(rng.uniform(size=(64, 4000)))
    big = roc_curve(rng.normal(size=(64, 4000)) + 0.1 * mem, mem)
    thin, kept = thin_roc(big), roc_file_curve(big)
    assert len(thin.fpr) > ROC_FILE_EXACT_POINTS
    assert len(kept.fpr) <= 2 * min(0.01 * big.num_neg, 20_000) + len(ROC_FILE_GRID) + 3
    low = thin.fpr <= 0.01
    np.testing.assert_array_equal(kept.fpr[kept.fpr <= 0.01], thin.fpr[low])  # every corner below 1% FPR
    np.testing.assert_array_equal(kept.tpr[kept.fpr <= 0.01], thin.tpr[low])
    for g in ROC_FILE_GRID:  # the staircase read at every grid FPR is the thinned curve's
        assert kept.tpr[kept.fpr <= g + 1e-12].max() == thin.tpr[thin.fpr <= g + 1e-12].max()
    fine = np.logspace(-2, 0, 400)  # above 1% FPR a plot's line stays within one grid step of the curve
    assert np.max(np.abs(np.interp(fine, kept.fpr, kept.tpr) - np.interp(fine, thin.fpr, thin.tpr))) < 0.01
    assert kept.fpr[0] == 0 and kept.fpr[-1] == 1 and kept.tpr[-1] == 1


# --- the whole phase -----------------------------------------------------------------------------
GOLDEN_RUN = dict(models=8, samples=3000, views=3, classes=5, population=60, dtype="float32", signals="medium", seed=1,
                  levels="both", overrides={"attack.names": ["lira", "lira-offline", "rmia", "threshold"],
                                            "attack.bootstrap": 300})
NOT_COMPARED = ("config", "timings", "created", "harness_version", "fingerprint", "data_fingerprint",
                "trained_with_version")


def golden_results(where: Path) -> dict:
    """The attack phase of the code on the path, on the golden synthetic run built in ``where``:
    results.json as written (non-finite numbers as strings), without :data:`NOT_COMPARED`."""
    from harness.audit.attack_phase import evaluate_run
    from harness.audit.report import write_outputs
    from harness.run.runstore import RunDir

    run = build_run(where, **GOLDEN_RUN)
    results, curves = evaluate_run(RunDir(run))
    write_outputs(run, results, curves)
    out = json.loads((run / "results.json").read_text())
    levels = [out["population"], out["sample"], *out.get("sample_by_canary", {}).values()]
    for level in levels:  # the per-model-scale read, added since (issue 65): its own test
        level["attacks"] = [a for a in level["attacks"] if a["name"] != SCALED]
        level.get("attack_params", {}).pop(SCALED, None)
    return {k: v for k, v in out.items() if k not in NOT_COMPARED}


#: keys results.json gained after the golden file was written (c8b0d8b), none of them a number of the
#: attack phase: the declared defense name (the leaderboard's label), the random-serving check, the
#: defense's paper reference (issue 48), the checks of the saved outputs and the machines (issue 46)
ADDED_SINCE_GOLDEN = {"defense_name", "defense_reference", "serving", "checks", "machine",
                      # issue 53: the leak's fixed set, and whether the one-run bound can certify at the design
                      "attack_roles", "ranked_attacks", "attainable_p", "certifiable",
                      # issue 65: the one-run epsilon's attainable maximum at the design, printed beside it
                      "attainable_epsilon"}
#: the per-model-scale LiRA every run gets since issue 65 (tests/test_scale_invariance.py checks it)
SCALED = "lira-scaled"
#: what issue 44 changed by design (docs/protocol.md, Headlines): the level figures (`figure` replaced
#: `strongest`; `best` is now the declared variant's own record), the headline test, the ratio, the
#: one-run epsilon's family correction, each variant's plotting-position `reading` and the resolution
#: rule (3 expected false positives, `resolved`); every other per-variant number is c8b0d8b's
CHANGED_BY_ISSUE_44 = {"best", "strongest", "figure", "one_run_epsilon", "headline_test", "sample_population_ratio",
                       "warnings", "reading", "resolved",
                       # issue 53: each variant's interval is the figures' one-variant rule, no longer the
                       # percentile bootstrap (none at FPR 0); tests/test_metrics.py checks the rule
                       "tpr_ci"}


def _differences(a, b, path=""):
    if isinstance(a, dict) and isinstance(b, dict):
        a = {k: v for k, v in a.items() if k not in CHANGED_BY_ISSUE_44}
        b = {k: v for k, v in b.items() if k not in CHANGED_BY_ISSUE_44}
        if set(a) - ADDED_SINCE_GOLDEN != set(b):
            yield f"{path}: keys {sorted((set(a) - ADDED_SINCE_GOLDEN) ^ set(b))}"
        for k in set(a) & set(b):
            yield from _differences(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield f"{path}: lengths {len(a)} and {len(b)}"
        for i, (u, v) in enumerate(zip(a, b)):
            yield from _differences(u, v, f"{path}/{i}")
    elif isinstance(a, float) and isinstance(b, float) and not isinstance(a, bool):
        if a != b and abs(a - b) > 1e-12 * max(1.0, abs(a), abs(b)):
            yield f"{path}: {a!r} and {b!r}"
    elif a != b:
        yield f"{path}: {a!r} and {b!r}"


def test_the_attack_phase_gives_the_numbers_of_the_code_before(tmp_path):
    want = json.loads(gzip.decompress(GOLDEN.read_bytes()))
    got = golden_results(tmp_path / "golden")
    diffs = list(_differences(got, want))
    assert not diffs, f"{len(diffs)} differences, e.g. {diffs[:5]}"
    # the run's ROC files: the exact staircase where small, bounded otherwise
    roc = sorted(f for f in (tmp_path / "golden" / "run" / "roc").glob("*.csv") if SCALED not in f.name)
    assert len(roc) == 2 * 22 and all(f.stat().st_size < 2 * (ROC_FILE_EXACT_POINTS + 2) * 64 for f in roc)


RUNNER = """
import atexit, sys
atexit.register(lambda: print("torch imported" if "torch" in sys.modules else "no torch", file=sys.stderr))
from harness.cli import main
sys.argv = ["harness", *sys.argv[1:]]
main()
"""


def test_attack_and_report_import_no_torch(tmp_path):
    run = build_run(tmp_path / "tiny", 6, 40, 2, 4, 12, "float32", "strong")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for args in (["attack", str(run)], ["report", str(run)], ["report", "--html", str(run)]):
        proc = subprocess.run([sys.executable, "-c", RUNNER, *args], capture_output=True, text=True, env=env,
                              timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stderr.strip().splitlines()[-1] == "no torch", (args, proc.stderr[-2000:])


def test_every_built_in_defense_is_named_and_built_without_torch():
    code = ("import sys, defenses\n"
            "for name in defenses.KIND.builtins:\n"
            "    cls = defenses.resolve(name)\n"
            "    d = cls(inner='dpsgd-medium') if name == 'subsample' else cls()\n"
            "    type(d).recipe_routing(dict(d.params))\n"
            "    assert 'torch' not in sys.modules, name\n"
            "print('ok', len(defenses.KIND.builtins))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stdout + proc.stderr


def test_the_benchmark_against_another_commit_builds_its_run_and_compares_every_number(tmp_path):
    """``bench_attack_phase.py --vs REV``: REV's harness builds its own run directory from the same draws
    (an older harness refuses config keys added since) and the two results.json files are compared.
    Against this checkout's own HEAD every number must agree and no key may be missing on either side."""
    repo = Path(__file__).resolve().parents[1]
    if subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout: --vs needs `git archive`")
    proc = subprocess.run([sys.executable, str(repo / "benchmarks" / "bench_attack_phase.py"), "--models", "8",
                           "--samples", "400", "--views", "2", "--population", "100", "--signals", "medium",
                           "--vs", "HEAD", "--work", str(tmp_path), "--json"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    assert row["compare"] == {"values": row["compare"]["values"], "max_abs_diff": 0.0, "other_differences": [],
                              "keys_in_one_only": []}
    assert row["compare"]["values"] > 1000
    where = tmp_path / "S8-C400-A2-K10-Z100-float16-medium"
    assert (where / "run" / "results.json").is_file() and (where / "vs-HEAD" / "run" / "results.json").is_file()
    assert row["this"]["headline"] == row["vs"]["headline"]


def test_packed_ascending_is_exact_where_it_says_so():
    """Where two neighbours of the packed order differ in their high bits, the smaller value comes
    first; equal values are in index order; ``same`` is True exactly where the high bits agree."""
    from harness.core.packed_sort import packed_ascending

    rng = np.random.default_rng(10)
    v = np.r_[rng.normal(size=3000), rng.integers(-3, 3, 1000) * 0.5, 1 + rng.integers(0, 9, 500) * 1e-13,
              [np.inf, -np.inf, -0.0, 0.0, 1e-300, -1e-300]]
    order, same = packed_ascending(v)
    assert sorted(order.tolist()) == list(range(len(v)))
    a, b = v[order[:-1]], v[order[1:]]
    assert np.all((a <= b) | same), "neighbours with different high bits out of order"
    bits = v.view(np.uint64)
    eq = bits[order[:-1]] == bits[order[1:]]
    assert np.all(order[:-1][eq] < order[1:][eq]), "equal values out of index order"
    assert same[eq].all()
    assert not same[(a < b) & (np.abs(b - a) > 1e-6 * np.abs(a))].any()
    assert np.any(same & (a != b)), "the near-equal values share high bits: the case the callers re-sort"


def test_label_entries_read_what_take_along_axis_reads():
    from attacks.scores import label_entries

    rng = np.random.default_rng(11)
    for shape in ((10, 3, 7, 5), (4, 2, 9), (3, 1, 1, 2), (6, 5, 0, 3)):
        a = rng.normal(size=shape)
        labels = rng.integers(0, shape[0], shape[2])
        idx = np.broadcast_to(labels.reshape(1, 1, -1, *([1] * (len(shape) - 3))), (1, *shape[1:]))
        want = np.take_along_axis(a, idx, axis=0)[0]
        np.testing.assert_array_equal(a.reshape(-1)[label_entries(labels, shape)].reshape(shape[1:]), want)
        b = a.copy()
        b.reshape(-1)[label_entries(labels, shape)] = np.inf
        c = a.copy()
        np.put_along_axis(c, idx, np.inf, axis=0)
        np.testing.assert_array_equal(b, c)
