"""The CNN head on the fixed scattering features beside the linear head (issue 66): the heuristic
defenses and DP-SGD's frontier on both heads, and is "a convex head on fixed features" why DP-SGD
protects less on cifar10-scatter than in the paper?

    python benchmarks/bench_cnn_head.py --data-dir ../shared/data/cifar10-subset --out runs/cnn
        [--stages tune,tune-defenses,dp-recipe,runs,throughput,table] [--models 16]
        [--defenses undefended,relaxloss,hamp,selena] [--tune-defenses hamp] [--noises 0.3,1]
        [--cnn-dp defense_params.max_grad_norm=1 ...] [--cnn-lr LR] [--cnn-anchor ACC] [--markdown]

Stages (each resumes: a finished run or tune is read back at no cost):

- ``tune``: ``harness tune undefended --preset cifar10-scatter --set train.model=scatter-cnn --grid
  train.lr=0.005,0.01,0.02,0.05 --models 64`` (the preset's 10 epochs; the CNN head's anchor is its
  recipe of best validation accuracy, as the linear head's is; the test set chooses nothing). Its
  choice is the CNN's ``train.lr`` in every later stage, unless ``--cnn-lr`` names one (on
  2026-12-07 the tune chose 0.02: docs/defenses.md, the CNN head);
- ``tune-defenses``: each of ``--tune-defenses`` tuned on the CNN head to the CNN anchor's validation
  accuracy minus ``--gap`` points (6.5: the matched-utility table's rule, the paper's "at least 88%" where
  its undefended model reads 94.52%), ``harness tune DEFENSE --set train.model=scatter-cnn --set
  train.lr=LR --min-accuracy A --models MODELS`` over the knobs the defense declares; the ``runs`` stage
  then audits the choice (``harness evaluate --from-tune``, mislabeled canaries, in the tune's folder).
  ``--defense-lrs`` first picks the defense's own lr (the most accurate of those at its mildest
  setting: HAMP's entropy threshold 0.5; its soft labels train the CNN poorly at the anchor's lr) and
  ``--defense-grid KEY=V,...`` narrows a knob (2026-12-07: ``--defense-lrs 0.05,0.1,0.2,0.5
  --defense-grid regularization=0.005``, HAMP's regularization having moved accuracy by at most 1.4
  points at any threshold in the tune at the anchor's lr, on the page).
  The anchor's accuracy is the ``tune`` stage's choice, or ``--cnn-anchor`` where that tune is not in
  ``--out`` (63.5% on 2026-12-07: 64 models, 500 validation images);
- ``dp-recipe``: is the CNN head's DP-SGD accuracy capped by the recipe? ``harness tune dpsgd --set
  train.model=scatter-cnn --grid noise_multiplier=0.1 --grid defense_params.max_grad_norm=0.1,1 --grid
  defense_params.lr=4,0.4`` (4 models a setting, no target: the most accurate), at the preset's batch
  and epochs (the epsilon of every setting is the same); the table prints every setting's validation
  accuracy. ``--cnn-dp KEY=V`` (repeatable) then sets the CNN head's DP-SGD runs apart from the
  linear head's (the linear head keeps the preset's recipe);
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

The rows are kept in benchmarks/results/cnn_head.json with the command and date that measured each: a run
finished in ``--out`` replaces its row (same head, recipe and model count), rows of runs not in ``--out``
stay as measured, so a session can add rows without re-training the others (a CNN row is 6-21 minutes on
2 cores). The page lists the commands behind its rows.
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
#: every measured row, with its command and date (the table stage merges the runs in --out into it)
RECORD = REPO / "benchmarks" / "results" / "cnn_head.json"
#: the DP-SGD recipe grid of the dp-recipe stage (noise 0.1: the recipe's accuracy, not the noise's cost)
DP_RECIPE_GRID = ("noise_multiplier=0.1", "defense_params.max_grad_norm=0.1,1", "defense_params.lr=4,0.4")


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


def dp_suffix(overrides: dict[str, str]) -> str:
    """The folder and label part of a CNN DP-SGD recipe that differs from the preset's."""
    return "".join(f"-{k.removeprefix('defense_params.')}={v}" for k, v in sorted(overrides.items()))


def run_folder(out: Path, head: str, defense: str, noise: float | None, dp: dict[str, str] | None = None) -> Path:
    return out / head / (defense if noise is None else f"dpsgd-{noise:g}{dp_suffix(dp or {})}")


def mild_setting(defense: str) -> list[str]:
    """``--grid`` arguments fixing a defense's knobs at its mildest setting: the first declared knob at its
    least private value, the others at the defense's defaults (HAMP: entropy threshold 0.5, regularization
    0.005)."""
    from harness.plugins import resolve

    cls = resolve("defenses", defense)
    knobs = cls.privacy_knobs
    first = knobs[0]
    least = min(first.values) if first.more_private == "higher" else max(first.values)
    args = ["--grid", f"{first.param}={least:g}"]
    for k in knobs[1:]:
        args += ["--grid", f"{k.param}={cls.param_defaults[k.param]:g}"]
    return args


def tune_defense(data: Path, out: Path, defense: str, lr: float, target: float, models: int,
                 lrs: list[float], grid: list[str]) -> Path:
    """``harness tune DEFENSE`` on the CNN head to ``target`` validation accuracy (resumed when done).

    With ``lrs``: first the defense's own lr, the most accurate of ``lrs`` at its mildest setting
    (:func:`mild_setting`; a defense's soft labels may want another step size than the anchor's hard
    ones), then its knobs at that lr. ``grid``: ``KEY=V1,...`` narrowing a declared knob's values."""
    if lrs:
        first = out / f"tune-{defense}-lr"
        if not (first / "tune.json").is_file():
            t = time.perf_counter()
            run_cli("tune", defense, "--preset", PRESET, "--data-dir", str(data), "--set", CNN, *mild_setting(defense),
                    "--grid", "train.lr=" + ",".join(f"{v:g}" for v in lrs), "--models", str(models), "--workers",
                    "2", "--max-models-per-point", "4", "--out", str(first))
            print(f"tune {defense} lr: {time.perf_counter() - t:.0f} s", flush=True)
        lr = float(json.loads((first / "tune.json").read_text())["choice"]["params"]["train.lr"])
    folder = out / f"tune-{defense}"
    if not (folder / "tune.json").is_file():
        t = time.perf_counter()
        run_cli("tune", defense, "--preset", PRESET, "--data-dir", str(data), "--set", CNN, "--set",
                f"train.lr={lr:g}", *[a for g in grid for a in ("--grid", g)], "--min-accuracy", f"{target:.4f}",
                "--models", str(models), "--workers", "2", "--out", str(folder))
        print(f"tune {defense}: {time.perf_counter() - t:.0f} s", flush=True)
    return folder / "tune.json"


def evaluate_tuned(out: Path, defense: str, models: int) -> Path | None:
    """The audit of a tuned setting (``harness evaluate --from-tune``), in the tune's folder; None when
    the tune met no setting (its tune.json names the closest)."""
    tune_json = out / f"tune-{defense}" / "tune.json"
    if json.loads(tune_json.read_text())["choice"] is None:
        print(f"{defense}: the tune met no setting ({tune_json}): no run")
        return None
    folder = tune_json.parent
    if _finished(folder, models) is None:
        t = time.perf_counter()
        run_cli("evaluate", "--from-tune", str(tune_json), "--models", str(models), "--canary", "mislabeled",
                "--workers", "2")
        print(f"scatter-cnn {defense} tuned: {time.perf_counter() - t:.0f} s", flush=True)
    return _finished(folder, models)


def dp_recipe(data: Path, out: Path, models: int) -> Path:
    """The dp-recipe stage's tune (resumed when done)."""
    folder = out / "tune-dp-recipe"
    if not (folder / "tune.json").is_file():
        os.environ.update(DP_MALLOC)
        grid = [a for g in DP_RECIPE_GRID for a in ("--grid", g)]
        t = time.perf_counter()
        run_cli("tune", "dpsgd", "--preset", PRESET, "--data-dir", str(data), "--set", CNN, *grid, "--models",
                str(models), "--workers", "2", "--max-models-per-point", "4", "--out", str(folder))
        print(f"dp-recipe: {time.perf_counter() - t:.0f} s", flush=True)
    return folder / "tune.json"


def evaluate(data: Path, out: Path, head: str, cnn_lr: float, models: int, defense: str,
             noise: float | None = None, dp: dict[str, str] | None = None) -> Path:
    """One run (resumed when finished) of ``defense`` on ``head``; ``noise``: DP-SGD's noise multiplier;
    ``dp``: DP-SGD recipe overrides (the CNN head's, ``--cnn-dp``)."""
    folder = run_folder(out, head, defense, noise, dp)
    if _finished(folder, models) is None:
        args = ["evaluate", defense, "--preset", PRESET, "--data-dir", str(data), "--set", f"train.model={head}",
                "--models", str(models), "--canary", "mislabeled", "--out", str(folder), "--workers", "2"]
        if head == "scatter-cnn" and noise is None:  # DP-SGD's recipe has its own lr (train.lr would set it)
            args += ["--set", f"train.lr={cnn_lr:g}"]
        if noise is not None:
            os.environ.update(DP_MALLOC)
            args += ["--set", f"defense_params.noise_multiplier={noise:g}"]
            for k, v in sorted((dp or {}).items()):
                args += ["--set", f"{k}={v}"]
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
    return {"head": head, "what": what, "run": run.name, "models": c["audit"]["models"],
            "test_accuracy": r["population"]["test_accuracy"]["mean"],
            "validation_accuracy": (r["population"].get("validation_accuracy") or {}).get("mean"),
            "member_canaries_fitted": (mis.get("member_accuracy") or {}).get("mean"),
            "sample_fpr": s["fpr"], "sample_leak": s["leak"]["tpr"], "sample_lower": s["leak"]["lower"],
            "population_fpr": p["fpr"], "population_leak": p["leak"]["tpr"], "population_lower": p["leak"]["lower"],
            "epsilon": eps, "train_seconds_per_model": sum(r[lv]["compute"]["train_seconds_total"] for lv in ("population", "sample"))
            / (2 * c["audit"]["models"])}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _tune_summary(tune_json: Path) -> dict[str, Any]:
    """What the page says of a tune: its target, every setting's validation accuracy, the choice."""
    t = json.loads(tune_json.read_text())
    return {"defense": t["defense"], "overrides": t["overrides"], "min_accuracy": t["min_accuracy"],
            "settings": [{"params": e["params"], "models": e["models"],
                          "validation_accuracy": (e.get("validation_accuracy") or {}).get("mean"),
                          "se": (e.get("validation_accuracy") or {}).get("se")} for e in t["settings"]],
            "choice": None if t["choice"] is None else t["choice"]["params"], "why": t["why"],
            "seconds": t["seconds"], "date": dt.date.fromtimestamp(tune_json.stat().st_mtime).isoformat()}


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k.removeprefix('defense_params.')} {v:g}" if isinstance(v, (int, float)) else
                     f"{k.removeprefix('defense_params.')} {v}" for k, v in params.items())


RECIPE_ORDER = ("undefended", "relaxloss", "hamp", "selena", "dfkd", "DP-SGD")


def _order(row: dict[str, Any]) -> tuple[Any, ...]:
    what = row["what"]
    rank = next((i for i, r in enumerate(RECIPE_ORDER) if what.startswith(r)), len(RECIPE_ORDER))
    return rank, what, HEADS.index(row["head"]) if row["head"] in HEADS else 9, row["models"]


def merge_rows(kept: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``kept`` with each row of ``new`` in place of the row of its head, recipe and model count."""
    key = lambda r: (r["head"], r["what"], r["models"])  # noqa: E731
    merged = {key(r): r for r in kept}
    merged.update({key(r): r for r in new})
    return sorted(merged.values(), key=_order)


def markdown(record: dict[str, Any]) -> str:
    rows, speed, tunes = record["rows"], record.get("throughput") or [], record.get("tunes") or {}
    commands = sorted({r["command"] for r in rows} | {s["command"] for s in speed if "command" in s})
    lines = [
        "# The CNN head beside the linear head on cifar10-scatter",
        "",
        "<!-- generated by benchmarks/bench_cnn_head.py --markdown from benchmarks/results/cnn_head.json: edit "
        "that script, not this file -->",
        "",
        "Tramer and Boneh's CNN on the scattering maps (`scatter-cnn`: two 3x3 convolutions of 64 channels, "
        "tanh, a max-pool, a linear layer) against the preset's linear head (`scatter-linear`): same features, "
        "same 4 585-image pool, same audit design (seed 0, mislabeled canaries at the sample level), the same "
        "defense recipes; the linear head trains at the preset's lr (0.0005), the CNN at its own anchor's "
        "(the `tune` stage's choice by validation accuracy), every heuristic defense at its head's lr unless the "
        "row names another; DP-SGD at its recipe's own (lr 4) on both heads, with the changes a row names. Each row gives the date it was "
        "measured; the rows come from these commands (2 CPU cores; a later command's run replaces a row of the "
        "same head, recipe and model count):",
        "",
    ]
    lines += [f"- `python benchmarks/bench_cnn_head.py {c}`" for c in commands]
    lines += [
        "",
        "| recipe | head | models per level | test accuracy | validation accuracy | member mislabeled canaries "
        "fitted | sample leak, mislabeled (lower bound) | population leak (lower bound) | epsilon | training s a "
        "model | measured |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        eps = "-" if r["epsilon"] is None else f"{r['epsilon']:.3g}"
        lines.append(f"| {r['what']} | {r['head']} | {r['models']} | {_pct(r['test_accuracy'])} | "
                     f"{_pct(r['validation_accuracy'])} | {_pct(r['member_canaries_fitted'])} | {_pct(r['sample_leak'])} "
                     f"at {100 * r['sample_fpr']:g}% (>= {_pct(r['sample_lower'])}) | {_pct(r['population_leak'])} at "
                     f"{100 * r['population_fpr']:g}% (>= {_pct(r['population_lower'])}) | {eps} | "
                     f"{r['train_seconds_per_model']:.0f} | {r['date']} |")
    lines += ["", "Leaks: the ranked figure (the plain maximum of the fixed set of primary attacks) at 0.1% FPR, with "
              "its one-sided 95% lower bound. DP-SGD rows: the preset's `dpsgd` recipe (clipping 0.1, batch 256, 30 "
              "epochs, lr 4, EMA 0.999) at the noise named, with the changes the row names; one sampling rate, step "
              "count and noise give one epsilon (Opacus RDP, delta 1e-5) for both heads. Tuned rows: the `tune-defenses` "
              "stage's choice (below). Training seconds a model: the runs' own record (two workers on two cores)."]
    for name, t in sorted(tunes.items()):
        target = "" if t["min_accuracy"] is None else f" to at least {100 * t['min_accuracy']:.1f}% validation accuracy"
        lines += ["", f"`{name}` ({t['date']}, {t['seconds']:.0f} s; `python benchmarks/bench_cnn_head.py "
                  f"{t['command']}`): `harness tune {t['defense']}` on the CNN head{target}, every setting's validation "
                  "accuracy (mean over its models and the 500 validation images, ± SE):", "",
                  "| setting | models | validation accuracy |", "|---|---|---|"]
        for e in t["settings"]:
            acc = "-" if e["validation_accuracy"] is None else f"{100 * e['validation_accuracy']:.1f}% ± {100 * e['se']:.1f}"
            mark = " (chosen)" if e["params"] == t["choice"] else ""
            lines.append(f"| {_params(e['params'])}{mark} | {e['models']} | {acc} |")
        lines += ["", f"Its choice: {t['why']}"]
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


def cnn_anchor(out: Path, given: float | None) -> float:
    """The CNN anchor's validation accuracy: the tune stage's choice, else ``--cnn-anchor``."""
    f = out / "tune-undefended" / "tune.json"
    if f.is_file():
        return float(json.loads(f.read_text())["choice"]["validation_accuracy"]["mean"])
    if given is None:
        sys.exit(f"no {f}: run the tune stage first (--stages tune), or give the anchor's validation accuracy "
                 "with --cnn-anchor (0.635 on 2026-12-07: 64 models, lr 0.02)")
    return given


STAGES = ("tune", "tune-defenses", "dp-recipe", "runs", "throughput", "table")


def command_line(argv: list[str], tuned: list[str], cnn_dp: bool, throughput: bool) -> str:
    """The command a row is recorded with: ``argv`` with ``--stages`` naming every stage that makes its
    runs (a table-only call records the command that re-measures the rows it reads)."""
    rest, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--stages":
            skip = True
        elif not arg.startswith("--stages="):
            rest.append(arg)
    stages = ["tune"] + ["tune-defenses"] * bool(tuned) + ["dp-recipe"] * cnn_dp + ["runs"] + \
        ["throughput"] * throughput + ["table"]
    return " ".join(["--stages", ",".join(stages), *rest])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path("runs/cnn"))
    ap.add_argument("--stages", default="tune,runs,throughput,table", help=f"of {', '.join(STAGES)}")
    ap.add_argument("--models", type=int, default=16, help="models per level of every run")
    ap.add_argument("--defenses", default="undefended,relaxloss,hamp", help="run at the preset's setting, both heads")
    ap.add_argument("--tune-defenses", default="", help="tuned on the CNN head to anchor - gap (tune-defenses stage)")
    ap.add_argument("--gap", type=float, default=6.5, help="points under the CNN anchor's validation accuracy")
    ap.add_argument("--defense-lrs", default="", help="tune-defenses: first each defense's own lr, the most accurate "
                    "of these at its mildest setting (comma-separated; empty: the CNN anchor's lr)")
    ap.add_argument("--defense-grid", action="append", default=[], metavar="KEY=V1,V2",
                    help="tune-defenses: narrow a declared knob's values (e.g. regularization=0.005)")
    ap.add_argument("--noises", default="0.3,1", help="DP-SGD noise multipliers, comma-separated")
    ap.add_argument("--cnn-dp", action="append", default=[], metavar="KEY=V",
                    help="the CNN head's DP-SGD recipe apart from the preset's (e.g. defense_params.max_grad_norm=1)")
    ap.add_argument("--models-of", action="append", default=[], metavar="RECIPE=S",
                    help="another model count for one recipe (a defense, or dpsgd-NOISE), e.g. undefended=64")
    ap.add_argument("--cnn-lr", type=float, default=None, help="the CNN head's lr (default: the tune stage's choice)")
    ap.add_argument("--cnn-anchor", type=float, default=None,
                    help="the CNN anchor's validation accuracy where the tune stage's tune.json is not in --out")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    stages = [s.strip() for s in a.stages.split(",") if s.strip()]
    unknown = set(stages) - set(STAGES)
    if unknown:
        sys.exit(f"unknown stages: {', '.join(sorted(unknown))} (stages: {', '.join(STAGES)})")
    defenses = [d.strip() for d in a.defenses.split(",") if d.strip()]
    tuned = [d.strip() for d in a.tune_defenses.split(",") if d.strip()]
    noises = [float(v) for v in a.noises.split(",") if v.strip()]
    cnn_dp: dict[str, str] = {}
    for item in a.cnn_dp:
        key, eq, value = item.partition("=")
        if not eq or not key.startswith("defense_params.") or not value:
            sys.exit(f"--cnn-dp {item!r}: want defense_params.KEY=VALUE (e.g. defense_params.max_grad_norm=1)")
        cnn_dp[key] = value
    recipe_names = set(defenses) | set(tuned) | {f"dpsgd-{v:g}" for v in noises}
    per: dict[str, int] = {}
    for item in a.models_of:
        name, _, count = item.partition("=")
        if name not in recipe_names or not count.isdigit() or int(count) < 2:
            sys.exit(f"--models-of {item!r}: want RECIPE=S with RECIPE one of {', '.join(sorted(recipe_names))} "
                     "and S >= 2")
        per[name] = int(count)

    def models_of(defense: str, noise: float | None) -> int:
        return per.get(defense if noise is None else f"dpsgd-{noise:g}", a.models)

    def dp_of(head: str, noise: float | None) -> dict[str, str] | None:
        return cnn_dp if noise is not None and head == "scatter-cnn" else None

    def label(what: str, head: str, noise: float | None) -> str:
        dp = dp_of(head, noise)
        return what + (f" ({_params(dict(sorted(dp.items())))})" if dp else "")

    data, out = a.data_dir.resolve(), a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if "tune" in stages:
        tune(data, out)
    lr = cnn_lr(out, a.cnn_lr) if {"runs", "throughput", "tune-defenses"} & set(stages) else None
    if "tune-defenses" in stages:
        target = cnn_anchor(out, a.cnn_anchor) - a.gap / 100
        for d in tuned:
            tune_defense(data, out, d, lr, target, models_of(d, None),  # type: ignore[arg-type]
                         [float(v) for v in a.defense_lrs.split(",") if v.strip()], a.defense_grid)
    if "dp-recipe" in stages:
        dp_recipe(data, out, a.models)
    recipes: list[tuple[str, str, float | None]] = [(d, d, None) for d in defenses] + [
        ("dpsgd", f"DP-SGD noise {v:g}", v) for v in noises]
    if "runs" in stages:
        for defense, _, noise in recipes:
            for head in HEADS:
                evaluate(data, out, head, lr, models_of(defense, noise), defense, noise,  # type: ignore[arg-type]
                         dp_of(head, noise))
        for d in tuned:
            evaluate_tuned(out, d, models_of(d, None))
    speed_file = out / "throughput.json"
    if "throughput" in stages:
        speed_file.write_text(json.dumps(throughput(data, noises[0], lr), indent=1) + "\n")  # type: ignore[arg-type]
    if "table" in stages:
        argv = command_line(sys.argv[1:], tuned, bool(cnn_dp), "throughput" in stages)
        today = dt.date.today().isoformat()
        rows = []
        found: list[tuple[Path, str, str]] = [
            (run, head, label(what, head, noise)) for defense, what, noise in recipes for head in HEADS
            if (run := _finished(run_folder(out, head, defense, noise, dp_of(head, noise)),
                                 models_of(defense, noise))) is not None]
        tunes: dict[str, Any] = {}
        for d in tuned:
            tune_json = out / f"tune-{d}" / "tune.json"
            if not tune_json.is_file():
                continue
            if (out / f"tune-{d}-lr" / "tune.json").is_file():
                tunes[f"tune-{d}-lr (scatter-cnn)"] = {**_tune_summary(out / f"tune-{d}-lr" / "tune.json"),
                                                       "command": argv}
            lr_tuned = json.loads(tune_json.read_text())["overrides"].get("train.lr")
            tunes[f"tune-{d} (scatter-cnn, lr {lr_tuned})"] = {**_tune_summary(tune_json), "command": argv}
            run = _finished(tune_json.parent, models_of(d, None))
            choice = json.loads(tune_json.read_text())["choice"]
            if run is not None and choice is not None:
                found.append((run, "scatter-cnn", f"{d} tuned (lr {lr_tuned}, {_params(choice['params'])})"))
        if (out / "tune-dp-recipe" / "tune.json").is_file():
            tunes["tune-dp-recipe (scatter-cnn, DP-SGD noise 0.1)"] = {
                **_tune_summary(out / "tune-dp-recipe" / "tune.json"), "command": argv}
        for run, head, what in found:
            when = dt.date.fromtimestamp((run / "results.json").stat().st_mtime).isoformat()
            rows.append({**_row(run, head, what), "command": argv, "date": when})
            r = rows[-1]
            print(f"{head:15s} {what}: {r['models']} models, test {_pct(r['test_accuracy'])}, sample leak "
                  f"{_pct(r['sample_leak'])} (>= {_pct(r['sample_lower'])}), population {_pct(r['population_leak'])}, "
                  f"epsilon {r['epsilon']}")
        record = json.loads(RECORD.read_text()) if RECORD.is_file() else {"rows": [], "throughput": [], "tunes": {}}
        record["rows"] = merge_rows(record["rows"], rows)
        if speed_file.is_file() and "throughput" in stages:
            record["throughput"] = [{**r, "command": argv, "date": today} for r in json.loads(speed_file.read_text())]
        record["tunes"] = {**(record.get("tunes") or {}), **tunes}
        RECORD.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {RECORD} ({len(record['rows'])} rows, {len(rows)} from {out})")
        if a.markdown:
            DOC.write_text(markdown(record))
            print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
