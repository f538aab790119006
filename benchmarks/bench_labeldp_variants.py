"""AGIBI's two posteriors and the label-flip game's three estimators, side by side.

    python benchmarks/bench_labeldp_variants.py [--epsilons 19,10,7,7.7,3.7] [--labels 100000] [--seed 0]
    python benchmarks/bench_labeldp_variants.py --train [--preset quick] [--canaries 200] [--seed 0]
                                                [--agibi 19,10,7] [--alibi 8,4,2.5] [--out runs/bench-labeldp-variants]

1. No training (about a second per epsilon): AGIBI's noisy labels ``onehot(y) + N(0, sigma^2)``
   (``defenses.labeldp.AGIBI.noisy_labels``, seed ``--seed``, ``--labels`` labels over 10 classes)
   and the mean soft-label mass on the true class under a uniform prior (before the model knows
   anything), with the derived posterior softmax(o / sigma^2 + log p) and the authors'
   softmax(o / sigma + log p). Under a uniform prior both have the same argmax; only the mass moves.
2. ``--train``: ``harness audit-one-run DEFENSE --set defense_params.epsilon=E [--set
   defense_params.posterior=P] --canaries N --seed SEED --json`` for AGIBI at each epsilon with both
   posteriors and ALIBI at each epsilon: the game model's test accuracy and the best lower bound of
   each of the three estimators on the same model (weighted: the paper's text; paper: the authors'
   code; clopper-pearson), uncorrected and Bonferroni-corrected.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch


def soft_label_mass(epsilons: list[float], n: int, seed: int) -> None:
    from defenses.labeldp import AGIBI

    print(f"AGIBI soft-label mass on the true class, uniform prior, {n} labels over 10 classes, noise seed {seed}")
    print("| label ε (delta 1e-5) | sigma | derived: softmax(o/σ² + log p) | authors: softmax(o/σ + log p) |")
    print("|---|---|---|---|")
    y = np.arange(n) % 10
    for eps in epsilons:
        rows = []
        for form in ("derived", "authors"):
            d = AGIBI(epsilon=eps, posterior=form)
            o = torch.from_numpy(d.noisy_labels(y, 10, seed)).double()
            soft = d.posterior(o, torch.full(o.shape, -math.log(10), dtype=torch.float64))
            rows.append(float(soft[torch.arange(n), torch.from_numpy(y)].mean()))
        print(f"| {eps:g} | {d.noise_scale():.3f} | {rows[0]:.3f} | {rows[1]:.3f} |")


def game(defense: str, eps: float, posterior: str | None, args: argparse.Namespace) -> tuple[dict, float]:
    from harness_cli import run_cli

    name = f"{defense}-eps{eps:g}" + (f"-{posterior}" if posterior else "") + f"-seed{args.seed}"
    extra = ["--set", f"defense_params.posterior={posterior}"] if posterior else []
    stdout, wall = run_cli("audit-one-run", defense, "--preset", args.preset, "--canaries", str(args.canaries),
                           "--seed", str(args.seed), "--set", f"defense_params.epsilon={eps}", *extra,
                           "--out", str(Path(args.out) / name), "--json")
    return json.loads(stdout.strip().splitlines()[-1]), wall


def estimators(args: argparse.Namespace) -> None:
    runs = [("agibi", float(e), p) for e in args.agibi.split(",") if e for p in ("derived", "authors")]
    runs += [("alibi", float(e), None) for e in args.alibi.split(",") if e]
    print(f"\nThe game's three estimators on one model each, preset {args.preset}, seed {args.seed}, "
          f"{args.canaries} canaries (best ε ≥ at the best tau / Bonferroni-corrected; paper: the authors' choice "
          "of tau)")
    print("| defense | label ε | posterior | game model acc | weighted ε ≥ (tau) | paper ε ≥ (tau), interval | "
          "clopper-pearson ε ≥ (tau) | wall |")
    print("|---|---|---|---|---|---|---|---|")
    for defense, eps, posterior in runs:
        r, wall = game(defense, eps, posterior, args)
        w, p, cp = r["weighted"], r["paper"], r["clopper-pearson"]
        cell = lambda g: f"{g['best_epsilon_lo']:.2f} / {g['best_epsilon_lo_bonferroni']:.2f} ({g['best_tau']})"
        print(f"| {defense} | {eps:g} | {posterior or '-'} | {100 * r['test_accuracy']:.1f}% | {cell(w)} | "
              f"{cell(p)}, {p['best_epsilon_lo']:.2f}-{p['best_epsilon_hi']:.2f} | {cell(cp)} | {wall:.0f} s |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epsilons", default="19,10,7,7.7,3.7")
    ap.add_argument("--labels", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0, help="the noise draw of part 1 and the models' seed of part 2")
    ap.add_argument("--train", action="store_true", help="also run audit-one-run for the three estimators")
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--canaries", type=int, default=200)
    ap.add_argument("--agibi", default="19,10,7")
    ap.add_argument("--alibi", default="8,4,2.5")
    ap.add_argument("--out", default="runs/bench-labeldp-variants")
    args = ap.parse_args()
    soft_label_mass([float(e) for e in args.epsilons.split(",")], args.labels, args.seed)
    if args.train:
        estimators(args)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
