"""Noise keyed to the input (docs/protocol.md, Input-keyed noise): the input-keyed check measured on
every built-in defense and on the plugins it is for, the attack on those plugins, and the check's cost.

    python benchmarks/bench_keyed_serving.py [--models 8] [--out runs/bench-keyed] [--defenses ...]
                                             [--skip-attack] [--skip-cost]

1. The check. ``harness evaluate DEFENSE --models S`` (quick preset, both levels, every canary
   experiment of the defense) for every built-in defense (bench_defenses.py's list), HAMP with one
   fixed masking image (``serving_plugins.py:HAMPFixedMask``: HAMP's rank masking made
   deterministic; HAMP itself draws a fresh image per query, which the random-serving check flags,
   so the keyed check never reads it), the noise keyed to the image's bytes at sigma 3 and 0.3
   (``serving_plugins.py:KeyedNoiseServing``) and keyed to the image normalized and rounded
   (``serving_plugins.py:CoarseKeyedNoiseServing``: 1 decimal, about 10 grey levels per cell on
   digits, at sigma 3 and 0.3; 0 decimals, about 96 grey levels, at sigma 3). From every model's
   signals file (``serving`` in its metadata): the models checked, those found random, those the
   keyed check read and flagged; the statistic at one grey level (per model: the median over the 8
   probe images x 4 copies of the largest log-probability difference between an image's answer and
   a copy's) as its largest value over the models; the growth (per model: the largest ratio, over the
   scales asked, of a scale's median to its proportional extrapolation from the scale below; near 1
   for a smooth model) as its largest value over the models; the models whose answers changed (median
   above KEYED_THRESHOLD) further out than one grey level, and the smallest and largest jump there
   (that ratio at the scale where they changed: what the rule reads); the largest scale asked (64: the
   answers never changed); and the averaging scales of the flagged models. The rule holds where no
   built-in is flagged (every jump below KEYED_JUMP) and every keyed model is.
2. The attack (unless --skip-attack). Each keyed plugin at sigma 3 (bytes; 1 decimal) at the quick
   preset, 32 models, with its noise-free ablation (``lira-raw``): TPR at 0.1% and 1% FPR per level
   of LiRA on single answers (``lira``), of ``lira-averaged`` (the mean of R = 8 answers per view,
   each to a fresh copy at the scale the check found), of ``lira-raw``, and the level's leak (the
   ranked figure) with its one-sided 95% lower bound.
3. The cost (unless --skip-cost). ``check_serving`` timed on a network of each preset's architecture
   (random weights: the time does not depend on them) on 8 random images of its data's shape, smooth
   (every scale asked: the most the check asks) against one grey level only (issue 48's check), and
   the images the model's signals ask at the preset's sizes, for scale.
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
from harness.run.signals import KEYED_JUMP, KEYED_SCALES, KEYED_THRESHOLD  # noqa: E402

PLUGINS = Path(__file__).resolve().parent / "serving_plugins.py"
#: (label, harness evaluate arguments) beside the built-ins
PLUGIN_RUNS = [("hamp-fixed-mask (plugin)", [f"{PLUGINS}:HAMPFixedMask"]),
               ("keyed noise, sigma 3 (plugin)", [f"{PLUGINS}:KeyedNoiseServing"]),
               ("keyed noise, sigma 0.3 (plugin)", [f"{PLUGINS}:KeyedNoiseServing", "--set",
                                                     "defense_params.sigma=0.3"]),
               ("coarse key 1 dec., sigma 3 (plugin)", [f"{PLUGINS}:CoarseKeyedNoiseServing"]),
               ("coarse key 1 dec., sigma 0.3 (plugin)", [f"{PLUGINS}:CoarseKeyedNoiseServing", "--set",
                                                          "defense_params.sigma=0.3"]),
               ("coarse key 0 dec., sigma 3 (plugin)", [f"{PLUGINS}:CoarseKeyedNoiseServing", "--set",
                                                        "defense_params.decimals=0"])]
#: (label, plugin class) of part 2
ATTACK_RUNS = [("keyed noise (image bytes), sigma 3", "KeyedNoiseServing"),
               ("coarse key (1 decimal), sigma 3", "CoarseKeyedNoiseServing")]


def serving_records(run_dir: Path) -> list[dict]:
    """Every model's ``serving`` record, over every level of the run."""
    run = RunDir(run_dir)
    s = run.load_config().audit.models
    return [m["serving"] for lv in run.levels() for i in range(s)
            if (m := run.read_signals_meta(lv, i)) is not None and isinstance(m.get("serving"), dict)]


def check_row(label: str, recs: list[dict]) -> str:
    keyed_read = [r for r in recs if r.get("keyed") is not None]
    stats = np.array([r["perturbed_median_difference"] for r in keyed_read])
    growth = np.array([r["perturbed_growth"] for r in keyed_read if r.get("perturbed_growth") is not None])
    crossed = [r for r in keyed_read if any(m > KEYED_THRESHOLD for m in (r.get("perturbed_medians") or [])[1:])]
    jumps = [r["keyed_jump"] for r in crossed if r.get("keyed_jump") is not None]
    furthest = max((max(r.get("perturbed_scales") or [1]) for r in keyed_read), default=None)
    scales = sorted({r["keyed_scale"] for r in keyed_read if r.get("keyed")})
    fig = f"{stats.max():8.3f}" if len(stats) else f"{'-':>8}"
    fig += f" {growth.max():7.2f}" if len(growth) else f" {'-':>7}"
    fig += f" {len(crossed):7d} {min(jumps):7.2f} {max(jumps):7.2f}" if jumps else f" {len(crossed):7d} {'-':>7} {'-':>7}"
    fig += f" {furthest if furthest is not None else '-':>8} {','.join(map(str, scales)) or '-':>7}"
    return (f"{label:38s} {len(recs):6d} {sum(bool(r['random']) for r in recs):6d} {len(keyed_read):5d} "
            f"{sum(bool(r.get('keyed')) for r in recs):5d} {fig}")


def _tpr(e: dict, k: str) -> str:
    ci = e.get("tpr_ci", {}).get(k)
    c = f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci and all(isinstance(v, (int, float)) and v == v for v in ci) else ""
    return f"{100 * e['tpr_at_fpr'][k]:.1f}%{c}" if e.get("resolved", {}).get(k, True) else "unresolved"


def attack_rows(results: dict) -> list[str]:
    rows = []
    for lv in ("sample", "population"):
        level = results[lv]
        for a in ("lira", "lira-averaged", "lira-raw"):
            e = next(e for e in level["attacks"] if e["name"] == a and e["primary"])
            rows.append(f"  {lv:10s} {a + ' (primary)':24s} TPR@0.1% {_tpr(e, '0.001'):22s} TPR@1% {_tpr(e, '0.01'):22s}"
                        f" ({e['name']}:{e['variant']})")
        fig = level["figure"]
        leak = fig["leak"]
        rows.append(f"  {lv:10s} {'leak (ranked)':24s} {100 * leak['tpr']:.1f}% (>= {100 * leak['lower']:.1f}) at "
                    f"{100 * fig['fpr']:g}% FPR ({leak['name']}:{leak['variant']})")
    return rows


def cost_rows() -> list[str]:
    """check_serving timed on each preset's architecture (random weights), every scale against one."""
    import time

    import torch

    from defenses.base import TorchClassifier
    from defenses.models import build_model
    from harness.defense_config import build_config
    from harness.run import signals

    torch.manual_seed(0)
    torch.set_num_threads(1)  # as a local worker queries
    rows = []
    for preset, shape in (("quick", (1, 8, 8)), ("cifar10", (3, 32, 32)), ("paper", (3, 32, 32))):
        cfg = build_config(preset, {})
        net = build_model(cfg.train.model, shape, 10, cfg.train.width)
        served = TorchClassifier(net, (0.5,) * shape[0], (0.25,) * shape[0], "cpu")
        x = np.random.default_rng(0).integers(0, 256, (signals.SERVING_PROBE, *shape), dtype=np.uint8)
        times = {}
        for label, scales in (("every scale", KEYED_SCALES), ("one grey level", KEYED_SCALES[:1])):
            saved, signals.KEYED_SCALES = signals.KEYED_SCALES, scales
            try:
                signals.check_serving(served, x)  # warm up
                t0 = time.perf_counter()
                rec = signals.check_serving(served, x)
                times[label] = (time.perf_counter() - t0, len(rec["perturbed_scales"]))
            finally:
                signals.KEYED_SCALES = saved
        views = 18 if shape[0] == 3 else 9
        asked = (cfg.audit.size + cfg.audit.population_samples) * views
        (full, n_full), (one, _) = times["every scale"], times["one grey level"]
        images = (2 + signals.KEYED_COPIES * n_full) * signals.SERVING_PROBE
        rows.append(f"  {preset:8s} {cfg.train.model:8s} every scale ({n_full} asked, {images} images) {full:6.3f} s; one "
                    f"grey level {one:6.3f} s; added {full - one:6.3f} s per model, x {cfg.audit.models} models x 2 "
                    f"levels = {2 * cfg.audit.models * (full - one):6.1f} s per run; the signals ask about {asked} "
                    f"images per model (at this rate {asked * full / images:.1f} s: the check adds "
                    f"{100 * (full - one) * images / (asked * full):.1f}%)")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=int, default=8, help="S of the check's runs (models per level)")
    ap.add_argument("--out", default="runs/bench-keyed")
    ap.add_argument("--defenses", default=",".join(DEFENSES), help="built-in defenses, comma-separated")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--skip-check", action="store_true", help="skip part 1")
    ap.add_argument("--skip-attack", action="store_true", help="skip part 2")
    ap.add_argument("--skip-cost", action="store_true", help="skip part 3")
    args = ap.parse_args()
    out = Path(args.out)
    if not args.skip_check:
        print(f"1. the input-keyed check (scales {', '.join(map(str, KEYED_SCALES))} grey levels; the answers change "
              f"where the median difference exceeds {KEYED_THRESHOLD}; keyed where they change at 1, or further out "
              f"with a growth above {KEYED_JUMP}), quick preset, {args.models} models per level")
        print(f"{'defense':38s} {'models':>6s} {'random':>6s} {'read':>5s} {'keyed':>5s} {'stat@1':>8s} "
              f"{'growth':>7s} {'changed':>7s} {'min jump':>7s} {'max jump':>7s} {'furthest':>8s} {'scales':>7s}")
        runs = [(d, [d, *(SUBSAMPLE if d == "subsample" else ())]) for d in args.defenses.split(",") if d]
        for label, cli in runs + PLUGIN_RUNS:
            folder = out / "check" / "-".join(a.rpartition(":")[2].replace("=", "-") for a in cli if a != "--set")
            run_dir, _ = evaluate_into(folder, *cli, "--models", str(args.models), "--workers", str(args.workers))
            print(check_row(label, serving_records(run_dir)), flush=True)
    if not args.skip_attack:
        for label, cls in ATTACK_RUNS:
            run_dir, wall = evaluate_into(out / "attack" / cls, f"{PLUGINS}:{cls}", "--set",
                                          "attack.names=[lira,rmia,threshold,lira-raw]", "--workers", str(args.workers))
            results = jsonio.loads((run_dir / "results.json").read_text())
            scales = sorted({sc for lv in ("population", "sample") for sc in results[lv]["serving"]["keyed_scales"]})
            print(f"\n2. the attack: {label}, quick preset, {results['num_models']} models ({run_dir.name}; "
                  f"{wall:.0f} s); test accuracy {100 * results['population']['test_accuracy']['mean']:.1f}% "
                  f"(population), {100 * results['sample']['test_accuracy']['mean']:.1f}% (sample); serving "
                  f"{results['serving']}; averaged copies at {', '.join(map(str, scales))} grey level(s)")
            print("\n".join(attack_rows(results)), flush=True)
    if not args.skip_cost:
        print("\n3. the check's cost (check_serving, random weights, 8 random probe images, 1 thread)")
        print("\n".join(cost_rows()))


if __name__ == "__main__":
    main()
