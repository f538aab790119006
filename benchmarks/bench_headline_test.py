"""The headline statistics where the truth is known: false alarms, power, bias and coverage.

    python benchmarks/bench_headline_test.py [--sims 300] [--seeds 20] [--out runs/headline] [--parts test,coverage,runs]

1. Synthetic scores (harness.audit.calibration; 20 x 100 and the quick preset's 32 x 200 victim
   models x audit samples, 500 bootstrap replicates, FPRs 0.1% and 1%): how often the headline test
   (Hansen's SPA) fires when no variant beats the headline (no signal, and K equally strong
   variants), next to the rule it replaces (the plain maximum's percentile-bootstrap CI lower limit
   above the headline's TPR at the headline FPR); and its power against one stronger variant.
2. K equally strong variants: the true best TPR at 1% FPR against the cross-fitted figure and the
   plain maximum: mean, CI coverage, and how often the maximum's whole CI lies above the truth.
3. `harness evaluate` at the quick preset: the no-signal plugin (benchmarks/headline_plugins.py:
   RandomLogits, seeded noise logits) over ``--seeds`` seeds, counting warnings; and the plugin
   that declares only the threshold attack on undefended training (ThresholdOnly), seeds 0-2.

docs/protocol.md (Headlines) quotes its output.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from harness.audit.calibration import coverage, flag_rate, synthetic_candidates, true_tpr
from harness.audit.headline import fpr_key
from harness.core.metrics import select_from_samples
from harness.defense_config import build_config

PLUGINS = Path(__file__).resolve().parent / "headline_plugins.py"
SIZE = {"models": 20, "samples": 100}
QUICK = {"models": 32, "samples": 200}  # the quick preset's S and C


def old_rule_rate(cfg, sims: int, variants: int, mu: float, size: dict) -> float:
    """The rule before the headline test: flag when the plain maximum's CI (re-making the choice in
    every replicate) has its lower limit above the headline's TPR at the headline FPR."""
    k, hits = fpr_key(0.001), 0
    for i in range(sims):
        c = cfg.model_copy(update={"seed": i})
        cands = synthetic_candidates(c, [mu] * variants, np.random.default_rng([0, i]), folds=False, **size)
        best = max(cands, key=lambda x: (x.entry["tpr_at_fpr"][k], x.entry["tpr_at_fpr"]["0.0"], x.entry["auc"]))
        lo = select_from_samples([x.samples for x in cands], [0.0, 0.001, 0.01], select_at=0.001,
                                 confidence=0.95).ci[0.001][0]
        head = cands[0].entry["tpr_at_fpr"][k]
        hits += best.entry["tpr_at_fpr"][k] > head and lo > head
    return hits / sims


def synthetic(sims: int, parts: set[str]) -> None:
    cfg = build_config("quick", {"attack.bootstrap": 500, "attack.fprs": [0.001, 0.01]})
    if "test" in parts:
        test_rates(cfg, sims)
    if "coverage" in parts:
        coverages(cfg, sims)


def test_rates(cfg, sims: int) -> None:
    print(f"## 1. The headline test on synthetic scores ({sims} simulations per row, 500 bootstrap replicates, "
          f"alpha = {cfg.attack.alpha}, FPRs 0.1% and 1%)\n")
    print("| S x C | variants K | signal | headline test fires | old rule fires (200 sims) |")
    print("|---|---|---|---|---|")
    for size in (SIZE, QUICK):
        for k, mu in ((2, 0.0), (8, 0.0), (20, 0.0), (2, 1.5), (20, 1.5)):
            r = flag_rate(cfg, sims, variants=k, mu=mu, **size)
            old = old_rule_rate(cfg, 200, k, mu, size)
            print(f"| {size['models']} x {size['samples']} | {k} | {'none' if mu == 0 else f'all equal (mu {mu})'} | "
                  f"{100 * r.rate:.1f}% | {100 * old:.1f}% |")
    print(f"\nPower ({sims} simulations per row; S x C {QUICK['models']} x {QUICK['samples']}): the headline and 18 "
          "variants at mu 1.5, one variant stronger\n")
    print("| the stronger variant's mu | its TPR@1% vs the headline's (truth) | headline test fires |")
    print("|---|---|---|")
    for mu in (1.75, 2.0, 2.5):
        r = flag_rate(cfg, sims, variants=20, mu=1.5, stronger=mu, **QUICK)
        print(f"| {mu} | {100 * true_tpr(mu, 0.01, 0.5):.1f}% vs {100 * true_tpr(1.5, 0.01, 0.5):.1f}% | "
              f"{100 * r.rate:.1f}% |")


def coverages(cfg, sims: int) -> None:
    print(f"\n## 2. K equally strong variants (mu 2): true best TPR at 1% FPR vs the figures ({min(sims, 200)} "
          f"simulations; S x C {SIZE['models']} x {SIZE['samples']})\n")
    print("| K | truth | cross-fitted mean | its CI covers | plain max mean | its CI covers | its CI wholly above |")
    print("|---|---|---|---|---|---|---|")
    for k in (1, 8, 24):
        c = coverage(cfg, min(sims, 200), variants=k, mu=2.0, fpr=0.01, **SIZE)
        print(f"| {k} | {100 * c.truth:.1f}% | {100 * c.crossfit_mean:.1f}% | {100 * c.crossfit_coverage:.0f}% | "
              f"{100 * c.max_mean:.1f}% | {100 * c.max_coverage:.0f}% | {100 * c.max_above:.0f}% |")


def runs(out: Path, seeds: int) -> None:
    from harness_cli import evaluate_into

    from harness.core import jsonio

    print("\n## 3. `harness evaluate` at the quick preset\n")
    print("| plugin | seed | warning | p population | p sample | sample headline | strongest (cross-fitted) | "
          "optimistic max |")
    print("|---|---|---|---|---|---|---|---|")
    fired = {"RandomLogits": 0, "ThresholdOnly": 0}
    for cls, n in (("RandomLogits", seeds), ("ThresholdOnly", 3)):
        for seed in range(n):
            run_dir, _ = evaluate_into(out / f"{cls}-{seed}", f"{PLUGINS}:{cls}", "--seed", str(seed))
            r = jsonio.loads((Path(run_dir) / "results.json").read_text())
            t = r["headline_test"]["levels"]
            s = r["sample"]
            k = fpr_key(r["headline_fpr"])
            fired[cls] += bool(r.get("warnings"))
            print(f"| {cls} | {seed} | {'yes' if r.get('warnings') else 'no'} | {t['population']['p_value']:.3f} | "
                  f"{t['sample']['p_value']:.3f} | {100 * s['best']['tpr_at_fpr'][k]:.1f}% | "
                  f"{100 * s['strongest']['tpr_at_fpr'][k]:.1f}% | "
                  f"{100 * s['strongest']['optimistic_max']['tpr_at_fpr'][k]:.1f}% |")
    print(f"\nRandomLogits: warnings in {fired['RandomLogits']} of {seeds} seeds; "
          f"ThresholdOnly: flagged in {fired['ThresholdOnly']} of 3.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("runs/headline"))
    ap.add_argument("--parts", default="test,coverage,runs", help="which parts to run: test, coverage, runs")
    a = ap.parse_args()
    parts = set(a.parts.split(","))
    synthetic(a.sims, parts)
    if "runs" in parts:
        runs(a.out, a.seeds)


if __name__ == "__main__":
    main()
