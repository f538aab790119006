"""Checks that a run's saved outputs are what its design says they are (docs/protocol.md, Checks).

Every run's attack phase applies them to the saved signals and records them in results.json
(``checks``); ``harness import`` applies them to an outside trainer's outputs before anything is
written and refuses a run that fails one (the membership check only unless ``--force``);
``harness leaderboard add`` and ``build`` refuse an entry that failed one (a forced membership
check is shown as forced).

**Membership consistency** (:func:`membership_check`). Per model i and audit sample c, the score
``s[i, c]`` is the model's logit-scaled confidence on the sample's label at view 0 (the image as it
is), ``log p_y - log(1 - p_y)`` computed from the logits; it is standardized per sample over the S
models, ``z[i, c] = (s[i, c] - mean_j s[j, c]) / sd_j s[j, c]``, which takes out how hard the sample
is (the other models are its reference). Two rank tests read z, each a one-sided Mann-Whitney U
test (normal approximation):

- **pair** (i, j), i != j: on the samples where exactly one of the two models is a member, do model
  i's outputs rank the members of j (``m_j & ~m_i``) above its own members (``m_i & ~m_j``)? With
  the right masks a model fits its own members at least as well as anyone else's, so a large z
  says model i's outputs fit model j's membership better than its own: swapped or permuted files.
  Where no model fits its members at all, z is exchangeable across samples and the test is exact.
- **own** i: does model i fit its own members less than half as well as the level's median model,
  beyond sampling error? The fit is the AUC's excess over 1/2 (its members over its non-members, on
  z), and ``z = (1/2 + (median - 1/2) / 2 - AUC_i) / se``, ``se^2 = v_i + v_m pi / (8 (S - 1))``
  with ``v = (C + 1) / (12 n_in n_out)`` (the AUC's null variance; the second term is the
  median's, quartered). A model that fits nothing reads ``z = (median - 1/2) / (2 se)``: half the
  statistic of a comparison with the median itself, so it is named where the median model's fit
  exceeds 2 t se (0.25 at 500 samples, t = 4.9). A model whose rows or membership are shuffled,
  or that trained on another set than the plan's, fits nothing (AUC 1/2) while the others fit; an
  honest model that fits its members less cleanly than the others is not named unless it fits
  them less than half as well, however far it lies from the others' spread (honest fits have heavy
  tails: one undefended scattering head of 64 reads AUC 0.85, 71% of the median's fit, where the
  others read 0.95-1.00; the rule this replaced, a comparison with the median over the AUCs'
  robust spread, named it).

- **provenance** i (experiments whose canaries keep their image and take a uniformly random wrong
  label, ``mislabeled``): does model i predict the canary label of the canaries the plan says it
  never trained on more often than chance? A model that never saw canary c's label r answers r only
  by chance: given its prediction p on c, ``P(p = r) = 1 / (K - 1)`` where ``p`` is not c's original
  label (r is uniform over the K - 1 other labels, independent of the model) and 0 where it is. So
  the count ``x_i`` of its plan non-members it answers with their canary label is exactly
  ``Binomial(n_i, 1 / (K - 1))`` with ``n_i`` its plan non-members answered with another label than
  their original one, whatever the model; the one-sided binomial p-value is turned into a z
  (``Phi^-1(1 - p)``). A model trained on its own random half of the canaries instead of the plan's
  predicts the random labels of the canaries it did train on (the issue-65 case: 11-57% of its plan
  non-members, against about 5% by chance). This catches membership that ignores the plan, which
  the pair and own tests cannot where every model ignores it alike.

Every test of every experiment (S^2 per experiment: S(S-1) pairs and S own tests, and S provenance
tests where they apply) is one family, Bonferroni-corrected at :data:`ALPHA`: a z above ``Phi^-1(1 - ALPHA / tests)`` fails the check
(4.9 for two experiments of 32 models). Its false-alarm rate is at most ALPHA where every model fits
its members at least as well as its non-members and at least half as well as the median model
(measured on simulated runs whose models fit unequally, or stray from one another unequally,
benchmarks/bench_checks.py; and on 37 honest cifar10-scatter runs, benchmarks/bench_check_false_alarms.py);
the measured statistics are in docs/protocol.md (Checks).

**Outputs** (:func:`degenerate_outputs`): a model whose outputs are the same for every query image
and view (e.g. all zeros), and models whose scores are identical to another model's (models that
serve labels only are exempt from the second: two of them may predict every query alike).

**Utility** (:func:`at_chance`): a model whose test accuracy is not above the accuracy of always
answering the test set's most frequent class, by a one-sided binomial test at level :data:`ALPHA`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

#: family-wise false-alarm rate of the membership check, and the level of the chance-accuracy test
ALPHA = 1e-3

#: the own test names a model shown to fit its members less than this fraction as well as the level's median
#: model (fit: the AUC's excess over 1/2)
OWN_FIT_FRACTION = 0.5


#: the membership check reads at most this many audit samples (evenly spaced): at a population level of
#: 50 000 samples the whole (S, C) statistics cost 24 CPU-s and 1 GB at 64 models, and 10 000 already
#: give each model's own AUC a standard error of 0.006
MAX_CHECK_SAMPLES = 10_000


def check_columns(num_samples: int, limit: int = MAX_CHECK_SAMPLES) -> np.ndarray:
    """The audit samples the membership check reads: all of them up to ``limit``, else ``limit``
    evenly spaced ones (deterministic: no draw)."""
    if num_samples <= limit:
        return np.arange(num_samples)
    return np.unique(np.linspace(0, num_samples - 1, limit).round().astype(np.int64))


def label_scores(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(S, C) logit-scaled confidence ``log p_y - log(1 - p_y) = z_y - logsumexp_{k != y} z_k`` of
    each model on each sample's label, from logits (S, C, K) (one view), in float64, one model at a
    time (no float64 copy of the whole stack)."""
    y = np.asarray(labels)[:, None]
    out = np.empty(logits.shape[:2], np.float64)
    for i in range(len(logits)):
        z = np.asarray(logits[i], np.float64)
        zy = np.take_along_axis(z, y, -1)[:, 0]
        np.put_along_axis(z, y, -np.inf, -1)
        top = z.max(-1)
        out[i] = zy - (top + np.log(np.exp(z - top[:, None]).sum(-1)))
    return out


def _standardize(scores: np.ndarray) -> np.ndarray:
    """Per sample (column), over the models: (s - mean) / sd; 0 where every model scores alike."""
    mean = scores.mean(0, keepdims=True)
    sd = scores.std(0, keepdims=True)
    return np.where(sd > 0, (scores - mean) / np.where(sd > 0, sd, 1.0), 0.0)


def rank_sums(values: np.ndarray, first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mann-Whitney U of ``first`` over ``second`` and its z (normal approximation, ties averaged
    and their variance correction), for many pairs of groups of one set of values at once:
    ``values`` (C,); ``first``, ``second`` (R, C) disjoint 0/1 masks, one pair of groups per row.
    U counts the (a, b) pairs with values[a] > values[b] (ties count one half); z is 0 where a
    group is empty or every value of the two groups is tied."""
    order = np.argsort(values, kind="stable")
    v = values[order]
    starts = np.flatnonzero(np.r_[True, v[1:] != v[:-1]])  # the tie groups of the sorted values
    if len(starts) == len(v):  # no ties (continuous scores): integer counts, no tie groups to sum
        fa, fb = first[:, order].astype(bool), second[:, order].astype(bool)
        below = np.cumsum(fa | fb, axis=1, dtype=np.int64)  # through each element: its rank among the two groups
        n1, n2 = fa.sum(1).astype(np.float64), fb.sum(1).astype(np.float64)
        u = np.where(fa, below, 0).sum(1).astype(np.float64) - n1 * (n1 + 1) / 2
        with np.errstate(divide="ignore", invalid="ignore"):
            var = n1 * n2 / 12 * (n1 + n2 + 1)
            z = np.where((n1 > 0) & (n2 > 0) & (var > 0), (u - n1 * n2 / 2) / np.sqrt(var), 0.0)
        return u, z
    a = np.add.reduceat(first[:, order].astype(np.float64), starts, axis=1)  # (R, G): first's count per tie group
    b = np.add.reduceat(second[:, order].astype(np.float64), starts, axis=1)
    t = a + b
    below = np.cumsum(t, axis=1) - t  # elements of the two groups below each tie group
    n1, n2 = a.sum(1), b.sum(1)
    u = (a * (below + (t + 1) / 2)).sum(1) - n1 * (n1 + 1) / 2
    n = n1 + n2
    with np.errstate(divide="ignore", invalid="ignore"):
        var = n1 * n2 / 12 * ((n + 1) - (t ** 3 - t).sum(1) / (n * (n - 1)))
        z = np.where((n1 > 0) & (n2 > 0) & (var > 0), (u - n1 * n2 / 2) / np.sqrt(var), 0.0)
    return u, z


@dataclass(frozen=True)
class MembershipStats:
    """One experiment's membership-consistency statistics (:func:`membership_stats`), with the
    provenance test's (:func:`provenance_stats`) where it applies."""

    experiment: str
    own_auc: np.ndarray  # (S,) AUC of each model's own members over its non-members
    own_z: np.ndarray  # (S,) (1/2 + (median AUC - 1/2) / 2 - AUC_i) / se
    pair_z: np.ndarray  # (S, S) z of "model i's outputs fit model j's members better than its own"; diagonal -inf
    provenance: "Provenance | None" = None

    @property
    def num_tests(self) -> int:
        return int(len(self.own_auc) ** 2) + (len(self.provenance.z) if self.provenance is not None else 0)


@dataclass(frozen=True)
class Provenance:
    """The provenance test of each model (module docstring): ``hits`` of its plan non-members answered
    with their canary label, out of ``trials`` answered with another label than their original one;
    ``expected`` = trials / (K - 1); ``z`` from the exact binomial upper tail."""

    hits: np.ndarray  # (S,)
    trials: np.ndarray  # (S,)
    expected: np.ndarray  # (S,)
    z: np.ndarray  # (S,)


def provenance_stats(predictions: np.ndarray, canary_labels: np.ndarray, original_labels: np.ndarray,
                     membership: np.ndarray, num_classes: int) -> Provenance:
    """The provenance test (module docstring) of predictions (S, C) at view 0 on canaries whose
    labels ``canary_labels`` (C,) were drawn uniformly from the ``num_classes - 1`` labels other than
    ``original_labels`` (C,), for the plan's ``membership`` (S, C)."""
    from scipy.stats import binom, norm

    pred = np.asarray(predictions)
    out = ~np.asarray(membership, bool)
    trials = (out & (pred != np.asarray(original_labels)[None])).sum(1)
    hits = (out & (pred == np.asarray(canary_labels)[None])).sum(1)
    q = 1.0 / (num_classes - 1)
    p = binom.sf(hits - 1, trials, q)  # P(X >= hits)
    z = np.clip(norm.isf(np.clip(p, 1e-300, 1.0)), -40.0, 40.0)  # finite: results.json holds numbers
    return Provenance(hits.astype(np.int64), trials.astype(np.int64), trials * q, z)


def membership_stats(experiment: str, scores: np.ndarray, membership: np.ndarray,
                     provenance: Provenance | None = None) -> MembershipStats:
    """The pair and own tests of the module docstring on scores (S, C) and membership (S, C), with
    the experiment's provenance test (:func:`provenance_stats`) where it applies."""
    m = np.asarray(membership, bool)
    s_models, c = m.shape
    z = _standardize(np.asarray(scores, np.float64))
    own_auc = np.zeros(s_models)
    pair_z = np.full((s_models, s_models), -np.inf)
    for i in range(s_models):
        first = np.vstack([m & ~m[i], m[i][None]])  # the members of each j that are not i's; i's own members
        second = np.vstack([m[i] & ~m, ~m[i][None]])  # i's members that are not j's; i's non-members
        u, zi = rank_sums(z[i], first, second)
        n_in, n_out = int(m[i].sum()), int((~m[i]).sum())
        own_auc[i] = u[-1] / (n_in * n_out) if n_in and n_out else 0.5
        zi = zi[:-1].copy()
        zi[i] = -np.inf
        pair_z[i] = zi
    n_in = m.sum(1).astype(np.float64)
    n_out = c - n_in
    valid = (n_in > 0) & (n_out > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        var = np.where(valid, (c + 1) / (12 * n_in * n_out), 0.0)  # the AUC's null (sampling) variance
        median = float(np.median(own_auc[valid])) if valid.any() else 0.5
        median_var = float(np.median(var[valid])) * math.pi / (2 * max(s_models - 1, 1)) if valid.any() else 0.0
        floor = 0.5 + OWN_FIT_FRACTION * (median - 0.5)
        se = np.sqrt(var + OWN_FIT_FRACTION ** 2 * median_var)
        own_z = np.where(valid, (floor - own_auc) / np.where(valid, se, 1.0), 0.0)
    return MembershipStats(experiment, own_auc, own_z, pair_z, provenance)


def threshold(num_tests: int, alpha: float = ALPHA) -> float:
    """The one-sided z a test must exceed to fail the check: Bonferroni over ``num_tests``."""
    from scipy.stats import norm

    return float(norm.isf(alpha / max(num_tests, 1)))


@dataclass
class CheckResult:
    """What a check found: ``findings`` (one line each, models named), and its record for results.json."""

    name: str
    findings: list[str] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.findings


def _name(i: int, names: Sequence[str] | None) -> str:
    return names[i] if names is not None else f"model {i}"


def membership_check(stats: list[MembershipStats], names: dict[str, Sequence[str]] | None = None,
                     alpha: float = ALPHA) -> CheckResult:
    """The membership-consistency check over every experiment's :class:`MembershipStats`, one
    Bonferroni family. ``names``: per experiment, how to name its models (default ``model i``)."""
    tests = sum(st.num_tests for st in stats)
    t = threshold(tests, alpha)
    findings: list[str] = []
    experiments: dict[str, Any] = {}
    for st in stats:
        nm = (names or {}).get(st.experiment)
        # the most specific cause first: two files swapped (each fits the other's members), then models whose
        # membership as a whole is not the plan's (provenance; the complement), then the rest
        named: set[int] = set()
        done: set[tuple[int, int]] = set()
        for i, j in zip(*np.nonzero(st.pair_z > t)):
            i, j = int(i), int(j)
            if i < j and st.pair_z[j, i] > t:
                done.add((i, j))
                named |= {i, j}
                findings.append(f"{st.experiment}: the outputs of {_name(i, nm)} and {_name(j, nm)} each fit the "
                                f"other's members better than their own (z = {st.pair_z[i, j]:.1f}, "
                                f"{st.pair_z[j, i]:.1f} > {t:.1f}): swapped?")
        prov = st.provenance
        if prov is not None:
            bad = [int(i) for i in np.flatnonzero(prov.z > t) if int(i) not in named]
            if bad:
                worst = max(bad, key=lambda i: prov.z[i])
                one = len(bad) == 1
                findings.append(
                    f"{st.experiment}: {_listing(bad, nm)} {'predicts' if one else 'predict'} the (random) canary label "
                    f"of canaries the plan says {'it' if one else 'they'} never trained on far above chance "
                    f"({_name(worst, nm)}: {prov.hits[worst]} of its "
                    f"{prov.trials[worst]} plan non-members answered with another label than their own, where chance "
                    f"gives {prov.expected[worst]:.1f}; z = {prov.z[worst]:.1f} > {t:.1f}): "
                    + (_complement(st.own_auc[worst]) if st.own_auc[worst] < COMPLEMENT_AUC else
                       "trained on another membership than the plan's") +
                    " (each model must train on exactly its plan members)")
                named |= set(bad)
        complement = {int(i) for i in np.flatnonzero((st.own_z > t) & (st.own_auc < COMPLEMENT_AUC))} - named
        for i in sorted(complement):
            findings.append(f"{st.experiment}: the outputs of {_name(i, nm)} fit its members far less than the other "
                            f"models fit theirs (AUC {st.own_auc[i]:.2f} against a median of "
                            f"{float(np.median(st.own_auc)):.2f}: less than half the median's fit, z = "
                            f"{st.own_z[i]:.1f} > {t:.1f}): {_complement(st.own_auc[i])}")
        named |= complement
        for i, j in zip(*np.nonzero(st.pair_z > t)):
            i, j = int(i), int(j)
            if i in named or j in named or (j, i) in done:
                continue
            done.add((i, j))
            findings.append(f"{st.experiment}: the outputs of {_name(i, nm)} fit the members of {_name(j, nm)} "
                            f"better than its own (z = {st.pair_z[i, j]:.1f} > {t:.1f}): models swapped or permuted?")
        for i in np.flatnonzero(st.own_z > t):
            i = int(i)
            if any(i in pair for pair in done) or i in named:
                continue
            findings.append(f"{st.experiment}: the outputs of {_name(i, nm)} fit its members far less than the other "
                            f"models fit theirs (AUC {st.own_auc[i]:.2f} against a median of "
                            f"{float(np.median(st.own_auc)):.2f}: less than half the median's fit, z = "
                            f"{st.own_z[i]:.1f} > {t:.1f}): trained on another "
                            "set than the plan's, or its rows shuffled?")
        pair = st.pair_z[np.isfinite(st.pair_z)]
        experiments[st.experiment] = {
            "median_auc": float(np.median(st.own_auc)), "min_auc": float(st.own_auc.min()),
            "max_pair_z": float(pair.max()) if pair.size else None, "max_own_z": float(st.own_z.max()),
            **({"max_provenance_z": float(prov.z.max()),
                "provenance_hit_rate": float(prov.hits.sum() / max(int(prov.trials.sum()), 1))}
               if prov is not None else {}),
        }
    record = {"alpha": alpha, "tests": tests, "threshold_z": t, "passed": not findings,
              "experiments": experiments, "findings": findings}
    return CheckResult("membership", findings, record)


#: a model whose own-members AUC is below this fits its plan non-members better than its members: named
#: as trained on the complement of its plan membership
COMPLEMENT_AUC = 0.35


def _complement(auc: float) -> str:
    return (f"it fits its plan non-members better than its plan members (AUC {auc:.2f}): trained on the complement of "
            "its plan membership?")


def is_constant(outputs: np.ndarray) -> bool:
    """Whether a model's outputs are the same for every query row and view (the array's first axis is
    the query rows, its last the classes)."""
    flat = np.asarray(outputs).reshape(-1, np.asarray(outputs).shape[-1])
    if len(flat) < 2 or not (flat[1] == flat[0]).all():  # most outputs differ at once: no pass over the rest
        return False
    return bool((flat == flat[0]).all())


def label_rows(outputs: np.ndarray) -> bool:
    """Whether every row (last axis) says nothing but its top class: one largest entry, every other
    entry equal (one-hot labels, or a constant score on the predicted class). The first row is
    checked alone first: scores fail there, without a pass over every row."""
    a = np.asarray(outputs)
    a = a.reshape(-1, a.shape[-1])
    if not a.size or a.shape[-1] < 2:
        return False
    for rows in (a[:1], a):
        mx, mn = rows.max(-1, keepdims=True), rows.min(-1, keepdims=True)
        if not (np.all(mx > mn) and np.all((rows == mx).sum(-1) == 1)
                and np.all((rows == mn).sum(-1) == a.shape[-1] - 1)):
            return False
    return True


def _listing(indices: Sequence[int], names: Sequence[str] | None, limit: int = 6) -> str:
    shown = [_name(i, names) for i in indices[:limit]]
    return ", ".join(shown) + (f" and {len(indices) - limit} more" if len(indices) > limit else "")


@dataclass(frozen=True)
class LevelOutputs:
    """What the outputs check needs of one experiment: its constant models, its groups of identical
    models, which of the constant ones answer all zeros, and its number of models."""

    constant: list[int]
    identical: list[list[int]]
    zeros: list[int]
    num_models: int

    @classmethod
    def of(cls, outputs: Iterable[np.ndarray]) -> "LevelOutputs":
        """From each model's outputs in turn (an iterable: one model's array is held at a time). Identical
        models are looked for among the models whose outputs are scores: models that serve labels only
        (:func:`label_rows`) may well predict every query alike when their training sets differ in a
        few samples."""
        import hashlib

        const, zeros, n = [], [], 0
        groups: dict[tuple[str, tuple[int, ...]], list[int]] = {}
        for i, o in enumerate(outputs):
            n += 1
            if is_constant(o):
                const.append(i)
                if not np.any(o):
                    zeros.append(i)
            if not label_rows(o):
                a = np.ascontiguousarray(o)
                groups.setdefault((hashlib.sha256(a.data).hexdigest(), a.shape), []).append(i)
        return cls(const, [g for g in groups.values() if len(g) > 1], zeros, n)


def degenerate_outputs(levels: dict[str, LevelOutputs], names: dict[str, Sequence[str]] | None = None) -> CheckResult:
    """Constant outputs and outputs identical across models, per experiment."""
    findings: list[str] = []
    record: dict[str, Any] = {"constant": {}, "identical": {}}
    for e, lo in levels.items():
        nm = (names or {}).get(e)
        record["constant"][e] = lo.constant
        record["identical"][e] = lo.identical
        if lo.constant:
            zeros = " (all zeros)" if lo.zeros == lo.constant else ""
            findings.append(f"{e}: {_listing(lo.constant, nm)} answer{'s' if len(lo.constant) == 1 else ''} every "
                            f"query image and view with the same output{zeros}: not a trained model's outputs")
        for g in lo.identical:
            if set(g) <= set(lo.constant):  # already said
                continue
            findings.append(f"{e}: {_listing(g, nm)} have identical outputs ({len(g)} of {lo.num_models} models): "
                            "each model must be trained on its own training set")
    record["passed"] = not findings
    record["findings"] = findings
    return CheckResult("outputs", findings, record)


def chance_accuracy(test_labels: np.ndarray) -> float:
    """The accuracy of always answering the test set's most frequent class."""
    y = np.asarray(test_labels)
    return float(np.bincount(y).max() / len(y)) if len(y) else 0.0


def at_chance(accuracy: float, n: int, chance: float, alpha: float = ALPHA) -> bool:
    """Whether ``accuracy`` on ``n`` test images is not above ``chance`` by a one-sided binomial test
    at level ``alpha`` (P[Binomial(n, chance) >= correct] > alpha)."""
    from scipy.stats import binom

    correct = int(round(accuracy * n))
    return bool(n == 0 or binom.sf(correct - 1, n, chance) > alpha)


def utility_check(accuracies: dict[str, Sequence[float]], test_labels: np.ndarray,
                  names: dict[str, Sequence[str]] | None = None, alpha: float = ALPHA) -> CheckResult:
    """Models at chance accuracy (:func:`at_chance`), per experiment."""
    n = len(test_labels)
    chance = chance_accuracy(test_labels)
    findings, flagged = [], {}
    for e, accs in accuracies.items():
        bad = [i for i, a in enumerate(accs) if at_chance(float(a), n, chance, alpha)]
        flagged[e] = bad
        if bad:
            nm = (names or {}).get(e)
            findings.append(f"{e}: {_listing(bad, nm)} {'is' if len(bad) == 1 else 'are'} at chance accuracy "
                            f"({', '.join(f'{100 * float(accs[i]):.1f}%' for i in bad[:6])} on {n} test images, where "
                            f"always answering the most frequent class gives {100 * chance:.1f}%)")
    record = {"alpha": alpha, "chance": chance, "test_size": n, "at_chance": flagged, "passed": not findings,
              "findings": findings}
    return CheckResult("utility", findings, record)


#: Monte Carlo draws of the two-groups statistic's null distribution (:func:`two_groups_p`)
TWO_GROUPS_DRAWS = 20_000


def two_groups_statistic(values: np.ndarray) -> tuple[float, int]:
    """(R, j): the largest share of the values' spread that two groups explain,
    ``R = 1 - (SS_low + SS_high) / SS_total`` over the splits of the sorted values into the j smallest
    and the rest with at least ``max(3, S // 8)`` a side (the best two-group split of numbers is one of
    these), and that split. One normal sample gives about 2/pi (0.64) for large S; the models of two
    trainers give nearly 1."""
    v = np.sort(np.asarray(values, np.float64))
    r = _split_shares(v[None])[0]
    if not np.isfinite(r).any():
        return 0.0, 0
    m = max(3, len(v) // 8)
    j = int(np.nanargmax(r))
    return float(r[j]), j + m


def _split_shares(v: np.ndarray) -> np.ndarray:
    """For sorted rows ``v`` (N, S): R of every split j = m .. S - m (columns), from cumulative sums."""
    n, s = v.shape
    m = max(3, s // 8)
    c1, c2 = np.cumsum(v, axis=1), np.cumsum(v * v, axis=1)
    sst = c2[:, -1] - c1[:, -1] ** 2 / s
    j = np.arange(m, s - m + 1)
    left = c2[:, j - 1] - c1[:, j - 1] ** 2 / j
    right = (c2[:, -1:] - c2[:, j - 1]) - (c1[:, -1:] - c1[:, j - 1]) ** 2 / (s - j)
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 - (left + right) / sst[:, None]


@functools.lru_cache(maxsize=32)
def _two_groups_null(s: int, draws: int = TWO_GROUPS_DRAWS) -> np.ndarray:
    """Draws of :func:`two_groups_statistic` for S values from one normal distribution (the statistic
    is location and scale free), from a fixed seed (the check is deterministic)."""
    rng = np.random.default_rng(np.random.SeedSequence([0x7E0, s]))
    return _split_shares(np.sort(rng.standard_normal((draws, s)), axis=1)).max(axis=1)


def mean_cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    """The mean of ``-log softmax(logits)[label]`` over rows (logits (N, K) of one model)."""
    z = np.asarray(logits, np.float64)
    z = z - z.max(-1, keepdims=True)
    lse = np.log(np.exp(z).sum(-1))
    return float((lse - z[np.arange(len(z)), np.asarray(labels)]).mean())


def two_groups_p(values: Sequence[float]) -> tuple[float, float, int]:
    """(p, T, j): the Monte Carlo p-value of :func:`two_groups_statistic` against S values from one
    normal distribution ((1 + #draws >= T) / (1 + draws), so never below 1 / 20 001)."""
    s = len(values)
    if s < 6:
        return 1.0, 0.0, 0
    t, j = two_groups_statistic(np.asarray(values))
    null = _two_groups_null(s)
    return float((1 + (null >= t).sum()) / (1 + len(null))), t, j


def trainers_check(stats: dict[str, dict[str, Sequence[float]]], names: dict[str, Sequence[str]] | None = None,
                   alpha: float = ALPHA * 10) -> CheckResult:
    """One trainer per run (issue 65): per experiment and per statistic of its models (``loss``: the mean
    cross-entropy of its answers on test images; ``scale``: the log of its answer spread on the rows
    every model answers: both continuous, where accuracies tie on a few hundred images), do the models
    fall in two groups, as the outputs of two trainers mixed under one run do? The two-groups
    statistic (:func:`two_groups_statistic`: the share of the spread the best split into two groups of
    at least max(3, S/8) models explains) against its distribution for one normal sample (Monte Carlo, :func:`two_groups_p`),
    Bonferroni over every experiment and statistic at ``alpha`` (1%: the Monte Carlo p-value's floor is
    5e-5). A warning, not a refusal, in a run: seeds alone never split a recipe's models so (the
    false-alarm rate on the built-in runs is in docs/protocol.md, Checks); ``harness import`` refuses."""
    tests = sum(len(v) for v in stats.values())
    level = alpha / max(tests, 1)
    findings: list[str] = []
    record: dict[str, Any] = {"alpha": alpha, "tests": tests, "experiments": {}}
    for e, by in stats.items():
        rec = {}
        for what, values in by.items():
            vals = np.log(np.asarray(values, np.float64)) if what == "scale" else np.asarray(values, np.float64)
            p, t, j = two_groups_p(vals)
            rec[what] = {"p_value": p, "explained": t}
            if p <= level:
                order = np.argsort(vals)
                low, high = sorted(int(i) for i in order[:j]), sorted(int(i) for i in order[j:])
                shown = (lambda idx: "; ".join(f"{float(values[i]):.3g}" for i in idx[:3]))
                nm = (names or {}).get(e)
                findings.append(f"{e}: the models' {what} falls in two groups ({_listing(low, nm, 4)}: {shown(low)} ...; "
                                f"{_listing(high, nm, 4)}: {shown(high)} ...; the split explains {100 * t:.0f}% of its "
                                f"spread, p = {p:.2g} <= {level:.2g}): "
                                "the outputs of two trainers or settings under one run?")
        record["experiments"][e] = rec
    record.update({"passed": not findings, "findings": findings})
    return CheckResult("trainers", findings, record)


def probability_rows(logits: np.ndarray) -> bool:
    """Whether every row (last axis) of ``logits`` is a probability vector: entries in [0, 1] summing
    to 1 (within the dtype's rounding over K entries), and not every row one-hot (labels only, which
    the harness reads as served labels)."""
    a = np.asarray(logits)
    if not a.size or float(a.min()) < 0 or float(a.max()) > 1:
        return False
    k = a.shape[-1]
    tol = k * (1e-3 if a.dtype == np.float16 else 1e-5)
    if not bool(np.all(np.abs(a.astype(np.float64).sum(-1) - 1) <= tol)):
        return False
    return not bool(np.all((a == 0) | (a == 1)))


def summary(checks: dict[str, Any]) -> str:
    """One line of what a results.json ``checks`` record found, for reports and pages."""
    parts = []
    mem = checks.get("membership") or {}
    if mem:
        worst = max((max(-np.inf if v.get(k) is None else v[k] for k in ("max_pair_z", "max_own_z"))
                     for v in mem.get("experiments", {}).values()), default=float("nan"))
        forced = "membership" in (checks.get("forced") or [])
        verdict = "passed" if mem.get("passed") else "failed, imported with --force" if forced else "FAILED"
        parts.append(f"membership consistency {verdict} (largest z {worst:.1f}, threshold "
                     f"{mem.get('threshold_z', float('nan')):.1f})")
    out = checks.get("outputs") or {}
    if out:
        parts.append("outputs " + ("not constant, not identical across models" if out.get("passed") else "DEGENERATE"))
    ut = checks.get("utility") or {}
    if ut:
        parts.append(f"accuracy {'above' if ut.get('passed') else 'AT'} chance ({100 * ut.get('chance', 0):.1f}%)")
    return "; ".join(parts)
