"""Stacked training (defenses/stacked.py) against one-at-a-time training: seconds per model by group
size, and how far float rounding carries over the quick preset's 40 epochs.

    python benchmarks/bench_stacked.py [--groups 8 16 32] [--alone 8]

Uses the quick preset's recipe and the population level's training sets (digits; model i gets the
run's seed for model i). Prints, per line: one model alone (1 thread), stacked by G (1 thread), stacked
by 16 with 2 threads, then the largest logit difference between 1- and 2-thread one-at-a-time training
of the same model after 1 and 40 epochs (the rounding SGD amplifies; docs/protocol.md, Determinism).
"""

from __future__ import annotations

import argparse
import copy
import time

import torch

from defenses.base import FitContext, Normalizer
from defenses.stacked import train_stacked
from defenses.training import init_network, train_classifier
from harness.config import build_config
from harness.runner import build_level, model_seed, training_set
from harness.data import load_dataset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, nargs="+", default=[8, 16, 32])
    ap.add_argument("--alone", type=int, default=8, help="models timed one at a time")
    args = ap.parse_args()
    cfg = build_config("quick")
    data = load_dataset(cfg.data, cfg.seed)
    ld = build_level(cfg, data, "population", "none")
    n = max(*args.groups, args.alone, 16)
    trains = [training_set(data, ld, i) for i in range(n)]
    ctxs = [FitContext(seed=model_seed(cfg.seed, i, cfg.audit.rng, cfg.audit.models), device="cpu", train=cfg.train)
            for i in range(n)]

    def stacked(g: int) -> float:
        nets = [init_network(t, c) for t, c in zip(trains[:g], ctxs[:g])]
        t0 = time.perf_counter()
        train_stacked(nets, trains[:g], ctxs[:g])
        return (time.perf_counter() - t0) / g

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    for t, c in zip(trains[: args.alone], ctxs[: args.alone]):
        train_classifier(init_network(t, c), t, c)
    print(f"alone, 1 thread: {(time.perf_counter() - t0) / args.alone:.2f} s per model", flush=True)
    for g in args.groups:
        print(f"stacked by {g}, 1 thread: {stacked(g):.2f} s per model", flush=True)
    torch.set_num_threads(2)
    print(f"stacked by 16, 2 threads: {stacked(16):.2f} s per model", flush=True)

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


if __name__ == "__main__":
    main()
