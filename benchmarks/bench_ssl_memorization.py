"""Do the SSL encoders memorize their training images at CPU scale? (docs/defenses.md, SSL)

    python benchmarks/bench_ssl_memorization.py [--rows all|digits|NAME,...] [--data-dir ../shared/data/cifar10-subset]
    python benchmarks/bench_ssl_memorization.py --canaries [--models 8] [--seed 0] [--rows all|NAME,...]
    python benchmarks/bench_ssl_memorization.py --audit 40 [--defense ssl-simclr|ssl-moco] [--audit-models 32]
                                                [--audit-set KEY=VALUE ...] [--out DIR]

Default table: for each setting, pre-train one SSL encoder (``defenses.ssl``) on the first n
training images, then score n training images and n held-out images by the white-box contrastive
signal (the mean over views and repetitions of the Fisher-transformed similarity of two SSL views,
``harness.run.signals.contrastive_similarity``) and print the AUC of training vs held-out (0.5: no
memorization visible to the attack), the final pre-training loss and the probe's test accuracy.

``--canaries``: the audit's own question on the quick preset's data. C of the digits training
images become OOD canaries (the quick preset's bundled photo patches, original labels), each a
member of exactly half of S encoders (SimCLR or MoCo, MLP 256, 100 epochs, batch 256 unless the
row says otherwise; probe 1 epoch, unused); every other image is always a member. Per canary, each model's
white-box signal (mean over 9 views x 6 repetitions) is standardized over the S models; the table
prints the pooled AUC of those z-scores, members vs non-members (0.5: the encoder's view
similarity does not depend on membership), and the median over canaries of the member mean minus
the non-member mean in units of the non-members' standard deviation. ``--seed`` changes the draw of
the canaries' positions, the membership and the encoders' seeds (0: the table's first draw).

``--audit C``: the whole audit at that setting, ``harness evaluate ssl-simclr (or --defense) --level sample
--canary ood --audit-size C --models S --set defense_params.crop_scale=[0.5,1.0]`` (quick preset;
``--audit-models S``, default 32),
and each attack's primary variant: AUC and TPR@1% FPR, white-box contrastive vs the black-box
attacks on the probe.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from defenses.base import FitContext, LabeledImages
from defenses.ssl import MoCo, SimCLR
from harness.core.config import DataConfig, TrainConfig
from harness.core.data import load_dataset
from harness.run.signals import contrastive_similarity

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


# name -> (number of canaries C, defense, parameters beyond the quick preset's)
CANARY_ROWS: dict[str, tuple[int, type, dict]] = {
    "c200": (200, SimCLR, {}),
    "c200-crop0.5-t0.1-e300": (200, SimCLR, {"crop_scale": [0.5, 1.0], "temperature": 0.1, "epochs": 300}),
    "c40": (40, SimCLR, {}),
    "c40-crop0.5": (40, SimCLR, {"crop_scale": [0.5, 1.0]}),
    "c40-crop0.5-t0.1": (40, SimCLR, {"crop_scale": [0.5, 1.0], "temperature": 0.1}),
    "c13": (13, SimCLR, {}),  # 1% of the 1300 training images, the paper's fraction (500 of 50 000)
    "c13-crop0.5": (13, SimCLR, {"crop_scale": [0.5, 1.0]}),
    "moco-c200": (200, MoCo, {"queue_size": 1024}),
    "moco-c40-crop0.5": (40, MoCo, {"queue_size": 1024, "crop_scale": [0.5, 1.0]}),
    "moco-c13-crop0.5": (13, MoCo, {"queue_size": 1024, "crop_scale": [0.5, 1.0]}),
}


def measure_canaries(num_canaries: int, cls: type, extra: dict, models: int, seed: int = 0) -> str:
    from canaries.base import CanaryContext
    from canaries.ood import OutOfDistribution
    from harness.core.design import balanced_membership

    data = load_dataset(DataConfig(name="digits", test_size=497), 0)
    rng = np.random.default_rng(seed)
    pos = rng.permutation(len(data.y_train))[:num_canaries]
    can = OutOfDistribution(source="photos").apply(
        data.x_train[pos], data.y_train[pos],
        CanaryContext(num_classes=data.num_classes, rng=np.random.default_rng(seed + 1), pool_indices=pos))
    x, y = data.x_train.copy(), data.y_train.copy()
    x[pos], y[pos] = can.x, can.y
    member = balanced_membership(rng.uniform(size=(models, num_canaries)))  # each canary IN in exactly S/2 models
    always = np.setdiff1d(np.arange(len(y)), pos)
    params = {"encoder": "mlp", "width": 256, "epochs": 100, "batch_size": 256, "probe_epochs": 1, **extra}
    t0 = time.perf_counter()
    sig = np.zeros((models, num_canaries))
    for s in range(models):
        keep = np.concatenate([always, pos[member[s]]])
        train = LabeledImages(x[keep], y[keep], data.num_classes, data.mean, data.std, data.augment)
        served = cls(**params).fit(train, FitContext(seed=100 + s + 1000 * seed, device="cpu", train=TrainConfig()))
        sig[s] = contrastive_similarity(served.features, can.x, data.augment, 7,
                                        augment=served.view_augmentation()).mean(axis=(1, 2))
    z = (sig - sig.mean(0)) / (sig.std(0) + 1e-12)
    auc = roc_auc_score(member.ravel(), z.ravel())
    gap = [(sig[member[:, c], c].mean() - sig[~member[:, c], c].mean()) / (sig[~member[:, c], c].std() + 1e-12)
           for c in range(num_canaries)]
    return (f"| {num_canaries} | {cls.name} {extra or '(quick preset)'} | {auc:.3f} | {np.median(gap):.2f} | "
            f"{(time.perf_counter() - t0) / models:.0f} s |")


def audit_row(num_canaries: int, out: str, defense: str = "ssl-simclr", models: int = 32,
              overrides: tuple[str, ...] = ()) -> None:
    import csv
    from pathlib import Path

    from harness_cli import evaluate_into  # beside this script

    tag = "".join(f"-{kv}" for kv in overrides).replace("defense_params.", "").replace("=", "")
    run_dir, wall = evaluate_into(Path(out) / f"{defense}-c{num_canaries}-s{models}{tag}", defense, "--level", "sample",
                                  "--canary", "ood", "--audit-size", str(num_canaries), "--models", str(models),
                                  "--set", "defense_params.crop_scale=[0.5,1.0]", *[a for kv in overrides for a in ("--set", kv)])
    print(f"{run_dir} ({wall:.0f} s)")
    print("| attack | access | primary variant | AUC | TPR@1% FPR |")
    print("|---|---|---|---|---|")
    with open(run_dir / "attacks.csv") as f:
        for r in csv.DictReader(f):
            if r["primary"] == "True":
                print(f"| {r['attack']} | {r['access']} | {r['variant']} | {float(r['auc']):.3f} | "
                      f"{100 * float(r['tpr@0.01']):.1f}% |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="all", help="all, digits, or comma-separated names: " + ", ".join(ROWS))
    ap.add_argument("--data-dir", default="../shared/data/cifar10-subset")
    ap.add_argument("--canaries", action="store_true", help="membership of OOD canaries over S encoders")
    ap.add_argument("--models", type=int, default=8, help="--canaries: S encoders (even)")
    ap.add_argument("--seed", type=int, default=0, help="--canaries: draw of the canaries, membership and encoder seeds")
    ap.add_argument("--audit", type=int, default=None, metavar="C", help="run the sample-level audit with C canaries")
    ap.add_argument("--defense", default="ssl-simclr", choices=["ssl-simclr", "ssl-moco"], help="--audit: which")
    ap.add_argument("--audit-models", type=int, default=32, help="--audit: S models (the quick preset's 32)")
    ap.add_argument("--audit-set", action="append", default=[], metavar="KEY=VALUE",
                    help="--audit: a further harness --set (repeatable), e.g. defense_params.probe_weight_decay=0.05")
    ap.add_argument("--out", default="runs/bench-ssl-audit", help="--audit: parent folder of the run")
    args = ap.parse_args()
    if args.models < 4 or args.models % 2:
        ap.error(f"--models must be an even number >= 4, got {args.models}")
    if args.audit is not None:
        audit_row(args.audit, args.out, args.defense, args.audit_models, tuple(args.audit_set))
        return
    torch.set_num_threads(1)
    if args.canaries:
        names = list(CANARY_ROWS) if args.rows == "all" else args.rows.split(",")
        print(f"| canaries C | defense and setting | z-score AUC, members vs not (S = {args.models}, seed {args.seed}) | "
              "median member gap "
              "(non-member SDs) | fit + signal per model |")
        print("|---|---|---|---|---|")
        for name in names:
            print(measure_canaries(*CANARY_ROWS[name], args.models, args.seed), flush=True)
        return
    names = (list(ROWS) if args.rows == "all" else [r for r in ROWS if r.startswith("digits")] if args.rows == "digits"
             else args.rows.split(","))
    print("| data | images | defense and parameters | AUC train vs held-out | final loss | probe test acc | fit |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        print(measure(*ROWS[name], args.data_dir), flush=True)


if __name__ == "__main__":
    main()
