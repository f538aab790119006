"""The paper's setting on a GPU (issues 13 and 10): what a lent GPU session runs, one JSON line per figure.

    python benchmarks/bench_gpu.py smoke --data-dir ../shared/data/cifar10-subset [--device cuda]
    python benchmarks/bench_gpu.py epoch --data-dir ../shared/data/cifar10-subset [--epochs 2]
    python benchmarks/bench_gpu.py attack --data-dir ... --out DIR [--samples 50000]   # after epoch --out DIR
    python benchmarks/bench_gpu.py fast  --data-dir ../shared/data/cifar10-subset [--models 64]
    python benchmarks/bench_gpu.py hamp  --data-dir ../shared/data/cifar10-subset [--models 16] [--epochs 50]
    python benchmarks/bench_gpu.py ssl   --data-dir ../shared/data/cifar10-subset [--models 16] [--epochs 100]
    python benchmarks/bench_gpu.py all   --data-dir ... --out DIR        # epoch, attack, fast, hamp, ssl; under DIR

- ``smoke``: every figure below at toy scale (the first 24 images of each training batch, 60 test
  images, 6 models, one epoch, sample level) with the real networks: do the code paths run on this
  device? About a minute on a GPU; run it first.
- ``epoch``: one WRN16-4 model at the paper's recipe (``paper`` preset: batch 256, SGD 0.1, flips
  and shifts, ``run.deterministic`` as ``harness evaluate`` sets it) trained for ``--epochs``
  (default 2) epochs on the training images found; prints the seconds per epoch and per training
  image, and projects the paper's 2 x 64 models of 200 epochs on ~25 000 training images per model.
- ``attack``: the whole attack phase (``harness attack``: LiRA, RMIA and the threshold attack, 14
  variants, their metrics, bootstrap CIs, bounds and report files) on a synthetic run of the paper's
  population audit (64 models x 50 000 samples x 18 views x 10 classes, float16 signals, weak
  signals as a real population level: benchmarks/bench_attack_phase.py) on this machine's CPU: wall
  and CPU seconds, peak RSS, bytes written, and, where ``--out`` holds the ``epoch`` figure, its
  share of one level's projected training (issue 13: the attack phase should take under 5% of the
  training time).
- ``fast``: ``harness evaluate undefended --preset fast`` end to end (both levels), its wall time,
  test accuracy and population / sample-level TPR@0.1% FPR (does the fast recipe keep the finding
  that mislabeled canaries are found at near 100%?).
- ``hamp``: ``harness evaluate hamp`` with the WRN16-4 at the ``cifar10`` preset's HAMP recipe,
  mislabeled canaries, LiRA and the label-only attack: which is stronger at the sample level (the
  paper finds label-only beats LiRA against HAMP's confidence masking)?
- ``ssl`` (issue 10): ``harness evaluate ssl-simclr`` with the ResNet-18 encoder (the ``cifar10``
  preset's SSL settings, ``encoder=resnet18``) pre-trained for ``--epochs`` (default 100, the paper
  800), both levels: does the white-box contrastive attack beat LiRA on the OOD canaries? ``--ood
  auto`` (default) takes the paper's ImageNet canaries where the data folder holds
  ``ood_imagenet_samples.pt``, else the bundled photo patches; the figure records ``ood_source``.

``--set KEY=VALUE`` and ``--workers`` go to every ``harness evaluate`` run (``--set`` also to
``epoch``'s config); ``--runs DIR`` keeps the runs (the same command again resumes its run). An
option that the chosen figure does not read is refused. ``--tag T`` names the file OUT/<what>-T.json,
so that two settings of one figure (``fast --workers 1`` and ``--workers 4``: several trainings
sharing the GPU, issue 13) come back side by side. Each
figure prints the device (torch.cuda.get_device_name). ``--device cpu`` with small ``--models`` /
``--epochs`` runs the same code on a CPU: tests/test_bench_gpu.py does, at toy scale.
benchmarks/gpu_prepare.sh and benchmarks/gpu_run.sh run this script on this project's lent GPU
machines (docs/gpu.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from harness_cli import evaluate_into, run_python

from harness.core import jsonio

PAPER_TRAIN_IMAGES = 25_000  # about half of CIFAR-10's 50 000 training images per model (membership 1/2)


def device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return f"{device} ({torch.cuda.get_device_name()})"
    return device


def bench_epoch(data_dir: Path, device: str, epochs: int, overrides: list[str]) -> dict[str, Any]:
    from defenses.base import FitContext, LabeledImages
    from defenses.training import init_network, train_classifier
    from harness.core.config import parse_set_options
    from harness.defense_config import build_config
    from harness.core.data import load_dataset
    from harness.run.runner import configure_determinism

    cfg = build_config("paper", {**parse_set_options(overrides), "data.path": str(data_dir), "train.epochs": epochs})
    configure_determinism(device, cfg.run.deterministic)  # as harness evaluate trains (run.deterministic)
    data = load_dataset(cfg.data, cfg.seed)
    train = LabeledImages(x=data.x_train, y=data.y_train, num_classes=data.num_classes, mean=data.mean,
                          std=data.std, augment=data.augment)
    # untimed warm-up (CUDA context, cuDNN and allocator start-up): one epoch of another net on 512 images
    warm = LabeledImages(x=data.x_train[:512], y=data.y_train[:512], num_classes=data.num_classes, mean=data.mean,
                         std=data.std, augment=data.augment)
    warm_ctx = FitContext(seed=1, device=device, train=cfg.train.model_copy(update={"epochs": 1}))
    train_classifier(init_network(warm, warm_ctx), warm, warm_ctx)
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
            "batch_size": cfg.train.batch_size, "deterministic": cfg.run.deterministic,
            "warm_up": "one untimed epoch of another model on 512 images first"}


def _evaluate(args: list[str], runs: Path | None) -> tuple[dict[str, Any], float]:
    """``harness evaluate ARGS`` into ``runs/<defense>-<hash of ARGS>`` (kept: the same command again
    resumes its run, e.g. after a device call ran out of time), or into a temporary folder when
    ``runs`` is None."""
    with tempfile.TemporaryDirectory() as tmp:
        key = hashlib.sha256(json.dumps(args).encode()).hexdigest()[:10]
        out = Path(tmp) if runs is None else runs / f"{args[0]}-{key}"
        out.mkdir(parents=True, exist_ok=True)
        run_dir, wall = evaluate_into(out, *args)
        return jsonio.loads((run_dir / "results.json").read_text()), wall


def _experiment(r: dict[str, Any], k: str) -> dict[str, Any]:
    per_attack = {f"{a['name']}:{a['variant']}": a["tpr_at_fpr"][k] for a in r["attacks"] if a["primary"]}
    return {"canary": r["canary"], "test_accuracy": r["test_accuracy"]["mean"],
            "headline": f"{r['best']['name']}:{r['best']['variant']}", "tpr_at_0.1%": r["best"]["tpr_at_fpr"][k],
            "tpr_ci": r["best"]["tpr_ci"][k], "primary_variants": per_attack}


def _levels(results: dict[str, Any]) -> dict[str, Any]:
    """``population`` and one ``sample-<canary>`` entry per sample-level canary: the headline, its
    CI, the test accuracy and every primary variant's TPR at the headline FPR (0.1%)."""
    k = repr(float(results["headline_fpr"]))
    out = {}
    if "population" in results:
        out["population"] = _experiment(results["population"], k)
    if "sample" in results:
        by_canary = results.get("sample_by_canary") or {results["sample"]["canary"]: results["sample"]}
        for canary, r in by_canary.items():
            out[f"sample-{canary}"] = _experiment(r, k)
    return out


def _best_by_attack(level: dict[str, Any], names: tuple[str, ...]) -> dict[str, float | None]:
    """The largest TPR among each attack's primary variants in one experiment of :func:`_levels`."""
    s = level.get("primary_variants", {})
    return {n: max((v for key, v in s.items() if key.startswith(n + ":")), default=None) for n in names}


def _beats(best: dict[str, float | None], a: str, b: str) -> bool | None:
    """Whether attack ``a`` has the higher TPR than ``b`` in :func:`_best_by_attack`; None if one is missing."""
    return None if best[a] is None or best[b] is None else best[a] > best[b]


def bench_fast(data_dir: Path, device: str, models: int, epochs: int | None, extra: list[str],
               runs: Path | None = None) -> dict[str, Any]:
    args = ["undefended", "--preset", "fast", "--data-dir", str(data_dir), "--device", device, "--models", str(models)]
    if epochs:
        args += ["--epochs", str(epochs)]
    results, wall = _evaluate(args + extra, runs)
    return {"figure": "fast preset end to end", "device": device_name(device), "models_per_level": models,
            "wall_seconds": wall, "levels": _levels(results)}


def bench_hamp(data_dir: Path, device: str, models: int, epochs: int, extra: list[str],
               runs: Path | None = None) -> dict[str, Any]:
    args = ["hamp", "--preset", "cifar10", "--data-dir", str(data_dir), "--device", device, "--models", str(models),
            "--epochs", str(epochs), "--set", "train.model=wrn16-4", "--set", "audit.canary=mislabeled"]
    results, wall = _evaluate(args + extra, runs)
    levels = _levels(results)
    best = _best_by_attack(levels.get("sample-mislabeled", {}), ("lira", "label-only"))
    return {"figure": "hamp wrn16-4 cifar10 subset", "device": device_name(device), "models_per_level": models,
            "epochs": epochs, "wall_seconds": wall, "levels": levels,
            "sample_lira": best["lira"], "sample_label_only": best["label-only"],
            "label_only_beats_lira": _beats(best, "label-only", "lira")}


def ood_source(data_dir: Path, wanted: str) -> str:
    """``auto``: the paper's ImageNet canaries where ``ood_imagenet_samples.pt`` lies in the data folder,
    else the bundled photo patches (the figure records which); otherwise ``wanted`` as given."""
    if wanted != "auto":
        return wanted
    paper_file = data_dir / "ood_imagenet_samples.pt"
    return str(paper_file) if paper_file.is_file() else "photos"


def bench_ssl(data_dir: Path, device: str, models: int, epochs: int, extra: list[str],
              ood: str = "auto", runs: Path | None = None) -> dict[str, Any]:
    source = ood_source(data_dir, ood)
    args = ["ssl-simclr", "--preset", "cifar10", "--data-dir", str(data_dir), "--device", device, "--models",
            str(models), "--set", "defense_params.encoder=resnet18", "--set", f"defense_params.epochs={epochs}",
            "--set", f"audit.canary_params.ood.source={source}"]
    results, wall = _evaluate(args + extra, runs)
    levels = _levels(results)
    best = _best_by_attack(levels.get("sample-ood", {}), ("lira", "contrastive", "lira-sslview"))
    return {"figure": "ssl-simclr resnet18 cifar10 subset", "device": device_name(device), "models_per_level": models,
            "pretrain_epochs": epochs, "ood_source": source, "wall_seconds": wall, "levels": levels,
            "ood_best_by_attack": best,
            "contrastive_beats_lira_on_ood": _beats(best, "contrastive", "lira"),
            "contrastive_beats_lira_sslview_on_ood": _beats(best, "contrastive", "lira-sslview")}


def bench_attack(out: Path | None, samples: int) -> dict[str, Any]:
    """The whole attack phase (``harness attack``, every attack of the ``paper`` preset) on a synthetic
    run at the paper's population scale (64 models x ``samples`` x 18 views x 10 classes, float16,
    weak signals: benchmarks/bench_attack_phase.py), on this machine's CPU, and its share of the
    paper setting's projected training time where ``out`` holds an ``epoch`` figure (issue 13:
    attack phase under 5% of training)."""
    stdout, _ = run_python(str(Path(__file__).with_name("bench_attack_phase.py")), "--models", "64", "--samples",
                           str(samples), "--signals", "weak", "--json")
    row = json.loads(stdout.strip().splitlines()[-1])
    this = row["this"]
    fig = {"figure": "attack phase (harness attack) at the paper's population scale", "device": "cpu",
           "cpu_cores": os.cpu_count(), "models": row["models"], "samples": row["samples"], "views": row["views"],
           "classes": row["classes"], "dtype": row["dtype"], "variants": this["headline"]["variants"],
           "attack_wall_seconds": this["wall_s"], "attack_cpu_seconds": this["cpu_s"],
           "peak_rss_mib": this["peak_rss_mib"], "bytes_written": this["bytes_written"], "roc_bytes": this["roc_bytes"]}
    epoch = out / "epoch.json" if out is not None else None
    if epoch is not None and epoch.is_file():
        hours = json.loads(epoch.read_text())["projected_hours_2x64_models_200_epochs_25k_images"]
        # one level's training (64 models) against one level's attack phase (its 64 models' signals)
        fig["share_of_projected_training_per_level"] = fig["attack_wall_seconds"] / (hours * 3600 / 2)
    return fig


def toy_cifar(src: Path, dst: Path, per_batch: int = 24, test: int = 60) -> Path:
    """A CIFAR-10 folder in the official format with the first ``per_batch`` images of each training
    batch under ``src`` and the first ``test`` test images (and ``src``'s OOD canary file, if any)."""
    folder = src / "cifar-10-batches-py" if (src / "cifar-10-batches-py").is_dir() else src
    (dst / "cifar-10-batches-py").mkdir(parents=True, exist_ok=True)
    for name, n in [(f"data_batch_{i}", per_batch) for i in range(1, 6)] + [("test_batch", test)]:
        with open(folder / name, "rb") as f:
            d = pickle.load(f, encoding="latin1")
        with open(dst / "cifar-10-batches-py" / name, "wb") as f:
            pickle.dump({"data": d["data"][:n], "labels": d["labels"][:n]}, f)
    if (src / "ood_imagenet_samples.pt").is_file():
        shutil.copy(src / "ood_imagenet_samples.pt", dst)
    return dst


#: toy settings of ``smoke``: 6 models, 8 audit samples, one epoch, sample level only
TOY = ["--set", "audit.size=8", "--set", "audit.population_samples=8", "--set", "attack.bootstrap=20",
       "--set", "run.level=sample"]


def bench_smoke(data_dir: Path, device: str) -> dict[str, Any]:
    """Every figure at toy scale (120 training images, 6 models, one epoch) with the real networks
    (WRN16-4, airbench, ResNet-18) on ``device``: do the code paths run there? About a minute on a GPU."""
    with tempfile.TemporaryDirectory() as tmp:
        toy = toy_cifar(data_dir, Path(tmp) / "toy")
        figs = {"epoch": bench_epoch(toy, device, 1, []),
                "fast": bench_fast(toy, device, 6, 1, TOY),
                "hamp": bench_hamp(toy, device, 6, 1, TOY),
                "ssl": bench_ssl(toy, device, 6, 1, TOY + ["--set", "defense_params.batch_size=32",
                                                          "--set", "defense_params.probe_epochs=1"])}
    return {"figure": "smoke: every figure at toy scale", "device": device_name(device),
            "seconds": {k: v.get("wall_seconds", v.get("seconds_per_epoch")) for k, v in figs.items()},
            "figures": figs}


#: the options each figure reads (any other given option is refused: it would be silently ignored)
_EVALUATE = {"--models", "--epochs", "--set", "--workers", "--runs"}
APPLIES: dict[str, set[str]] = {"smoke": set(), "epoch": {"--epochs", "--set"}, "attack": {"--samples"},
                                "fast": _EVALUATE, "hamp": _EVALUATE, "ssl": _EVALUATE | {"--ood"}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["smoke", "epoch", "attack", "fast", "hamp", "ssl", "all"])
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--models", type=int, default=None)
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--samples", type=int, default=None, help="attack: audit samples (default CIFAR-10's 50 000)")
    ap.add_argument("--workers", type=int, default=None, help="harness evaluate --workers (trainings sharing the GPU)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="passed to every harness evaluate run (repeatable)")
    ap.add_argument("--ood", default="auto",
                    help="ssl's OOD canaries: auto (the data folder's ood_imagenet_samples.pt if there, else photos), "
                         "photos, or a path")
    ap.add_argument("--runs", type=Path, default=None,
                    help="keep the evaluate runs under RUNS (the same command again resumes its run); default: a "
                         "temporary folder, removed")
    ap.add_argument("--out", type=Path, default=None, help="also write each figure to OUT/<what>.json")
    ap.add_argument("--tag", default="", help="write OUT/<what>-TAG.json instead (two settings of one figure, e.g. "
                                              "--workers 1 and 4, in one OUT)")
    args = ap.parse_args()
    jobs = ["epoch", "attack", "fast", "hamp", "ssl"] if args.what == "all" else [args.what]
    given = {flag for flag, v in (("--models", args.models), ("--epochs", args.epochs), ("--set", args.overrides),
                                  ("--workers", args.workers), ("--runs", args.runs), ("--samples", args.samples),
                                  ("--ood", args.ood != "auto")) if v}
    unused = given - set().union(*(APPLIES[j] for j in jobs))
    if unused:
        reads = "; ".join(f"{j} reads " + (", ".join(sorted(APPLIES[j])) or "none of them") for j in jobs)
        ap.error(f"{', '.join(sorted(unused))} would not apply to {args.what} ({reads})")
    extra = [a for kv in args.overrides for a in ("--set", kv)]
    if args.workers is not None:
        extra += ["--workers", str(args.workers)]
    for what in jobs:
        t0 = time.perf_counter()
        if what == "smoke":
            fig = bench_smoke(args.data_dir, args.device)
        elif what == "attack":
            fig = bench_attack(args.out, args.samples or 50_000)
        elif what == "epoch":
            fig = bench_epoch(args.data_dir, args.device, args.epochs or 2, args.overrides)
        elif what == "fast":
            fig = bench_fast(args.data_dir, args.device, args.models or 64, args.epochs, extra, args.runs)
        elif what == "hamp":
            fig = bench_hamp(args.data_dir, args.device, args.models or 16, args.epochs or 50, extra, args.runs)
        else:
            fig = bench_ssl(args.data_dir, args.device, args.models or 16, args.epochs or 100, extra, args.ood,
                            args.runs)
        fig["extra_args"] = extra
        if args.tag:
            fig["tag"] = args.tag
        fig["bench_seconds"] = time.perf_counter() - t0
        line = json.dumps(fig)
        print(line, flush=True)
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{what}{'-' + args.tag if args.tag else ''}.json").write_text(line + "\n")


if __name__ == "__main__":
    main()
