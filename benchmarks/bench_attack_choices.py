"""Measure the attack choices docs/protocol.md states: primary views, RMIA's gamma, balanced shadows.

    python benchmarks/bench_attack_choices.py [--out runs/choices] [--seeds 0,1,2]

For each seed, runs (or resumes) ``harness evaluate undefended`` at the quick preset and re-scores
the saved signals (no retraining) to print:

- LiRA's online logit variant on the plain query vs on all 9 views (the quick preset trains without
  augmentation), and per-sample vs global variance (32 models), population and sample level;
- RMIA (online, plain query) at gamma 2 (its default) and gamma 1 (the quick preset's), with the
  largest share of non-member guesses tied at one score, beside LiRA's primary, at 0.1% and 1% FPR;
- LiRA with all S - 1 shadows (the paper's) vs balanced shadows on a 6-model, 4-epoch run, where
  the shadow counts leak most (AUC of the primary variant).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from attacks.base import AttackInput
from attacks.lira import lira_scores
from attacks.rmia import label_log_prob, rmia_scores
from attacks.scores import logit_score
from harness.audit.attack_phase import load_level_signals
from harness.core.metrics import auc, roc_curve, tpr_at_fpr
from harness.run.runstore import RunDir
from harness_cli import evaluate_into


def evaluate(out: Path, *extra: str) -> RunDir:
    return RunDir(evaluate_into(out, "undefended", "--workers", "2", *extra)[0])


def level_input(run: RunDir, level: str) -> AttackInput:
    cfg = run.load_config()
    ld = run.load_level(level)
    ls = load_level_signals(run, level, cfg.audit.models)
    return AttackInput(ls.signals, ld.canaries.y, ld.design.membership,
                       population_labels=run.load_data().y_test[ld.population_indices])


def pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/choices")
    ap.add_argument("--seeds", default="0")
    args = ap.parse_args()
    print("TPR at the FPR of the last column; LiRA: online logit, plain query or 9 views, per-sample or global\n"
          "variance (the primary: plain query, per-sample); RMIA: online, plain query; (..): largest share of\n"
          "the non-member guesses tied at one score\n")
    print("| seed | level | LiRA plain, global | LiRA 9 views, global | LiRA plain, per-sample | "
          "RMIA gamma 2 (max tie) | RMIA gamma 1 (max tie) | FPR |")
    print("|---|---|---|---|---|---|---|---|")
    for seed in [int(s) for s in args.seeds.split(",")]:
        run = evaluate(Path(args.out) / f"quick-seed{seed}", "--seed", str(seed))
        for level in ("population", "sample-mislabeled"):
            inp = level_input(run, level)
            mem = inp.membership
            obs = logit_score(inp.signals["logits"], inp.labels)
            lira = {(q, g): roc_curve(lira_scores(o, mem, online=True, global_variance=g), mem)
                    for q, o in (("plain", obs[:, :, :1]), ("views", obs)) for g in (False, True)}
            lx = label_log_prob(inp.signals["logits"][:, :, :1], inp.labels, 2.0)
            lz = label_log_prob(inp.signals["population_logits"][:, :, :1], inp.population_labels, 2.0)
            rmia = {}
            for gamma in (2.0, 1.0):
                s = rmia_scores(lx, mem, lz, online=True, gamma=gamma, a=0.3)
                _, counts = np.unique(s[~mem], return_counts=True)
                rmia[gamma] = (roc_curve(s, mem), counts.max() / (~mem).sum())
            for fpr in (0.001, 0.01):
                print(f"| {seed} | {level} | {pct(tpr_at_fpr(lira[('plain', True)], fpr))} | "
                      f"{pct(tpr_at_fpr(lira[('views', True)], fpr))} | {pct(tpr_at_fpr(lira[('plain', False)], fpr))} | "
                      f"{pct(tpr_at_fpr(rmia[2.0][0], fpr))} ({pct(rmia[2.0][1])}) | "
                      f"{pct(tpr_at_fpr(rmia[1.0][0], fpr))} ({pct(rmia[1.0][1])}) | {100 * fpr:g}% |")
    small = evaluate(Path(args.out) / "quick-6models", "--models", "6", "--audit-size", "60", "--epochs", "4",
                     "--set", "train.width=64", "--set", "attack.bootstrap=50")
    print("\n6 models, 60 audit samples, 4 epochs: AUC of online-logit-aug9-persample LiRA")
    for level in ("population", "sample-mislabeled"):
        inp = level_input(small, level)
        obs = logit_score(inp.signals["logits"], inp.labels)
        a = {b: auc(roc_curve(lira_scores(obs, inp.membership, online=True, global_variance=False, balanced=b),
                              inp.membership)) for b in (False, True)}
        print(f"- {level}: all S - 1 shadows (the paper's) {a[False]:.3f}, balanced shadows {a[True]:.3f}")


if __name__ == "__main__":
    main()
