"""RMIA, the relative membership-inference attack (Zarifzadeh, Liu, Shokri, "Low-Cost High-Power
Membership Inference Attacks", ICML 2024), evaluated leave-one-out.

For victim model t, audit sample x (label y) and population samples z (test images no model
trained on, with their labels), with ``p_m(x) = softmax(f_m(x) / T)_y`` the probability model m
gives the label at temperature T, on one query view:

- pairwise likelihood ratio ``LR(x, z) = (p_t(x) / P(x)) / (p_t(z) / P(z))``;
- score ``= |{z : LR(x, z) >= gamma}| / |z|``, the fraction of population samples x dominates.

``P(.)`` is estimated from the reference models, the models other than t:

- ``online``: ``P(x) = (mean over IN references + mean over OUT references) / 2`` (the paper's
  average over reference models of which half trained on x), with S/2 - 1 IN and S/2 - 1 OUT
  references for every victim (:mod:`attacks.loo`: the shadow counts would otherwise differ by
  one between member and non-member victims); ``P(z) = mean over all S - 1 references`` (z is OUT
  for all of them);
- ``offline``: ``P(x) = ((1 + a) P_OUT(x) + (1 - a)) / 2`` from the OUT references only (the
  paper's linear approximation of the missing IN models), and the same map applied to the mean
  over all references for z (as the authors' code does).

Variants ``{online|offline}-{noaug|augA}``: the plain query, or the fraction of (view, z) pairs
with ``LR_a(x, z) >= gamma`` over the A query views, computed as the integer pass count summed over
views divided once by A x Z, so that equal counts tie exactly (the metrics' tie rule); the authors'
research code takes a majority vote over views per pair instead. The primary variant is ``online-augA``
for models trained with augmentation and ``online-noaug`` otherwise (as LiRA's).

Parameters (``attack.params.rmia``): gamma = 2, a = 0.3, temperature T = 2 by default (the
authors' research configuration, which uses ~25 000 population samples). With a few hundred z,
gamma = 2 ties every well-fitted sample: its ratio is about 1, so it passes the test against the
same few z whose ratio is below 1/2 (measured on the quick preset: 19% of the population
non-member guesses share one score); the ``quick`` and ``cifar10`` presets use gamma = 1
(docs/protocol.md, with the case where gamma = 1 ties at the top instead). The z
signals are saved by the runner (``audit.population_samples``); a run without them cannot be
scored by RMIA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import log_softmax

from attacks.base import Attack, AttackInput
from attacks.loo import dropped_shadow
from attacks.scores import _sum_first, label_entries, logsumexp_last
from harness.core.packed_sort import packed_ascending


def label_log_prob(logits: np.ndarray, labels: np.ndarray, temperature: float) -> np.ndarray:
    """``log mean_a softmax(logits / T)_y`` for logits (S, N, A, K) and labels (N,): (S, N) float64
    (with A = 1, the log-probability of the label)."""
    if logits.shape[2] == 1:
        return _view_log_prob(logits, 0, labels, temperature)
    z = np.asarray(logits, dtype=np.float64) / temperature
    lp = log_softmax(z, axis=-1)
    picked = np.take_along_axis(lp, labels[None, :, None, None].astype(np.int64), axis=-1)[..., 0]  # (S, N, A)
    return logsumexp_last(picked) - np.log(picked.shape[-1])


#: samples whose tempered log-softmax is computed at once (float64 temporaries K x S x LOGPROB_CHUNK: a
#: few MB, in the caches)
LOGPROB_CHUNK = 1024


def _view_log_prob(logits: np.ndarray, view: int, labels: np.ndarray, temperature: float) -> np.ndarray:
    """:func:`label_log_prob` of the one query view ``view`` of logits (S, N, A, K): (S, N), computed
    :data:`LOGPROB_CHUNK` samples at a time. The same values as ``label_log_prob(logits[:, :, view :
    view + 1], ...)`` in the form that read it through ``scipy.special.log_softmax`` and ``logsumexp``:
    SciPy's log-softmax written out (``tmp - log(sum(exp(tmp)))``, ``tmp = z - max z`` with a
    non-finite maximum replaced by 0) and read at the label, then the log-sum-exp over one view,
    which is the value itself (``0 + 0 + v`` in SciPy's arithmetic, minus ``log 1 = 0``). The classes
    are the first axis of the float64 copy: the maximum and the sum over them are element-wise
    operations on whole arrays (the sum in numpy's order: :func:`attacks.scores._sum_first`)."""
    num_models, n = logits.shape[:2]
    out = np.empty((num_models, n))
    idx_all = np.asarray(labels).astype(np.int64)
    for i in range(0, n, LOGPROB_CHUNK):
        j = min(i + LOGPROB_CHUNK, n)
        # the view's (S, n, K) block copied as stored first, then cast with the classes moved first: a
        # cast that gathers its values across the views is about twice as slow (one value per 2-byte read)
        block = np.ascontiguousarray(logits[:, i:j, view, :])
        z = np.array(np.moveaxis(block, -1, 0), dtype=np.float64, order="C")  # (K, S, n)
        del block
        z /= temperature
        x_max = z.max(axis=0)
        x_max[~np.isfinite(x_max)] = 0
        z -= x_max  # tmp = z - max
        picked = z.reshape(-1)[label_entries(idx_all[i:j], z.shape)].reshape(num_models, j - i)
        with np.errstate(divide="ignore"):
            log_s = np.log(_sum_first(np.exp(z)))
        del z
        out[:, i:j] = ((picked - log_s) + 0.0) - np.log(1)  # log_softmax at the label, then the one-view mean
    return out


def _logsumexp0(a: np.ndarray) -> np.ndarray:
    """``log sum_i exp(a_i)`` over axis 0, shifted by the column maximum (-inf for a column of
    -inf): scipy.special.logsumexp's value, without its per-call overhead (this runs S x views x 2
    times per attack)."""
    m = a.max(axis=0)
    shift = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(a - shift).sum(axis=0)) + shift


def _log_mean(lp: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """log of the mean of exp(lp) over axis 0 where ``mask`` (same shape) is True; -inf if none."""
    return _logsumexp0(np.where(mask, lp, -np.inf)) - np.log(np.maximum(mask.sum(axis=0), 1))


def _offline_map(log_mean: np.ndarray, a: float) -> np.ndarray:
    """log(((1 + a) exp(log_mean) + (1 - a)) / 2)."""
    return np.logaddexp(np.log1p(a) + log_mean, np.log1p(-a) if a < 1 else -np.inf) - np.log(2.0)


def _loop_pass_counts(lp_x: np.ndarray, membership: np.ndarray, lp_z: np.ndarray, *, online: bool, gamma: float,
                      a: float) -> np.ndarray:
    """:func:`rmia_pass_counts` one victim at a time, for any membership matrix (the form before
    :func:`_group_pass_counts`; used where the groups' sizes differ between samples)."""
    s = lp_x.shape[0]
    out = np.empty(lp_x.shape, dtype=np.int64)
    log_gamma = np.log(gamma)
    drop = dropped_shadow(membership)  # (S, C)
    models = np.arange(s)[:, None]
    for t in range(s):
        use = (models != t) & (models != drop[t][None, :])  # (S, C): the references of victim t per sample
        ref = np.arange(s) != t
        in_ref, out_ref = use & membership, use & ~membership
        if online:
            log_p_x = np.logaddexp(_log_mean(lp_x, in_ref), _log_mean(lp_x, out_ref)) - np.log(2.0)
            log_p_z = _logsumexp0(lp_z[ref]) - np.log(s - 1)  # every model but the victim
        else:
            log_p_x = _offline_map(_log_mean(lp_x, out_ref), a)
            log_p_z = _offline_map(_logsumexp0(lp_z[ref]) - np.log(s - 1), a)
        log_ratio_x = lp_x[t] - log_p_x  # (C,)
        log_ratio_z = np.sort(lp_z[t] - log_p_z)  # (Z,)
        # LR(x, z) >= gamma  <=>  log_ratio_z <= log_ratio_x - log gamma
        out[t] = np.searchsorted(log_ratio_z, log_ratio_x - log_gamma, side="right")
    return out


def _leave_one_out_log_means(v: np.ndarray) -> np.ndarray:
    """For the m values of each column of ``v`` (m, C) (one group's models in index order), the
    log of the mean of exp over the column without its j-th value, for every j: (m, C). The same
    floating-point operations as :func:`_log_mean` over the group minus one model: shifted by the
    largest remaining value, the exponentials summed in model order (so the result is bit for bit
    that of the masked sum, whose left-out and other-group rows add exact zeros), at O(m^2) adds per
    column instead of O(m S) exponentials per victim."""
    v = np.ascontiguousarray(v)  # every array below C-ordered: the exponentials and sums of the masked form
    m, c = v.shape
    mx = v.max(axis=0)
    is_max = v == mx
    unique = is_max.sum(axis=0) == 1  # without its maximum, such a column is shifted by its second largest
    top = is_max.argmax(axis=0)
    del is_max
    shift = np.where(np.isfinite(mx), mx, 0.0)
    e = np.exp(v - shift)
    sums = np.empty((m, c))
    prefix = np.zeros(c)
    for j in range(m):  # the sequential sum of every term but the j-th
        acc = prefix.copy()
        for k in range(j + 1, m):
            acc += e[k]
        sums[j] = acc
        prefix += e[j]
    del e
    shifts = np.broadcast_to(shift, (m, c)).copy()
    cols = np.flatnonzero(unique)
    if len(cols):
        w = np.ascontiguousarray(v[:, cols])  # (m, U): the columns whose maximum is left out at j = top
        rows = top[cols]
        w[rows, np.arange(len(cols))] = -np.inf
        m2 = w.max(axis=0)
        shift2 = np.where(np.isfinite(m2), m2, 0.0)
        e2 = np.exp(w - shift2)
        acc = np.zeros(len(cols))
        for k in range(m):  # in model order, the left-out term an exact zero
            acc += e2[k]
        sums[rows, cols] = acc
        shifts[rows, cols] = shift2
    with np.errstate(divide="ignore"):
        log_count = np.log(np.maximum(np.full(c, m - 1, dtype=np.int64), 1))
        return (np.log(sums) + shifts) - log_count


@dataclass(frozen=True)
class _Groups:
    """Flat indices of a membership matrix with S/2 members per column, the same for every view:
    each group's models in index order (``take_in``, ``take_out``: into an (S, C) array, giving
    (S/2, C)), and, for every victim and sample, the row of its group's leave-one-out means that
    holds its references (``read_in``, ``read_out``: into an (S/2, C) array, giving (S, C))."""

    take_in: np.ndarray
    take_out: np.ndarray
    read_in: np.ndarray
    read_out: np.ndarray

    @classmethod
    def of(cls, membership: np.ndarray) -> "_Groups":
        s, c = membership.shape
        m = s // 2
        order = np.argsort(~membership, axis=0, kind="stable")  # rows 0..m-1: the IN models in index order
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.arange(s)[:, None], axis=0)  # each model's row in ``order``
        cols = np.arange(c)
        # a member victim's IN references: the IN models but itself; its OUT ones: the OUT models but
        # the last (the dropped shadow); a non-member's the other way round
        row_in = np.where(membership, rank, m - 1)
        row_out = np.where(membership, m - 1, rank - m)
        return cls(take_in=(order[:m] * c + cols).ravel(), take_out=(order[m:] * c + cols).ravel(),
                   read_in=(row_in * c + cols).ravel(), read_out=(row_out * c + cols).ravel())


def _group_pass_counts(lp_x: np.ndarray, membership: np.ndarray, lp_z: np.ndarray, *, gamma: float,
                       a: float, groups: _Groups | None = None) -> dict[str, np.ndarray]:
    """:func:`rmia_pass_counts` of both modes at once, ``{"online": (S, C), "offline": (S, C)}``, for
    a membership matrix with S/2 members in every column (the audit design's).

    The references of victim t for sample x are its group minus one model: a member victim's IN
    references are the IN models but t and its OUT references the OUT models but the last (the
    dropped shadow), a non-member victim's the IN models but the last and the OUT models but t. So
    every victim's P_IN(x) and P_OUT(x) is one of the S/2 leave-one-out means of its column's groups
    (:func:`_leave_one_out_log_means`, computed once per sample instead of once per victim), and the
    offline mode reuses the online mode's P_OUT(x). The values are those of :func:`_loop_pass_counts`,
    bit for bit."""
    s, c = lp_x.shape
    m = s // 2
    g = groups if groups is not None else _Groups.of(membership)
    flat = np.ascontiguousarray(lp_x).ravel()
    l_in = _leave_one_out_log_means(flat[g.take_in].reshape(m, c)).ravel()[g.read_in].reshape(s, c)
    l_out = _leave_one_out_log_means(flat[g.take_out].reshape(m, c)).ravel()[g.read_out].reshape(s, c)
    log_gamma = np.log(gamma)
    thresholds = {"online": (lp_x - (np.logaddexp(l_in, l_out) - np.log(2.0))) - log_gamma,
                  "offline": (lp_x - _offline_map(l_out, a)) - log_gamma}
    del l_in, l_out
    out = {mode: np.empty((s, c), dtype=np.int64) for mode in thresholds}
    for t in range(s):
        ref = np.arange(s) != t
        log_p_z = _logsumexp0(lp_z[ref]) - np.log(s - 1)  # every model but the victim
        for mode, log_p in (("online", log_p_z), ("offline", _offline_map(log_p_z, a))):
            log_ratio_z = np.sort(lp_z[t] - log_p)  # (Z,)
            # LR(x, z) >= gamma  <=>  log_ratio_z <= log_ratio_x - log gamma
            out[mode][t] = _counts_at_most(log_ratio_z, thresholds[mode][t])
    return out


def _counts_at_most(sorted_values: np.ndarray, needles: np.ndarray) -> np.ndarray:
    """``np.searchsorted(sorted_values, needles, side="right")``, the needles looked up in (about)
    ascending order and the counts put back in theirs: numpy's bisection is faster on ordered needles
    (C of them against Z values, C >> Z), enough to pay for the sort
    (:func:`harness.core.packed_sort.packed_ascending`; each count is the needle's own, whatever the
    order among near-equal needles). NaN needles count as searchsorted counts them."""
    packed = packed_ascending(needles)
    order = np.argsort(needles) if packed is None else packed[0]
    out = np.empty(len(needles), dtype=np.int64)
    out[order] = np.searchsorted(sorted_values, needles[order], side="right")
    return out


def _balanced(membership: np.ndarray) -> bool:
    s = membership.shape[0]
    return s % 2 == 0 and s >= 2 and bool(np.all(membership.sum(axis=0) == s // 2))


def rmia_pass_counts(lp_x: np.ndarray, membership: np.ndarray, lp_z: np.ndarray, *, online: bool, gamma: float,
                     a: float) -> np.ndarray:
    """``|{z : LR(x, z) >= gamma}|`` (S, C) int64 from label log-probabilities on the audit samples
    ``lp_x`` (S, C) and on the population samples ``lp_z`` (S, Z), leave-one-out over victims. For x
    the references are the S - 2 models other than the victim and :func:`attacks.loo.dropped_shadow`
    (S/2 - 1 IN and OUT); for z, all S - 1 models other than the victim."""
    if _balanced(membership):
        return _group_pass_counts(lp_x, membership, lp_z, gamma=gamma, a=a)["online" if online else "offline"]
    return _loop_pass_counts(lp_x, membership, lp_z, online=online, gamma=gamma, a=a)


def rmia_scores(lp_x: np.ndarray, membership: np.ndarray, lp_z: np.ndarray, *, online: bool, gamma: float,
                a: float) -> np.ndarray:
    """RMIA scores (S, C): the fraction of population samples x dominates, :func:`rmia_pass_counts` / Z."""
    return rmia_pass_counts(lp_x, membership, lp_z, online=online, gamma=gamma, a=a) / lp_z.shape[1]


class RMIA(Attack):
    name = "rmia"
    description = "RMIA (Zarifzadeh et al. 2024): pairwise likelihood ratios against population samples, online/offline"
    needs = frozenset({"logits", "population_logits"})

    def __init__(self, gamma: float = 2.0, a: float = 0.3, temperature: float = 2.0) -> None:
        for k, v, ok in (("gamma", gamma, lambda x: x > 0), ("a", a, lambda x: 0 <= x <= 1),
                         ("temperature", temperature, lambda x: x > 0)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not ok(v):
                rule = "in [0, 1]" if k == "a" else "> 0"
                raise ValueError(f"rmia: {k} must be a number {rule}, got {v!r}")
        self.gamma, self.a, self.temperature = float(gamma), float(a), float(temperature)

    def params(self) -> dict[str, Any]:
        return {"gamma": self.gamma, "a": self.a, "temperature": self.temperature}

    def score(self, inp: AttackInput) -> dict[str, np.ndarray]:
        if inp.population_labels is None or not len(inp.population_labels):
            raise ValueError("RMIA needs population samples: set audit.population_samples > 0 before training")
        x, z = inp.signals["logits"], inp.signals["population_logits"]
        num_aug, num_z = x.shape[2], z.shape[1]
        balanced = _balanced(inp.membership)
        groups = _Groups.of(inp.membership) if balanced else None
        first: dict[str, np.ndarray] = {}
        total: dict[str, np.ndarray] = {}
        for view in range(num_aug):  # one query view at a time: its (S, C) label log-probabilities and pass counts
            lx = _view_log_prob(x, view, inp.labels, self.temperature)
            lz = _view_log_prob(z, view, inp.population_labels, self.temperature)
            if balanced:
                counts = _group_pass_counts(lx, inp.membership, lz, gamma=self.gamma, a=self.a, groups=groups)
            else:
                counts = {mode: _loop_pass_counts(lx, inp.membership, lz, online=mode == "online", gamma=self.gamma,
                                                  a=self.a) for mode in ("online", "offline")}
            del lx
            for mode, cnt in counts.items():
                if view == 0:
                    first[mode] = cnt
                    total[mode] = cnt.copy() if num_aug > 1 else cnt
                else:
                    total[mode] += cnt
        out = {}
        for mode in ("online", "offline"):
            out[f"{mode}-noaug"] = first[mode] / num_z
            if num_aug > 1:  # the fraction of (view, z) pairs that pass: integer counts summed, divided once,
                # so that equal pass counts are one float (a mean of per-view fractions rounds them apart)
                out[f"{mode}-aug{num_aug}"] = total[mode] / (num_aug * num_z)
        return out

    def primary(self, variants: list[str], inp: AttackInput) -> str:
        aug = [v for v in variants if v.startswith("online-aug")]
        return aug[0] if aug and inp.trained_with_augmentation else "online-noaug"
