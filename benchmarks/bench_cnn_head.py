"""The CNN head on the fixed scattering features beside the linear head (issue 66): is "a convex head
on fixed features" why DP-SGD protects less on cifar10-scatter than in the paper?

    python benchmarks/bench_cnn_head.py --data-dir ../shared/data/cifar10-subset --out runs/cnn
        [--linear runs/matched] [--stages tune,undefended,dpsgd,throughput,table] [--dp-models 16]
        [--noise 0.3] [--markdown]

Stages (each resumes: a finished run or tune is read back at no cost):

- ``tune``: ``harness tune undefended --preset cifar10-scatter --set train.model=scatter-cnn --grid
  train.lr=0.005,0.01,0.02,0.05 --models 64`` (the preset's 10 epochs; the CNN head's anchor is its
  recipe of best validation accuracy, as the linear head's is; the test set chooses nothing);
- ``undefended``: ``harness evaluate --from-tune OUT/tune-undefended/tune.json undefended`` at 64
  models per level;
- ``dpsgd``: ``harness evaluate dpsgd --set train.model=scatter-cnn --set
  defense_params.noise_multiplier=NOISE --models DP_MODELS`` (the preset's ``dpsgd`` recipe, the
  linear head's frontier recipe: clipping 0.1, batch 256, 30 epochs, lr 4, EMA 0.999; the same
  sampling rate, steps and noise give the same epsilon whatever the head). DP-SGD's per-sample
  gradients through the CNN head take about 100 s a model on one core (``throughput``), so the
  default is 16 models per level, not the linear frontier's 64;
- ``throughput``: one model of each recipe on the cached features of the 4 585-image pool, one thread,
  nothing else asked of the process: seconds, and training images per second (epochs x images /
  seconds), for both heads;
- ``table``: one row per run (test accuracy, the leak at both levels with the sample leak's lower
  bound, epsilon) beside the linear head's runs of the same recipes from ``--linear`` (the matched
  comparison's folder, benchmarks/bench_matched_utility.py: its anchor and its frontier run at
  NOISE); ``--markdown`` writes docs/results-cnn-head.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import time
from pathlib import Path
from typing import Any

from harness_cli import run_cli

REPO = Path(__file__).resolve().parents[1]
PRESET = "cifar10-scatter"
CNN = "train.model=scatter-cnn"
LR_GRID = "train.lr=0.005,0.01,0.02,0.05"
DOC = REPO / "docs" / "results-cnn-head.md"


#: the results of a run attacked on its population and mislabeled levels only (``evaluate_run(levels=...)``):
#: a DP-SGD run started with every DP canary experiment, its other experiments unfinished
PARTIAL = "results-mislabeled.json"


def _finished(folder: Path) -> Path | None:
    runs = [p for name in ("results.json", PARTIAL) for p in folder.glob(f"*/{name}")] if folder.is_dir() else []
    return runs[0].parent if len(runs) == 1 else None


def _results(run: Path) -> dict[str, Any]:
    return json.loads((run / ("results.json" if (run / "results.json").is_file() else PARTIAL)).read_text())


def tune(data: Path, out: Path) -> Path:
    target = out / "tune-undefended"
    if not (target / "tune.json").is_file():
        run_cli("tune", "undefended", "--preset", PRESET, "--data-dir", str(data), "--set", CNN, "--grid", LR_GRID,
                "--models", "64", "--out", str(target))
    return target / "tune.json"


def undefended(data: Path, out: Path) -> Path:
    folder = out / "undefended"
    if _finished(folder) is None:
        run_cli("evaluate", "--from-tune", str(out / "tune-undefended" / "tune.json"), "undefended", "--preset",
                PRESET, "--data-dir", str(data), "--out", str(folder), "--workers", "2")
    return _finished(folder)


#: glibc's allocator told to serve every allocation from the heap and keep what is freed: DP-SGD's
#: per-sample gradients of the CNN head (about 140 MB a step at batch 256) are otherwise mapped and
#: faulted in afresh at every step (two epochs of one model: 11.5 s user + 8.7 s system with glibc's
#: thresholds, 13.1 + 1.6 s with these; the children inherit it)
DP_MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2 ** 36)}


def dpsgd(data: Path, out: Path, noise: float, models: int) -> Path:
    folder = out / f"dpsgd-{noise:g}"
    if _finished(folder) is None:
        os.environ.update(DP_MALLOC)
        run_cli("evaluate", "dpsgd", "--preset", PRESET, "--data-dir", str(data), "--set", CNN, "--set",
                f"defense_params.noise_multiplier={noise:g}", "--models", str(models), "--canary", "mislabeled",
                "--out", str(folder),
                "--workers", "2")
    return _finished(folder)


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


def linear_runs(linear: Path, noise: float) -> dict[str, Path]:
    """The linear head's anchor (seed 0, the preset's recipe and pool) and frontier run at ``noise``."""
    out = {}
    for f in sorted(linear.glob("*/*/results.json")):
        c = json.loads(f.read_text())["config"]
        if c["seed"] != 0 or c["data"].get("validation_size") != 500 or c["data"].get("normalization", "dataset") != \
                "dataset" or c["train"]["model"] != "scatter-linear":
            continue
        if c["defense"] == "undefended" and c["train"]["lr"] == 0.0005 and c["train"]["epochs"] == 10:
            out["undefended"] = f.parent
        if c["defense"] == "dpsgd" and c.get("defense_params", {}).get("noise_multiplier") == noise:
            out["dpsgd"] = f.parent
    return out


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def markdown(rows: list[dict[str, Any]], speed: list[dict[str, Any]], noise: float, argv: str) -> str:
    lines = [
        "# The CNN head beside the linear head on cifar10-scatter",
        "",
        f"Made by `python benchmarks/bench_cnn_head.py {argv}` on {dt.date.today().isoformat()} (2 CPU cores). "
        "Tramer and Boneh's CNN on the scattering maps (`scatter-cnn`: two 3x3 convolutions of 64 channels, "
        "tanh, a max-pool, a linear layer) against the preset's linear head (`scatter-linear`), same features, "
        "same 4 585-image pool, same audit design (seed 0); sample level: mislabeled canaries.",
        "",
        "| head | run | models per level | test accuracy | validation accuracy | member mislabeled canaries fitted | "
        "sample leak, mislabeled (lower bound) | population leak (lower bound) | epsilon | training s a model |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        eps = "-" if r["epsilon"] is None else f"{r['epsilon']:.0f}"
        lines.append(f"| {r['head']} | {r['what']} | {r['models']} | {_pct(r['test_accuracy'])} | "
                     f"{_pct(r['validation_accuracy'])} | {_pct(r['member_canaries_fitted'])} | {_pct(r['sample_leak'])} "
                     f"at {100 * r['sample_fpr']:g}% (>= {_pct(r['sample_lower'])}) | {_pct(r['population_leak'])} at "
                     f"{100 * r['population_fpr']:g}% (>= {_pct(r['population_lower'])}) | {eps} | "
                     f"{r['train_seconds_per_model']:.0f} |")
    lines += ["", "Leaks at 0.1% FPR, the mislabeled experiment's (the linear DP-SGD run also has OOD and blank canaries, "
              "left out here); both DP-SGD rows are the `dpsgd` recipe (clipping 0.1, batch 256, 30 epochs, lr 4, EMA "
              f"0.999) at noise {noise:g}: one sampling rate, step count and noise, so one epsilon. A row with fewer models "
              "per level reads each figure from fewer guesses (its lower bound is looser). A DP-SGD row read from "
              f"`{PARTIAL}` comes from a run started with every DP canary experiment and attacked on its population and "
              "mislabeled levels only (`harness.audit.attack_phase.evaluate_run(run, levels=...)`); the `dpsgd` stage "
              "trains `--canary mislabeled` alone. Training seconds a model: the runs' own record (two workers on two "
              "cores, other jobs beside them)."]
    if speed:
        lines += ["", "Training throughput on cached features, one model, one thread (`throughput` stage; in one "
                  "process with glibc's default allocator thresholds: DP-SGD on the CNN head spends about 40% of its "
                  "time in the kernel there, mapping its per-sample gradients afresh each step, which the `dpsgd` "
                  "stage's `MALLOC_MMAP_MAX_=0` avoids):", "",
                  "| head | recipe | seconds | training images per second |", "|---|---|---|---|"]
        lines += [f"| {r['head']} | {r['recipe']} | {r['seconds']:.1f} | {r['images_per_second']:.0f} |" for r in speed]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path("runs/cnn"))
    ap.add_argument("--linear", type=Path, default=Path("runs/matched"))
    ap.add_argument("--stages", default="tune,undefended,dpsgd,throughput,table")
    ap.add_argument("--noise", type=float, default=0.3)
    ap.add_argument("--dp-models", type=int, default=16)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    stages = [s.strip() for s in a.stages.split(",") if s.strip()]
    data, out = a.data_dir.resolve(), a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if "tune" in stages:
        tune(data, out)
    if "undefended" in stages:
        undefended(data, out)
    if "dpsgd" in stages:
        dpsgd(data, out, a.noise, a.dp_models)
    speed_file = out / "throughput.json"
    if "throughput" in stages:
        chosen = json.loads((out / "tune-undefended" / "tune.json").read_text())["choice"]["params"]["train.lr"]
        speed_file.write_text(json.dumps(throughput(data, a.noise, float(chosen)), indent=1) + "\n")
    if "table" in stages:
        rows = []
        lin = linear_runs(a.linear.resolve(), a.noise) if a.linear.is_dir() else {}
        for head, what, run in (("linear", "undefended (the preset's anchor)", lin.get("undefended")),
                                ("CNN", "undefended (its own anchor, tuned)", _finished(out / "undefended")),
                                ("linear", f"DP-SGD noise {a.noise:g}", lin.get("dpsgd")),
                                ("CNN", f"DP-SGD noise {a.noise:g}", _finished(out / f"dpsgd-{a.noise:g}"))):
            if run is None:
                print(f"table: no {head} {what} run (skipped)")
                continue
            rows.append(_row(run, head, what))
            r = rows[-1]
            print(f"{head:6s} {what}: {r['models']} models, test {_pct(r['test_accuracy'])}, sample leak "
                  f"{_pct(r['sample_leak'])} (>= {_pct(r['sample_lower'])}), population {_pct(r['population_leak'])}, "
                  f"epsilon {r['epsilon']}")
        speed = json.loads(speed_file.read_text()) if speed_file.is_file() else []
        (out / "cnn-head.json").write_text(json.dumps({"rows": rows, "throughput": speed}, indent=1) + "\n")
        if a.markdown:
            argv = (f"--data-dir {a.data_dir} --out {a.out} --linear {a.linear} --noise {a.noise:g} "
                    f"--dp-models {a.dp_models} --markdown")
            DOC.write_text(markdown(rows, speed, a.noise, argv))
            print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
