"""The level figures where the truth is known: the headline test's size and power, the coverage of
every printed interval, and the issue-44 runs through `harness evaluate`.

    python benchmarks/bench_headline_test.py [--sims 1000] [--cover-sims 300] [--seeds 20] [--out runs/headline]
                                             [--parts size,power,coverage,runs]

1. **size** (harness.audit.calibration: the leave-one-out LiRA toy with heterogeneous victims): how
   often the headline test fires when no variant beats the declared headline (the least favourable
   null: K - 1 variants exactly as strong, K = 2 and 8), at S = 8, 16, 32, 64 models and C = 20, 50,
   200 samples per victim, with and without tied scores; beside it the same test with Hansen's own
   centring at the observed difference (what the calibration replaced).
2. **power**: one variant without the declared headline's noise among K = 8 (its TPR about 1.5x at
   1% FPR), at S = 16, 32, 64.
3. **coverage**: at S = 16, 32, 64 and C = 50, 200: the declared headline's 95% CI (one variant), the
   leak's one-sided 95% lower bound (the best of 8 equal variants) and its point, and the ratio's
   95% CI; the paper's reading with its percentile interval (the rule it replaced) beside them.
4. **runs** (`harness evaluate`, the quick preset, plugins in benchmarks/headline_plugins.py): the
   no-signal plugin over ``--seeds`` seeds (warnings counted); undefended training declaring only
   the threshold attack at 16 and 32 models, and undefended training declaring LiRA at the same
   sizes: flagged or not, and whether the leak (the ranked figure) is the same.

docs/protocol.md (Headlines) quotes its output.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from harness.audit.calibration import Variants, coverage, flag_rate, ratio_coverage
from harness.defense_config import build_config

PLUGINS = Path(__file__).resolve().parent / "headline_plugins.py"


def _wilson(p: float, n: int) -> str:
    z = 1.96
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return f"[{100 * (c - h):.1f}, {100 * (c + h):.1f}]"


def size(sims: int) -> None:
    import harness.core.spa as spa

    cfg = build_config("quick", {"attack.bootstrap": 200, "attack.fprs": [0.001, 0.01]})
    print(f"## 1. Size: the headline test under the least favourable null ({sims} simulations per cell, "
          "200 bootstrap replicates, alpha 5%; [Wilson 95%])\n")
    print("| S | C | ties | K = 2 | K = 8 | K = 2, Hansen's centring (replaced) | comparisons untestable (K = 2) |")
    print("|---|---|---|---|---|---|---|")
    real = spa.spa_test
    pooled = []
    for s in (8, 16, 32, 64):
        for c in (20, 50, 200):
            for ties in (False, True):
                seed = s * 1000 + c + ties
                two = flag_rate(cfg, sims, models=s, samples=c, variants=Variants((1.0, 1.0), ties), seed=seed)
                eight = flag_rate(cfg, sims // 4, models=s, samples=c, variants=Variants((1.0,) * 8, ties), seed=seed)
                spa.spa_test = lambda *a, **k: real(*a, **{**k, "recentre": "observed"})
                try:
                    old = flag_rate(cfg, sims // 2, models=s, samples=c, variants=Variants((1.0, 1.0), ties), seed=seed)
                finally:
                    spa.spa_test = real
                pooled.append(two.rate)
                print(f"| {s} | {c} | {'yes' if ties else 'no'} | {100 * two.rate:.1f}% {_wilson(two.rate, sims)} | "
                      f"{100 * eight.rate:.1f}% ({sims // 4}) | {100 * old.rate:.1f}% ({sims // 2}) | "
                      f"{100 * two.untestable:.0f}% |", flush=True)
    print(f"\nPooled K = 2: {100 * np.mean(pooled):.2f}% over {len(pooled) * sims} simulations.")


def power(sims: int) -> None:
    from harness.audit.calibration import ToyWorld, truth

    cfg = build_config("quick", {"attack.bootstrap": 200, "attack.fprs": [0.001, 0.01]})
    print(f"\n## 2. Power: one variant without the declared headline's noise among 8 ({sims} simulations)\n")
    print("| S x C | its TPR vs the declared headline's at 1% FPR (truth) | the test fires |")
    print("|---|---|---|")
    for s, c in ((16, 100), (32, 100), (64, 100)):
        seed = 7 + s
        w = ToyWorld.draw(c, seed)
        strong = truth(w, s, Variants((0.0,)), [0.01], worlds=150)[0.01]
        weak = truth(w, s, Variants((2.0,)), [0.01], worlds=150)[0.01]
        r = flag_rate(cfg, sims, models=s, samples=c, variants=Variants((2.0,) * 7 + (0.0,)), seed=seed)
        print(f"| {s} x {c} | {100 * strong:.1f}% vs {100 * weak:.1f}% ({strong / weak:.2f}x) | "
              f"{100 * r.rate:.1f}% {_wilson(r.rate, sims)} |", flush=True)


def coverages(sims: int, widening: float = 1.0, rows: tuple[tuple[int, int], ...] = (),
              headline: float = 0.001) -> None:
    """``widening`` c: the intervals' threshold factor sqrt(1 + c/k) in place of the harness's c = 1
    (:func:`harness.core.figure.threshold_factor`), to see what a wider rule would cover;
    ``headline``: the headline FPR (the reported FPRs from it up), to read with more expected false
    positives."""
    import harness.core.figure as figure

    if widening != 1.0:
        figure.threshold_factor = lambda k: 1.0 if not k else float(np.sqrt(1 + widening / max(float(k), 1.0)))
        print(f"\n(threshold factor sqrt(1 + {widening:g}/k), not the harness's sqrt(1 + 1/k))")
    fprs = [f for f in (0.001, 0.002, 0.005, 0.01, 0.02, 0.05) if f >= headline]
    cfg = build_config("quick", {"attack.bootstrap": 400, "attack.fprs": fprs})
    if headline != 0.001:
        print(f"\n(headline FPR {100 * headline:g}%: reported FPRs {', '.join(f'{100 * f:g}%' for f in fprs)})")
    print(f"\n## 3. Coverage at the figure FPR ({sims} simulations per row, 400 bootstrap replicates; 8 equally "
          "strong variants)\n")
    print("| S x C | figure FPR | truth | declared mean | declared 95% CI covers (truth below it) | paper reading's "
          "percentile CI covers | leak point mean | leak 95% lower bound holds | ratio 95% CI covers (runs with a ratio) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s, c in rows or tuple((s, c) for s in (16, 32, 64) for c in (50, 200)):
        seed = s * 7 + c
        cv = coverage(cfg, sims, models=s, samples=c, variants=Variants((1.0,) * 8), seed=seed)
        rc = ratio_coverage(cfg, sims, models=s, samples=c, seed=seed)
        print(f"| {s} x {c} | {100 * cv.fpr:g}% | {100 * cv.rows['truth_declared']:.1f}% | "
              f"{100 * cv.declared_mean:.1f}% | {100 * cv.declared_covers:.1f}% ({100 * cv.declared_below:.1f}%) | "
              f"{100 * cv.old_covers:.1f}% | {100 * cv.leak_mean:.1f}% (truth {100 * cv.truth:.1f}%) | "
              f"{100 * cv.leak_lower_covers:.1f}% | {100 * rc[0]:.1f}% ({rc[3]}) |", flush=True)


def runs(out: Path, seeds: int) -> None:
    from harness_cli import evaluate_into

    from harness.core import jsonio

    print("\n## 4. `harness evaluate` at the quick preset\n")
    warned = 0
    for seed in range(seeds):
        run_dir, _ = evaluate_into(out / f"RandomLogits-{seed}", f"{PLUGINS}:RandomLogits", "--seed", str(seed))
        r = jsonio.loads((Path(run_dir) / "results.json").read_text())
        warned += bool(r.get("warnings"))
        ps = [r[lv]["figure"]["flag"]["p_value"] for lv in ("population", "sample")]
        print(f"RandomLogits seed {seed}: warning {'yes' if r.get('warnings') else 'no'}, p {ps[0]:.3f} / {ps[1]:.3f}, "
              f"sample leak {100 * r['sample']['figure']['leak']['tpr']:.2f}% at "
              f"{100 * r['sample']['figure']['fpr']:g}% FPR", flush=True)
    print(f"\nRandomLogits: warnings in {warned} of {seeds} seeds.\n")
    print("| defense (declared) | models | sample figure FPR | declared headline | leak (ranked) | flag (adjusted p, "
          "comparison) |")
    print("|---|---|---|---|---|---|")
    for models in (16, 32):
        for spec, label in (("undefended", "undefended (lira)"), (f"{PLUGINS}:ThresholdOnly", "threshold-only")):
            run_dir, _ = evaluate_into(out / f"{label.split()[0]}-{models}", spec, "--models", str(models))
            r = jsonio.loads((Path(run_dir) / "results.json").read_text())
            f = r["sample"]["figure"]
            d, lk, fl = f["declared"], f["leak"], f["flag"]
            top = fl.get("top") or {}
            comp = (f"{top['name']} {100 * top['tpr']:.1f}% vs {100 * top['headline_tpr']:.1f}% at "
                    f"{100 * top['fpr']:g}% FPR" if fl["flagged"] else "-")
            print(f"| {label} | {models} | {100 * f['fpr']:g}% | {100 * d['tpr']:.1f}% {[round(100 * v, 1) for v in d['ci']]} "
                  f"| {100 * lk['tpr']:.1f}% (>= {100 * lk['lower']:.1f}), {lk['name']} | "
                  f"{'yes' if fl['flagged'] else 'no'} (p = {fl['p_value']:.3f}) {comp} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=1000, help="simulations per size cell (K = 2)")
    ap.add_argument("--power-sims", type=int, default=200)
    ap.add_argument("--cover-sims", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("runs/headline"))
    ap.add_argument("--parts", default="size,power,coverage,runs", help="which parts: size, power, coverage, runs")
    ap.add_argument("--threshold-widening", type=float, default=1.0,
                    help="coverage part: the threshold factor sqrt(1 + c/k) with this c (the harness: 1)")
    ap.add_argument("--rows", default="", help="coverage part: S x C rows, e.g. 64x200,16x50 (default: all six)")
    ap.add_argument("--headline-fpr", type=float, default=0.001,
                    help="coverage part: the headline FPR (default 0.1%%); larger reads more expected false positives")
    a = ap.parse_args()
    parts = set(a.parts.split(","))
    t0 = time.time()
    if "size" in parts:
        size(a.sims)
    if "power" in parts:
        power(a.power_sims)
    if "coverage" in parts:
        rows = tuple(tuple(int(v) for v in r.split("x")) for r in a.rows.split(",") if r)
        coverages(a.cover_sims, a.threshold_widening, rows, a.headline_fpr)
    if "runs" in parts:
        runs(a.out, a.seeds)
    print(f"\n({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
