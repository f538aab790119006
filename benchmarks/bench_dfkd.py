"""Does the DFKD student inherit its teacher's memorized canaries at CPU scale? (docs/defenses.md, DFKD)

    python benchmarks/bench_dfkd.py [--settings "rounds=40,synth_batch=64" "rounds=30,synth_batch=128" ...]

One digits model per setting (quick preset's DFKD recipe, seed 1): 200 training samples are
relabeled uniformly at random to a wrong class (the ``mislabeled`` canary rule); 100 of them stay in
the training set (members), 100 are removed (non-members). For the teacher and the served student,
print the test accuracy, the fraction of member / non-member canaries predicted as their canary
label, and the median log-probability of the canary label on members and on non-members (a large
gap is what LiRA finds), plus the fit time on one thread.

    python benchmarks/bench_dfkd.py --reuse [--out runs/bench-dfkd-reuse]

``--reuse``: the quick preset's ``harness evaluate dfkd`` twice, in OUT/trained (it trains its own
teachers) and in OUT/reuse after ``harness evaluate undefended --set train.model=mlp-bn
--save-models`` there (it reuses those 64 models as teachers); prints each run's recorded time
(prepare + training + attacks, from results.json) and whether every saved signal file holds the
same arrays. Finished runs resume at no cost.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from defenses.base import FitContext, LabeledImages, TorchClassifier
from defenses.dfkd import DFKD
from harness.defense_config import build_config
from harness.core.data import load_digits
from harness.core import jsonio


def parse_setting(text: str) -> dict:
    out = {}
    for item in filter(None, text.split(",")):
        k, _, v = item.partition("=")
        out[k.strip()] = json.loads(v)
    return out


def reuse(out: Path) -> None:
    from bench_defenses import run_seconds
    from harness_cli import evaluate_into, run_cli

    trained, _ = evaluate_into(out / "trained", "dfkd")
    for args in (("undefended", "--set", "train.model=mlp-bn", "--save-models"), ("dfkd",)):
        run_cli("evaluate", *args, "--out", str(out / "reuse"))  # two runs in one folder: dfkd finds the teachers
    teachers, reused = (next((out / "reuse").glob(f"{name}-*")) for name in ("undefended", "dfkd"))
    seconds = [run_seconds(jsonio.loads((d / "results.json").read_text())) for d in (trained, reused, teachers)]
    files = sorted(f.relative_to(trained) for f in trained.glob("*/signals/*.npz"))
    if not files:
        raise SystemExit(f"no signal files under {trained}")
    same = all(_same_arrays(trained / f, reused / f) for f in files)
    print(f"dfkd training its teachers: {seconds[0]:.0f} s; reusing the saved undefended models: {seconds[1]:.0f} s "
          f"(the undefended mlp-bn run itself: {seconds[2]:.0f} s)")
    print(f"{len(files)} signal files, all arrays identical: {same}; teachers recorded: "
          f"{_teacher(trained / files[0])!r} in the first run, {_teacher(reused / files[0])!r} in the second")


def _teacher(path: Path) -> str:
    with np.load(path) as z:
        return str(json.loads(str(z["meta"]))["defense_info"].get("teacher", "?"))


def _same_arrays(a: Path, b: Path) -> bool:
    with np.load(a) as x, np.load(b) as y:
        keys = [k for k in x.files if k != "meta"]
        return sorted(keys) == sorted(k for k in y.files if k != "meta") and all(np.array_equal(x[k], y[k]) for k in keys)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", nargs="*", default=["rounds=40,synth_batch=64", "rounds=30,synth_batch=128",
                                                       "rounds=20,warmup=4,synth_batch=128"],
                    help="defense_params overrides of the quick preset's dfkd section, one setting each")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reuse", action="store_true", help="time harness evaluate dfkd with and without saved teachers")
    ap.add_argument("--out", default="runs/bench-dfkd-reuse", help="--reuse: parent folder of the runs")
    args = ap.parse_args()
    if args.reuse:
        reuse(Path(args.out))
        return
    torch.set_num_threads(args.threads)

    data = load_digits(497, 0)
    rng = np.random.default_rng(0)
    canary = rng.permutation(len(data.y_train))[:200]
    nonmember = canary[100:]  # the first 100 canaries stay in the training set (members)
    r = rng.integers(0, data.num_classes - 1, size=200)
    y_canary = np.where(r < data.y_train[canary], r, r + 1)
    y = data.y_train.copy()
    y[canary] = y_canary
    keep = np.ones(len(y), bool)
    keep[nonmember] = False
    train = LabeledImages(data.x_train[keep], y[keep], data.num_classes, data.mean, data.std, data.augment)

    print("| setting | fit (s) | model | test acc | member canaries fitted | non-member | median log p(canary) member / non-member |")
    print("|---|---|---|---|---|---|---|")
    for text in args.settings:
        overrides = {f"defense_params.{k}": v for k, v in parse_setting(text).items()}
        cfg = build_config("quick", {"defense": "dfkd", **overrides})
        t0 = time.perf_counter()
        fit = DFKD(**cfg.defense_params).fit_all(train, FitContext(seed=1, device="cpu", train=cfg.train))
        seconds = time.perf_counter() - t0
        for name, model in (("teacher", TorchClassifier(fit.teacher, data.mean, data.std, "cpu")),
                            ("student", fit.student)):
            test_acc = float((model.query(data.x_test).argmax(1) == data.y_test).mean())
            logits = torch.from_numpy(model.query(data.x_train[canary]))
            logp = torch.log_softmax(logits, 1).numpy()[np.arange(200), y_canary]
            fitted = logits.argmax(1).numpy() == y_canary
            print(f"| {text} | {seconds:.1f} | {name} | {100 * test_acc:.1f}% | {100 * fitted[:100].mean():.0f}% | "
                  f"{100 * fitted[100:].mean():.0f}% | {np.median(logp[:100]):.2f} / {np.median(logp[100:]):.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
