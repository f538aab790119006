"""The level figures where the truth is known: the headline test's size and power, the coverage of
every printed interval, and the issue-44 runs through `harness evaluate`.

    python benchmarks/bench_headline_test.py [--sims 1000] [--cover-sims 300] [--seeds 20] [--out runs/headline]
                                             [--parts size,power,coverage,shadows,rules,skew,runs] [--audit-draws 1]

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
4. **shadows**: why the declared CI covers less at large designs: the same toy's leave-one-out LiRA
   (per-sample Gaussians fitted on the victim's S - 1 shadows) beside LiRA with the toy's true
   per-sample Gaussians (no shadows), one variant: the Monte Carlo SD of the figure over the
   bootstrap's SD, and the declared CI's coverage, over several draws of audit samples.
5. **rules**: the declared CI's rule (harness.core.figure.interval: symmetric, the larger of the
   bootstrap's and the delete-one-victim jackknife's SD) beside the expanded percentile interval it
   replaced and two other widenings of it (symmetric with the percentile's larger arm; the
   percentile's arms scaled by max(1, jackknife SD / bootstrap SD)), one variant with and without
   tied scores, over several draws of audit samples.
6. **skew**: one exact LiRA variant at 32 x 400, 0.1% FPR, with the toy's victims and with equal
   victims (no per-model offset or noise scale): the bootstrap's 2.5% and 97.5% points about the
   TPR and the TPR's own about the truth, both in bootstrap SDs.
7. **runs** (`harness evaluate`, the quick preset, plugins in benchmarks/headline_plugins.py): the
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

from harness.audit.calibration import Variants, coverage, flag_rate, ratio_coverage, truth
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
    from harness.audit.calibration import ToyWorld

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
              headline: float = 0.001, audit_draws: int = 1) -> None:
    """``widening`` c: the intervals' threshold factor sqrt(1 + c/k) in place of the harness's c = 1
    (:func:`harness.core.figure.threshold_factor`), to see what a wider rule would cover;
    ``headline``: the headline FPR (the reported FPRs from it up), to read with more expected false
    positives; ``audit_draws``: the draws of audit samples (toy worlds) a row's ``sims`` runs are
    split over (the figures are conditional on the audit samples, and coverage varies by draw: one
    draw's coverage is that draw's, not the design's)."""
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
    spreads = []
    for s, c in rows or tuple((s, c) for s in (16, 32, 64) for c in (50, 200)):
        seeds = [s * 7 + c + 1000 * w for w in range(audit_draws)]
        each = max(1, sims // audit_draws)
        cvs = [coverage(cfg, each, models=s, samples=c, variants=Variants((1.0,) * 8), seed=sd) for sd in seeds]
        rcs = [ratio_coverage(cfg, each, models=s, samples=c, seed=sd) for sd in seeds]

        def avg(get) -> float:
            return float(np.mean([get(cv) for cv in cvs]))

        with_ratio = sum(rc[3] for rc in rcs)
        ratio_cov = sum(rc[0] * rc[3] for rc in rcs if rc[3]) / with_ratio if with_ratio else float("nan")
        print(f"| {s} x {c} | {100 * cvs[0].fpr:g}% | {100 * avg(lambda v: v.rows['truth_declared']):.1f}% | "
              f"{100 * avg(lambda v: v.declared_mean):.1f}% | {100 * avg(lambda v: v.declared_covers):.1f}% "
              f"({100 * avg(lambda v: v.declared_below):.1f}%) | {100 * avg(lambda v: v.old_covers):.1f}% | "
              f"{100 * avg(lambda v: v.leak_mean):.1f}% (truth {100 * avg(lambda v: v.truth):.1f}%) | "
              f"{100 * avg(lambda v: v.leak_lower_covers):.1f}% | {100 * ratio_cov:.1f}% ({with_ratio}) |", flush=True)
        if audit_draws > 1:
            spreads.append(f"{s} x {c}: declared {100 * min(v.declared_covers for v in cvs):.0f}-"
                           f"{100 * max(v.declared_covers for v in cvs):.0f}%, leak bound "
                           f"{100 * min(v.leak_lower_covers for v in cvs):.0f}-{100 * max(v.leak_lower_covers for v in cvs):.0f}%")
    if spreads:
        print(f"\nEach row pools {audit_draws} draws of audit samples ({max(1, sims // audit_draws)} runs each; "
              "the estimand is conditional on them, so each draw has its own truth); coverage by draw: "
              + "; ".join(spreads))


def shadows(sims: int, rows: tuple[tuple[int, int, float], ...], audit_draws: int) -> None:
    """Leave-one-out LiRA (its shadows' fits shared by every victim) against LiRA with the toy's true
    per-sample Gaussians (no fit), at each (S, C, FPR) of ``rows``: the victim bootstrap resamples
    victims, so it cannot see noise that every victim's scores share."""
    from harness.audit.calibration import ToyWorld, lira_loo
    from harness.core.figure import interval
    from harness.core.metrics import evaluate_scores, weighted_tpr_plotting

    print(f"\n## 4. Shadows: leave-one-out LiRA vs the true per-sample Gaussians ({audit_draws} draws of audit "
          f"samples x {sims} runs per row, 400 bootstrap replicates, one variant)\n")
    print("| S x C | FPR (k) | scores | Monte Carlo SD / bootstrap SD (by draw) | declared 95% CI covers (truth below it) |")
    print("|---|---|---|---|---|")
    for s, c, t in rows:
        k = t * s * c / 2
        for name in ("leave-one-out", "true Gaussians"):
            hits, below, ratios = [], [], []
            for w in range(audit_draws):
                world = ToyWorld.draw(c, 1 + w)
                var = world.u_sd ** 2 + world.e_sd ** 2 * np.exp(2 * world.scale_sd ** 2)

                def score(x: np.ndarray, mem: np.ndarray, world: ToyWorld = world, var: float = var) -> np.ndarray:
                    if name == "leave-one-out":
                        return lira_loo(x, mem)
                    m_c = world.memorization[None]  # log N(x; d + m, var) - log N(x; d, var)
                    return m_c * (x - world.difficulty[None]) / var - m_c ** 2 / (2 * var)

                rng = np.random.default_rng([w, 99])
                pooled = [world.outputs(s, rng) for _ in range(200)]
                truth_t = float(weighted_tpr_plotting(np.concatenate([score(x, m).ravel() for x, m in pooled])[None],
                                                      np.concatenate([m.ravel() for _, m in pooled])[None], [t],
                                                      np.ones((1, 1)))[t][0])
                est, sds = [], []
                for i in range(sims):
                    x, mem = world.outputs(s, np.random.default_rng([w, i, 2]))
                    m = evaluate_scores(score(x, mem), mem, np.ones(c, bool), [t], bootstrap=400, confidence=0.95,
                                        seed=i, reading_fprs=(t,))
                    reps = np.asarray(m.reading_samples[t]).ravel()
                    lo, hi = interval(m.reading[t], reps, s, 0.95, k, jackknife=m.reading_jackknife[t])
                    hits.append(lo <= truth_t <= hi)
                    below.append(truth_t < lo)
                    est.append(m.reading[t])
                    sds.append(np.nanstd(reps, ddof=1))
                ratios.append(np.std(est) / np.mean(sds))
            print(f"| {s} x {c} | {100 * t:g}% ({k:.1f}) | {name} | {np.mean(ratios):.3f} "
                  f"({', '.join(f'{r:.2f}' for r in ratios)}) | {100 * np.mean(hits):.1f}% ({100 * np.mean(below):.1f}%) |",
                  flush=True)


def rules(sims: int, rows: tuple[tuple[int, int, float], ...], audit_draws: int) -> None:
    """Coverage of the declared CI's rule and of three alternatives (module docstring, part 5) on the
    same runs: one leave-one-out LiRA variant, exact scores (noise 0) and tied ones (noise 0.5 on a
    grid of 0.5)."""
    from harness.audit.calibration import ToyWorld
    from harness.core.figure import expanded_level, interval, jackknife_sd, threshold_factor
    from harness.core.metrics import evaluate_scores

    names = ("harness: symmetric, larger of bootstrap and jackknife SD", "expanded percentile (the rule replaced)",
             "symmetric, the percentile's larger arm", "percentile x max(1, jackknife / bootstrap SD)")
    print(f"\n## 5. Rules for the declared CI ({audit_draws} draws of audit samples x {sims} runs per row, 400 bootstrap "
          "replicates, one variant): covers (truth below it)\n")
    print("| S x C | FPR (k) | scores | MC SD / bootstrap SD | MC SD / jackknife SD | " + " | ".join(names) + " |")
    print("|---|---|---|---|---|" + "---|" * len(names))
    for s, c, t in rows:
        k = t * s * c / 2
        f = threshold_factor(k)
        for label, variants in (("exact", Variants((0.0,))), ("tied", Variants((0.5,), ties=True))):
            hits = {n: [] for n in names}
            r_boot, r_jack = [], []
            for w in range(audit_draws):
                world = ToyWorld.draw(c, 1 + w)
                truth_t = truth(world, s, variants, [t], worlds=300)[t]
                est, sd_b, sd_j = [], [], []
                for i in range(sims):
                    rng = np.random.default_rng([w, i, 2])
                    x, mem = world.outputs(s, rng)
                    sc = variants.scores(x, mem, rng)[0]
                    m = evaluate_scores(sc, mem, np.ones(c, bool), [t], bootstrap=400, confidence=0.95, seed=i,
                                        reading_fprs=(t,))
                    th = m.reading[t]
                    reps = np.asarray(m.reading_samples[t]).ravel()
                    sb = float(np.std(reps, ddof=1))
                    jk = m.reading_jackknife[t]
                    sj = jackknife_sd(jk)
                    ql, qh = np.quantile(reps, [expanded_level(0.025, s), 1 - expanded_level(0.025, s)])
                    lo, hi = th - f * max(th - ql, 0.0), th + f * max(qh - th, 0.0)  # the rule replaced
                    arm, g = max(th - lo, hi - th), max(1.0, sj / sb) if sb > 0 else 1.0
                    for n, (a, b) in zip(names, (interval(th, reps, s, 0.95, k, jackknife=jk), (max(0.0, lo), min(1.0, hi)),
                                                 (th - arm, th + arm), (th - g * (th - lo), th + g * (hi - th)))):
                        hits[n].append((a <= truth_t <= b, truth_t < a))
                    est.append(th)
                    sd_b.append(sb)
                    sd_j.append(sj)
                r_boot.append(np.std(est) / np.mean(sd_b))
                r_jack.append(np.std(est) / np.mean(sd_j))
            cells = " | ".join(f"{100 * np.mean([h for h, _ in hits[n]]):.1f}% ({100 * np.mean([b for _, b in hits[n]]):.1f}%)"
                               for n in names)
            print(f"| {s} x {c} | {100 * t:g}% ({k:.1f}) | {label} | {np.mean(r_boot):.3f} | {np.mean(r_jack):.3f} | {cells} |",
                  flush=True)


def skew(sims: int, audit_draws: int, s: int = 32, c: int = 400, t: float = 0.001) -> None:
    """Where the percentile interval's asymmetry comes from (module docstring, part 6)."""
    from dataclasses import replace

    from harness.audit.calibration import ToyWorld
    from harness.core.metrics import evaluate_scores

    print(f"\n## 6. Skew at {s} x {c}, {100 * t:g}% FPR ({audit_draws} draws x {sims} runs, one exact LiRA variant)\n")
    print("| victims | bootstrap's 2.5% / 97.5% points about the TPR (its SDs) | the TPR's own 2.5% / 50% / 97.5% about the truth (bootstrap SDs) |")
    print("|---|---|---|")
    for label, kw in (("the toy's (an offset and a noise scale per model)", {}), ("equal", {"u_sd": 0.0, "scale_sd": 0.0})):
        boot_lo, boot_hi, pivot = [], [], []
        for w in range(audit_draws):
            world = replace(ToyWorld.draw(c, 1 + w), **kw)
            variant = Variants((0.0,))
            truth_t = truth(world, s, variant, [t], worlds=300)[t]
            for i in range(sims):
                rng = np.random.default_rng([w, i, 2])
                x, mem = world.outputs(s, rng)
                m = evaluate_scores(variant.scores(x, mem, rng)[0], mem, np.ones(c, bool), [t], bootstrap=400,
                                    confidence=0.95, seed=i, reading_fprs=(t,))
                reps = np.asarray(m.reading_samples[t]).ravel()
                sd = float(np.std(reps, ddof=1))
                q = np.quantile((reps - m.reading[t]) / sd, [0.025, 0.975])
                boot_lo.append(q[0])
                boot_hi.append(q[1])
                pivot.append((m.reading[t] - truth_t) / sd)
        p = np.quantile(pivot, [0.025, 0.5, 0.975])
        print(f"| {label} | {np.mean(boot_lo):+.2f} / {np.mean(boot_hi):+.2f} | {p[0]:+.2f} / {p[1]:+.2f} / {p[2]:+.2f} |", flush=True)


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


def srows_of(text: str) -> tuple[tuple[int, int, float], ...]:
    """``16x200@0.002,...`` as (S, C, FPR) rows."""
    return tuple((int(r.split("x")[0]), int(r.split("x")[1].split("@")[0]), float(r.split("@")[1]))
                 for r in text.split(",") if r)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=1000, help="simulations per size cell (K = 2)")
    ap.add_argument("--power-sims", type=int, default=200)
    ap.add_argument("--cover-sims", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("runs/headline"))
    ap.add_argument("--parts", default="size,power,coverage,runs", help="which parts: size, power, coverage, shadows, rules, skew, runs")
    ap.add_argument("--threshold-widening", type=float, default=1.0,
                    help="coverage part: the threshold factor sqrt(1 + c/k) with this c (the harness: 1)")
    ap.add_argument("--rows", default="", help="coverage part: S x C rows, e.g. 64x200,16x50 (default: all six)")
    ap.add_argument("--headline-fpr", type=float, default=0.001,
                    help="coverage part: the headline FPR (default 0.1%%); larger reads more expected false positives")
    ap.add_argument("--shadow-rows", default="16x200@0.002,32x400@0.001,32x200@0.01,64x200@0.001,64x200@0.005,64x50@0.01",
                    help="shadows part: S x C @ FPR rows")
    ap.add_argument("--rule-rows", default="16x50@0.01,16x200@0.002,64x50@0.002,32x200@0.01,32x400@0.001,64x200@0.001",
                    help="rules part: S x C @ FPR rows")
    ap.add_argument("--shadow-sims", type=int, default=150, help="shadows, rules and skew parts: runs per draw of audit samples")
    ap.add_argument("--shadow-draws", type=int, default=6, help="shadows, rules and skew parts: draws of audit samples per row")
    ap.add_argument("--audit-draws", type=int, default=1,
                    help="coverage part: split each row's runs over this many draws of audit samples (default 1)")
    a = ap.parse_args()
    parts = set(a.parts.split(","))
    t0 = time.time()
    if "size" in parts:
        size(a.sims)
    if "power" in parts:
        power(a.power_sims)
    if "coverage" in parts:
        rows = tuple(tuple(int(v) for v in r.split("x")) for r in a.rows.split(",") if r)
        coverages(a.cover_sims, a.threshold_widening, rows, a.headline_fpr, a.audit_draws)
    if "shadows" in parts:
        shadows(a.shadow_sims, srows_of(a.shadow_rows), a.shadow_draws)
    if "rules" in parts:
        rules(a.shadow_sims, srows_of(a.rule_rows), a.shadow_draws)
    if "skew" in parts:
        skew(a.shadow_sims, a.shadow_draws)
    if "runs" in parts:
        runs(a.out, a.seeds)
    print(f"\n({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
