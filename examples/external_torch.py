"""Train an audit plan's models with a plain PyTorch loop, outside the harness.

    harness plan plans/digits --models 16                 # the audit plan (docs/external-models.md)
    python examples/external_torch.py plans/digits --outputs outputs/digits
    harness import plans/digits --outputs outputs/digits  # the audit: report, run directory, leaderboard entry

This script imports neither the harness nor its training code: it reads the plan's files with numpy
and trains the plan's recipe (plan.json, ``recipe``: the quick preset's MLP, SGD with momentum,
weight decay and a cosine schedule) with its own loop. Each model i of each experiment trains on
``train.npz``'s ``x[train_indices[train_offsets[i]:train_offsets[i + 1]]]``, seeded with
plan.json's ``models[i].seed`` (initialization, then the order of the batches), and answers the
query set under every view (``query.npz``'s ``views``, the images the harness itself queries). Its
outputs go to ``OUTPUTS/<experiment>/model_0007.npz``: ``logits`` (Q, A, K), ``plan_fingerprint``,
``experiment`` (the folder's name), ``test_logits`` (T, K) on ``data.npz``'s ``x_test``,
``test_accuracy``, ``train_seconds`` and ``run_id`` (this script, the plan and the settings, hashed:
the same in every file of this run). Finished files are kept, so a re-run with the same settings
trains only the missing models.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn


def mlp(in_features: int, width: int, num_classes: int) -> nn.Module:
    """flatten -> Linear(d, w) -> ReLU -> Linear(w, w) -> ReLU -> Linear(w, K)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(in_features, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, num_classes))


def lr_at(step: int, total: int, steps_per_epoch: int, recipe: dict) -> float:
    """The recipe's learning rate at optimizer step ``step``: linear warm-up, then constant, cosine or step."""
    warm = recipe["warmup_epochs"] * steps_per_epoch
    if step < warm:
        return recipe["lr"] * (step + 1) / warm
    if recipe["schedule"] == "cosine":
        return recipe["lr"] * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))
    if recipe["schedule"] == "step":
        return recipe["lr"] * recipe["gamma"] ** sum(step >= round(m * total) for m in recipe["milestones"])
    return recipe["lr"]


def random_shift_flip(x: torch.Tensor, shift: int, flip: bool, gen: torch.Generator) -> torch.Tensor:
    """Per-image random translation in [-shift, shift]^2 with zero fill, and a random horizontal flip."""
    n, _, h, w = x.shape
    if shift:
        pad = nn.functional.pad(x, (shift, shift, shift, shift))
        oy = torch.randint(0, 2 * shift + 1, (n,), generator=gen)
        ox = torch.randint(0, 2 * shift + 1, (n,), generator=gen)
        rows = (oy[:, None] + torch.arange(h)[None, :])[:, :, None]
        cols = (ox[:, None] + torch.arange(w)[None, :])[:, None, :]
        x = pad.permute(0, 2, 3, 1)[torch.arange(n)[:, None, None], rows, cols].permute(0, 3, 1, 2)
    if flip:
        do = torch.rand(n, generator=gen) < 0.5
        x = torch.where(do[:, None, None, None], torch.flip(x, dims=(-1,)), x)
    return x


def train_one(x: np.ndarray, y: np.ndarray, seed: int, recipe: dict, mean: torch.Tensor, std: torch.Tensor,
              num_classes: int, epochs: int) -> nn.Module:
    torch.manual_seed(seed)
    net = mlp(int(np.prod(x.shape[1:])), recipe["width"], num_classes)
    opt = torch.optim.SGD(net.parameters(), lr=recipe["lr"], momentum=recipe["momentum"],
                          weight_decay=recipe["weight_decay"])
    gen = torch.Generator().manual_seed(seed)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    n, bs = len(y), recipe["batch_size"]
    per_epoch = math.ceil(n / bs)
    total, step = per_epoch * epochs, 0
    aug = recipe["augmentation"]
    net.train()
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, bs):
            idx = perm[i:i + bs]
            xb = xt[idx]
            if recipe["augment"]:
                xb = random_shift_flip(xb, aug["shift"], aug["flip"], gen)
            for g in opt.param_groups:
                g["lr"] = lr_at(step, total, per_epoch, recipe)
            loss = nn.functional.cross_entropy(net((xb.float() / 255.0 - mean) / std), yt[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
    return net.eval()


@torch.no_grad()
def outputs_of(net: nn.Module, images: np.ndarray, mean: torch.Tensor, std: torch.Tensor) -> np.ndarray:
    """Logits of every image, in batches; ``images`` (..., C, H, W) uint8 -> (..., K)."""
    lead, flat = images.shape[:-3], images.reshape(-1, *images.shape[-3:])
    out = [net((torch.from_numpy(flat[i:i + 4096]).float() / 255.0 - mean) / std) for i in range(0, len(flat), 4096)]
    return torch.cat(out).numpy().reshape(*lead, -1)


def run_id(plan: dict, **settings: object) -> str:
    """This training run's identifier, written into every output file: the same whenever this script
    trains this plan with these settings (a run resumed after an interruption included), another for
    another script, another version of this one, or other settings. The import refuses a folder whose
    files name different runs (two runs mixed)."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(json.dumps({"plan": plan["fingerprint"], **settings}, sort_keys=True).encode())
    return f"{Path(__file__).stem}-{h.hexdigest()[:16]}"


def save_npz(path: Path, **arrays: np.ndarray) -> None:
    """Write atomically (temp file, then rename): an interrupted write leaves no half file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan", type=Path, help="the plan folder (`harness plan PLAN`)")
    ap.add_argument("--outputs", type=Path, required=True, help="where to write OUTPUTS/<experiment>/model_0007.npz")
    ap.add_argument("--epochs", type=int, help="train this many epochs instead of the recipe's")
    ap.add_argument("--models", help="train only these model indices (e.g. 0,1,2); default all")
    ap.add_argument("--dtype", choices=("float32", "float16"), default="float32", help="the logits' dtype")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest for these small MLPs)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    plan = json.loads((args.plan / "plan.json").read_text())
    recipe = plan["recipe"]
    if recipe["model"] not in ("mlp",):
        print(f"this example trains the mlp recipe; the plan's is {recipe['model']!r}: put your network here",
              file=sys.stderr)
        return 2
    epochs = args.epochs if args.epochs is not None else recipe["epochs"]
    norm = plan["normalization"]
    mean = torch.tensor(norm["mean"], dtype=torch.float32).view(1, -1, 1, 1)
    std = torch.tensor(norm["std"], dtype=torch.float32).view(1, -1, 1, 1)
    k = plan["num_classes"]
    with np.load(args.plan / "data.npz") as d:
        x_test, y_test = d["x_test"], d["y_test"]
    wanted = [int(i) for i in args.models.split(",")] if args.models else range(plan["num_models"])
    rid = run_id(plan, epochs=epochs, dtype=args.dtype)
    for name, exp in plan["experiments"].items():
        with np.load(args.plan / exp["files"]["train"]) as t:
            x, y, idx, off = t["x"], t["y"], t["train_indices"], t["train_offsets"]
        with np.load(args.plan / exp["files"]["query"]) as q:
            views = q["views"]  # (Q, A, C, H, W): the query images under every view
        for i in wanted:
            out = args.outputs / name / f"model_{i:04d}.npz"
            if out.is_file():
                continue
            rows = idx[off[i]:off[i + 1]]
            t0 = time.perf_counter()
            net = train_one(x[rows], y[rows], plan["models"][i]["seed"], recipe, mean, std, k, epochs)
            secs = time.perf_counter() - t0
            test_logits = outputs_of(net, x_test, mean, std)
            acc = float((test_logits.argmax(-1) == y_test).mean())
            save_npz(out, logits=outputs_of(net, views, mean, std).astype(args.dtype),
                     plan_fingerprint=np.array(plan["fingerprint"]), experiment=np.array(name),
                     test_logits=test_logits.astype(args.dtype), test_accuracy=np.array(acc),
                     train_seconds=np.array(secs), run_id=np.array(rid))
            print(f"{name} model {i}: test accuracy {100 * acc:.1f}%, {secs:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
