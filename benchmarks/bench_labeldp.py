"""Label-DP (ALIBI / AGIBI) at several label epsilons: claimed epsilon vs empirical lower bounds.

    python benchmarks/bench_labeldp.py [--defense alibi] [--epsilons 8,4,2.5] [--preset quick]
                                       [--canaries 200] [--out runs/bench-labeldp] [--workers 2]

For each label epsilon E: ``harness evaluate DEFENSE --set defense_params.epsilon=E`` (population
and mislabeled-canary sample level; LiRA's one-run and nominal empirical epsilon lower bounds of the
sample-level headline) and ``harness audit-one-run DEFENSE --set defense_params.epsilon=E`` (the
label-flip memorization game on one model: the paper's weighted-ACGR game at its best tau, the same
with a Bonferroni correction over the 50 taus, and the Clopper-Pearson game). Prints a Markdown
table (the README's and docs/defenses.md's) and whether every lower bound stays below E and the
game's bound grows with E.

    python benchmarks/bench_labeldp.py --noise

prints AGIBI's noise at several label epsilons against the authors' conversion (docs/protocol.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench_defenses import headline, one_run_eps, pct, run
from harness_cli import run_cli


def audit(defense: str, eps: float, args: argparse.Namespace) -> tuple[dict, float]:
    out = Path(args.out) / f"{defense}-eps{eps:g}-one-run"
    data = ["--data-dir", args.data_dir] if args.data_dir else []
    stdout, wall = run_cli("audit-one-run", defense, "--preset", args.preset, "--canaries", str(args.canaries),
                           "--set", f"defense_params.epsilon={eps}", "--out", str(out), "--json", *data)
    return json.loads(stdout.strip().splitlines()[-1]), wall


def nominal_eps(level: dict) -> float:
    b = level["best"]
    e = next(a for a in level["attacks"] if a["name"] == b["name"] and a["variant"] == b["variant"])
    return float(e["eps_lower"]["epsilon"])


def noise(epsilons: list[float], delta: float = 1e-5) -> None:
    """AGIBI's noise at a nominal label epsilon: the harness's sigma (opacus 1.6's RDP-to-(eps, delta)
    conversion, Balle et al. 2020) against the authors' (opacus 0.x's classic conversion, Mironov
    2017: min over orders of rdp + log(1/delta)/(alpha - 1)), on the same RDP curve and orders."""
    import math

    import numpy as np

    from defenses.labeldp import RDP_ORDERS, _opacus_rdp, gaussian_sigma_for

    rdp = _opacus_rdp()

    def classic(sigma: float) -> float:
        r = np.asarray(rdp.compute_rdp(q=1.0, noise_multiplier=sigma / math.sqrt(2.0), steps=1, orders=list(RDP_ORDERS)))
        return float(np.min(r + math.log(1 / delta) / (np.asarray(RDP_ORDERS) - 1)))

    print(f"| label ε (δ = {delta:g}) | σ, harness (opacus 1.6) | σ, the authors' code (opacus 0.x) | less noise |")
    print("|---|---|---|---|")
    for eps in epsilons:
        mine = gaussian_sigma_for(eps, delta)
        lo, hi = math.log(1e-3), math.log(1e3)
        while hi - lo > 1e-7:
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if classic(math.exp(mid)) > eps else (lo, mid)
        theirs = math.exp(hi)
        print(f"| {eps:g} | {mine:.4f} | {theirs:.4f} | {100 * (1 - mine / theirs):.1f}% |")


def main() -> None:
    if "--noise" in sys.argv:
        noise([0.5, 1, 2, 4, 8, 16, 19, 32])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--defense", default="alibi")
    ap.add_argument("--epsilons", default="8,4,2.5")
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--canaries", type=int, default=200)
    ap.add_argument("--out", default="runs/bench-labeldp")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    rows, checks, game_eps = [], [], []
    for eps in [float(e) for e in args.epsilons.split(",")]:
        r, wall = run(args.defense, args, "--set", f"defense_params.epsilon={eps}")
        pop, smp = r["population"], r["sample"]
        g, wall_g = audit(args.defense, eps, args)
        w, cp = g["weighted"], g["clopper-pearson"]
        lira = [float(one_run_eps(smp)), nominal_eps(smp)]
        games = [w["best_epsilon_lo"], w["best_epsilon_lo_bonferroni"], cp["best_epsilon_lo"]]
        game_eps.append((eps, w["best_epsilon_lo"]))
        checks.append(all(v <= eps for v in lira + games))
        best_row = max(w["rows"], key=lambda x: x["epsilon_lo"])
        rows.append(
            f"| {eps:g} | {pct(smp['test_accuracy']['mean'])} | {headline(pop)} | {headline(smp)} | "
            f"{lira[0]:.2f} / {lira[1]:.2f} | {best_row['epsilon_lo']:.2f}-{best_row['epsilon_hi']:.2f} "
            f"(tau {best_row['tau']:.2f}) | {games[1]:.2f} | {games[2]:.2f} | {pct(g['test_accuracy'])} | "
            f"{wall:.0f} s + {wall_g:.0f} s |"
        )
    print(f"{args.defense}, preset {args.preset}, {args.canaries} game canaries")
    print("| label ε | test acc | population TPR@0.1% | sample TPR@0.1% (mislabeled) | LiRA ε ≥ one-run / nominal | "
          "game ε interval, paper's (best tau) | game ε ≥ Bonferroni | game ε ≥ Clopper-Pearson | game model acc | "
          "wall (evaluate + game) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    by_eps = [v for _, v in sorted(game_eps)]
    grows = all(a <= b for a, b in zip(by_eps, by_eps[1:]))
    print(f"- every lower bound <= its label epsilon: {all(checks)}; the paper's game bound grows with epsilon: {grows}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
