"""Peak memory and time of LiRA's scoring alone (``LiRA.score``, every variant) on a synthetic signal
set of S models x C audit samples x A query views x K classes, scored in chunks of audit samples
(``attacks.lira.LIRA_CHUNK``). This is one attack's scores, not the attack phase: the metrics,
bootstrap CIs, bounds, RMIA and the report files are left out, and the signals (one shifted logit)
are nearly separable. ``benchmarks/bench_attack_phase.py`` measures the whole phase (``harness
attack``) on weak and strong signals.

    python benchmarks/bench_attack_memory.py [--models 64] [--samples 5000] [--views 18] [--classes 10]
        [--chunk N] [--dtype float32|float16] [--from-disk] [--json]

Prints the signals' size, the process's peak resident memory before and after the attack (Linux
``ru_maxrss``), and the attack's wall time. ``--chunk`` larger than ``--samples`` scores in one pass
(the memory the chunks save). ``--dtype`` is the stored signals' dtype (``audit.signal_dtype``).
``--from-disk`` writes each model's signals to its own .npz file in a temporary folder (one model in
memory at a time, as the training jobs do), then stacks them with the harness's loader
(:func:`harness.audit.attack_phase.load_level_signals`) before the attack, and the load time is printed.
``--json`` prints the same figures as one JSON line (benchmarks/bench_gpu.py reads it).
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

import attacks.lira as lira
from attacks.base import AttackInput
from harness.core.design import balanced_membership
from harness.audit.attack_phase import load_level_signals
from harness.run.runstore import ModelSignals, atomic_write_npz


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class SignalFiles:
    """One .npz per model, read back as :class:`harness.run.runstore.RunDir` reads a level's signals."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, index: int) -> Path:
        return self.folder / f"model_{index:04d}.npz"

    def write(self, index: int, logits: np.ndarray) -> None:
        atomic_write_npz(self.path(index), meta=np.array(json.dumps({"model_index": index})), logits=logits)

    def read_signals(self, level: str, index: int) -> ModelSignals | None:
        with np.load(self.path(index)) as z:
            return ModelSignals(index=index, arrays={"logits": z["logits"]}, meta=json.loads(str(z["meta"])))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=64)
    ap.add_argument("--samples", type=int, default=5000)
    ap.add_argument("--views", type=int, default=18)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--chunk", type=int, default=lira.LIRA_CHUNK)
    ap.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    ap.add_argument("--from-disk", action="store_true")
    ap.add_argument("--json", action="store_true", help="print one JSON line instead of text")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    s, c, a, k = args.models, args.samples, args.views, args.classes
    membership = balanced_membership(rng.uniform(size=(s, c)))

    def model_logits(i: int) -> np.ndarray:
        return (rng.standard_normal((c, a, k), dtype=np.float32) + 2.0 * membership[i][:, None, None] * (
            np.arange(k) == 0)).astype(args.dtype)

    with tempfile.TemporaryDirectory() as tmp:
        if args.from_disk:
            files = SignalFiles(Path(tmp))
            for i in range(s):
                files.write(i, model_logits(i))
            t0 = time.perf_counter()
            logits = load_level_signals(files, "population", s).signals["logits"]  # type: ignore[arg-type]
            load_s = time.perf_counter() - t0
            load = f"; loaded from {s} files in {load_s:.1f} s"
            before = peak_mib()
        else:
            logits = np.empty((s, c, a, k), args.dtype)
            for i in range(s):  # filled model by model: no float64 copy of the whole set
                logits[i] = model_logits(i)
            before, load, load_s = peak_mib(), "", None
        labels = np.zeros(c, np.int64)
        lira.LIRA_CHUNK = args.chunk  # the chunk size the attack reads at call time
        inp = AttackInput(signals={"logits": logits}, labels=labels, membership=membership, population_labels=None,
                          trained_with_augmentation=True)
        t0 = time.perf_counter()
        scores = lira.LiRA().score(inp)
        wall = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"models": s, "samples": c, "views": a, "classes": k, "dtype": args.dtype,
                          "signals_mib": logits.nbytes / 2**20, "load_seconds": load_s, "lira_variants": len(scores),
                          "chunk": args.chunk, "lira_seconds": wall, "peak_rss_mib": peak_mib(),
                          "peak_rss_mib_before_attack": before}))
        return
    print(f"signals: {s} models x {c} samples x {a} views x {k} classes = {logits.nbytes / 2**20:.0f} MiB "
          f"({args.dtype}){load}")
    print(f"LiRA scoring alone (not the attack phase), {len(scores)} variants, chunks of {args.chunk} samples: "
          f"{wall:.1f} s; "
          f"peak RSS {peak_mib():.0f} MiB (before the attack: {before:.0f} MiB)")


if __name__ == "__main__":
    main()
