"""The antipodes of label-DP side by side: PATE-FM and ALIBI at comparable accuracy, each audited
with the label-flip memorization game (Malek et al., NeurIPS 2021, Table 2's comparison).

    python benchmarks/bench_antipodes.py [--pairs pate-fm-high:6,pate-fm-medium:1.3,pate-fm-low:0.7]
                                         [--preset quick] [--canaries 200] [--seed 0]
                                         [--out runs/bench-antipodes] [--evaluate]

For each pair LEVEL:EPS: ``harness audit-one-run LEVEL`` and ``harness audit-one-run alibi --set
defense_params.epsilon=EPS`` (one model each, the same label-flip canaries and seed), then one
Markdown table: the game model's test accuracy, PATE-FM's released-label accuracy, the claimed
label epsilon (PATE-FM: the data-independent RDP bound; ALIBI: its Laplace epsilon), PATE-FM's
data-dependent epsilon (not a DP guarantee), the game's 95% epsilon interval at its best tau
(the weighted ACGR game, as the paper reports it), the Bonferroni-corrected lower bound over the 50
taus, and the wall time. The default ALIBI epsilons are those whose game models came closest in
accuracy to the PATE-FM levels' at the quick preset (docs/defenses.md). ``--evaluate`` adds
``harness evaluate`` of each (MI with mislabeled canaries, LiRA) and its sample-level TPR@0.1%.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness_cli import run_cli


def audit(defense: str, args: argparse.Namespace, *extra: str) -> tuple[dict, float]:
    tag = "-".join([defense, *[e.split("=")[-1] for e in extra if "=" in e]])
    stdout, wall = run_cli("audit-one-run", defense, "--preset", args.preset, "--canaries", str(args.canaries),
                           "--seed", str(args.seed), "--out", str(Path(args.out) / f"{tag}-one-run"), "--json", *extra)
    return json.loads(stdout.strip().splitlines()[-1]), wall


def row(name: str, res: dict, wall: float, mi: str | None) -> tuple[str, bool]:
    info = res.get("defense_info") or {}
    w = res["weighted"]
    best = max(w["rows"], key=lambda r: r["epsilon_lo"])
    claimed = res["label_epsilon"]
    ens = f"{100 * info['ensemble_accuracy']:.1f}% of {info['queries_answered']}" if "ensemble_accuracy" in info else "-"
    dep = f"{info['label_epsilon_data_dependent']:.3g}" if "label_epsilon_data_dependent" in info else "-"
    cells = [name, f"{100 * res['test_accuracy']:.1f}%", ens, f"{claimed:.3g}", dep,
             f"{best['epsilon_lo']:.2f}-{best['epsilon_hi']:.2f} (tau {best['tau']:.2f})",
             f"{w['best_epsilon_lo_bonferroni']:.2f}"]
    if mi is not None:
        cells.append(mi)
    cells.append(f"{wall:.0f} s")
    below = all(res[g]["best_epsilon_lo"] <= claimed for g in ("weighted", "paper", "clopper-pearson"))
    return "| " + " | ".join(cells) + " |", below


def evaluate(defense: str, args: argparse.Namespace, *extra: str) -> str:
    from bench_defenses import headline, run

    r, wall = run(defense, argparse.Namespace(out=str(Path(args.out) / "evaluate"), preset=args.preset,
                                              data_dir=None, workers=args.workers), *extra)
    return f"{headline(r['sample'])}, acc {100 * r['sample']['test_accuracy']['mean']:.1f}% ({wall:.0f} s)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", default="pate-fm-high:6,pate-fm-medium:1.3,pate-fm-low:0.7",
                    help="PATE-FM level:ALIBI label epsilon, comma-separated")
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--canaries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/bench-antipodes")
    ap.add_argument("--evaluate", action="store_true", help="also run harness evaluate (LiRA, mislabeled canaries)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    lines, below = [], []
    for pair in args.pairs.split(","):
        level, eps = pair.split(":")
        for name, defense, extra in ((level, level, ()),
                                     (f"alibi ε {float(eps):g}", "alibi", ("--set", f"defense_params.epsilon={eps}"))):
            res, wall = audit(defense, args, *extra)
            mi = evaluate(defense, args, *extra) if args.evaluate else None
            line, ok = row(name, res, wall, mi)
            lines.append(line)
            below.append(ok)
    head = ["defense", "game model acc", "released labels correct (PATE)", "claimed label ε",
            "data-dependent ε (PATE, not DP)", "game ε interval (best tau)", "game ε ≥ Bonferroni"]
    if args.evaluate:
        head.append("MI: sample TPR@0.1% (LiRA), acc")
    head.append("wall")
    print(f"preset {args.preset}, {args.canaries} label-flip canaries, seed {args.seed}")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    print("\n".join(lines))
    print(f"- every game lower bound (weighted, paper, Clopper-Pearson) <= its claimed label epsilon: {all(below)}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
