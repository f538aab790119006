"""Fixed features computed once, before any model trains (the ``cifar10-scatter`` preset's networks
on the scattering transform: :mod:`defenses.scatter_models`).

Every model of a run asks for the features of the same images: the training pool (with each level's
rewritten audit samples and extra canary images) and every query view of the audit and population
images. Computed inside the training jobs, the first model of each worker would compute them all,
each worker the same ones at once, behind a progress line that says nothing of it. Here the run's
process computes the rows the cache holds neither in memory nor on disk, in chunks, reporting its
progress, and writes them to the cache's disk folder, where every worker then reads them; a later
run on the same data computes nothing.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

#: images per transform call (and progress report)
CHUNK = 500


def uses_fixed_features(cfg: Any) -> bool:
    """Whether the run's networks read a fixed feature map (``train.model`` ``scatter-*``)."""
    return str(cfg.train.model).startswith("scatter-")


def run_images(prep: Any) -> np.ndarray:
    """The distinct uint8 images (N, C, H, W) a run's models train on or are queried on at every view
    (the test set and the validation split at the plain view)."""
    from harness.views import query_offsets, shift_flip

    data, run = prep.data, prep.run
    parts = [data.x_train, data.x_test]  # every model's test accuracy reads the whole test set
    if data.validation_size:  # and its validation accuracy the validation split
        parts.append(data.x_val)
    spec = data.augment
    for level in prep.levels:
        ld = run.load_level(level)
        c = ld.canaries
        queried = [c.x, data.x_test[ld.population_indices]]
        if c.has_neighbours:
            queried.append(c.neighbour_x)
        parts.append(c.x)
        if len(c.extra_y):
            parts.append(c.extra_x)
        for q in queried:
            if len(q):
                parts += [shift_flip(q, dy, dx, f) for f, dy, dx in query_offsets(spec.flip, spec.shift)]
    x = np.concatenate([p.reshape(len(p), -1) for p in parts if len(p)])
    _, first = np.unique(x, axis=0, return_index=True)
    return x[np.sort(first)].reshape(-1, *data.x_train.shape[1:])


def precompute_features(prep: Any, device: str, report: Callable[[int, int], None] | None = None
                        ) -> tuple[int, float]:
    """Compute and cache the features of :func:`run_images` that the cache lacks; returns (rows
    computed, seconds). ``report(done, total)`` after each chunk. Nothing to do for other networks."""
    if not uses_fixed_features(prep.cfg):
        return 0, 0.0
    import torch

    from defenses.base import Normalizer
    from defenses.scatter_models import shared_cache

    t = time.perf_counter()
    normalize = Normalizer(prep.data.mean, prep.data.std, device)
    cache = shared_cache(device)
    x = run_images(prep)
    todo = cache.missing(normalize(torch.from_numpy(x)))
    with torch.no_grad():
        for i in range(0, len(todo), CHUNK):
            cache(normalize(torch.from_numpy(x[todo[i : i + CHUNK]])))
            if report is not None:
                report(min(i + CHUNK, len(todo)), len(todo))
    return len(todo), time.perf_counter() - t
