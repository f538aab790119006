"""How useful SimCLR / MoCo on the fixed scattering maps are at a setting (issue 66; defenses/scatter_ssl.py):
one model's fit and probe, as the cifar10-scatter preset runs them, on the subset's first training images
(no canaries, no audit), and its test accuracy. A diagnosis of the encoder's budget, not a tuning of any
privacy setting (docs/defenses.md, SSL).

    python benchmarks/bench_scatter_ssl.py --data-dir ../shared/data/cifar10-subset [--method simclr|moco]
        [--epochs 8] [--crop-low 0.25] [--width 32] [--images 4350] [--seed 1]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--method", choices=("simclr", "moco"), default="simclr")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--crop-low", type=float, default=0.25)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--images", type=int, default=4350)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    import torch

    from defenses.base import FitContext, LabeledImages
    from defenses.ssl import MoCo, SimCLR
    from harness.core.config import TrainConfig
    from harness.defense_config import build_config
    from harness.core.data import load_cifar10

    torch.set_num_threads(1)
    defense = f"ssl-{args.method}"
    cfg = build_config("cifar10-scatter", {"defense": defense, "data.path": str(Path(args.data_dir).resolve())})
    data = load_cifar10(Path(args.data_dir), download=False)
    n = args.images
    train = LabeledImages(data.x_train[:n], data.y_train[:n].astype(np.int64), 10, data.mean, data.std, data.augment)
    params = {**cfg.defense_params, "epochs": args.epochs, "crop_scale": [args.crop_low, 1.0], "width": args.width}
    model = (SimCLR if args.method == "simclr" else MoCo)(**params)
    t0 = time.perf_counter()
    served = model.fit(train, FitContext(seed=args.seed, device="cpu", train=TrainConfig()))
    fit = time.perf_counter() - t0
    acc = float((served.query(data.x_test).argmax(1) == data.y_test).mean())
    print(f"{defense} on the maps: {n} images, {args.epochs} epochs, crops {args.crop_low}-1, width {args.width}: "
          f"test accuracy {100 * acc:.1f}% ({len(data.y_test)} images), fit {fit:.0f} s on one thread, "
          f"final loss {served.info()['pretrain_final_loss']:.2f}")


if __name__ == "__main__":
    main()
