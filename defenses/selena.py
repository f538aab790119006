"""SELENA (Tang et al., "Mitigating Membership Inference Attacks by Self-Distillation Through a
Novel Ensemble Architecture", USENIX Security 2022, arXiv:2110.08324), as evaluated in the
misleading-evaluations paper (Aerni, Zhang, Tramer, CCS 2024; protocol notes section 4.4, the
``duplicates`` canaries of protocol notes section 2, the Split-AI attacks of section 3.6).

Algorithm (SELENA paper section 3: Split-AI, then Self-Distillation):

1. **Split-AI.** Train K teachers. Every training sample i gets a *query set* Q(i): L of the K
   teacher indices, drawn uniformly without replacement and independently per sample from a
   generator seeded by the model seed. Teacher k trains on the samples whose query set does not
   contain k, so each sample is left out of exactly L teachers and seen by the other K - L (about
   60% of the data per teacher at K=25, L=10). Split-AI answers a training sample with the mean
   softmax of its L query teachers, none of which saw it. Any other input (a non-member) is
   answered by L teachers chosen deterministically from the input: the BLAKE2b hash of the input's
   shape, dtype and bytes, keyed with a per-model secret derived from the model seed, seeds a
   generator; the first L entries of its permutation of range(K) are the query set (SELENA uses a
   hash of the input for this, so that repeating a query gets the same answer and averaging
   repeated queries reveals nothing). An input whose bytes equal several training samples
   (duplicates) uses the query set of the first of them in training order.
2. **Self-Distillation.** The soft label of training sample i is Split-AI's output on it: the mean
   over its L query teachers of their softmax on the *unaugmented* sample (as the paper's code). A
   student with the preset's architecture, recipe and augmentation trains with cross-entropy
   against these probability targets on all training samples. The student is the served model
   (:class:`SELENAStudent`); it also answers ``splitai_query`` with Split-AI, an access the
   deployed student does not serve to the public but the misleading-evaluations paper attacks
   (its ``splitai_nn``: the ``lira-neighbour`` attack). :class:`SELENAFit` holds all three parts.

Why the ``duplicates`` canaries break it (misleading-evaluations paper, protocol notes section 2):
an audit image appears twice, once with its true label and once (the evaluated canary) with a wrong
label. The copy's own soft label comes from teachers that never saw it, so it is about the true
label; but when the clean twin is also a member, the twin's query teachers that trained on the
mislabeled copy (about (K - L)/K of them) put the wrong label into the twin's soft label, and the
student learns the wrong label on that image. A plain mislabeled canary has no twin and leaks much
less.

Deviations from the paper's released code, on purpose:

- Teachers get distinct initializations: teacher k's seed (from ``SeedSequence([seed, 1, k])``)
  drives its initialization, batch order and augmentation. The paper's code seeds only the data
  loader per teacher, so all teachers of a shadow model share one initialization (a quirk).
- Non-members get a hash-based query set (above) as the SELENA paper describes; the paper's code
  copies the query set of a random member.
- Member query sets are drawn per sample from ``SeedSequence([seed, 0])`` (the paper's code draws
  them from a generator that is also used for other purposes; the distribution is the same).
- ``teacher_epochs`` may shorten the teachers' training on the small presets (the presets document
  their K, L and epochs); ``None`` uses the preset's recipe unchanged, as the paper.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from scipy.special import softmax

from defenses.base import Defense, FitContext, LabeledImages, ServedModel, TorchClassifier, is_int
from defenses.training import init_network, train_classifier
from harness.core.config import TrainConfig

# Stream tags of the seeds derived from the model seed (SeedSequence([seed, tag, ...])).
_QUERY_SETS, _TEACHER, _STUDENT, _HASH_KEY = 0, 1, 2, 3


def derived_seed(seed: int, *tags: int) -> int:
    """A 32-bit seed for one stream of model ``seed`` (e.g. ``derived_seed(seed, 1, k)`` for teacher k)."""
    return int(np.random.SeedSequence([seed, *tags]).generate_state(1)[0])


def draw_query_sets(n: int, num_teachers: int, num_query: int, rng: np.random.Generator) -> np.ndarray:
    """Query sets of ``n`` training samples: (n, L) int64, each row L distinct teachers in
    increasing order, drawn uniformly and independently per sample (Split-AI's partition)."""
    order = np.argsort(rng.random((n, num_teachers)), axis=1, kind="stable")[:, :num_query]
    return np.sort(order, axis=1).astype(np.int64)


def teacher_masks(query_sets: np.ndarray, num_teachers: int) -> np.ndarray:
    """(K, n) bool: ``masks[k, i]`` is True when teacher k trains on sample i, i.e. k is not in
    sample i's query set."""
    n = len(query_sets)
    excluded = np.zeros((num_teachers, n), dtype=bool)
    excluded[query_sets.T, np.arange(n)[None, :]] = True
    return ~excluded


def input_digest(x: np.ndarray, key: bytes = b"") -> bytes:
    """BLAKE2b digest (16 bytes) of one input's shape, dtype and bytes, optionally keyed."""
    h = hashlib.blake2b(key=key, digest_size=16)
    h.update(repr((x.shape, x.dtype.str)).encode())
    h.update(np.ascontiguousarray(x).tobytes())
    return h.digest()


def hashed_query_set(x: np.ndarray, num_teachers: int, num_query: int, key: bytes) -> np.ndarray:
    """The non-member query set of one input: a generator seeded by the keyed hash of the input's
    bytes draws a permutation of range(K); its first L entries, sorted, are the set."""
    seed = int.from_bytes(input_digest(x, key), "little")
    perm = np.random.default_rng(seed).permutation(num_teachers)
    return np.sort(perm[:num_query]).astype(np.int64)


class SplitAI(ServedModel):
    """The Split-AI ensemble (SELENA paper section 3): K teachers plus each training sample's query set.

    ``query`` returns log of the mean softmax of the input's L query teachers: the training
    sample's own query set when the input's bytes equal a training sample, else the hashed set.
    """

    def __init__(self, teachers: list[TorchClassifier], query_sets: np.ndarray, train_x: np.ndarray,
                 hash_key: bytes, train_masks: np.ndarray) -> None:
        self.teachers = teachers
        self.num_teachers = len(teachers)
        self.member_query_sets = query_sets
        self.num_query = query_sets.shape[1]
        self.train_masks = train_masks
        self._hash_key = hash_key
        self._member_index: dict[bytes, int] = {}
        for i, xi in enumerate(train_x):
            self._member_index.setdefault(input_digest(xi), i)

    def member_index(self, x: np.ndarray) -> np.ndarray:
        """For each input, the index of the first training sample with the same bytes, or -1."""
        return np.array([self._member_index.get(input_digest(xi), -1) for xi in x], dtype=np.int64)

    def query_sets(self, x: np.ndarray) -> np.ndarray:
        """(N, L) teacher indices that answer each input."""
        out = np.empty((len(x), self.num_query), dtype=np.int64)
        for row, (xi, i) in enumerate(zip(x, self.member_index(x))):
            out[row] = self.member_query_sets[i] if i >= 0 else hashed_query_set(
                xi, self.num_teachers, self.num_query, self._hash_key)
        return out

    def teacher_probs(self, x: np.ndarray) -> np.ndarray:
        """(N, K, classes) float64 softmax outputs of every teacher on ``x``."""
        logits = np.stack([t.query(x) for t in self.teachers], axis=1).astype(np.float64)
        return softmax(logits, axis=-1)

    def query(self, x: np.ndarray) -> np.ndarray:
        """log of the mean softmax of each input's L query teachers, float32 (N, classes)."""
        probs = self.teacher_probs(x)
        sets = self.query_sets(x)
        mean = np.take_along_axis(probs, sets[:, :, None], axis=1).mean(axis=1)
        return np.log(np.maximum(mean, np.finfo(np.float64).tiny)).astype(np.float32)


class SELENAStudent(TorchClassifier):
    """The served SELENA model: the distilled student answers ``query``; ``splitai_query`` answers
    with the Split-AI ensemble it was distilled from (:meth:`SplitAI.query`, plain query only), the
    access the paper's near-duplicate attack reads. ``model_state`` is the student's only."""

    def __init__(self, net: Any, mean: tuple[float, ...], std: tuple[float, ...], device: str,
                 split_ai: SplitAI, record: dict[str, Any] | None = None) -> None:
        super().__init__(net, mean, std, device, record=record)
        self.split_ai = split_ai

    def splitai_query(self, x: np.ndarray) -> np.ndarray:
        """log of the mean softmax of each input's L query teachers (float32, (N, classes))."""
        return self.split_ai.query(x)


@dataclass(frozen=True)
class SELENAFit:
    """Everything one SELENA fit produced: the Split-AI ensemble, the soft labels (n, classes)
    float32 the student was distilled on, and the student (the served model, which also serves
    ``splitai_query`` from ``split_ai``)."""

    split_ai: SplitAI
    soft_labels: np.ndarray
    student: SELENAStudent


class SELENA(Defense):
    """SELENA: Split-AI with K teachers (each sample left out of L) distilled into a served student.

    Parameters: ``num_teachers`` (K, default 25), ``num_query`` (L, default 10, 1 <= L < K) and
    ``teacher_epochs`` (None = the preset's epochs).
    """

    name = "selena"
    description = "Split-AI (K teachers, each sample left out of L) self-distilled into a served student"
    reference = "https://arxiv.org/abs/2110.08324"
    default_canary = "duplicates"
    #: ``lira-neighbour`` is the paper's ``splitai_nn``: Split-AI queried at each canary's near-duplicate
    adaptive_attacks = ("lira", "lira-neighbour")
    provides = frozenset({"splitai_query"})
    param_defaults = {"num_teachers": 25, "num_query": 10, "teacher_epochs": None}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        k, q, e = self.params["num_teachers"], self.params["num_query"], self.params["teacher_epochs"]
        if not is_int(k) or k < 2:
            raise ValueError(f"num_teachers must be an integer >= 2, got {k!r}")
        if not is_int(q) or not 1 <= q < k:
            raise ValueError(f"num_query must be an integer with 1 <= num_query < num_teachers ({k}), got {q!r}")
        if e is not None and (not is_int(e) or e < 1):
            raise ValueError(f"teacher_epochs must be None or an integer >= 1, got {e!r}")

    def teacher_recipe(self, train_cfg: TrainConfig) -> TrainConfig:
        """The preset's recipe, with ``teacher_epochs`` replacing its epochs when set."""
        e = self.params["teacher_epochs"]
        return train_cfg if e is None else train_cfg.model_copy(update={"epochs": int(e)})

    def fit(self, train: LabeledImages, ctx: FitContext) -> ServedModel:
        """Train SELENA and serve the distilled student (a :class:`SELENAStudent`, which also answers
        ``splitai_query``)."""
        return self.fit_all(train, ctx).student

    def fit_all(self, train: LabeledImages, ctx: FitContext) -> SELENAFit:
        """Train Split-AI's K teachers, compute the soft labels and distill the student.

        Deterministic from ``ctx.seed``: query sets, teacher seeds, student seed and the hash key
        are separate ``SeedSequence([seed, tag, ...])`` streams. Progress goes to ``ctx.report``
        as one fraction over all K + 1 networks, weighted by epochs x training samples.
        """
        k_total, num_query = int(self.params["num_teachers"]), int(self.params["num_query"])
        n = len(train)
        query_sets = draw_query_sets(n, k_total, num_query,
                                     np.random.default_rng(np.random.SeedSequence([ctx.seed, _QUERY_SETS])))
        masks = teacher_masks(query_sets, k_total)
        sizes = masks.sum(axis=1)
        if (sizes == 0).any():
            raise ValueError(f"SELENA: teacher(s) {np.flatnonzero(sizes == 0).tolist()} got no training samples "
                             f"({n} samples, K={k_total}, L={num_query})")
        teacher_cfg = self.teacher_recipe(ctx.train)
        # progress: each network's share is proportional to its epochs x training samples
        work = [float(s) * teacher_cfg.epochs for s in sizes] + [float(n) * ctx.train.epochs]
        done = np.concatenate([[0.0], np.cumsum(work)]) / sum(work)

        def part(j: int) -> Callable[[str, float], None]:
            return lambda what, f: ctx.report("train", float(done[j] + f * (done[j + 1] - done[j])))

        teachers: list[TorchClassifier] = []
        prob_sum = np.zeros((n, train.num_classes), dtype=np.float64)
        for k in range(k_total):
            seed_k = derived_seed(ctx.seed, _TEACHER, k)
            subset = dataclasses.replace(train, x=train.x[masks[k]], y=train.y[masks[k]])
            tctx = FitContext(seed=seed_k, device=ctx.device, train=teacher_cfg, params=ctx.params,
                              progress=part(k))
            net = train_classifier(init_network(train, ctx, seed_k), subset, tctx)
            teacher = TorchClassifier(net, train.mean, train.std, ctx.device)
            teachers.append(teacher)
            left_out = ~masks[k]  # the samples teacher k answers for: k is in their query set
            if left_out.any():
                logits = teacher.query(train.x[left_out]).astype(np.float64)
                prob_sum[left_out] += softmax(logits, axis=-1)
        soft = (prob_sum / num_query).astype(np.float32)
        split_ai = SplitAI(teachers, query_sets, train.x, derived_hash_key(ctx.seed), masks)

        seed_s = derived_seed(ctx.seed, _STUDENT)
        sctx = FitContext(seed=seed_s, device=ctx.device, train=ctx.train, params=ctx.params, progress=part(k_total))
        student_net = train_classifier(init_network(train, ctx, seed_s), train, sctx, targets=soft)
        facts = {
            "num_teachers": k_total,
            "num_query": num_query,
            "teacher_epochs": teacher_cfg.epochs,
            "teacher_train_size_mean": float(sizes.mean()),
            "soft_label_agreement": float((soft.argmax(axis=1) == train.y).mean()),
        }
        student = SELENAStudent(student_net, train.mean, train.std, ctx.device, split_ai, record=facts)
        return SELENAFit(split_ai=split_ai, soft_labels=soft, student=student)


def derived_hash_key(seed: int) -> bytes:
    """The per-model secret key of the non-member query hash (BLAKE2b keys are at most 64 bytes)."""
    return np.random.SeedSequence([seed, _HASH_KEY]).generate_state(4).tobytes()

