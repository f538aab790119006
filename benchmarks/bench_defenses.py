"""Evaluate every built-in defense at one preset and print the README's results table.

    python benchmarks/bench_defenses.py [--preset quick] [--data-dir PATH] [--out runs/bench]
                                        [--defenses undefended,hamp,...] [--workers 2]

Runs ``harness evaluate DEFENSE`` (resuming finished runs) for each defense, plus SELENA with plain
mislabeled canaries for comparison with its duplicates canaries, then prints a Markdown table:
population-level vs sample-level TPR@0.1% FPR of the headline attacks, test accuracy, the DP
epsilon where the defense records one, and the wall time of each command. The per-attack
sample-level figures of HAMP (label-only vs LiRA on the defended outputs) follow the table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from harness.evaluation import run_privacy

DEFENSES = ["undefended", "hamp", "relaxloss", "selena", "dpsgd-medium", "dpsgd-high", "dpsgd-veryhigh"]


def run(defense: str, args: argparse.Namespace, *extra: str) -> tuple[dict, float]:
    out = Path(args.out) / (defense + ("-" + "-".join(e.strip("-") for e in extra) if extra else ""))
    cmd = [sys.executable, "-m", "harness.cli", "evaluate", defense, "--preset", args.preset, "--out", str(out),
           "--workers", str(args.workers), *extra]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    (run_dir,) = [p for p in out.iterdir() if (p / "results.json").is_file()]
    return json.loads((run_dir / "results.json").read_text()), wall


def pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def best_of(level: dict, attack: str) -> float:
    return max(e["tpr_at_fpr"]["0.001"] for e in level["attacks"] if e["name"] == attack)


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
        r, wall = run(d, args)
        pop, smp = r.get("population"), r.get("sample")
        eps = (run_privacy(r) or {}).get("epsilon")
        rows.append(
            f"| {d} | {pct(pop['best']['tpr_at_fpr']['0.001'])} | {pct(smp['best']['tpr_at_fpr']['0.001'])} "
            f"({', '.join(smp.get('canaries', [smp['canary']]))}; best: {smp['canary']}, {smp['best']['name']}) | "
            f"{pct(pop['test_accuracy']['mean'])} | {pct(smp['test_accuracy']['mean'])} | "
            f"{'-' if eps is None else f'{eps:.3g}'} | {wall:.0f} s |"
        )
        if d == "hamp":
            notes.append(f"HAMP sample level, TPR@0.1%: label-only {pct(best_of(smp, 'label-only'))}, LiRA on "
                         f"defended outputs {pct(best_of(smp, 'lira'))}, LiRA on raw outputs (ablation) "
                         f"{pct(best_of(smp, 'lira-raw'))}")
        if d == "selena":
            m, wall_m = run(d, args, "--level", "sample", "--canary", "mislabeled")
            notes.append(f"SELENA sample level, TPR@0.1%: duplicates {pct(smp['best']['tpr_at_fpr']['0.001'])} vs "
                         f"plain mislabeled {pct(m['sample']['best']['tpr_at_fpr']['0.001'])} ({wall_m:.0f} s)")
    print(f"preset: {args.preset}")
    print("| defense | population TPR@0.1% | sample TPR@0.1% (canaries; strongest) | test acc (pop.) | "
          "test acc (sample) | epsilon | wall |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    for n in notes:
        print(f"- {n}")


if __name__ == "__main__":
    main()
