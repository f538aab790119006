"""Time one shadow model's training and the attack phase for the quick and cifar10 presets.

    python benchmarks/bench_core.py [--cifar-dir ../shared/data/cifar10-subset] [--device cpu] [--repeats 1]

Training: one model of the preset (the first sample-level model: all non-audit samples plus its
member canaries), timed from ``Defense.fit`` to the served model, then the signal queries.
Attack phase: every attack variant of the preset plus the metrics with bootstrap CIs, on logits of
the shape the preset's S models produce (S x C x A x K); the attack cost depends on shapes only.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from attacks.base import AttackInput
from defenses.base import FitContext
from harness.defense_config import build_config
from harness.core.data import load_dataset
from harness.run.attack_set import attack_names, load_attacks
from harness.core.metrics import evaluate_scores
from harness.run.runner import build_level, collect_signals, make_defense, model_seed, training_set


def bench_training(cfg, repeats: int) -> dict[str, float]:
    data = load_dataset(cfg.data, cfg.seed)
    ld = build_level(cfg, data, "sample", "mislabeled")
    train = training_set(data, ld, 0)
    defense = make_defense(cfg)
    fit_s, query_s = [], []
    for r in range(repeats):
        t0 = time.perf_counter()
        served = defense.fit(train, FitContext(seed=model_seed(cfg.seed, r), device=cfg.run.device,
                                               train=cfg.train))
        t1 = time.perf_counter()
        collect_signals(served, cfg, defense, ld.canaries.x, data.augment, data.x_test[ld.population_indices])
        served.query(data.x_test)
        query_s.append(time.perf_counter() - t1)
        fit_s.append(t1 - t0)
    return {"train_size": len(train), "fit_s": float(np.median(fit_s)), "query_s": float(np.median(query_s)),
            "num_queries": len(data.augment.query_offsets()), "num_classes": data.num_classes}


def bench_attacks(cfg, num_queries: int, num_classes: int) -> dict[str, float]:
    s, c = cfg.audit.models, cfg.audit.size
    rng = np.random.default_rng(0)
    membership = np.zeros((s, c), bool)
    for i in range(c):
        membership[rng.permutation(s)[: s // 2], i] = True
    logits = rng.normal(size=(s, c, num_queries, num_classes)).astype(np.float32)
    logits[..., 0] += 2.0 * membership[:, :, None]
    z = cfg.audit.population_samples
    pop = rng.normal(size=(s, z, num_queries, num_classes)).astype(np.float32)
    inp = AttackInput(signals={"logits": logits, "population_logits": pop}, labels=np.zeros(c, np.int64),
                      membership=membership, population_labels=np.zeros(z, np.int64))
    t0 = time.perf_counter()
    variants = 0
    for attack in load_attacks(attack_names(cfg, make_defense(cfg)), cfg.attack.params):
        for scores in attack.score(inp).values():
            evaluate_scores(scores, membership, np.ones(c, bool), cfg.attack.fprs, bootstrap=cfg.attack.bootstrap,
                            confidence=cfg.attack.confidence, seed=0)
            variants += 1
    return {"attack_s": time.perf_counter() - t0, "variants": variants}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cifar-dir", default=str(Path(__file__).resolve().parents[1].parent / "shared/data/cifar10-subset"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for preset, extra in (("quick", {}), ("cifar10", {"data.path": args.cifar_dir})):
        cfg = build_config(preset, {**extra, "run.device": args.device})
        tr = bench_training(cfg, args.repeats)
        at = bench_attacks(cfg, tr["num_queries"], tr["num_classes"])
        levels = 2
        rows.append((preset, cfg, tr, at, levels))
    print(f"device={args.device} torch threads={args.threads} torch={torch.__version__}")
    print(f"{'preset':8} {'model':8} {'epochs':>6} {'train n':>7} {'fit s':>8} {'query s':>8} "
          f"{'S':>3} {'C':>4} {'variants':>8} {'attack s':>9} {'serial est. evaluate s':>22}")
    for preset, cfg, tr, at, levels in rows:
        total = levels * (cfg.audit.models * (tr["fit_s"] + tr["query_s"]) + at["attack_s"])
        print(f"{preset:8} {cfg.train.model:8} {cfg.train.epochs:>6} {tr['train_size']:>7} {tr['fit_s']:>8.2f} "
              f"{tr['query_s']:>8.2f} {cfg.audit.models:>3} {cfg.audit.size:>4} {at['variants']:>8} "
              f"{at['attack_s']:>9.2f} {total:>22.0f}")


if __name__ == "__main__":
    main()
