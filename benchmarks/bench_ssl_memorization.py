"""Do the SSL encoders memorize their training images at CPU scale? (docs/defenses.md, SSL)

    python benchmarks/bench_ssl_memorization.py [--rows all|digits|NAME,...] [--data-dir ../shared/data/cifar10-subset]

For each setting, pre-train one SSL encoder (``defenses.ssl``) on the first n training images, then
score n training images and n held-out images by the white-box contrastive signal (the mean over
views and repetitions of the Fisher-transformed similarity of two SSL views,
``harness.signals.contrastive_similarity``) and print the AUC of training vs held-out (0.5: no
memorization visible to the attack), the final pre-training loss and the probe's test accuracy.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from defenses.base import FitContext, LabeledImages
from defenses.ssl import MoCo, SimCLR
from harness.config import DataConfig, TrainConfig
from harness.data import load_dataset
from harness.signals import contrastive_similarity

# name -> (dataset, n images, defense class, parameters)
ROWS: dict[str, tuple[str, int, type, dict]] = {
    "digits-128-e300": ("digits", 128, SimCLR, {"encoder": "mlp", "width": 256, "epochs": 300, "batch_size": 32}),
    "digits-128-e1000": ("digits", 128, SimCLR, {"encoder": "mlp", "width": 256, "epochs": 1000, "batch_size": 32}),
    "digits-128-lr0.5": ("digits", 128, SimCLR, {"encoder": "mlp", "width": 256, "epochs": 300, "batch_size": 32,
                                                 "lr": 0.5}),
    "digits-128-lr0.5-t0.1": ("digits", 128, SimCLR, {"encoder": "mlp", "width": 256, "epochs": 300, "batch_size": 32,
                                                      "lr": 0.5, "temperature": 0.1}),
    "digits-1000-t0.1-crop0.5": ("digits", 1000, SimCLR, {"encoder": "mlp", "width": 256, "epochs": 300,
                                                          "batch_size": 128, "temperature": 0.1,
                                                          "crop_scale": [0.5, 1.0]}),
    "digits-1000-w1024": ("digits", 1000, SimCLR, {"encoder": "mlp", "width": 1024, "epochs": 300, "batch_size": 128}),
    "digits-1000-moco": ("digits", 1000, MoCo, {"encoder": "mlp", "width": 256, "epochs": 300, "batch_size": 128,
                                                "queue_size": 1024}),
    "cifar10-512-cnn": ("cifar10", 512, SimCLR, {"encoder": "cnn", "width": 16, "epochs": 100, "batch_size": 128,
                                                 "probe_epochs": 10}),
}


def measure(dataset: str, n: int, cls: type, params: dict, data_dir: str) -> str:
    cfg = DataConfig(name="digits", test_size=497) if dataset == "digits" else DataConfig(name="cifar10", path=data_dir)
    data = load_dataset(cfg, 0)
    train = LabeledImages(data.x_train[:n], data.y_train[:n], data.num_classes, data.mean, data.std, data.augment)
    t0 = time.perf_counter()
    served = cls(**{"probe_epochs": 1, **params}).fit(train, FitContext(seed=0, device="cpu", train=TrainConfig()))
    fit_s = time.perf_counter() - t0
    m = min(n, 300)
    score = lambda x: contrastive_similarity(served.features, x, data.augment, 1, repetitions=2,  # noqa: E731
                                             augment=served.view_augmentation()).mean(axis=(1, 2))
    inside, held_out = score(data.x_train[:m]), score(data.x_train[n : n + m])
    auc = roc_auc_score(np.r_[np.ones(m), np.zeros(m)], np.r_[inside, held_out])
    acc = (served.query(data.x_test).argmax(1) == data.y_test).mean()
    return (f"| {dataset} | {n} | {cls.name} {params} | {auc:.3f} | {served.info()['pretrain_final_loss']:.2f} | "
            f"{100 * acc:.1f}% | {fit_s:.0f} s |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="all", help="all, digits, or comma-separated names: " + ", ".join(ROWS))
    ap.add_argument("--data-dir", default="../shared/data/cifar10-subset")
    args = ap.parse_args()
    names = (list(ROWS) if args.rows == "all" else [r for r in ROWS if r.startswith("digits")] if args.rows == "digits"
             else args.rows.split(","))
    torch.set_num_threads(1)
    print("| data | images | defense and parameters | AUC train vs held-out | final loss | probe test acc | fit |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        print(measure(*ROWS[name], args.data_dir), flush=True)


if __name__ == "__main__":
    main()
