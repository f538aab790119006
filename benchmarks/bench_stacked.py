"""Stacked training (defenses/stacked.py) against one-at-a-time training: seconds per model by group
size, and how far float rounding carries over the quick preset's 40 epochs.

    python benchmarks/bench_stacked.py [--groups 4 8 16 32] [--models 32] [--repeats 3] [--alone 8]
    python benchmarks/bench_stacked.py --defense hamp --epochs 10 [--groups 4 8] [--models 8] [--alone 4]

Uses the quick preset's recipe and the population level's training sets (digits; model i gets the
run's seed for model i). Prints, per line: one model alone (1 thread); the median (min-max over the
repeats, the group sizes taking turns) seconds per model when the first --models models train in
groups of G (1 thread); the same for the default group size with 2 threads; then the largest logit
difference between 1- and 2-thread one-at-a-time training of the same model after 1 and 40 epochs
(the rounding SGD amplifies; docs/protocol.md, Determinism).

``--defense hamp`` (or ``relaxloss``, ``dpsgd-high``, ...) times that defense's recipe of ``--preset``
(default quick) instead, through its own ``fit`` one at a time and its ``fit_group`` in groups of G
(the grouped engine, defenses/grouped.py; DP-SGD's nested vmap, defenses/dpsgd_stacked.py), on one
thread, for ``--epochs`` epochs (default: the recipe's), and prints only those lines.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from typing import Any

import torch

from defenses.base import FitContext, Normalizer
from defenses.stacked import train_stacked
from defenses.training import init_network, train_classifier
from harness.defense_config import build_config
from harness.run.runner import AUTO_GROUP_SIZE, build_level, model_seed, training_set
from harness.core.data import load_dataset


def population_models(cfg, n: int) -> tuple[Any, list, list]:
    """The dataset and the first ``n`` population-level models' training sets and fit contexts, as a
    run builds them."""
    data = load_dataset(cfg.data, cfg.seed)
    ld = build_level(cfg, data, "population", "none")
    trains = [training_set(data, ld, i) for i in range(n)]
    ctxs = [FitContext(seed=model_seed(cfg.seed, i, cfg.audit.rng, cfg.audit.models), device="cpu", train=cfg.train)
            for i in range(n)]
    return data, trains, ctxs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, nargs="+", default=[4, 8, 16, 32])
    ap.add_argument("--alone", type=int, default=8, help="models timed one at a time")
    ap.add_argument("--models", type=int, default=32, help="models trained in groups of each size")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--defense", default="undefended", help="undefended (default), or a stackable defense: hamp, relaxloss, dpsgd-high, ...")
    ap.add_argument("--epochs", type=int, default=None, help="--defense: epochs (default: the recipe's)")
    ap.add_argument("--preset", default="quick", help="--defense: the preset (cifar10 needs --data-dir)")
    ap.add_argument("--data-dir", default=None, help="--defense: the data folder of --preset cifar10")
    args = ap.parse_args()
    if args.defense != "undefended":
        return defense_timings(args)
    cfg = build_config("quick")
    data, trains, ctxs = population_models(cfg, max(args.models, args.alone))

    def stacked(g: int) -> float:
        """Seconds per model, the first --models models trained in groups of g."""
        t0 = time.perf_counter()
        for lo in range(0, args.models, g):
            part = slice(lo, min(lo + g, args.models))
            train_stacked([init_network(t, c) for t, c in zip(trains[part], ctxs[part])], trains[part], ctxs[part])
        return (time.perf_counter() - t0) / args.models

    def spread(v: list[float]) -> str:
        return f"{statistics.median(v):.2f} s per model ({min(v):.2f}-{max(v):.2f})"

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    for t, c in zip(trains[: args.alone], ctxs[: args.alone]):
        train_classifier(init_network(t, c), t, c)
    print(f"alone, 1 thread: {(time.perf_counter() - t0) / max(args.alone, 1):.2f} s per model", flush=True)
    times: dict[int, list[float]] = {g: [] for g in args.groups}
    for _ in range(args.repeats):
        for g in args.groups:
            times[g].append(stacked(g))
    for g in args.groups:
        print(f"stacked by {g}, 1 thread: {spread(times[g])}", flush=True)
    torch.set_num_threads(2)
    two = [stacked(AUTO_GROUP_SIZE) for _ in range(args.repeats)]
    print(f"stacked by {AUTO_GROUP_SIZE} (the default), 2 threads: {spread(two)}", flush=True)

    x = Normalizer(data.mean, data.std, "cpu")(torch.from_numpy(data.x_test))
    for epochs in (1, cfg.train.epochs):
        c = FitContext(seed=ctxs[0].seed, device="cpu", train=cfg.train.model_copy(update={"epochs": epochs}))
        net = init_network(trains[0], c)
        out = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            out.append(train_classifier(copy.deepcopy(net), trains[0], c))
        with torch.no_grad():
            diff, scale = float((out[0](x) - out[1](x)).abs().max()), float(out[0](x).abs().max())
        print(f"{epochs} epoch(s), 1 vs 2 threads: max |logit difference| {diff:.3g} (max |logit| {scale:.3g})")


def defense_timings(args: argparse.Namespace) -> None:
    """Seconds per model of a defense's recipe (``--preset``): its ``fit`` alone against ``fit_group``."""
    from harness.plugins import make_defense

    over = {"defense": args.defense, **({"train.epochs": args.epochs} if args.epochs else {}),
            **({"data.path": args.data_dir} if args.data_dir else {})}
    cfg = build_config(args.preset, over)
    defense = make_defense(cfg)
    _, trains, ctxs = population_models(cfg, max(args.models, args.alone))
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    for t, c in zip(trains[: args.alone], ctxs[: args.alone]):
        defense.fit(t, c)
    epochs = defense.params.get("epochs", cfg.train.epochs)
    print(f"{args.defense} ({args.preset}, {cfg.train.model}), {epochs} epochs, alone, 1 thread: "
          f"{(time.perf_counter() - t0) / max(args.alone, 1):.2f} s per model", flush=True)
    for g in args.groups:
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for lo in range(0, args.models, g):
                defense.fit_group(trains[lo : min(lo + g, args.models)], ctxs[lo : min(lo + g, args.models)])
            times.append((time.perf_counter() - t0) / args.models)
        print(f"{args.defense} ({args.preset}, {cfg.train.model}), stacked by {g}, 1 thread: "
              f"{statistics.median(times):.2f} s per model "
              f"({min(times):.2f}-{max(times):.2f})", flush=True)


if __name__ == "__main__":
    main()
