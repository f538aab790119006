"""What the cifar10-scatter preset's fixed features cost (issue 55): the scattering transform's
throughput on real CIFAR-10 images (images per second, 1 and 2 threads), the feature cache's read
speed (rows per second from memory), and one linear head's training time on cached features.

    python benchmarks/bench_scattering.py [--data-dir ../shared/data/cifar10-subset] [--images 1000]

Prints one line per measurement; docs/architecture.md (Fixed features) quotes them.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="../shared/data/cifar10-subset")
    ap.add_argument("--images", type=int, default=1000)
    args = ap.parse_args()

    from defenses import scatter_models
    from defenses.base import FitContext, LabeledImages, Normalizer
    from defenses.models import build_model
    from defenses.training import seeded_init, train_classifier
    from harness.core.config import DataConfig, TrainConfig
    from harness.core.data import load_dataset
    from harness.core.feature_cache import FeatureCache

    ds = load_dataset(DataConfig(name="cifar10", path=args.data_dir), 0)
    x = Normalizer(ds.mean, ds.std, "cpu")(torch.from_numpy(ds.x_train[: args.images]))
    for threads in (1, 2):
        torch.set_num_threads(threads)
        t = time.perf_counter()
        with torch.no_grad():
            scatter_models.normalized_scatter(x)
        s = time.perf_counter() - t
        print(f"transform: {args.images} images in {s:.1f} s on {threads} thread(s): {args.images / s:.0f} images/s")

    with tempfile.TemporaryDirectory() as tmp:
        cache = FeatureCache(scatter_models.normalized_scatter, {"bench": 1}, None, memory_rows=args.images)
        with torch.no_grad():
            cache(x)
            t = time.perf_counter()
            cache(x)
        s = time.perf_counter() - t
        print(f"cache: {args.images} rows read back in {s:.2f} s: {args.images / s:.0f} rows/s (digest, lookup, copy)")

        import os

        os.environ[scatter_models.CACHE_ENV] = tmp
        n = min(len(ds.x_train), 4835)
        train = LabeledImages(x=ds.x_train[:n], y=ds.y_train[:n].astype(np.int64), num_classes=10, mean=ds.mean,
                              std=ds.std, augment=ds.augment)
        cfg = TrainConfig(model="scatter-linear", epochs=10, batch_size=128, lr=0.005, weight_decay=1e-4,
                          augment=False)
        net = seeded_init(lambda: build_model("scatter-linear", (3, 32, 32), 10, 1), 0)
        with torch.no_grad():
            net(Normalizer(ds.mean, ds.std, "cpu")(torch.from_numpy(train.x)))  # features cached first
        torch.set_num_threads(1)
        t = time.perf_counter()
        train_classifier(net, train, FitContext(seed=0, device="cpu", train=cfg))
        print(f"head: one scatter-linear model, {n} images x {cfg.epochs} epochs on cached features, 1 thread: "
              f"{time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
