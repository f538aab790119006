"""The paper's setting on a GPU (issue 13): what a lent GPU session runs, one JSON line per figure.

    python benchmarks/bench_gpu.py epoch --data-dir ../shared/data/cifar10-subset [--device cuda]
    python benchmarks/bench_gpu.py fast  --data-dir ../shared/data/cifar10-subset [--models 64]
    python benchmarks/bench_gpu.py hamp  --data-dir ../shared/data/cifar10-subset [--models 16] [--epochs 50]
    python benchmarks/bench_gpu.py ssl   --data-dir ../shared/data/cifar10-subset [--models 16] [--epochs 100]
    python benchmarks/bench_gpu.py all   --data-dir ... --out DIR        # epoch, fast, hamp, ssl; results under DIR

- ``epoch``: one WRN16-4 model at the paper's recipe (``paper`` preset: batch 256, SGD 0.1, flips
  and shifts) trained for ``--epochs`` (default 2) epochs on the training images found; prints the
  seconds per epoch and per training image, and projects the paper's 2 x 64 models of 200 epochs
  on the paper's ~25 000 training images per model.
- ``fast``: ``harness evaluate undefended --preset fast`` end to end (both levels), its wall time,
  test accuracy and population / sample-level TPR@0.1% FPR (does the fast recipe keep the finding
  that mislabeled canaries are found at near 100%?).
- ``hamp``: ``harness evaluate hamp`` with the WRN16-4 at the ``cifar10`` preset's HAMP recipe, both
  levels, LiRA and the label-only attack: which is stronger at the sample level (the paper finds
  label-only beats LiRA against HAMP's confidence masking).

- ``ssl`` (issue 10): ``harness evaluate ssl-simclr`` with the ResNet-18 encoder (the ``cifar10``
  preset's SSL settings, ``encoder=resnet18``) pre-trained for ``--epochs`` (default 100, the paper
  800), both levels: does the white-box contrastive attack beat LiRA on the OOD canaries?

Each prints the device (torch.cuda.get_device_name) with its figures. ``--device cpu`` with small
``--models`` / ``--epochs`` runs the same code on a CPU (tests/test_bench_gpu.py does).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from harness_cli import evaluate_into

PAPER_TRAIN_IMAGES = 25_000  # about half of CIFAR-10's 50 000 training images per model (membership 1/2)


def device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return f"{device} ({torch.cuda.get_device_name()})"
    return device


def bench_epoch(data_dir: Path, device: str, epochs: int) -> dict[str, Any]:
    from defenses.base import FitContext, LabeledImages
    from defenses.training import init_network, train_classifier
    from harness.config import build_config
    from harness.data import load_dataset

    cfg = build_config("paper", {"data.path": str(data_dir), "train.epochs": epochs})
    data = load_dataset(cfg.data, cfg.seed)
    train = LabeledImages(x=data.x_train, y=data.y_train, num_classes=data.num_classes, mean=data.mean,
                          std=data.std, augment=data.augment)
    ctx = FitContext(seed=0, device=device, train=cfg.train)
    net = init_network(train, ctx)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    train_classifier(net, train, ctx)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    secs = (time.perf_counter() - t0) / epochs
    per_image = secs / len(train)
    total_epochs = build_config("paper").train.epochs
    projected = per_image * PAPER_TRAIN_IMAGES * total_epochs * 2 * 64
    return {"figure": "wrn16-4 paper recipe", "device": device_name(device), "train_images": len(train),
            "epochs_timed": epochs, "seconds_per_epoch": secs, "seconds_per_image": per_image,
            "projected_hours_2x64_models_200_epochs_25k_images": projected / 3600,
            "batch_size": cfg.train.batch_size}


def _evaluate(args: list[str]) -> tuple[dict[str, Any], float]:
    with tempfile.TemporaryDirectory() as out:
        run_dir, wall = evaluate_into(Path(out), *args)
        return json.loads((run_dir / "results.json").read_text()), wall


def _levels(results: dict[str, Any]) -> dict[str, Any]:
    k = repr(float(results["headline_fpr"]))
    out = {}
    for lv in ("population", "sample"):
        if lv not in results:
            continue
        r = results[lv]
        per_attack = {f"{a['name']}:{a['variant']}": a["tpr_at_fpr"][k] for a in r["attacks"] if a["primary"]}
        out[lv] = {"canary": r["canary"], "test_accuracy": r["test_accuracy"]["mean"],
                   "headline": f"{r['best']['name']}:{r['best']['variant']}", "tpr_at_0.1%": r["best"]["tpr_at_fpr"][k],
                   "tpr_ci": r["best"]["tpr_ci"][k], "primary_variants": per_attack}
    return out


def bench_fast(data_dir: Path, device: str, models: int, epochs: int | None) -> dict[str, Any]:
    args = ["undefended", "--preset", "fast", "--data-dir", str(data_dir), "--device", device, "--models", str(models)]
    if epochs:
        args += ["--epochs", str(epochs)]
    results, wall = _evaluate(args)
    return {"figure": "fast preset end to end", "device": device_name(device), "models_per_level": models,
            "wall_seconds": wall, "levels": _levels(results)}


def bench_hamp(data_dir: Path, device: str, models: int, epochs: int) -> dict[str, Any]:
    args = ["hamp", "--preset", "cifar10", "--data-dir", str(data_dir), "--device", device, "--models", str(models),
            "--epochs", str(epochs), "--set", "train.model=wrn16-4"]
    results, wall = _evaluate(args)
    levels = _levels(results)
    s = levels.get("sample", {}).get("primary_variants", {})
    lira = max((v for k, v in s.items() if k.startswith("lira:")), default=None)
    label_only = max((v for k, v in s.items() if k.startswith("label-only:")), default=None)
    return {"figure": "hamp wrn16-4 cifar10 subset", "device": device_name(device), "models_per_level": models,
            "epochs": epochs, "wall_seconds": wall, "levels": levels,
            "sample_lira": lira, "sample_label_only": label_only,
            "label_only_beats_lira": None if lira is None or label_only is None else label_only > lira}


def bench_ssl(data_dir: Path, device: str, models: int, epochs: int) -> dict[str, Any]:
    args = ["ssl-simclr", "--preset", "cifar10", "--data-dir", str(data_dir), "--device", device, "--models",
            str(models), "--set", "defense_params.encoder=resnet18", "--set", f"defense_params.epochs={epochs}"]
    results, wall = _evaluate(args)
    levels = _levels(results)
    s = levels.get("sample", {}).get("primary_variants", {})
    best = {name: max((v for k, v in s.items() if k.startswith(name + ":")), default=None)
            for name in ("lira", "contrastive")}
    return {"figure": "ssl-simclr resnet18 cifar10 subset", "device": device_name(device), "models_per_level": models,
            "pretrain_epochs": epochs, "wall_seconds": wall, "levels": levels, "sample_best_by_attack": best}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["epoch", "fast", "hamp", "ssl", "all"])
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--models", type=int, default=None)
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None, help="also write each figure to OUT/<what>.json")
    args = ap.parse_args()
    jobs = ["epoch", "fast", "hamp", "ssl"] if args.what == "all" else [args.what]
    for what in jobs:
        t0 = time.perf_counter()
        if what == "epoch":
            fig = bench_epoch(args.data_dir, args.device, args.epochs or 2)
        elif what == "fast":
            fig = bench_fast(args.data_dir, args.device, args.models or 64, args.epochs)
        elif what == "hamp":
            fig = bench_hamp(args.data_dir, args.device, args.models or 16, args.epochs or 50)
        else:
            fig = bench_ssl(args.data_dir, args.device, args.models or 16, args.epochs or 100)
        fig["bench_seconds"] = time.perf_counter() - t0
        line = json.dumps(fig)
        print(line, flush=True)
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{what}.json").write_text(line + "\n")


if __name__ == "__main__":
    main()
