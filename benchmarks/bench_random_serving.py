"""How to average the answers of a randomly serving model (docs/protocol.md, Random serving).

Reads a finished run of ``benchmarks/serving_plugins.py:NoisyServing`` that also saved the
noise-free outputs (``lira-raw`` among its attacks, so ``raw_logits`` were saved), e.g.

    harness evaluate benchmarks/serving_plugins.py:NoisyServing --set "attack.names=[lira,rmia,threshold,lira-raw]"
    python benchmarks/bench_random_serving.py RUN_DIR

and re-draws the plugin's noise (N(0, sigma^2) on every logit of every answer) on the plain query
of every audit sample, R answers at a time, averaged two ways: the mean of the answers'
log-probabilities (what ``logits_averaged`` holds) and the log of the mean of their probabilities.
For each, LiRA's primary variant for models trained without augmentation
(``online-logit-noaug-persample``), leave-one-out, as the attack phase runs it: TPR at the run's
FPRs and AUC per level, beside one answer (R = 1) and the noise-free outputs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attacks.base import AttackInput  # noqa: E402
from attacks.lira import LiRA  # noqa: E402
from harness.audit.attack_phase import load_level_signals  # noqa: E402
from harness.core.metrics import evaluate_scores  # noqa: E402
from harness.run.runstore import RunDir  # noqa: E402
from harness.run.signals import log_probabilities  # noqa: E402

VARIANT = "online-logit-noaug-persample"


def lira_figures(z: np.ndarray, labels: np.ndarray, membership: np.ndarray, evaluated: np.ndarray,
                 fprs: list[float]) -> dict[str, float]:
    """LiRA's ``VARIANT`` on outputs ``z`` (S, C, 1, K): TPR at each FPR and the AUC."""
    scores = LiRA().score(AttackInput(signals={"logits": z}, labels=labels, membership=membership))[VARIANT]
    m = evaluate_scores(scores, membership, evaluated, fprs, bootstrap=0, confidence=0.95, seed=0)
    return {**{f"TPR@{100 * f:g}%": m.tpr_at_fpr[f] for f in fprs}, "AUC": m.auc}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--repeats", default="1,4,8,16,32", help="R values, comma-separated")
    ap.add_argument("--seed", type=int, default=0, help="seed of the re-drawn noise")
    args = ap.parse_args()
    run = RunDir(args.run_dir)
    cfg = run.load_config()
    sigma = float(cfg.defense_params.get("sigma", 3.0))
    fprs = [f for f in cfg.attack.fprs if f >= 0.001]
    rng = np.random.default_rng(args.seed)
    print(f"{args.run_dir.name}: sigma {sigma}, {cfg.audit.models} models, LiRA {VARIANT}")
    for level in run.levels():
        ld = run.load_level(level)
        ls = load_level_signals(run, level, cfg.audit.models)
        if "raw_logits" not in ls.signals:
            raise SystemExit(f"{level}: no raw_logits saved; train the run with lira-raw among its attacks")
        raw = ls.signals["raw_logits"][:, :, :1].astype(np.float64)  # the plain query: (S, C, 1, K)
        args_ = (ld.canaries.y, ld.design.membership, ld.canaries.evaluated, fprs)
        rows = [("noise-free outputs", lira_figures(raw, *args_))]
        for r in (int(v) for v in args.repeats.split(",")):
            answers = [raw + rng.normal(0.0, sigma, raw.shape) for _ in range(r)]
            mean_logp = np.mean([log_probabilities(a) for a in answers], axis=0)
            mean_p = np.log(np.mean([np.exp(log_probabilities(a)) for a in answers], axis=0))
            rows.append((f"R = {r:2d}, mean log-probabilities", lira_figures(mean_logp, *args_)))
            if r > 1:
                rows.append((f"R = {r:2d}, mean probabilities", lira_figures(mean_p, *args_)))
        print(f"\n{level}")
        for name, figs in rows:
            print(f"  {name:36s} " + "  ".join(f"{k} {100 * v:5.1f}%" if k != "AUC" else f"AUC {v:.3f}"
                                                 for k, v in figs.items()))


if __name__ == "__main__":
    main()
