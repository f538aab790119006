"""Train an audit plan's models with scikit-learn's MLPClassifier, outside the harness.

    harness plan plans/digits --models 16                 # the audit plan (docs/external-models.md)
    python examples/external_sklearn.py plans/digits --outputs outputs/digits-sklearn
    harness import plans/digits --outputs outputs/digits-sklearn --name sklearn-mlp

No torch, no harness: numpy and scikit-learn only. Each model i of each experiment is an
``MLPClassifier`` with the recipe's two hidden layers of ``width`` units (ReLU), trained by SGD with
the recipe's learning rate (constant: scikit-learn has no cosine schedule), momentum, batch size,
epochs and weight decay (scikit-learn's ``alpha`` adds ``alpha / batch size`` times the weights to
each step's gradient, so ``alpha`` = weight decay x batch size; biases are not decayed), seeded with
plan.json's ``models[i].seed``, on ``train.npz``'s ``x[train_indices[train_offsets[i]:train_offsets[i + 1]]]``
normalized with the plan's mean and std. Its initialization (Glorot) and batches are scikit-learn's
own: another trainer, the same audit. Its outputs are the network's logits (the last layer before
the softmax) on every query view (``query.npz``'s ``views``) and on the test set (``test_logits``);
every file carries the run's ``run_id`` (this script, the plan and the settings, hashed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPClassifier
from threadpoolctl import threadpool_limits


def features(images: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """uint8 images (N, C, H, W) -> normalized, flattened float32 features (N, C*H*W)."""
    x = (images.astype(np.float32) / 255.0 - mean[None, :, None, None]) / std[None, :, None, None]
    return x.reshape(len(images), -1)


def logits(clf: MLPClassifier, x: np.ndarray) -> np.ndarray:
    """The network's pre-softmax outputs: the hidden ReLU layers, then the last affine layer."""
    a = x.astype(np.float64)
    for i, (w, b) in enumerate(zip(clf.coefs_, clf.intercepts_)):
        a = a @ w + b
        if i < len(clf.coefs_) - 1:
            a = np.maximum(a, 0.0)
    return a


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
    ap.add_argument("--threads", type=int, default=1, help="BLAS threads (1 is fastest for these small MLPs)")
    args = ap.parse_args(argv)
    with threadpool_limits(limits=args.threads):
        return train(args)


def train(args: argparse.Namespace) -> int:
    plan = json.loads((args.plan / "plan.json").read_text())
    recipe = plan["recipe"]
    epochs = args.epochs if args.epochs is not None else recipe["epochs"]
    mean = np.asarray(plan["normalization"]["mean"], np.float32)
    std = np.asarray(plan["normalization"]["std"], np.float32)
    with np.load(args.plan / "data.npz") as d:
        x_test, y_test = features(d["x_test"], mean, std), d["y_test"]
    classes = np.arange(plan["num_classes"])
    wanted = [int(i) for i in args.models.split(",")] if args.models else range(plan["num_models"])
    rid = run_id(plan, epochs=epochs)
    for name, exp in plan["experiments"].items():
        with np.load(args.plan / exp["files"]["train"]) as t:
            x, y, idx, off = t["x"], t["y"], t["train_indices"], t["train_offsets"]
        with np.load(args.plan / exp["files"]["query"]) as q:
            views = q["views"]  # (Q, A, C, H, W)
        queries = features(views.reshape(-1, *views.shape[2:]), mean, std)
        for i in wanted:
            out = args.outputs / name / f"model_{i:04d}.npz"
            if out.is_file():
                continue
            rows = idx[off[i]:off[i + 1]]
            clf = MLPClassifier(hidden_layer_sizes=(recipe["width"], recipe["width"]), solver="sgd",
                                learning_rate_init=recipe["lr"], momentum=recipe["momentum"], nesterovs_momentum=False,
                                batch_size=recipe["batch_size"], max_iter=epochs, shuffle=True,
                                alpha=recipe["weight_decay"] * recipe["batch_size"],
                                random_state=plan["models"][i]["seed"] % 2**32, n_iter_no_change=epochs + 1, tol=0.0)
            if not np.array_equal(np.unique(y[rows]), classes):  # one output column per class of the dataset
                print(f"{name} model {i}: its training set lacks a class; this example needs every class",
                      file=sys.stderr)
                return 2
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)  # it runs exactly `epochs` epochs, as asked
                clf.fit(features(x[rows], mean, std), y[rows])
            secs = time.perf_counter() - t0
            test_logits = logits(clf, x_test)
            acc = float((test_logits.argmax(-1) == y_test).mean())
            z = logits(clf, queries).reshape(views.shape[0], views.shape[1], -1)
            save_npz(out, logits=z.astype(np.float32), plan_fingerprint=np.array(plan["fingerprint"]),
                     experiment=np.array(name), test_logits=test_logits.astype(np.float32),
                     test_accuracy=np.array(acc), train_seconds=np.array(secs), run_id=np.array(rid))
            print(f"{name} model {i}: test accuracy {100 * acc:.1f}%, {secs:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
