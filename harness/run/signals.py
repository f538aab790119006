"""Signals: what each trained model leaves behind for the attacks.

A signal is a named function ``(served model, images, query spec, seed) -> array`` computed once
per model right after training and saved with it (so that attacks re-run without retraining).
An attack declares the signals it ``needs``; the runner computes the union of what the run's
attacks need (``logits`` always: the run's bookkeeping reads them) and nothing else. A signal may
need a capability of the served model (``features`` for white-box signals, ``raw_query`` for
pre-defense outputs, ``splitai_query`` for SELENA's Split-AI ensemble): an attack whose signal the
defense cannot provide is refused before any
training (:func:`check_signals`). ``seed`` is the same for every model of a run, so that random
query draws (the contrastive views) are identical across the victim and its shadow models.

Built-in signals, each (N, A, ...) over the dataset's A fixed query views (index 0 unaugmented):

- ``logits`` (N, A, K): the served outputs on the audit samples (black-box);
- ``raw_logits`` (N, A, K): the outputs before a test-time defense (needs ``raw_query``);
- ``population_logits`` (Z, A, K): the served outputs on the run's population samples (RMIA's z);
- ``neighbour_logits`` (N, A, K): the served outputs on each canary's matched near-duplicate (the
  ``near-duplicates`` canaries carry them; the ``lira-neighbour-student`` attack reads it);
- ``splitai_neighbour_logits`` (N, 1, K): SELENA's Split-AI answer on each canary's near-duplicate,
  log of the mean softmax of the L teachers that never trained on the neighbour, plain query only
  (needs ``splitai_query``; the ``lira-neighbour`` attack, the paper's ``splitai_nn``, reads it);
- ``contrastive_features`` (N, A, R): per query view and repetition r < R = 6, the Fisher-transformed
  cosine similarity ``log((1 + s) / (1 - s))`` of the encoder features of two SSL-augmented copies
  of the view (white-box, needs ``features``; the paper's ``backbone`` score, protocol notes 3.5);
- ``contrastive_logits`` (N, A, R): the same on the served logits (black-box; the paper's
  ``similarity`` score);
- ``logits_averaged`` (N, A, K): for a model whose serving is random (:func:`check_serving`), the
  mean of the log-probabilities of ``audit.repeat_queries`` answers per query view of the audit
  samples (``lira-averaged`` reads it); for an input-keyed one, the same over answers to fresh
  copies a few grey levels off in a few pixels, at the scale where the check saw the key change
  (:class:`PerturbedQueries`); a deterministic model saves none (its average is the log-softmax of ``logits``, which the attack phase takes instead).

Attacks may bring signals of their own (``Attack.signals``: name -> :class:`Signal`). A signal
value holding a NaN is refused when computed (:func:`compute_signals`, one line naming it): no
attack scores NaN, and a saved file holding one reads as damaged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import numpy as np

from defenses.ssl_augment import SSLAugment
from harness.core.errors import ConfigError
from harness.core.data import AugmentSpec
from harness.core.lazy import LazyModule
from harness.core.signals import CONTRASTIVE_REPETITIONS, FISHER_EPS, NOT_SERVED, Signal
from harness.run.plugin_errors import CheckedServed

if TYPE_CHECKING:
    from attacks.base import Attack
    from defenses.base import ServedModel

# torch where signals are computed (after training): the attack phase reads this module's table only
torch = LazyModule("torch")


def query_augmented(query: Callable[[np.ndarray], np.ndarray], x: np.ndarray, spec: AugmentSpec) -> np.ndarray:
    """Outputs (N, A, K) under the dataset's fixed query augmentations (index 0 = unaugmented)."""
    from harness.core.augment import shift_flip

    xt = torch.from_numpy(x)
    outs = [query(shift_flip(xt, dy, dx, flip).numpy()) for flip, dy, dx in spec.query_offsets()]
    return np.stack(outs, axis=1).astype(np.float32)


def fisher(s: np.ndarray) -> np.ndarray:
    """The paper's Fisher-type transform of a cosine similarity: ``log(1 + s) - log(1 - s)`` after
    clipping s to [-1, 1] (= 2 artanh(s); 0 -> 0, 0.5 -> ln 3)."""
    s = np.clip(np.asarray(s, dtype=np.float64), -1.0, 1.0)
    return np.log(1 + s + FISHER_EPS) - np.log(1 - s + FISHER_EPS)


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    return (a * b).sum(1) / np.maximum(na * nb, 1e-12)


def ssl_view_pairs(x: np.ndarray, spec: AugmentSpec, seed: int, repetitions: int = CONTRASTIVE_REPETITIONS,
                   batch_size: int = 512, augment: SSLAugment | None = None
                   ) -> Iterator[tuple[int, int, slice, np.ndarray, np.ndarray]]:
    """Two SSL-augmented uint8 copies ``(v1, v2)`` of every query view of ``x``, yielded as
    ``(r, a, rows, v1, v2)`` for R seeded repetitions, query view a and the batch of rows. ``augment``:
    the served model's own ``view_augmentation()`` (an adaptive attack knows the training recipe);
    None for a model without one: the paper's SSL augmentation with flips only where ``spec``
    allows them. The draws depend on ``seed``, r, the view and the batch only, never on the model's
    weights: every model of a run sees the same views, and every signal built on them the same pairs.
    An augmentation in feature space (``space == "features"``: :class:`defenses.scatter_ssl.FeatureViewAugment`)
    yields float32 feature maps drawn from the query view's fixed maps, which the served model reads."""
    from harness.core.augment import shift_flip

    aug = augment if augment is not None else SSLAugment(flip=spec.flip)
    xt = torch.from_numpy(x)
    if getattr(aug, "space", "images") == "features":  # float32 maps of each query view, the views drawn on them
        for a, (flip, dy, dx) in enumerate(spec.query_offsets()):
            maps = aug.base_maps(shift_flip(xt, dy, dx, flip))
            for r in range(repetitions):
                g = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, r, a]).generate_state(1)[0]))
                for i in range(0, len(x), batch_size):
                    fb = maps[i : i + batch_size]
                    v1, v2 = (aug(fb, g).numpy() for _ in range(2))
                    yield r, a, slice(i, i + batch_size), v1, v2
        return
    for r in range(repetitions):
        for a, (flip, dy, dx) in enumerate(spec.query_offsets()):
            g = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, r, a]).generate_state(1)[0]))
            base = shift_flip(xt, dy, dx, flip).float() / 255.0
            for i in range(0, len(x), batch_size):
                xb = base[i : i + batch_size]
                v1, v2 = (torch.round(aug(xb, g) * 255.0).clamp(0, 255).to(torch.uint8).numpy() for _ in range(2))
                yield r, a, slice(i, i + batch_size), v1, v2


def contrastive_similarity(embed: Callable[[np.ndarray], np.ndarray], x: np.ndarray, spec: AugmentSpec, seed: int,
                           repetitions: int = CONTRASTIVE_REPETITIONS, batch_size: int = 512,
                           augment: SSLAugment | None = None) -> np.ndarray:
    """(N, A, R) Fisher-transformed cosine similarities of ``embed`` on two SSL-augmented copies of
    every query view (:func:`ssl_view_pairs`), for R seeded repetitions."""
    out = np.zeros((len(x), len(spec.query_offsets()), repetitions), np.float32)
    for r, a, rows, v1, v2 in ssl_view_pairs(x, spec, seed, repetitions, batch_size, augment):
        out[rows, a, r] = fisher(_cosine(embed(v1), embed(v2)))
    return out


def ssl_view_outputs(query: Callable[[np.ndarray], np.ndarray], x: np.ndarray, spec: AugmentSpec, seed: int,
                     repetitions: int = CONTRASTIVE_REPETITIONS, batch_size: int = 512,
                     augment: SSLAugment | None = None) -> np.ndarray:
    """(N, A, R, K) outputs of ``query`` on the first copy of each pair of :func:`ssl_view_pairs` (the
    same views as :func:`contrastive_similarity`'s): the inputs of the paper's SSL ``confidence`` score."""
    out: np.ndarray | None = None
    for r, a, rows, v1, _ in ssl_view_pairs(x, spec, seed, repetitions, batch_size, augment):
        z = np.asarray(query(v1), dtype=np.float32)
        if out is None:
            out = np.zeros((len(x), len(spec.query_offsets()), repetitions, z.shape[-1]), np.float32)
        out[rows, a, r] = z
    assert out is not None
    return out


def _logits(served: ServedModel, x: np.ndarray, spec: AugmentSpec, seed: int) -> np.ndarray:
    return query_augmented(served.query, x, spec)


#: how many audit samples (the first ones: a fixed choice) every trained model is asked twice
SERVING_PROBE = 8
#: answers that differ by more than this (on log-probabilities, relative and absolute) are random
SERVING_TOLERANCE = 1e-4
#: copies of each probe image the input-keyed check asks about, at every scale (:func:`check_serving`)
KEYED_COPIES = 4
#: entries (channel, row, column) of an image that a perturbed copy changes (:func:`perturb_pixels`)
KEYED_PIXELS = 3
#: the scales of the input-keyed check, smallest first: grey levels by which a copy's KEYED_PIXELS
#: entries move (1: the smallest step uint8 images allow). The same entries and directions at every
#: scale, so that each copy walks away from its image along one line
KEYED_SCALES = (1, 2, 4, 8, 16, 32, 64)
#: at a scale where the median, over the probe's (image, copy) pairs, of the largest difference
#: between the answers' log-probabilities exceeds this, the answers have changed (measured:
#: docs/protocol.md, Input-keyed noise; ``benchmarks/bench_keyed_serving.py``)
KEYED_THRESHOLD = 0.5
#: at a scale above the first where the answers have changed, serving is keyed where that median
#: exceeds this many times its proportional extrapolation from the scale below (a model smooth in
#: its input moves in proportion to the step: a ratio near 1; measured as above)
KEYED_JUMP = 2.0
#: the answers move at the smallest scale where the median there exceeds this: a model whose answers
#: are discrete (labels, rounded confidences, rank masking) answers most copies one grey level off
#: identically, has no smoothness to extrapolate, and is read at the first scale only
KEYED_MOVES = 1e-6
#: the averaged answers of an input-keyed model are asked on copies at the scale it was flagged at
#: if at least this fraction of the probe's pairs changed there (fresh noise in nearly every copy),
#: else at the next scale (:func:`check_serving`)
KEYED_COVERAGE = 0.875


def log_probabilities(z: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax over the last axis, in float64: what an answer's softmax means, whatever
    constant a served model adds per row."""
    z = np.asarray(z, dtype=np.float64)
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


#: the streams of perturbed copies drawn from a run's signal seed (:func:`perturbation_seed`)
CHECK_COPIES, AVERAGED_COPIES = 0, 1


def perturbation_seed(seed: int, stream: int = CHECK_COPIES) -> int:
    """The seed of a stream of perturbed copies (the input-keyed check's, :data:`CHECK_COPIES`, or
    the averaged answers', :data:`AVERAGED_COPIES`): a function of the run's signal seed only, so
    every model of a run, victim and shadows alike, is asked the same copies."""
    return int(np.random.SeedSequence([seed, 0x6B6579, stream]).generate_state(1)[0])


def perturb_pixels(x: np.ndarray, rng: np.random.Generator, pixels: int = KEYED_PIXELS, scale: int = 1) -> np.ndarray:
    """A copy of the uint8 images ``x`` (N, C, H, W) with ``pixels`` distinct entries per image
    (channel, row, column, drawn uniformly) moved by ``scale`` grey levels, up or down with
    probability 1/2, up where down would leave [0, 255] and down where up would (``scale`` at most
    127: one of the two always fits). Scale 1 is the smallest step the data's uint8 format allows,
    where no model that is smooth in its input can answer differently. The draws from ``rng`` do
    not depend on ``scale``: the same generator state moves the same entries the same way at every
    scale (up to the edges of [0, 255])."""
    if not 1 <= scale <= 127:
        raise ValueError(f"scale must lie in [1, 127] grey levels, got {scale}")
    n = len(x)
    flat = np.array(x, dtype=np.uint8, copy=True).reshape(n, -1)
    d = flat.shape[1]
    k = min(pixels, d)
    pos = rng.integers(0, d, (n, k))
    while k > 1:  # redraw the rows that hit one entry twice (rare): the k entries are distinct
        s = np.sort(pos, axis=1)
        dup = (s[:, 1:] == s[:, :-1]).any(axis=1)
        if not dup.any():
            break
        pos[dup] = rng.integers(0, d, (int(dup.sum()), k))
    step = rng.choice(np.array([-1, 1], dtype=np.int16), size=(n, k))
    rows = np.arange(n)[:, None]
    v = flat[rows, pos].astype(np.int16)
    step = np.where(v - scale < 0, 1, np.where(v + scale > 255, -1, step))
    flat[rows, pos] = (v + scale * step).astype(np.uint8)
    return flat.reshape(x.shape)


class PerturbedQueries:
    """A served model asked every query on fresh perturbed copies of its images
    (:func:`perturb_pixels` at ``scale``, drawn from ``seed`` in query order): the answers of a
    model whose noise is keyed to the input, fresh per copy, for the averaged answers of
    input-keyed serving. Only ``query`` is served."""

    def __init__(self, served: Any, seed: int, scale: int = 1) -> None:
        self.served, self.scale = served, int(scale)
        self.rng = np.random.default_rng(seed)

    def query(self, x: np.ndarray) -> np.ndarray:
        return self.served.query(perturb_pixels(x, self.rng, scale=self.scale))


def keyed_copies(probe: np.ndarray, seed: int, scale: int) -> np.ndarray:
    """The input-keyed check's copies at ``scale``: :data:`KEYED_COPIES` copies of each probe image
    (copy-major, (KEYED_COPIES x P, C, H, W)), drawn from :func:`perturbation_seed` of ``seed``; the
    same entries and directions at every scale."""
    rng = np.random.default_rng(perturbation_seed(seed))
    return np.concatenate([perturb_pixels(probe, rng, KEYED_PIXELS, scale) for _ in range(KEYED_COPIES)])


def check_serving(served: ServedModel, x: np.ndarray, seed: int = 0) -> dict[str, Any]:
    """Two checks of how a model serves, on the first :data:`SERVING_PROBE` images of ``x``,
    unaugmented; returns the per-model record saved with the signals (``serving``).

    *Random*: the same images asked twice, the answers compared as log-probabilities (a constant
    added per row is not a difference). ``random``: they differ beyond :data:`SERVING_TOLERANCE`
    (``np.allclose``, relative and absolute): the model serves fresh randomness per query, so one
    answer per image understates what R answers reveal.

    *Input-keyed* (a deterministic model only; None for a random one): noise drawn from a seed that
    hashes the input (the same image, the same noise) changes where the key does, and a key may
    survive small steps (a hash of the image rounded coarsely). So the check walks away from each
    probe image, scale after scale (:data:`KEYED_SCALES` grey levels in :data:`KEYED_PIXELS`
    entries, :data:`KEYED_COPIES` copies per image: :func:`keyed_copies`, from
    :func:`perturbation_seed` of ``seed``): per (image, copy) pair d = the largest absolute
    difference of the two answers' log-probabilities, and the answers have changed at a scale where
    the median d exceeds :data:`KEYED_THRESHOLD`. The reference is the model's own smoothness: a
    smooth model's d grows in proportion to the step, a keyed one jumps where the key changes.
    ``keyed``: the answers changed at the first scale (the unperturbed answer, identical when asked
    twice, is the reference there), or at a larger one with a median more than :data:`KEYED_JUMP`
    times the proportional extrapolation of the median at the scale below; the walk stops there,
    else at the last scale (past the scale where the model's own answers change, a key coarser than
    that still jumps). A model whose answers do not move at the first scale (median d at most
    :data:`KEYED_MOVES`: labels, rounded confidences, rank masking; discrete answers jump at their
    own boundaries, and have no smoothness to extrapolate) is read at the first scale only. The
    median keeps a model whose answer jumps for a few copies (at a decision boundary) unflagged.

    The record: ``keyed``; ``perturbed_median_difference`` and ``perturbed_max_difference`` (the
    median and the largest d at the first scale); ``perturbed_scales`` and ``perturbed_medians``
    (every scale asked, its median d); ``perturbed_growth`` (the largest ratio, over the scales
    asked above the first, of a median to its proportional extrapolation from the scale below: near
    1 for a smooth model; None with one scale asked); ``keyed_jump`` (what the rule compared with
    :data:`KEYED_JUMP`: that ratio at the scale a keyed model was flagged at, else its largest value
    over the scales above the first where the answers had changed; None where none had, or for a
    model flagged at the first scale); and ``keyed_scale``, for a keyed model the scale of the copies its
    averaged answers are asked on (the scale it was flagged at, or the next one where fewer than
    :data:`KEYED_COVERAGE` of the pairs changed there), else None."""
    probe = x[:SERVING_PROBE]
    if isinstance(served, CheckedServed):
        served.during = f"the random-serving check (the first {len(probe)} audit images, asked twice)"
    first, second = (log_probabilities(served.query(probe)) for _ in range(2))
    diff = float(np.abs(first - second).max()) if first.size else 0.0
    random = not np.allclose(first, second, rtol=SERVING_TOLERANCE, atol=SERVING_TOLERANCE)
    record: dict[str, Any] = {"random": bool(random), "probe_images": int(len(probe)), "max_abs_difference": diff}
    if random or not len(probe):  # fresh noise moves every answer: the keyed check reads deterministic ones
        return {**record, "keyed": None}
    scales: list[int] = []
    medians: list[float] = []
    keyed, jump, keyed_scale = False, None, None
    for k, scale in enumerate(KEYED_SCALES):
        if isinstance(served, CheckedServed):
            served.during = (f"the input-keyed check (the first {len(probe)} audit images, {KEYED_COPIES} copies each "
                             f"{scale} grey level{'s' if scale > 1 else ''} off in {KEYED_PIXELS} pixels)")
        answers = log_probabilities(served.query(keyed_copies(probe, seed, scale))).reshape(KEYED_COPIES, len(probe), -1)
        d = np.abs(answers - first[None]).max(axis=-1)
        median = float(np.median(d))
        scales.append(scale)
        medians.append(median)
        if k == 0:
            record.update(perturbed_median_difference=median, perturbed_max_difference=float(d.max()))
            keyed = median > KEYED_THRESHOLD  # against the unperturbed answer: any change is a jump
        elif median > KEYED_THRESHOLD:  # changed here: a jump, or the model's own proportional change?
            predicted = medians[k - 1] * scale / KEYED_SCALES[k - 1]
            ratio = median / predicted if predicted > 0 else float("inf")
            keyed = ratio > KEYED_JUMP
            jump = ratio if keyed or jump is None else max(jump, ratio)
        if keyed:
            covered = float(np.mean(d > KEYED_THRESHOLD)) >= KEYED_COVERAGE
            keyed_scale = scale if covered or k + 1 == len(KEYED_SCALES) else KEYED_SCALES[k + 1]
            break
        if k == 0 and median <= KEYED_MOVES:  # discrete answers: nothing to extrapolate
            break
    growth = [m / (p * s / r) for m, p, s, r in zip(medians[1:], medians, scales[1:], scales) if p > 0]
    return {**record, "keyed": bool(keyed), "keyed_copies": KEYED_COPIES, "keyed_pixels": KEYED_PIXELS,
            "perturbed_scales": scales, "perturbed_medians": medians,
            "perturbed_growth": max(growth) if growth else None,
            "keyed_jump": jump if jump is None or np.isfinite(jump) else None, "keyed_scale": keyed_scale}


def averaged_answers(answer: Callable[[], np.ndarray], repeats: int) -> np.ndarray:
    """The mean log-probabilities (float32) of ``repeats`` calls of ``answer`` (each a fresh answer
    of a random served model, or of an input-keyed one on fresh perturbed copies, (..., K) scores):
    the standard estimate of the model behind the noise (docs/protocol.md, Random serving)."""
    total: np.ndarray | None = None
    for _ in range(repeats):
        lp = log_probabilities(answer())
        total = lp if total is None else total + lp
    assert total is not None
    return (total / repeats).astype(np.float32)


def _raw_logits(served: ServedModel, x: np.ndarray, spec: AugmentSpec, seed: int) -> np.ndarray | None:
    if served.raw_query(x[:1]) is None:
        return None
    return query_augmented(served.raw_query, x, spec)  # type: ignore[arg-type]


def _splitai_logits(served: ServedModel, x: np.ndarray, spec: AugmentSpec, seed: int) -> np.ndarray | None:
    """(N, 1, K): Split-AI's answer on the plain images only. A shifted or flipped view is an input
    no teacher trained on, so Split-AI would answer it with hashed teachers, some of which saw the
    sample (the paper's code queries Split-AI without augmentation)."""
    if served.splitai_query(x[:1]) is None:
        return None
    return np.asarray(served.splitai_query(x), dtype=np.float32)[:, None, :]


def _contrastive_features(served: ServedModel, x: np.ndarray, spec: AugmentSpec, seed: int) -> np.ndarray | None:
    if served.features(x[:1]) is None:
        return None
    return contrastive_similarity(served.features, x, spec, seed, augment=served.view_augmentation())  # type: ignore[arg-type]


def _contrastive_logits(served: ServedModel, x: np.ndarray, spec: AugmentSpec, seed: int) -> np.ndarray:
    return contrastive_similarity(served.query, x, spec, seed, augment=served.view_augmentation())


def _ssl_view_logits(served: ServedModel, x: np.ndarray, spec: AugmentSpec, seed: int) -> np.ndarray:
    return ssl_view_outputs(served.query, x, spec, seed, augment=served.view_augmentation())


BUILTIN_SIGNALS: dict[str, Signal] = {
    s.name: s
    for s in (
        Signal("logits", "served outputs under the query views", _logits),
        Signal("raw_logits", "outputs before the test-time defense", _raw_logits, requires="raw_query",
               access="white-box"),
        Signal("population_logits", "served outputs on the population samples (RMIA's z)", _logits,
               images="population"),
        Signal("neighbour_logits", "served outputs on each canary's matched near-duplicate (near-duplicates "
               "canaries)", _logits, images="neighbours"),
        Signal("splitai_neighbour_logits", "SELENA's Split-AI answer (mean softmax of the teachers that never "
               "trained on it) on each canary's matched near-duplicate, plain query", _splitai_logits,
               requires="splitai_query", images="neighbours", access="white-box"),
        Signal("contrastive_features", "similarity of encoder features of two SSL views (Fisher-transformed)",
               _contrastive_features, requires="features", access="white-box"),
        Signal("contrastive_logits", "similarity of served logits of two SSL views (Fisher-transformed)",
               _contrastive_logits),
        Signal("ssl_view_logits", "served outputs on the first of each pair of SSL views (the paper's SSL "
               "confidence baseline)", _ssl_view_logits),
        Signal("logits_averaged", "mean served log-probabilities of audit.repeat_queries answers per query view "
               "(random serving only)", _logits, averages="logits"),
    )
}


def signal_table(attacks: Iterable[Attack]) -> dict[str, Signal]:
    """The built-in signals and those the attacks bring (an attack may not redefine a built-in)."""
    table = dict(BUILTIN_SIGNALS)
    for a in attacks:
        for name, sig in getattr(a, "signals", {}).items():
            if name in BUILTIN_SIGNALS or (name in table and table[name] is not sig):
                raise ConfigError(f"attack {a.name!r} defines signal {name!r}, which another signal already uses")
            table[name] = sig
    return table


def needed_signals(attacks: Iterable[Attack]) -> list[str]:
    """``logits`` and every signal the attacks need, in a stable order."""
    return sorted({"logits", *(n for a in attacks for n in a.needs)})


def unserved_access(attack: Attack, table: dict[str, Signal]) -> str | None:
    """The first access in :data:`harness.core.signals.NOT_SERVED` (what the deployed model does not
    serve) that a signal the attack reads needs (``raw_query``
    for ``lira-raw``, HAMP's ablation on its pre-defense outputs; ``splitai_query`` for
    ``lira-neighbour``, which queries SELENA's Split-AI ensemble), or None for an attack on what the
    deployed model serves."""
    needs = {table[n].requires for n in attack.needs if n in table}
    return next((a for a in NOT_SERVED if a in needs), None)


def attack_access(attack: Attack, table: dict[str, Signal]) -> str:
    """``white-box`` if any signal the attack reads is, else ``black-box``."""
    return "white-box" if any(table[n].access == "white-box" for n in attack.needs if n in table) else "black-box"


#: what to run instead of an attack refused for want of an access, by access
_INSTEAD = {"splitai_query": "; lira-neighbour-student queries the served model at each canary's near-duplicate"}


def check_signals(attacks: list[Attack], provides: frozenset[str], defense: str, population_samples: int,
                  adaptive: tuple[str, ...] = (), neighbours: bool = True) -> None:
    """Refuse, before training, an attack whose signals cannot be computed for this run. For one of
    the defense's ``adaptive`` attacks (which run whatever ``attack.names`` says) the message points
    at the defense's declaration instead of ``attack.names``. ``neighbours``: whether a sample-level
    canary of the run carries near-duplicate neighbours; an attack the user asked for that reads
    them is refused without one (a defense's adaptive one simply does not apply there)."""
    table = signal_table(attacks)
    for a in attacks:
        declared = a.name in adaptive
        who = f"adaptive attack {a.name!r} (declared by defense {defense!r})" if declared else f"attack {a.name!r}"
        for n in sorted(a.needs):
            sig = table.get(n)
            if sig is None:
                raise ConfigError(f"{who} needs signal {n!r}, which no signal provides "
                                  f"(known: {', '.join(sorted(table))})")
            if sig.requires is not None and sig.requires not in provides:
                what = {"features": "white-box features", "raw_query": "pre-defense outputs",
                        "splitai_query": "a Split-AI ensemble's outputs (SELENA's)"}.get(sig.requires, sig.requires)
                fix = (f"declare provides = frozenset({{{sig.requires!r}}}) on the defense with a served model that "
                       f"implements {sig.requires}, or remove the attack from its adaptive_attacks" if declared else
                       "leave the attack out (--set attack.names=[...])" + _INSTEAD.get(sig.requires, ""))
                raise ConfigError(f"{who} needs signal {n!r} ({sig.description}), which needs {what}; defense "
                                  f"{defense!r}'s served model does not provide them: {fix}")
            if sig.images == "neighbours" and not neighbours and not declared:
                raise ConfigError(f"{who} reads {n!r} ({sig.description}), but none of this run's canaries has "
                                  "near-duplicate neighbours: add --canary near-duplicates, or leave the attack out "
                                  "(--set attack.names=[...])")
            if sig.images == "population" and population_samples == 0:
                fix = ("" if declared else ", or leave it out (--set attack.names=[...])")
                raise ConfigError(f"{who} needs population samples: set audit.population_samples > 0{fix}")


def compute_signals(names: list[str], table: dict[str, Signal], served: ServedModel, audit_x: np.ndarray,
                    population_x: np.ndarray, spec: AugmentSpec, seed: int,
                    neighbour_x: np.ndarray | None = None, repeats: int = 1,
                    perturb_seed: int | None = None, perturb_scale: int = 1) -> dict[str, np.ndarray]:
    """Compute the named signals for one trained model: on the audit samples, the population
    samples or the canaries' neighbours (``Signal.images``); a signal whose images a level does not
    have (no population samples, canaries without neighbours) is not computed. A signal of repeated
    queries (``Signal.averages``) is the mean of ``repeats`` answers (:func:`averaged_answers`), and
    is not computed with ``repeats`` < 2 (a deterministic model, or ``audit.repeat_queries=1``);
    with ``perturb_seed`` (input-keyed serving) every one of those answers is asked on fresh
    perturbed copies of the images (:class:`PerturbedQueries`, drawn from that seed, entries moved
    by ``perturb_scale`` grey levels)."""
    out: dict[str, np.ndarray] = {}
    images = {"audit": audit_x, "population": population_x,
              "neighbours": neighbour_x if neighbour_x is not None else audit_x[:0]}
    for n in names:
        sig = table[n]
        x = images[sig.images]
        if (sig.images != "audit" and not len(x)) or (sig.averages is not None and repeats < 2):
            continue
        if isinstance(served, CheckedServed):  # its messages name the signal
            served.during = f"signal {n!r} on the {sig.images} samples"
        if sig.averages is not None:
            asked = served if perturb_seed is None else PerturbedQueries(served, perturb_seed, perturb_scale)
            value = averaged_answers(lambda: sig.fn(asked, x, spec, seed), repeats)
        else:
            value = sig.fn(served, x, spec, seed)
        if value is None:
            raise RuntimeError(f"signal {n!r} needs the served model's {sig.requires}, which the defense declares "
                               f"(Defense.provides) but its served model returned None")
        if np.issubdtype(np.asarray(value).dtype, np.floating) and (nan := int(np.isnan(value).sum())):
            # a stored NaN reads as a damaged file (RunDir.read_signals): refused here, before it is saved
            raise ConfigError(f"signal {n!r} ({sig.description}) computed {nan} NaN value{'s' if nan > 1 else ''}; "
                              "the attacks cannot score NaN: fix the function that computes it (Signal.fn)")
        out[n] = value
    return out


def stored(arrays: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """The signals as saved: every floating-point array cast to ``dtype`` (``audit.signal_dtype``).

    float16 keeps 11 significant bits (relative rounding at most 2^-11; for values in [16, 32) the
    spacing is 2^-6, so the error at most 2^-7) and halves the disk and the attack phase's memory;
    attacks compute in float64 chunk by chunk. A value beyond float16's range (|v| > 65504) is
    refused, never stored as infinity."""
    out: dict[str, np.ndarray] = {}
    for name, a in arrays.items():
        if not np.issubdtype(a.dtype, np.floating) or a.dtype == np.dtype(dtype):
            out[name] = a
            continue
        if dtype == "float16":
            finite = a[np.isfinite(a)]
            big = float(np.abs(finite).max()) if finite.size else 0.0
            if big > float(np.finfo(np.float16).max):
                raise ConfigError(f"signal {name!r} holds {big:.4g}, beyond float16's range (65504): "
                                  "run with --set audit.signal_dtype=float32")
        out[name] = a.astype(dtype)
    return out


def signal_seed(seed: int) -> int:
    """The seed of a run's signal draws: a function of the run's seed only (every model, every level)."""
    return int(np.random.SeedSequence([seed, 0x516]).generate_state(1)[0])
