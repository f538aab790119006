"""Peak memory and time of the attack phase at scale: LiRA (every variant) on a synthetic signal set
of S models x C audit samples x A query views x K classes, scored in chunks of audit samples
(``attacks.lira.LIRA_CHUNK``).

    python benchmarks/bench_attack_memory.py [--models 64] [--samples 5000] [--views 18] [--classes 10]
        [--chunk N]

Prints the signals' size, the process's peak resident memory before and after the attack (Linux
``ru_maxrss``), and the attack's wall time. ``--chunk`` larger than ``--samples`` scores in one pass
(the memory the chunks save).
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

import attacks.lira as lira
from attacks.base import AttackInput
from harness.design import balanced_membership


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=64)
    ap.add_argument("--samples", type=int, default=5000)
    ap.add_argument("--views", type=int, default=18)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--chunk", type=int, default=lira.LIRA_CHUNK)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    s, c, a, k = args.models, args.samples, args.views, args.classes
    membership = balanced_membership(rng.uniform(size=(s, c)))
    logits = np.empty((s, c, a, k), np.float32)
    for i in range(s):  # filled model by model: no float64 copy of the whole set
        logits[i] = rng.standard_normal((c, a, k), dtype=np.float32) + 2.0 * membership[i][:, None, None] * (
            np.arange(k) == 0)
    labels = np.zeros(c, np.int64)
    before = peak_mib()
    lira.LIRA_CHUNK = args.chunk  # the chunk size the attack reads at call time
    inp = AttackInput(signals={"logits": logits}, labels=labels, membership=membership, population_labels=None,
                      trained_with_augmentation=True)
    t0 = time.perf_counter()
    scores = lira.LiRA().score(inp)
    wall = time.perf_counter() - t0
    print(f"signals: {s} models x {c} samples x {a} views x {k} classes = {logits.nbytes / 2**20:.0f} MiB (float32)")
    print(f"LiRA, {len(scores)} variants, chunks of {args.chunk} samples: {wall:.1f} s; "
          f"peak RSS {peak_mib():.0f} MiB (before the attack: {before:.0f} MiB)")


if __name__ == "__main__":
    main()
