"""The CNN head on the fixed scattering features beside the linear head (issue 66): the heuristic
defenses and DP-SGD's frontier on both heads, and is "a convex head on fixed features" why DP-SGD
protects less on cifar10-scatter than in the paper?

    python benchmarks/bench_cnn_head.py --data-dir ../shared/data/cifar10-subset --out runs/cnn
        [--stages tune,runs,throughput,table] [--models 16] [--defenses undefended,relaxloss,hamp]
        [--noises 0.3,1] [--cnn-lr LR] [--markdown]

Stages (each resumes: a finished run or tune is read back at no cost):

- ``tune``: ``harness tune undefended --preset cifar10-scatter --set train.model=scatter-cnn --grid
  train.lr=0.005,0.01,0.02,0.05 --models 64`` (the preset's 10 epochs; the CNN head's anchor is its
  recipe of best validation accuracy, as the linear head's is; the test set chooses nothing). Its
  choice is the CNN's ``train.lr`` in every later stage, unless ``--cnn-lr`` names one (on
  2026-12-07 the tune chose 0.02: docs/defenses.md, the CNN head);
- ``runs``: for each head (``scatter-linear`` at the preset's recipe, ``scatter-cnn`` at its anchor's
  lr) and each of ``--defenses``, ``harness evaluate DEFENSE --preset cifar10-scatter --set
  train.model=HEAD --models MODELS --canary mislabeled``; then for each of ``--noises``, ``harness
  evaluate dpsgd --set defense_params.noise_multiplier=NOISE`` the same way (the preset's ``dpsgd``
  recipe: clipping 0.1, batch 256, 30 epochs, lr 4, EMA 0.999; the same sampling rate, steps and
  noise give the same epsilon whatever the head). Every run has the same audit design (seed 0,
  mislabeled canaries), so the two heads' rows differ in the head only;
- ``throughput``: one model of each head and recipe (undefended, DP-SGD at the first noise) on the
  cached features of the 4 585-image pool, one thread: seconds and training images per second;
- ``table``: one row per run (test accuracy, the leak at both levels with lower bounds, epsilon);
  ``--markdown`` writes docs/results-cnn-head.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from harness_cli import run_cli

REPO = Path(__file__).resolve().parents[1]
PRESET = "cifar10-scatter"
CNN = "train.model=scatter-cnn"
LR_GRID = "train.lr=0.005,0.01,0.02,0.05"
DOC = REPO / "docs" / "results-cnn-head.md"


def _finished(folder: Path, models: int) -> Path | None:
    """The finished run of ``models`` models per level in ``folder`` (runs of other sizes may sit beside it)."""
    runs = [f.parent for f in folder.glob("*/results.json")
            if json.loads(f.read_text())["config"]["audit"]["models"] == models] if folder.is_dir() else []
    if len(runs) > 1:
        sys.exit(f"{folder} holds {len(runs)} finished runs of {models} models: leave one")
    return runs[0] if runs else None


def _results(run: Path) -> dict[str, Any]:
    return json.loads((run / "results.json").read_text())


def tune(data: Path, out: Path) -> Path:
    target = out / "tune-undefended"
    if not (target / "tune.json").is_file():
        run_cli("tune", "undefended", "--preset", PRESET, "--data-dir", str(data), "--set", CNN, "--grid", LR_GRID,
                "--models", "64", "--out", str(target))
    return target / "tune.json"


#: glibc's allocator told to serve every allocation from the heap and keep what is freed (the children
#: inherit it): DP-SGD's clipped sums allocate and free tens of MB a step, which glibc otherwise maps
#: and faults in afresh at every step
DP_MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2 ** 36)}

HEADS = ("scatter-linear", "scatter-cnn")


def run_folder(out: Path, head: str, defense: str, noise: float | None) -> Path:
    return out / head / (defense if noise is None else f"dpsgd-{noise:g}")


def evaluate(data: Path, out: Path, head: str, cnn_lr: float, models: int, defense: str,
             noise: float | None = None) -> Path:
    """One run (resumed when finished) of ``defense`` on ``head``; ``noise``: DP-SGD's noise multiplier."""
    folder = run_folder(out, head, defense, noise)
    if _finished(folder, models) is None:
        args = ["evaluate", defense, "--preset", PRESET, "--data-dir", str(data), "--set", f"train.model={head}",
                "--models", str(models), "--canary", "mislabeled", "--out", str(folder), "--workers", "2"]
        if head == "scatter-cnn" and noise is None:  # DP-SGD's recipe has its own lr (train.lr would set it)
            args += ["--set", f"train.lr={cnn_lr:g}"]
        if noise is not None:
            os.environ.update(DP_MALLOC)
            args += ["--set", f"defense_params.noise_multiplier={noise:g}"]
        t = time.perf_counter()
        run_cli(*args)
        print(f"{head} {folder.name}: {time.perf_counter() - t:.0f} s", flush=True)
    run = _finished(folder, models)
    assert run is not None, folder
    return run


def throughput(data: Path, noise: float, cnn_lr: float) -> list[dict[str, Any]]:
    """One model of each recipe and head on cached features, one thread: seconds and images/s."""
    import numpy as np
    import torch

    from defenses.base import FitContext, LabeledImages
    from defenses.models import build_model
    from defenses.training import seeded_init, train_classifier
    from harness.core.config import DataConfig
    from harness.core.data import load_dataset
    from harness.defense_config import build_config
    from harness.plugins import make_defense

    torch.set_num_threads(1)
    ds = load_dataset(DataConfig(name="cifar10", path=str(data)), 0)
    n = 4585
    train = LabeledImages(x=ds.x_train[:n], y=ds.y_train[:n].astype(np.int64), num_classes=10, mean=ds.mean,
                          std=ds.std, augment=ds.augment)
    rows = []
    for model in ("scatter-linear", "scatter-cnn"):
        over: dict[str, Any] = {"defense": "undefended", "train.model": model, "data.path": str(data)}
        if model == "scatter-cnn":
            over["train.lr"] = cnn_lr
        base = build_config(PRESET, over)
        net = seeded_init(lambda: build_model(model, (3, 32, 32), 10, base.train.width), 0)
        train_classifier(net, train, FitContext(seed=0, device="cpu", train=base.train.model_copy(
            update={"epochs": 1})))  # the features cached, untimed
        net = seeded_init(lambda: build_model(model, (3, 32, 32), 10, base.train.width), 0)
        t = time.perf_counter()
        train_classifier(net, train, FitContext(seed=0, device="cpu", train=base.train))
        s = time.perf_counter() - t
        rows.append({"head": model, "recipe": f"undefended (lr {base.train.lr:g}, {base.train.epochs} epochs)",
                     "seconds": s, "images_per_second": n * base.train.epochs / s})
        print(f"throughput {model} undefended: {s:.1f} s, {rows[-1]['images_per_second']:.0f} images/s", flush=True)
        dp = build_config(PRESET, {"defense": "dpsgd", "train.model": model, "data.path": str(data),
                                   "defense_params.noise_multiplier": noise})
        t = time.perf_counter()
        make_defense(dp).fit(train, FitContext(seed=0, device="cpu", train=dp.train))
        s = time.perf_counter() - t
        epochs = int(dp.defense_params.get("epochs", dp.train.epochs))
        rows.append({"head": model, "recipe": f"DP-SGD (noise {noise:g}, {epochs} epochs)", "seconds": s,
                     "images_per_second": n * epochs / s})
        print(f"throughput {model} DP-SGD: {s:.1f} s, {rows[-1]['images_per_second']:.0f} images/s", flush=True)
    return rows


def _row(run: Path, head: str, what: str) -> dict[str, Any]:
    """One run's row: the population level and the mislabeled experiment (every run here has it; a
    DP-SGD run of the linear frontier has OOD and blank canaries too, which this table leaves out)."""
    r = _results(run)
    c = r["config"]
    mis = (r.get("sample_by_canary") or {}).get("mislabeled") or r["sample"]
    s, p = mis["figure"], r["population"]["figure"]
    eps = (r["population"].get("privacy") or {}).get("epsilon")
    return {"head": head, "what": what, "run": str(run), "models": c["audit"]["models"],
            "test_accuracy": r["population"]["test_accuracy"]["mean"],
            "validation_accuracy": (r["population"].get("validation_accuracy") or {}).get("mean"),
            "member_canaries_fitted": (mis.get("member_accuracy") or {}).get("mean"),
            "sample_fpr": s["fpr"], "sample_leak": s["leak"]["tpr"], "sample_lower": s["leak"]["lower"],
            "population_fpr": p["fpr"], "population_leak": p["leak"]["tpr"], "population_lower": p["leak"]["lower"],
            "epsilon": eps, "train_seconds_per_model": sum(r[lv]["compute"]["train_seconds_total"] for lv in ("population", "sample"))
            / (2 * c["audit"]["models"])}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def markdown(rows: list[dict[str, Any]], speed: list[dict[str, Any]], argv: str) -> str:
    lines = [
        "# The CNN head beside the linear head on cifar10-scatter",
        "",
        "<!-- generated by benchmarks/bench_cnn_head.py --markdown: edit that script, not this file -->",
        "",
        f"Made by `python benchmarks/bench_cnn_head.py {argv}` on {dt.date.today().isoformat()} (2 CPU cores). "
        "Tramer and Boneh's CNN on the scattering maps (`scatter-cnn`: two 3x3 convolutions of 64 channels, "
        "tanh, a max-pool, a linear layer) against the preset's linear head (`scatter-linear`): same features, "
        "same 4 585-image pool, same audit design (seed 0, mislabeled canaries at the sample level), the same "
        "defense recipes; the linear head trains at the preset's lr (0.0005), the CNN at its own anchor's "
        "(the `tune` stage's choice by validation accuracy), every heuristic defense at its head's lr; DP-SGD at its recipe's own (lr 4) on both heads.",
        "",
        "| recipe | head | models per level | test accuracy | validation accuracy | member mislabeled canaries "
        "fitted | sample leak, mislabeled (lower bound) | population leak (lower bound) | epsilon | training s a model |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        eps = "-" if r["epsilon"] is None else f"{r['epsilon']:.3g}"
        lines.append(f"| {r['what']} | {r['head']} | {r['models']} | {_pct(r['test_accuracy'])} | "
                     f"{_pct(r['validation_accuracy'])} | {_pct(r['member_canaries_fitted'])} | {_pct(r['sample_leak'])} "
                     f"at {100 * r['sample_fpr']:g}% (>= {_pct(r['sample_lower'])}) | {_pct(r['population_leak'])} at "
                     f"{100 * r['population_fpr']:g}% (>= {_pct(r['population_lower'])}) | {eps} | "
                     f"{r['train_seconds_per_model']:.0f} |")
    lines += ["", "Leaks: the ranked figure (the plain maximum of the fixed set of primary attacks) at 0.1% FPR, with "
              "its one-sided 95% lower bound. DP-SGD rows: the preset's `dpsgd` recipe (clipping 0.1, batch 256, 30 "
              "epochs, lr 4, EMA 0.999) at the noise named; one sampling rate, step count and noise give one epsilon "
              "(Opacus RDP, delta 1e-5) for both heads. Training seconds a model: the runs' own record (two workers "
              "on two cores)."]
    if speed:
        lines += ["", "Training throughput on cached features, one model, one thread (`throughput` stage; DP-SGD's "
                  "clipped sums layer by layer, defenses/dpsgd_layers.py):", "",
                  "| head | recipe | seconds | training images per second |", "|---|---|---|---|"]
        lines += [f"| {r['head']} | {r['recipe']} | {r['seconds']:.1f} | {r['images_per_second']:.0f} |" for r in speed]
    return "\n".join(lines) + "\n"


def cnn_lr(out: Path, given: float | None) -> float:
    if given is not None:
        return given
    f = out / "tune-undefended" / "tune.json"
    if not f.is_file():
        sys.exit(f"no {f}: run the tune stage first (--stages tune), or name the CNN's lr with --cnn-lr "
                 "(the tune chose 0.02 on 2026-12-07, docs/defenses.md)")
    return float(json.loads(f.read_text())["choice"]["params"]["train.lr"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path("runs/cnn"))
    ap.add_argument("--stages", default="tune,runs,throughput,table")
    ap.add_argument("--models", type=int, default=16, help="models per level of every run")
    ap.add_argument("--defenses", default="undefended,relaxloss,hamp")
    ap.add_argument("--noises", default="0.3,1", help="DP-SGD noise multipliers, comma-separated")
    ap.add_argument("--models-of", action="append", default=[], metavar="RECIPE=S",
                    help="another model count for one recipe (a defense, or dpsgd-NOISE), e.g. undefended=64")
    ap.add_argument("--cnn-lr", type=float, default=None, help="the CNN head's lr (default: the tune stage's choice)")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    stages = [s.strip() for s in a.stages.split(",") if s.strip()]
    unknown = set(stages) - {"tune", "runs", "throughput", "table"}
    if unknown:
        sys.exit(f"unknown stages: {', '.join(sorted(unknown))} (stages: tune, runs, throughput, table)")
    defenses = [d.strip() for d in a.defenses.split(",") if d.strip()]
    noises = [float(v) for v in a.noises.split(",") if v.strip()]
    recipe_names = set(defenses) | {f"dpsgd-{v:g}" for v in noises}
    per: dict[str, int] = {}
    for item in a.models_of:
        name, _, count = item.partition("=")
        if name not in recipe_names or not count.isdigit() or int(count) < 2:
            sys.exit(f"--models-of {item!r}: want RECIPE=S with RECIPE one of {', '.join(sorted(recipe_names))} "
                     "and S >= 2")
        per[name] = int(count)

    def models_of(defense: str, noise: float | None) -> int:
        return per.get(defense if noise is None else f"dpsgd-{noise:g}", a.models)

    data, out = a.data_dir.resolve(), a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if "tune" in stages:
        tune(data, out)
    lr = cnn_lr(out, a.cnn_lr) if {"runs", "throughput"} & set(stages) else None
    recipes: list[tuple[str, str, float | None]] = [(d, d, None) for d in defenses] + [
        ("dpsgd", f"DP-SGD noise {v:g}", v) for v in noises]
    if "runs" in stages:
        for defense, _, noise in recipes:
            for head in HEADS:
                evaluate(data, out, head, lr, models_of(defense, noise), defense, noise)  # type: ignore[arg-type]
    speed_file = out / "throughput.json"
    if "throughput" in stages:
        speed_file.write_text(json.dumps(throughput(data, noises[0], lr), indent=1) + "\n")  # type: ignore[arg-type]
    if "table" in stages:
        rows = []
        for defense, what, noise in recipes:
            for head in HEADS:
                run = _finished(run_folder(out, head, defense, noise), models_of(defense, noise))
                if run is None:
                    print(f"table: no {head} {what} run (skipped)")
                    continue
                rows.append(_row(run, head, what))
                r = rows[-1]
                print(f"{head:15s} {what}: {r['models']} models, test {_pct(r['test_accuracy'])}, sample leak "
                      f"{_pct(r['sample_leak'])} (>= {_pct(r['sample_lower'])}), population {_pct(r['population_leak'])}, "
                      f"epsilon {r['epsilon']}")
        speed = json.loads(speed_file.read_text()) if speed_file.is_file() else []
        (out / "cnn-head.json").write_text(json.dumps({"rows": rows, "throughput": speed}, indent=1) + "\n")
        if a.markdown:
            argv = (f"--data-dir {a.data_dir} --out {a.out} --models {a.models} --defenses {a.defenses} "
                    f"--noises {a.noises}" + "".join(f" --models-of {m}" for m in a.models_of)
                    + (f" --cnn-lr {a.cnn_lr:g}" if a.cnn_lr is not None else "") + " --markdown")
            DOC.write_text(markdown(rows, speed, argv))
            print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
