"""Noise keyed to the input (docs/protocol.md, Input-keyed noise): the input-keyed check measured on
every built-in defense and on the plugin it is for, and the attack on that plugin.

    python benchmarks/bench_keyed_serving.py [--models 8] [--out runs/bench-keyed] [--defenses ...]
                                             [--skip-attack]

1. The check. ``harness evaluate DEFENSE --models S`` (quick preset, both levels, every canary
   experiment of the defense) for every built-in defense (bench_defenses.py's list), HAMP with one
   fixed masking image (``serving_plugins.py:HAMPFixedMask``: HAMP's rank masking made
   deterministic; HAMP itself draws a fresh image per query, which the random-serving check flags,
   so the keyed check never reads it) and the keyed-noise plugin at sigma 3 and 0.3
   (``serving_plugins.py:KeyedNoiseServing``). From every model's signals file (``serving`` in its
   metadata): the models checked, those found random, those the keyed check read and flagged, and the
   check's statistic (per model: the median over the 8 probe images x 4 copies of the largest
   log-probability difference between an image's answer and a copy's) as its largest value over the
   models and its median, beside the largest single pair's difference. The rule (KEYED_THRESHOLD)
   holds where every built-in stays below it and every keyed model above it.
2. The attack (unless --skip-attack). The keyed-noise plugin (sigma 3) at the quick preset, 32
   models, with its noise-free ablation (``lira-raw``): TPR at 0.1% and 1% FPR per level of LiRA on
   single answers (``lira``), of ``lira-averaged`` (the mean of R = 8 answers per view, each to a
   fresh copy one grey level off in 3 pixels), of the headline, and of ``lira-raw``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_defenses import DEFENSES, SUBSAMPLE  # noqa: E402
from harness_cli import evaluate_into  # noqa: E402

from harness.core import jsonio  # noqa: E402
from harness.run.runstore import RunDir  # noqa: E402
from harness.run.signals import KEYED_THRESHOLD  # noqa: E402

PLUGINS = Path(__file__).resolve().parent / "serving_plugins.py"
#: (label, harness evaluate arguments) beside the built-ins
PLUGIN_RUNS = [("hamp-fixed-mask (plugin)", [f"{PLUGINS}:HAMPFixedMask"]),
               ("keyed noise, sigma 3 (plugin)", [f"{PLUGINS}:KeyedNoiseServing"]),
               ("keyed noise, sigma 0.3 (plugin)", [f"{PLUGINS}:KeyedNoiseServing", "--set",
                                                     "defense_params.sigma=0.3"])]


def serving_records(run_dir: Path) -> list[dict]:
    """Every model's ``serving`` record, over every level of the run."""
    run = RunDir(run_dir)
    s = run.load_config().audit.models
    return [m["serving"] for lv in run.levels() for i in range(s)
            if (m := run.read_signals_meta(lv, i)) is not None and isinstance(m.get("serving"), dict)]


def check_row(label: str, recs: list[dict]) -> str:
    keyed_read = [r for r in recs if r.get("keyed") is not None]
    stats = np.array([r["perturbed_median_difference"] for r in keyed_read])
    pairs = np.array([r["perturbed_max_difference"] for r in keyed_read])
    fig = (f"{stats.max():9.4f} {np.median(stats):9.4f} {pairs.max():9.4f}" if len(stats) else
           f"{'-':>9} {'-':>9} {'-':>9}")
    return (f"{label:34s} {len(recs):6d} {sum(bool(r['random']) for r in recs):6d} {len(keyed_read):6d} "
            f"{sum(bool(r.get('keyed')) for r in recs):6d} {fig}")


def attack_rows(results: dict) -> list[str]:
    rows = []
    for lv in ("sample", "population"):
        level = results[lv]

        def fig(e: dict, k: str) -> str:
            ci = e.get("tpr_ci", {}).get(k)
            c = f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci and ci[0] == ci[0] else ""
            return (f"{100 * e['tpr_at_fpr'][k]:.1f}%{c}" if e.get("resolved", {}).get(k, True) else "unresolved")

        entries = [(f"{a} (primary)", next(e for e in level["attacks"] if e["name"] == a and e["primary"]))
                   for a in ("lira", "lira-averaged", "lira-raw")]
        entries.insert(2, ("headline", level["best"]))
        for name, e in entries:
            rows.append(f"  {lv:10s} {name:24s} TPR@0.1% {fig(e, '0.001'):22s} TPR@1% {fig(e, '0.01'):22s}"
                        f" ({e['name']}:{e['variant']})")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=int, default=8, help="S of the check's runs (models per level)")
    ap.add_argument("--out", default="runs/bench-keyed")
    ap.add_argument("--defenses", default=",".join(DEFENSES), help="built-in defenses, comma-separated")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--skip-attack", action="store_true", help="part 1 only")
    args = ap.parse_args()
    out = Path(args.out)
    print(f"1. the input-keyed check (threshold {KEYED_THRESHOLD} on the median difference), quick preset, "
          f"{args.models} models per level")
    print(f"{'defense':34s} {'models':>6s} {'random':>6s} {'read':>6s} {'keyed':>6s} {'max stat':>9s} "
          f"{'med stat':>9s} {'max pair':>9s}")
    runs = [(d, [d, *(SUBSAMPLE if d == "subsample" else ())]) for d in args.defenses.split(",") if d]
    for label, cli in runs + PLUGIN_RUNS:
        folder = out / "check" / "-".join(a.rpartition(":")[2].replace("=", "-") for a in cli if a != "--set")
        run_dir, _ = evaluate_into(folder, *cli, "--models", str(args.models), "--workers", str(args.workers))
        print(check_row(label, serving_records(run_dir)), flush=True)
    if args.skip_attack:
        return
    run_dir, wall = evaluate_into(out / "attack", f"{PLUGINS}:KeyedNoiseServing", "--set",
                                  "attack.names=[lira,rmia,threshold,lira-raw]", "--workers", str(args.workers))
    results = jsonio.loads((run_dir / "results.json").read_text())
    print(f"\n2. the attack: keyed noise sigma 3, quick preset, {results['num_models']} models ({run_dir.name}; "
          f"{wall:.0f} s); test accuracy {100 * results['population']['test_accuracy']['mean']:.1f}% (population), "
          f"{100 * results['sample']['test_accuracy']['mean']:.1f}% (sample); serving {results['serving']}")
    print("\n".join(attack_rows(results)))


if __name__ == "__main__":
    main()
