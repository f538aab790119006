"""Evaluate every built-in defense at one preset and print the README's results table.

    python benchmarks/bench_defenses.py [--preset quick] [--data-dir PATH] [--out runs/bench]
                                        [--defenses undefended,hamp,...] [--workers 2]

Runs ``harness evaluate DEFENSE`` (resuming finished runs) for each defense, plus SELENA with plain
mislabeled canaries for comparison with its duplicates canaries, then prints a Markdown table:
population-level vs sample-level TPR@0.1% FPR of the headline attacks, beside each the strongest figure
(every attack variant that ran, ``**!**`` where it beats the headline by more than its CI), the
sample/population ratio with its bootstrap CI, test accuracy, the DP
epsilon (or label-DP epsilon) where the defense records one, the one-run empirical epsilon lower
bound of the sample-level headline, RMIA's primary variant beside, and each run's own time (the prepare,
training and attack phases its results.json records from the invocations that trained it, so a resumed
run still shows what training it took; interpreter start-up excluded). Headlines are the best
primary variant of the defense's adaptive attacks with the selection-aware CI. The per-attack
sample-level figures of HAMP (label-only vs LiRA on the defended outputs), SELENA with plain
mislabeled canaries, DP-SGD's per-canary figures with uniform-noise canaries beside (and those of
``subsample``, which this script runs as ``--inner dpsgd-medium --rate 0.5``), and the SSL
defenses' white-box vs black-box attacks at 0.1% and 1% FPR follow.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness_cli import evaluate_into

from harness.audit.attack_phase import run_label_privacy, run_privacy

# ``--defenses subsample`` wraps DP-SGD (medium) and trains each model on a random half of the data
SUBSAMPLE = ("--inner", "dpsgd-medium", "--rate", "0.5")
DEFENSES = ["undefended", "hamp", "relaxloss", "selena", "dpsgd-medium", "dpsgd-high", "dpsgd-veryhigh", "ssl-simclr",
            "ssl-moco", "dfkd", "alibi"]


def run(defense: str, args: argparse.Namespace, *extra: str) -> tuple[dict, float]:
    out = Path(args.out) / (defense + ("-" + "-".join(e.strip("-") for e in extra) if extra else ""))
    data = ["--data-dir", args.data_dir] if args.data_dir else []
    run_dir, _ = evaluate_into(out, defense, "--preset", args.preset, "--workers", str(args.workers), *extra, *data)
    results = json.loads((run_dir / "results.json").read_text())
    return results, run_seconds(results)


def run_seconds(results: dict) -> float:
    """The run's own time: preparing and training (summed over the invocations that trained it) and
    its latest attack phase, from results.json's ``timings``."""
    t = results["timings"]
    return t.get("prepare_seconds", 0.0) + t.get("train_wall_seconds", 0.0) + t.get("attack_seconds", 0.0)


def pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def headline(level: dict, which: str = "best") -> str:
    """TPR@0.1% of the headline (or of the strongest figure) with its selection-aware CI, or 'unresolved'."""
    b = level[which]
    if not b["resolved"]["0.001"]:
        return "unresolved"
    lo, hi = b["tpr_ci"]["0.001"]
    return f"{pct(b['tpr_at_fpr']['0.001'])} [{100 * lo:.1f}, {100 * hi:.1f}]"


def strongest(level: dict) -> str:
    """The strongest figure (every attack variant that ran), its attack, and '!' where it beats the
    headline by more than its CI."""
    st = level["strongest"]
    flag = " **!**" if st["beats_headline"] else ""
    return f"{headline(level, 'strongest')} ({st['name']}:{st['variant']}){flag}"


def ratio(results: dict) -> str:
    """Sample / population headline ratio with its bootstrap CI, '-' without one."""
    r = results.get("sample_population_ratio") or {}
    if r.get("ratio") is None or not r.get("ci"):
        return "-"
    lo, hi = r["ci"]
    return f"{r['ratio']:.1f}x [{lo:.1f}, {'∞' if hi == float('inf') else f'{hi:.1f}'}]"


def primary(level: dict, attack: str) -> dict | None:
    return next((e for e in level["attacks"] if e["name"] == attack and e.get("primary")), None)


def primary_tpr(level: dict, attack: str, fpr: str = "0.001") -> str:
    e = primary(level, attack)
    return "-" if e is None else pct(e["tpr_at_fpr"][fpr])


def one_run_eps(level: dict) -> str:
    b = level["best"]
    e = next(a for a in level["attacks"] if a["name"] == b["name"] and a["variant"] == b["variant"])
    return f"{e['eps_lower_one_run']['epsilon']:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default="runs/bench")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--defenses", default=",".join(DEFENSES))
    args = ap.parse_args()
    rows, notes = [], []
    for d in args.defenses.split(","):
        extra = SUBSAMPLE if d == "subsample" else ()
        r, wall = run(d, args, *extra)
        pop, smp = r.get("population"), r.get("sample")
        eps = (run_privacy(r) or {}).get("epsilon")
        label_eps = (run_label_privacy(r) or {}).get("label_epsilon")
        eps_cell = f"{eps:.3g}" if eps is not None else f"label {label_eps:.3g}" if label_eps is not None else "-"
        rows.append(
            f"| {' '.join((d, *extra))} | {headline(pop)} | {strongest(pop)} | {headline(smp)} "
            f"({', '.join(smp.get('canaries', [smp['canary']]))}; headline from: {smp['canary']}, "
            f"{smp['best']['name']}, {smp['best'].get('access', 'black-box')}) | {strongest(smp)} | {ratio(r)} | "
            f"{primary_tpr(pop, 'rmia')} / {primary_tpr(smp, 'rmia')} | "
            f"{pct(pop['test_accuracy']['mean'])} | {pct(smp['test_accuracy']['mean'])} | "
            f"{eps_cell} | {one_run_eps(smp)} | {wall:.0f} s |"
        )
        if d == "hamp":
            notes.append(f"HAMP sample level, TPR@0.1% (primary variants): label-only {primary_tpr(smp, 'label-only')}, "
                         f"LiRA on defended outputs {primary_tpr(smp, 'lira')}, LiRA on raw outputs (ablation) "
                         f"{primary_tpr(smp, 'lira-raw')}")
        if d == "selena":
            m, wall_m = run(d, args, "--level", "sample", "--canary", "mislabeled")
            notes.append(f"SELENA sample level, TPR@0.1%: duplicates {pct(smp['best']['tpr_at_fpr']['0.001'])} vs "
                         f"plain mislabeled {pct(m['sample']['best']['tpr_at_fpr']['0.001'])} ({wall_m:.0f} s)")
        if d.startswith("ssl-"):
            for fpr in ("0.001", "0.01"):
                notes.append(f"{d}, TPR@{100 * float(fpr):g}% FPR (primary variants), population / sample by canary: "
                             + "; ".join(f"{name} ({primary(pop, name)['access']}) {primary_tpr(pop, name, fpr)} / "
                                         + ", ".join(f"{c} {primary_tpr(v, name, fpr)}"
                                                     for c, v in r["sample_by_canary"].items())
                                         for name in ("contrastive", "contrastive-blackbox", "lira", "lira-sslview", "rmia")))
        if extra:
            notes.append(f"{' '.join((d, *extra))} sample level, TPR@0.1% by canary: "
                         + ", ".join(f"{c} {pct(v['best']['tpr_at_fpr']['0.001'])}"
                                     for c, v in r["sample_by_canary"].items()))
        if d.startswith("dpsgd"):
            by = r["sample_by_canary"]
            u, wall_u = run(d, args, "--level", "sample", "--canary", "uniform")
            notes.append(f"{d} sample level, TPR@0.1% by canary: "
                         + ", ".join(f"{c} {pct(v['best']['tpr_at_fpr']['0.001'])}" for c, v in by.items())
                         + f"; uniform noise (not the paper's) {pct(u['sample']['best']['tpr_at_fpr']['0.001'])} "
                         f"({wall_u:.0f} s)")
    print(f"preset: {args.preset}")
    print("| defense | population TPR@0.1% [95% CI] | strongest, population | sample TPR@0.1% [95% CI] (canaries; "
          "headline from) | strongest, sample | sample / population [95% CI] | RMIA pop. / sample | test acc (pop.) | "
          "test acc (sample) | epsilon | one-run ε ≥ (sample) | wall |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    for n in notes:
        print(f"- {n}")


if __name__ == "__main__":
    main()
