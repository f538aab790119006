"""Stacked CNNs (defenses/stacked.py, the grouped engine; issue 45): what they buy, on this machine.

    python benchmarks/bench_stacked_cnn.py cpu --data-dir ../shared/data/cifar10-subset [--models 8] [--epochs 3]
        [--groups 2 4] [--runs 2] [--vs REV]
    python benchmarks/bench_stacked_cnn.py cnn --data-dir ../shared/data/cifar10-subset [--groups 2 4] [--rounds 3]
    python benchmarks/bench_stacked_cnn.py throughput --data-dir DIR [--device cuda] [--groups 1 8 16 32 64]
        [--epochs 2] [--variants channels_last bf16 compile] [--out DIR]
    python benchmarks/bench_stacked_cnn.py dpsgd [--device cuda] [--groups 1 4 8 16] [--repeats 7]

- ``cpu``: the ``cifar10`` preset end to end (``harness evaluate undefended --preset cifar10``, the
  population level, ``--models`` models of ``--epochs`` epochs, 2 workers: this project's 2 cores)
  with the models trained one at a time (``run.group_size=1``) and stacked (``run.group_size=G``),
  and with ``--vs REV`` REV's code one at a time (a git worktree), the settings taking turns run by
  run. Prints the wall times, each model's own training time (results.json) and the ratios.
- ``cnn``: the same question inside one process, so that a loaded machine's drift hits every setting
  alike: seconds per model-epoch of the ``cifar10`` preset's CNN on its population-level training
  sets, one thread, one model alone (channels-first and channels-last) and G models stacked (both
  layouts), the settings taking turns for ``--rounds`` rounds (median, min-max).
- ``throughput`` (the GPU figure of issue 45): G airbench models of the ``fast`` recipe (width 64,
  batch 512, flips and shifts) trained stacked for ``--epochs`` epochs on their own population-level
  training sets of the data folder, for each G of ``--groups``, after an untimed epoch at the same
  G; G = 1 also one at a time (``train_classifier``, the path before stacking). Prints seconds per
  epoch, images per second, models per second at the campaign's 60 epochs (``--project-epochs``)
  and the projected seconds for 2 x 64 such models (issue 45's goal: under 2 minutes), the peak
  GPU memory, and ``oom`` where a G did not fit. ``--variants`` times the grouped engine's speed
  settings (defenses.stacked.StackOptions), each changed alone from the device's defaults
  (channels-last switched, on the CPU off; bf16 autocast on; torch.compile on; ``nondeterministic``:
  CUDA's fast nondeterministic kernels and cuDNN's benchmark mode, ``run.deterministic=false``), at the
  largest G that fitted (or ``--variant-g``), each with its largest logit difference from the plain
  run and both test accuracies (do they keep the numbers?). With ``--out`` the figure so far is
  written after every row (``sweep_complete`` once every G ran, ``complete`` at the end).
- ``dpsgd``: do DP-SGD's per-sample gradients vectorise across models? The clipped per-sample
  gradient sums of one logical step (defenses/dpsgd.py: ``vmap(grad)`` over samples, augmentation
  multiplicity K) for G models of the ``cifar10`` preset's DP-SGD recipe (cnn-gn, width 16, batch
  16, K = 4), one model after the other against one ``vmap`` over the G models (equal batch sizes;
  Poisson batches would need padding), with the largest difference between the two.

Each mode prints one JSON line last (``--out DIR`` also writes DIR/<mode>.json). ``--device cpu`` with
small sizes runs every mode here: tests/test_gpu_campaign.py does, at toy scale.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from bench_speed import REPO, time_quick

#: the campaign's epochs for airbench on the CIFAR-10 subset (docs/gpu.md: the fast recipe fits its
#: mislabeled canaries at 60 epochs, 99.9% TPR@0.1% FPR, not at 10)
PROJECT_EPOCHS = 60


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return f"{device} ({torch.cuda.get_device_name()})"
    return device


# --- cpu: the cifar10 preset end to end, one at a time vs stacked ---------------------------------


def bench_cpu(data_dir: Path, models: int, epochs: int, groups: list[int], runs: int, vs: str | None) -> dict[str, Any]:
    args = ("undefended", "--preset", "cifar10", "--data-dir", str(data_dir.resolve()), "--models", str(models),
            "--epochs", str(epochs), "--level", "population", "--workers", "2")
    settings: dict[str, tuple[Path | None, list[str]]] = {"alone": (REPO, ["run.group_size=1"])}
    for g in groups:
        settings[f"stacked-{g}"] = (REPO, [f"run.group_size={g}"])
    other = None
    if vs:
        other = Path(tempfile.mkdtemp(prefix="bench-stacked-cnn-")) / "wt"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(other), vs],
                       check=True, capture_output=True)
        settings[f"{vs}-alone"] = (other, ["run.group_size=1"])
    wall: dict[str, list[float]] = {k: [] for k in settings}
    per_model: dict[str, list[float]] = {k: [] for k in settings}
    try:
        for i in range(runs):
            for name, (cwd, sets) in settings.items():
                phases: list[dict] = []
                wall[name].append(time_quick(cwd, sets, phases, args))
                if phases and phases[0].get("train_seconds_per_model"):
                    per_model[name].append(phases[0]["train_seconds_per_model"])
                print(f"run {i + 1} {name}: {wall[name][-1]:.1f} s", flush=True)
    finally:
        if other is not None:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(other)], capture_output=True)
    med = {k: statistics.median(v) for k, v in wall.items()}
    out = {"figure": "cifar10 preset on the CPU, one at a time vs stacked", "threads": torch.get_num_threads(),
           "models": models, "epochs": epochs, "level": "population", "workers": 2, "wall_seconds": wall,
           "median_wall_seconds": med, "train_seconds_per_model": per_model,
           "speedup_over_alone": {k: med["alone"] / v for k, v in med.items()}}
    for k, v in med.items():
        pm = per_model[k]
        print(f"{k}: median {v:.1f} s (min {min(wall[k]):.1f}, max {max(wall[k]):.1f})"
              + (f", each model's own training {statistics.median(pm):.2f} s" if pm else "")
              + f"; alone / this {med['alone'] / v:.2f}x")
    return out


# --- cnn: the cifar10 preset's CNN, one process, settings taking turns -------------------------------


def bench_cnn(data_dir: Path, groups: list[int], rounds: int) -> dict[str, Any]:
    from defenses.base import FitContext
    from defenses.stacked import StackOptions, train_stacked
    from defenses.training import init_network, train_classifier
    from harness.core.data import load_dataset
    from harness.defense_config import build_config
    from harness.run.runner import build_level, model_seed, training_set

    torch.set_num_threads(1)
    cfg = build_config("cifar10", {"data.path": str(data_dir), "train.epochs": 1, "run.level": "population"})
    data = load_dataset(cfg.data, cfg.seed)
    ld = build_level(cfg, data, "population", "none")
    n = max(groups)
    trains = [training_set(data, ld, i) for i in range(n)]
    ctxs = [FitContext(seed=model_seed(cfg.seed, i, cfg.audit.rng, cfg.audit.models), device="cpu", train=cfg.train)
            for i in range(n)]
    settings: dict[str, Any] = {"alone, channels-first": (1, False), "alone, channels-last": (1, True)}
    for g in groups:
        settings[f"stacked by {g}, channels-first"] = (g, False)
        settings[f"stacked by {g}, channels-last"] = (g, True)

    def once(g: int, last: bool) -> float:
        t0 = time.perf_counter()
        if g == 1:
            train_classifier(init_network(trains[0], ctxs[0]), trains[0], ctxs[0], channels_last=last)
        else:
            train_stacked([init_network(t, c) for t, c in zip(trains[:g], ctxs[:g])], trains[:g], ctxs[:g],
                          options=StackOptions(channels_last=last))
        return (time.perf_counter() - t0) / g

    for g, last in settings.values():  # warm-up: oneDNN builds its kernels for each shape once
        once(g, last)
    times: dict[str, list[float]] = {k: [] for k in settings}
    for r in range(rounds):
        for name, (g, last) in settings.items():
            times[name].append(once(g, last))
            print(f"round {r + 1} {name}: {times[name][-1]:.2f} s per model-epoch", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["alone, channels-first"]
    for k, v in med.items():
        print(f"{k}: median {v:.2f} s per model-epoch ({min(times[k]):.2f}-{max(times[k]):.2f}); "
              f"alone channels-first / this {base / v:.2f}x")
    return {"figure": "cifar10 preset CNN, seconds per model-epoch, one thread", "train_images": len(trains[0]),
            "rounds": rounds, "seconds": times, "median": med, "speedup_over_alone_channels_first":
            {k: base / v for k, v in med.items()}}


# --- throughput: models per second of the stacked airbench network --------------------------------


def _fast_setup(data_dir: Path, count: int, epochs: int, device: str, toy: bool):
    """``count`` population-level training sets and contexts of the ``fast`` preset on ``data_dir``."""
    from defenses.base import FitContext
    from harness.core.data import load_dataset
    from harness.defense_config import build_config
    from harness.run.runner import build_level, configure_determinism, model_seed, training_set

    over = {"data.path": str(data_dir), "audit.models": max(6, count + count % 2), "run.level": "population"}
    if toy:
        over.update({"train.width": 8, "train.batch_size": 32, "audit.size": 8, "audit.population_samples": 8})
    cfg = build_config("fast", over)
    configure_determinism(device, cfg.run.deterministic)
    data = load_dataset(cfg.data, cfg.seed)
    ld = build_level(cfg, data, "population", "none")
    recipe = cfg.train.model_copy(update={"epochs": epochs})
    trains = [training_set(data, ld, i) for i in range(count)]
    ctxs = [FitContext(seed=model_seed(cfg.seed, i, cfg.audit.rng, cfg.audit.models), device=device, train=recipe)
            for i in range(count)]
    return data, trains, ctxs


def _timed(fn, device: str) -> float:
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def _accuracy(nets: list[torch.nn.Module], data, device: str) -> tuple[float, torch.Tensor]:
    from defenses.base import Normalizer

    x = Normalizer(data.mean, data.std, device)(torch.from_numpy(data.x_test[:1000]))
    y = torch.from_numpy(data.y_test[:1000]).to(device)
    with torch.no_grad():
        z = torch.stack([n(x).float() for n in nets])
    return float((z.argmax(-1) == y).float().mean()), z


def bench_throughput(data_dir: Path, device: str, groups: list[int], epochs: int, variants: list[str],
                     variant_g: int | None, project_epochs: int, toy: bool = False,
                     out: Path | None = None) -> dict[str, Any]:
    from defenses.stacked import StackOptions, train_stacked
    from defenses.training import channels_last_default, init_network, train_classifier
    from harness.run.runner import configure_determinism

    data, trains, ctxs = _fast_setup(data_dir, max(groups + [variant_g or 0]), epochs, device, toy)
    images = statistics.mean(len(t) for t in trains)
    rows: list[dict[str, Any]] = []
    var_rows: list[dict[str, Any]] = []

    def figure(sweep_complete: bool, complete: bool) -> dict[str, Any]:
        strip = [{k: v for k, v in r.items() if k != "logits"} for r in rows + var_rows]
        return {"figure": "stacked airbench throughput on the CIFAR-10 subset", "device": device_name(device),
                "torch": torch.__version__, "epochs_timed": epochs, "train_images_per_model": images,
                "project_epochs": project_epochs, "toy": toy, "sweep_complete": sweep_complete,
                "complete": complete, "rows": strip}

    def save(sweep_complete: bool = False, complete: bool = False) -> None:
        """The figure so far to OUT/throughput.json after every row: a call cut short keeps what it measured."""
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / "throughput.json").write_text(json.dumps(figure(sweep_complete, complete)) + "\n")

    def run(g: int, options: StackOptions | None, alone: bool = False, deterministic: bool = True) -> dict[str, Any]:
        if not deterministic:
            configure_determinism(device, False)
        try:
            return _run(g, options, alone)
        finally:
            if not deterministic:
                configure_determinism(device, True)

    def _run(g: int, options: StackOptions | None, alone: bool = False) -> dict[str, Any]:
        tr, cx = trains[:g], ctxs[:g]
        warm = [dataclasses.replace(c, train=c.train.model_copy(update={"epochs": 1})) for c in cx]
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        try:
            if alone:
                train_classifier(init_network(tr[0], warm[0]), tr[0], warm[0])
                nets = [init_network(tr[0], cx[0])]
                secs = _timed(lambda: train_classifier(nets[0], tr[0], cx[0]), device)
            else:
                train_stacked([init_network(t, c) for t, c in zip(tr, warm)], tr, warm, options=options)
                nets = [init_network(t, c) for t, c in zip(tr, cx)]
                secs = _timed(lambda: train_stacked(nets, tr, cx, options=options), device)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            return {"G": g, "oom": True}
        acc, logits = _accuracy(nets, data, device)
        per_epoch = secs / epochs
        row = {"G": g, "mode": "alone" if alone else "stacked", "seconds": secs, "seconds_per_epoch": per_epoch,
               "images_per_second": g * images * epochs / secs,
               f"models_per_second_{project_epochs}_epochs": g / (per_epoch * project_epochs),
               f"projected_seconds_2x64_models_{project_epochs}_epochs": 128 * per_epoch * project_epochs / g,
               "test_accuracy": acc, "logits": logits}
        if device.startswith("cuda"):
            row["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
        return row

    for g in groups:
        if g == 1:
            rows.append(run(1, None, alone=True))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "logits"}), flush=True)
        row = run(g, StackOptions())
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "logits"}), flush=True)
        save()
        if row.get("oom"):
            break
    save(sweep_complete=True)
    fitted = [r for r in rows if r.get("mode") == "stacked"]
    if variants and fitted:
        g = variant_g or max(r["G"] for r in fitted)
        plain = next((r for r in fitted if r["G"] == g), None) or run(g, StackOptions())
        layout = channels_last_default(torch.device(device))
        for v in variants:  # each variant changes one setting of the plain run (the device's defaults)
            opts = StackOptions(channels_last=(not layout) if v == "channels_last" else None, bf16=v == "bf16",
                                compile=v == "compile")
            row = run(g, opts, deterministic=v != "nondeterministic")
            row["variant"] = f"channels_last={'off' if layout else 'on'}" if v == "channels_last" else v
            if not row.get("oom"):
                diff = (row["logits"] - plain["logits"]).abs().max() / plain["logits"].abs().max().clamp(min=1e-6)
                row["max_logit_difference_vs_plain"] = float(diff)
                row["plain_test_accuracy"] = plain["test_accuracy"]
                row["speedup_vs_plain"] = plain["seconds"] / row["seconds"]
            var_rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "logits"}), flush=True)
            save(sweep_complete=True)
    save(sweep_complete=True, complete=True)
    return figure(True, True)


# --- dpsgd: per-sample gradients across models ----------------------------------------------------


def bench_dpsgd(device: str, groups: list[int], repeats: int = 7,
                batch: int = 16, augmult: int = 4, width: int = 16) -> dict[str, Any]:
    from defenses.dpsgd import per_sample_grad_fn, sum_clipped
    from defenses.models import build_model

    gen = torch.Generator().manual_seed(0)
    g_max = max(groups)
    nets = []
    for i in range(g_max):
        torch.manual_seed(i)
        nets.append(build_model("cnn-gn", (3, 32, 32), 10, width).to(device))
    x = torch.randn(g_max, batch, augmult, 3, 32, 32, generator=gen).to(device)
    y = torch.randint(0, 10, (g_max, batch, 1), generator=gen).to(device)
    params = [{k: p.detach() for k, p in n.named_parameters()} for n in nets]
    buffers = [{k: b.detach() for k, b in n.named_buffers()} for n in nets]
    fn = per_sample_grad_fn(nets[0])

    def one(i: int) -> dict[str, torch.Tensor]:
        return sum_clipped(fn(params[i], buffers[i], x[i], y[i]), 1.0)

    stacked_fn = torch.func.vmap(lambda p, b, xs, ys: sum_clipped(fn(p, b, xs, ys), 1.0))
    rows = []
    for g in groups:
        sp = {k: torch.stack([p[k] for p in params[:g]]) for k in params[0]}
        sb = {k: torch.stack([b[k] for b in buffers[:g]]) for k in buffers[0]}

        def seq() -> list[dict[str, torch.Tensor]]:
            return [one(i) for i in range(g)]

        def vec() -> dict[str, torch.Tensor]:
            return stacked_fn(sp, sb, x[:g], y[:g])

        for _ in range(2):  # warm-up (the first calls build kernels and caches), and the two agree
            a, b = seq(), vec()
        diff = max(float((torch.stack([r[k] for r in a]) - b[k]).abs().max()) for k in b)
        t_seq = statistics.median(_timed(seq, device) for _ in range(repeats))
        t_vec = statistics.median(_timed(vec, device) for _ in range(repeats))
        rows.append({"G": g, "sequential_seconds": t_seq, "vmap_seconds": t_vec, "speedup": t_seq / t_vec,
                     "max_difference": diff})
        print(json.dumps(rows[-1]), flush=True)
    return {"figure": "DP-SGD per-sample gradients across models (nested vmap vs one model at a time)",
            "device": device_name(device), "torch": torch.__version__, "model": f"cnn-gn width {width}",
            "batch": batch, "augmult": augmult, "threads": torch.get_num_threads(), "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["cpu", "cnn", "throughput", "dpsgd"])
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--groups", type=int, nargs="+", default=None)
    ap.add_argument("--models", type=int, default=8, help="cpu: models per run")
    ap.add_argument("--epochs", type=int, default=None, help="cpu: 3; throughput: 2 (timed)")
    ap.add_argument("--runs", type=int, default=2, help="cpu: runs of each setting")
    ap.add_argument("--rounds", type=int, default=3, help="cnn: rounds of every setting")
    ap.add_argument("--vs", default=None, help="cpu: also time this commit's code one at a time")
    ap.add_argument("--variants", nargs="*", default=[],
                    choices=["channels_last", "bf16", "compile", "nondeterministic"])
    ap.add_argument("--variant-g", type=int, default=None)
    ap.add_argument("--project-epochs", type=int, default=PROJECT_EPOCHS)
    ap.add_argument("--toy", action="store_true", help="throughput: width 8, batch 32 (CPU tests)")
    ap.add_argument("--repeats", type=int, default=7, help="dpsgd: timed repeats of each (the median is kept)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.mode in ("cpu", "cnn", "throughput") and args.data_dir is None:
        ap.error(f"{args.mode} needs --data-dir (a CIFAR-10 folder, e.g. ../shared/data/cifar10-subset)")
    if args.mode == "cpu":
        fig = bench_cpu(args.data_dir, args.models, args.epochs or 3, args.groups or [2, 4], args.runs, args.vs)
    elif args.mode == "cnn":
        fig = bench_cnn(args.data_dir, args.groups or [2, 4], args.rounds)
    elif args.mode == "throughput":
        fig = bench_throughput(args.data_dir, args.device, args.groups or [1, 8, 16, 32, 64], args.epochs or 2,
                               args.variants, args.variant_g, args.project_epochs, args.toy, args.out)
    else:
        fig = bench_dpsgd(args.device, args.groups or [1, 4, 8, 16], args.repeats)
    line = json.dumps(fig)
    print(line, flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{args.mode}.json").write_text(line + "\n")


if __name__ == "__main__":
    main()
