"""The audit bracket's lower bounds where the truth is known, and on one-run DP-SGD audits.

    python benchmarks/bench_bracket.py [--canaries 250,1000] [--mus 0.5,1,2,4] [--runs 100] [--seed 0]
    python benchmarks/bench_bracket.py --train [--preset quick] [--canaries 1000] [--kinds mislabeled,blank,ood]
                                       [--shadows 0] [--out runs/bench-bracket]

1. No training (about 0.3 s per simulated run at m = 1000 on 2 shared cores): the mu-GDP mechanism
   (each canary's score mu b + N(0, 1), b its fair coin: exactly mu-GDP with respect to every canary),
   ``--runs`` one-run audits per (m, mu). For each 95% lower bound, each run's own statement at its
   own level (harness.bounds.fdp_one_run.per_victim_bounds; harness.bounds.gdp.gdp_lower_bound_roc):
   the share of runs where it exceeds the truth (must be <= 5%) and its mean as a fraction of the
   truth (mu for the f-DP and GDP bounds, the Gaussian mechanism's epsilon at delta 1e-5 for the
   epsilons), and for contrast the uncorrected point estimate of the GDP reading.
2. ``--train``: ``harness audit-one-run DEFENSE --canaries M --canary KIND [--shadows K] --json`` for
   each canary kind (DP-SGD at the preset; each target trains once, models are reused on a re-run):
   the target's test accuracy and the bracket's numbers.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

DELTA = 1e-5


def simulate(ms: list[int], mus: list[float], runs: int, seed: int) -> None:
    from harness.bounds.fdp_one_run import per_victim_bounds
    from harness.bounds.gdp import gdp_epsilon, gdp_lower_bound_roc

    print(f"Known truth: the mu-GDP mechanism, {runs} one-run audits per row, 95% bounds, delta {DELTA:g}; "
          "'over': share of runs where the bound exceeds the truth; 'mean/truth': the bound's mean over the truth")
    print("| m | mu | ε (δ=1e-5) | f-DP μ: over, mean/truth | f-DP ε: mean/truth | Steinke ε: over, mean/truth | "
          "GDP μ (Bonferroni): over, mean/truth | GDP μ (split): over, mean/truth | GDP point estimate: over | s/run |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m in ms:
        for mu in mus:
            rng = np.random.default_rng(np.random.SeedSequence([seed, m, int(mu * 1000)]))
            b = rng.random((runs, m)) < 0.5
            s = mu * b + rng.standard_normal((runs, m))
            t0 = time.perf_counter()
            mu_f, eps_s = per_victim_bounds(s, b, delta=DELTA)
            eps_f = np.array([gdp_epsilon(x, DELTA) for x in mu_f])
            g = [gdp_lower_bound_roc(s[i], b[i], delta=DELTA) for i in range(runs)]
            gs = [gdp_lower_bound_roc(s[i], b[i], delta=DELTA, correction="split", seed=i) for i in range(runs)]
            per = (time.perf_counter() - t0) / runs
            e = gdp_epsilon(mu, DELTA)
            gm, gsm, pt = (np.array([x.mu for x in g]), np.array([x.mu for x in gs]), np.array([x.mu_point for x in g]))
            print(f"| {m} | {mu:g} | {e:.2f} | {np.mean(mu_f > mu):.0%}, {mu_f.mean() / mu:.2f} | {eps_f.mean() / e:.2f} | "
                  f"{np.mean(eps_s > e):.0%}, {eps_s.mean() / e:.2f} | {np.mean(gm > mu):.0%}, {gm.mean() / mu:.2f} | "
                  f"{np.mean(gsm > mu):.0%}, {gsm.mean() / mu:.2f} | {np.mean(pt > mu):.0%} | {per:.2f} |", flush=True)


def train(preset: str, defense: str, canaries: int, kinds: list[str], shadows: int, out: str, seed: int) -> None:
    print(f"One-run DP audits: {defense} ({preset}), {canaries} canaries, {shadows} shadow models, seed {seed}")
    print("| canary | attack | target test acc | accountant ε | PLD ε | Steinke ε ≥ | f-DP: rules out μ < (that μ-GDP's ε) "
          "| GDP, nominal: μ < (ε) | TPR@1% (provable ≤) | claimed PLD ε / Steinke ε | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for kind in kinds:
        cmd = [sys.executable, "-m", "harness.cli", "audit-one-run", defense, "--preset", preset, "--canaries",
               str(canaries), "--canary", kind, "--shadows", str(shadows), "--seed", str(seed), "--out", out, "--json"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            print(f"| {kind} | failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode} |")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        br = r["bracket"]
        lo = {lb["key"]: lb for lb in br["lower"]}
        c = br["claimed"]
        tpr1 = br["attack"]["tpr_at_fpr"]["0.01"]
        curve = dict(zip(c["tpr_curve"]["fpr"], c["tpr_curve"]["tpr"]))
        up = min((v for f, v in curve.items() if f >= 0.01 - 1e-12), default=float("nan"))
        ratio = br["ratio_pld"]
        ratio_text = "∞" if ratio in (float("inf"), "Infinity") else f"{ratio:.3g}x"
        print(f"| {kind} | {br['attack']['variant']} | {100 * r['target']['test_accuracy']:.1f}% | "
              f"{c['epsilon_rdp']:.3g} | {c['epsilon_pld']:.3g} | {lo['steinke']['epsilon']:.3g} | "
              f"{lo['fdp']['mu']:.3g} ({lo['fdp']['epsilon_of_mu']:.3g}) | {lo['gdp']['mu']:.3g} "
              f"({lo['gdp']['epsilon_of_mu']:.3g}) | "
              f"{100 * tpr1:.1f}% ({100 * up:.1f}%) | {ratio_text} | "
              f"{time.perf_counter() - t0:.0f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--canaries", default=None, help="simulation: comma-separated m (default 250,1000); --train: one m "
                    "(default 1000)")
    ap.add_argument("--mus", default="0.5,1,2,4")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--defense", default="dpsgd-medium")
    ap.add_argument("--kinds", default="mislabeled,blank,ood")
    ap.add_argument("--shadows", type=int, default=0)
    ap.add_argument("--out", default=str(Path("runs") / "bench-bracket"))
    a = ap.parse_args()
    if a.train:
        train(a.preset, a.defense, int(a.canaries or 1000), a.kinds.split(","), a.shadows, a.out, a.seed)
    else:
        simulate([int(x) for x in (a.canaries or "250,1000").split(",")], [float(x) for x in a.mus.split(",")],
                 a.runs, a.seed)


if __name__ == "__main__":
    main()
