"""How often does a defense's served model predict its canaries' audit labels? A quick probe of
whether a training recipe memorizes the canaries at all, before paying for a full evaluation.

    python benchmarks/bench_canary_fit.py --defense hamp [--preset quick] [--data-dir PATH]
        [--models 2] "train.model=cnn-gn train.epochs=200" "audit.canary=uniform" ...

Each positional argument is one setting: space-separated ``KEY=VALUE`` overrides, as
``harness evaluate --set`` takes them (an empty string is the preset itself). For each setting and
each sample-level canary type, the script trains the first ``--models`` models of the membership
design in a temporary run directory and prints a Markdown row:

- ``fit in`` / ``fit out``: the fraction of member / non-member canaries whose served top-1 class
  on the plain (un-augmented) query is the canary's label;
- ``all queries in`` / ``out``: the same over every query augmentation (flips x shifts);
- test accuracy and seconds per model.

Label-only attacks see exactly these correctness bits, so a canary type that members do not fit
more often than non-members cannot be found by them, whatever the attack does.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time

import numpy as np

from harness.core.config import ConfigError, parse_set_options

from harness.defense_config import build_config
from harness.run.runner import TrainJob, prepare_run, train_one


def measure(defense: str, preset: str, setting: str, data_dir: str | None, models: int) -> list[str]:
    """Train ``models`` models per sample-level canary type of one setting; one table row per type."""
    overrides = parse_set_options(shlex.split(setting))
    overrides.update({"defense": defense, "run.level": "sample", "run.workers": 1})
    if data_dir:
        overrides["data.path"] = data_dir
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        overrides["run.out"] = tmp
        cfg = build_config(preset, overrides)
        prep = prepare_run(cfg)
        for level in prep.levels:
            ld = prep.run.load_level(level)
            stats, t0 = [], time.perf_counter()
            for i in range(models):
                meta = train_one(TrainJob(str(prep.run.path), level, i))
                served = prep.run.read_signals(level, i).arrays["logits"]  # (C, A, K)
                correct = served.argmax(-1) == ld.canaries.y[:, None]  # (C, A)
                member = ld.design.membership[i].astype(bool)
                stats.append([correct[member, 0].mean(), correct[~member, 0].mean(),
                              correct[member].mean(), correct[~member].mean(), meta["test_accuracy"]])
            per_model = (time.perf_counter() - t0) / models
            fin, fout, ain, aout, acc = np.mean(stats, axis=0)
            rows.append(f"| `{setting or '(preset)'}` | {level} | {100 * fin:.1f}% | {100 * fout:.1f}% | "
                        f"{100 * ain:.1f}% | {100 * aout:.1f}% | {100 * acc:.1f}% | {per_model:.0f} s |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("settings", nargs="*", default=[""], help='e.g. "train.model=cnn train.epochs=60"')
    ap.add_argument("--defense", default="hamp")
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--models", type=int, default=2, help="models trained per setting and canary type")
    args = ap.parse_args()
    if args.models < 1:
        sys.exit("--models must be at least 1")
    print(f"{args.defense} at preset {args.preset}, {args.models} model(s) per row\n")
    print("| setting | level | fit in | fit out | all queries in | all queries out | test acc | per model |")
    print("|---|---|---|---|---|---|---|---|")
    for setting in args.settings:
        try:
            for row in measure(args.defense, args.preset, setting, args.data_dir, args.models):
                print(row, flush=True)
        except ConfigError as e:
            sys.exit(f"setting {setting!r}: {e}")


if __name__ == "__main__":
    main()
