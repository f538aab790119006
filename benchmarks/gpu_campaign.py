"""The paper's questions on the CIFAR-10 subset, answered one lent 15-minute GPU slot at a time (issue 45).

    python benchmarks/gpu_campaign.py --plan [--budget-s 360]                  # what the next call runs
    bash benchmarks/gpu_run.sh campaign                                         # on a lent GPU (docs/gpu.md)
    python benchmarks/gpu_campaign.py --apply FILES_AT/campaign-update.tar.gz   # back here: commit what it brought
    python benchmarks/gpu_campaign.py --device cpu --toy                        # every item at toy scale, here

The campaign is a list of items (:data:`ITEMS`), each one ``harness evaluate`` run (or, first, the
stacked trainer's throughput figure) that answers one question of the paper (Aerni, Zhang and
Tramer, CCS 2024, Table 1) on the CIFAR-10 subset, at a scale where the models fit their canaries:
the ``fast`` recipe (airbench) at 60 epochs, where the undefended models found their mislabeled
canaries at 99.9% (H200, docs/gpu.md; at 10 epochs, 1.3%). Each item has a predicted device time,
``base + units x rate``, with ``units`` its models x epochs (or models) and ``rate`` the seconds per
unit of its kind, measured on the H200 (:data:`PRIOR_RATES`, each marked measured or prior); every
item that finishes replaces its kind's rate with what it measured, and the throughput figure sets
the stacked airbench rate and the group size of the stacked items.

One call (``--budget-s``) runs the items not yet done: the throughput figure first, then the
sample-level items, the DP-SGD vectorisation figure, then the population-level items, each group
by answer per predicted second
(``value / predicted``), skipping an item whose prediction (x :data:`SAFETY`) does not fit what
is left; an item stops at twice its prediction or at the budget's end (it is then marked
``interrupted`` and runs again next call, resuming its run where the machine is the same). Every
finished item writes its summary to ``benchmarks/gpu-results/campaign/<item>.json`` (its whole
results.json beside it, gzipped) and the campaign's state to ``state.json`` there, a committed
file: the next slot, on a fresh machine, continues where the last stopped. With ``--out`` (the
device's ``$OUT``) each finished item also refreshes ``OUT/campaign-update.tar.gz`` (the state and
the results, nothing else), so that what finished comes back even if the call is cut short;
``--apply`` unpacks it here and re-writes the tables of docs/gpu.md from the state
(:func:`write_docs`), beside the paper's figures (../shared/reference/misleading_evals_table1.csv,
copied into :data:`PAPER`).

``--toy`` runs every item end to end at toy scale (the first 24 images of each training batch, 60
test images, 6 models, one epoch, 8 audit samples) with its state, results and docs copy under
``--work`` (default runs/gpu-campaign-toy): the same command again resumes from that state (and
runs nothing once every item is done; delete the folder to start over). tests/test_gpu_campaign.py
checks the budget logic, the resume, the update archive, the docs table writer and every item's
configuration (full and toy scale), and runs four items end to end at toy scale.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
CAMPAIGN_DIR = Path("benchmarks/gpu-results/campaign")  # relative to the repository root
STATE_NAME = "state.json"
DOCS = Path("docs/gpu.md")
UPDATE_TAR = "campaign-update.tar.gz"
TOY_WORK = Path("runs/gpu-campaign-toy")
#: where --data-dir is looked for when not given: a lent GPU's prepared copy, then the shared subset
DATA_DIRS = (REPO / ".gpu/data/cifar10-subset", REPO.parent / "shared/data/cifar10-subset")
#: a prediction must fit SAFETY times in what is left of the budget
SAFETY = 1.25
#: an item is stopped after STOP_FACTOR x its prediction (+ STOP_GRACE_S)
STOP_FACTOR, STOP_GRACE_S = 2.0, 60.0
#: seconds kept at the end of a call to write the state and the update archive
END_RESERVE_S = 10.0
#: --toy's default budget: unbounded in effect. A toy call's predictions are full-scale units x rates
#: measured at toy scale (the throughput figure's rate is scaled to a full training set), not its time
TOY_BUDGET_S = 1e6
#: the campaign's airbench epochs: at 60 the fast recipe fits its mislabeled canaries (docs/gpu.md)
AIRBENCH_EPOCHS = 60

# The paper's Table 1 (CIFAR-10, WRN16-4, 64 models; ../shared/reference/misleading_evals_table1.csv):
# method -> (population TPR@0.1% FPR with LiRA, sample-level TPR@0.1% FPR with the adaptive attack,
# population test accuracy, sample-level test accuracy, canary, adaptive attack)
PAPER: dict[str, tuple[float, float, float, float, str, str]] = {
    "HAMP": (0.021, 0.285, 0.8829, 0.8800, "mislabeled", "label-only"),
    "RelaxLoss": (0.022, 0.741, 0.8886, 0.8860, "mislabeled", "lira"),
    "SELENA": (0.068, 0.527, 0.9305, 0.9288, "mislabeled-duplicates", "lira"),
    "SSL (SimCLR)": (0.058, 0.406, 0.8818, 0.8811, "ood-imagenet", "contrastive-whitebox"),
    "DFKD": (0.013, 0.722, 0.9239, 0.9184, "mislabeled", "lira"),
    "DP-SGD (high utility)": (0.022, 0.095, 0.9113, 0.9112, "max(mislabeled;ood;uniform)", "lira"),
    "DP-SGD (very high utility)": (0.048, 0.632, 0.9189, 0.9179, "max(mislabeled;ood;uniform)", "lira"),
    "Undefended": (0.134, 1.000, 0.9452, 0.9410, "mislabeled", "lira"),
}

#: seconds per unit of each kind of work, and where each figure comes from. A model-epoch is one
#: model trained for one epoch on its ~2 540-image training set of the subset (half the audit
#: samples plus every other image). Measured: the H200 session of 2026-11-26 (docs/gpu.md,
#: benchmarks/gpu-results/2026-11-26-h200/fast-e60.json: 16 models x 60 epochs, one at a time, in
#: 80.1 s wall, of which BASE_S start-up, data, queries and attacks: (80.1 - 20) / 960 = 0.063).
#: Priors: estimates for work no GPU has timed yet; the first item of the kind replaces them.
#: DP-SGD's prior: on the H200 (2026-11-28) groups of 4 took 40 s each (8 of 16 models of 4 epochs in
#: 116 s, about 2.5 s per model-epoch); the dpsgd-vmap figure's step takes 0.0148 s at G = 16 and
#: 0.0128 s at G = 4, so groups of 16 (:data:`DP_GROUP`) should take about 2.5 x 1.16 / 4 = 0.7 s (0.8: a margin)
DPSGD_PRIOR = ("prior: 2.5 s per model-epoch measured at G = 4 on the H200 (an interrupted item), "
               "scaled to G = 16 by the dpsgd-vmap figure")
PRIOR_RATES: dict[str, dict[str, Any]] = {
    "airbench": {"seconds": 0.063, "unit": "model-epoch", "source": "measured: H200 fast e60, one at a time "
                 "(stacked: the throughput item measures it)"},
    "airbench-alone": {"seconds": 0.063, "unit": "model-epoch", "source": "measured: H200 fast e60, one at a time"},
    "dpsgd-cnn-gn": {"seconds": 0.8, "unit": "model-epoch", "source": DPSGD_PRIOR},
    "simclr-resnet18": {"seconds": 0.6, "unit": "model-epoch", "source": "prior: ResNet-18, 2 views, ~3.3 GFLOP "
                        "per image at ~15 TFLOP/s (unmeasured), probe included"},
    "dfkd": {"seconds": 25.0, "unit": "model", "source": "prior: teacher (60 airbench epochs) + 40 rounds of "
             "synthesis and distillation (unmeasured)"},
    "throughput": {"seconds": 0.063, "unit": "model-epoch", "source": "measured: H200 fast e60, one at a time "
                   "(the figure trains airbench)"},
    "seconds": {"seconds": 1.0, "unit": "second", "source": "prior: the figure's own estimate"},
}
#: the throughput figure's model-epochs: G = 1 alone and G = 1, 8, 16, 32, 64 stacked, each for one untimed
#: and two timed epochs, and four variants at G = 16; plus torch.compile's compilation (seconds, a guess)
THROUGHPUT_MODEL_EPOCHS = 3 * (1 + 1 + 8 + 16 + 32 + 64) + 4 * 3 * 16
COMPILE_S = 60.0
#: start-up, data, canaries, queries and the attack phase of one ``harness evaluate`` call (seconds),
#: plus per model (queries: 18 views of ~2 000 images)
BASE_S, PER_MODEL_S = 20.0, 0.5


@dataclass(frozen=True)
class Item:
    """One question of the campaign.

    ``args``: the ``harness evaluate`` arguments (``--models``, ``--epochs``, ``--data-dir``,
    ``--device`` and ``--out`` are added); ``toy``: what ``--toy`` adds after them. ``kind`` and ``units`` predict the device time;
    ``models`` per experiment (``--models``); ``value`` weighs the answer (a headline question of the
    paper 3, a population figure 1).
    ``paper``: the Table 1 row; ``attack``: the attack whose best primary variant is compared with the
    paper's adaptive figure (the defense's headline is reported too); ``canaries``: the sample-level
    experiments read (the best of them, as the paper's max over canaries for DP-SGD).
    """

    id: str
    question: str
    level: str  # "device" (first), "sample", "extra" (after the sample level) or "population"
    kind: str
    units: float
    models: int
    value: float
    args: tuple[str, ...]
    toy: tuple[str, ...] = ()
    epochs: int | None = None  # --epochs (None: the recipe's)
    paper: str | None = None
    attack: str = "lira"
    compare: tuple[str, ...] = ()
    canaries: tuple[str, ...] = ()
    stacked: bool = False  # trained stacked: the throughput figure's group size applies
    scale: str = ""

    @property
    def total_models(self) -> int:
        """Models trained: ``models`` per experiment (each canary of a sample-level item is one)."""
        return self.models * max(1, len(self.canaries))


def _fast(defense: str, level: str, *extra: str) -> tuple[str, ...]:
    return (defense, "--preset", "fast", "--level", level, *extra)


#: toy settings of every harness item (with bench_gpu.toy_cifar's 120 training and 60 test images):
#: 6 models of one epoch (``--models``, ``--epochs``), 8 audit and population samples, 20 bootstrap draws
TOY_MODELS, TOY_EPOCHS = 6, 1
TOY = ("--set", "audit.size=8", "--set", "audit.population_samples=8", "--set", "attack.bootstrap=20")
#: toy settings of the airbench items: a narrow network, small batches
TOY_AIRBENCH = ("--set", "train.width=8", "--set", "train.batch_size=32")
OOD_PAPER = ("--set", "audit.canary_params.ood.source=null")  # the paper's ImageNet file in the data folder
AIRBENCH_SCALE = f"airbench, fast recipe, {AIRBENCH_EPOCHS} epochs, 16 models"
DP_CANARIES = ("mislabeled", "ood", "uniform")
#: DP-SGD's models train 16 to a group: nested vmap over 16 models ran 10.8x one model at a time on the
#: H200, over 4 models 3.0x (the dpsgd-vmap figure), so a group of 16 costs about what a group of 4 did
DP_GROUP = ("--set", "run.group_size=16")

ITEMS: tuple[Item, ...] = (
    Item("throughput", "models per second of the stacked airbench network at G = 1, 8, 16, 32, 64", "device",
         "throughput", THROUGHPUT_MODEL_EPOCHS, 0, 5.0, ("--groups", "1", "8", "16", "32", "64", "--epochs", "2", "--variants",
                                     "channels_last", "bf16", "nondeterministic", "compile", "--variant-g", "16"),
         toy=("--toy", "--groups", "1", "2", "--epochs", "1", "--variants", "channels_last", "--variant-g", "2"),
         scale="2 timed epochs after one untimed, per G"),
    Item("dpsgd-vmap", "do DP-SGD's per-sample gradients vectorise across models (nested vmap vs one at a time)?",
         "extra", "seconds", 40, 0, 1.0, ("--groups", "1", "4", "8", "16"), toy=("--groups", "1", "2", "--repeats", "2"),
         scale="one logical step of the cifar10 preset's DP-SGD recipe (cnn-gn width 16, batch 16, augmult 4)"),
    Item("undefended-mislabeled", "are mislabeled canaries found near 100% (LiRA)?", "sample", "airbench",
         16 * AIRBENCH_EPOCHS, 16, 3.0, _fast("undefended", "sample", "--set", "audit.canary=mislabeled"),
         toy=TOY_AIRBENCH, epochs=AIRBENCH_EPOCHS, paper="Undefended", canaries=("mislabeled",), stacked=True, scale=AIRBENCH_SCALE),
    Item("hamp-mislabeled", "does the label-only attack beat LiRA against HAMP?", "sample", "airbench",
         16 * AIRBENCH_EPOCHS, 16, 3.0, _fast("hamp", "sample", "--set", "audit.canary=mislabeled"),
         toy=TOY_AIRBENCH, epochs=AIRBENCH_EPOCHS, paper="HAMP", attack="label-only", compare=("lira",), canaries=("mislabeled",), stacked=True,
         scale=AIRBENCH_SCALE + " (HAMP's loss on the fast recipe)"),
    Item("relaxloss-mislabeled", "does LiRA find RelaxLoss's mislabeled canaries?", "sample", "airbench",
         16 * AIRBENCH_EPOCHS, 16, 2.0, _fast("relaxloss", "sample", "--set", "audit.canary=mislabeled"),
         toy=TOY_AIRBENCH, epochs=AIRBENCH_EPOCHS, paper="RelaxLoss", canaries=("mislabeled",), stacked=True,
         scale=AIRBENCH_SCALE + " (RelaxLoss's loss on the fast recipe)"),
    Item("undefended-ood", "are OOD (ImageNet) canaries found as mislabeled ones are?", "sample", "airbench",
         16 * AIRBENCH_EPOCHS, 16, 1.5, _fast("undefended", "sample", "--set", "audit.canary=ood", *OOD_PAPER),
         toy=TOY_AIRBENCH, epochs=AIRBENCH_EPOCHS, canaries=("ood",), stacked=True, scale=AIRBENCH_SCALE),
    Item("dpsgd-high", "DP-SGD at the paper's high-utility noise (0.00625): the best of three canaries", "sample",
         "dpsgd-cnn-gn", 3 * 16 * 4, 16, 2.0,
         ("dpsgd-high", "--preset", "cifar10", "--level", "sample",
          "--set", "audit.canary=[mislabeled,ood,uniform]", *OOD_PAPER, *DP_GROUP),
         toy=("--set", "defense_params.batch_size=8"),
         paper="DP-SGD (high utility)", canaries=DP_CANARIES,
         scale="cifar10 preset's DP-SGD recipe (cnn-gn width 16, batch 16, 4 epochs, augmult 4, groups of 16), 16 models per canary"),
    Item("dpsgd-veryhigh", "DP-SGD at the paper's very-high-utility noise (0.003125): the best of three canaries",
         "sample", "dpsgd-cnn-gn", 3 * 16 * 6, 16, 2.0,
         ("dpsgd-veryhigh", "--preset", "cifar10", "--level", "sample",
          "--set", "audit.canary=[mislabeled,ood,uniform]", *OOD_PAPER, *DP_GROUP),
         toy=("--set", "defense_params.batch_size=8"),
         paper="DP-SGD (very high utility)", canaries=DP_CANARIES,
         scale="cifar10 preset's DP-SGD recipe (cnn-gn width 16, batch 16, 6 epochs, augmult 4, groups of 16), 16 models per canary"),
    Item("simclr-ood", "does the white-box contrastive attack beat LiRA on SimCLR's OOD canaries?", "sample",
         "simclr-resnet18", 8 * 50, 8, 2.0,
         ("ssl-simclr", "--preset", "cifar10", "--level", "sample", "--set", "audit.canary=ood",
          "--set", "defense_params.encoder=resnet18", *OOD_PAPER),
         toy=("--set", "defense_params.encoder=cnn", "--set", "defense_params.width=8",
              "--set", "defense_params.batch_size=32", "--set", "defense_params.probe_epochs=1"), epochs=50,
         paper="SSL (SimCLR)", attack="contrastive", compare=("lira",), canaries=("ood",),
         scale="ResNet-18 encoder, 50 SimCLR epochs (the paper: 800), 8 models"),
    Item("selena-duplicates", "does LiRA find SELENA's mislabeled duplicates?", "sample", "airbench-alone",
         16 * AIRBENCH_EPOCHS * 4, 16, 1.5,
         _fast("selena", "sample", "--set", "audit.canary=duplicates",
               "--set", "defense_params.num_teachers=5", "--set", "defense_params.num_query=2"),
         toy=(*TOY_AIRBENCH, "--set", "defense_params.num_teachers=3", "--set", "defense_params.num_query=1"),
         epochs=AIRBENCH_EPOCHS,
         paper="SELENA", canaries=("duplicates",),
         scale=AIRBENCH_SCALE + "; K = 5 teachers, L = 2 (the cifar10 preset's scaling of the paper's 25 / 10)"),
    Item("dfkd-mislabeled", "does LiRA find DFKD's mislabeled canaries?", "sample", "dfkd", 16, 16, 1.0,
         _fast("dfkd", "sample", "--set", "audit.canary=mislabeled", "--set", "defense_params.rounds=40",
               "--set", "defense_params.warmup=5", "--set", "defense_params.synth_batch=64",
               "--set", "defense_params.student_passes=5"),
         toy=(*TOY_AIRBENCH, "--set", "defense_params.rounds=2", "--set", "defense_params.warmup=1",
              "--set", "defense_params.synth_batch=8"), epochs=AIRBENCH_EPOCHS,
         paper="DFKD", canaries=("mislabeled",),
         scale=AIRBENCH_SCALE + " teacher; 40 rounds of 64 synthetic images (the paper: 240 of 256)"),
    Item("undefended-population", "the population-level figure (LiRA)", "population", "airbench",
         16 * AIRBENCH_EPOCHS, 16, 1.0, _fast("undefended", "population"), toy=TOY_AIRBENCH, epochs=AIRBENCH_EPOCHS,
         paper="Undefended", stacked=True,
         scale=AIRBENCH_SCALE),
    Item("hamp-population", "the population-level figure (LiRA)", "population", "airbench", 16 * AIRBENCH_EPOCHS,
         16, 1.0, _fast("hamp", "population"), toy=TOY_AIRBENCH, epochs=AIRBENCH_EPOCHS, paper="HAMP", stacked=True,
         scale=AIRBENCH_SCALE),
    Item("relaxloss-population", "the population-level figure (LiRA)", "population", "airbench",
         16 * AIRBENCH_EPOCHS, 16, 1.0, _fast("relaxloss", "population"), toy=TOY_AIRBENCH, epochs=AIRBENCH_EPOCHS,
         paper="RelaxLoss", stacked=True,
         scale=AIRBENCH_SCALE),
    Item("dpsgd-high-population", "the population-level figure (LiRA)", "population", "dpsgd-cnn-gn", 16 * 4, 16,
         0.8, ("dpsgd-high", "--preset", "cifar10", "--level", "population", *DP_GROUP),
         toy=("--set", "defense_params.batch_size=8"),
         paper="DP-SGD (high utility)", scale="as dpsgd-high"),
    Item("dpsgd-veryhigh-population", "the population-level figure (LiRA)", "population", "dpsgd-cnn-gn", 16 * 6, 16,
         0.8, ("dpsgd-veryhigh", "--preset", "cifar10", "--level", "population", *DP_GROUP),
         toy=("--set", "defense_params.batch_size=8"),
         paper="DP-SGD (very high utility)", scale="as dpsgd-veryhigh"),
)


def harness_args(item: Item, toy: bool) -> list[str]:
    """The item's ``harness evaluate`` arguments, at toy scale with ``toy``."""
    models, epochs = (TOY_MODELS, TOY_EPOCHS if item.epochs or item.kind.startswith("dpsgd") else None) if toy \
        else (item.models, item.epochs)
    args = [*item.args, "--models", str(models)]
    if epochs is not None:
        args += ["--epochs", str(epochs)]
    return args + ([*TOY, *item.toy] if toy else [])


def item_by_id(item_id: str) -> Item:
    for it in ITEMS:
        if it.id == item_id:
            return it
    raise KeyError(item_id)


# --- state ----------------------------------------------------------------------------------------


def new_state() -> dict[str, Any]:
    return {"version": 1, "rates": {k: dict(v) for k, v in PRIOR_RATES.items()}, "group_size": None,
            "items": {it.id: {"status": "pending", "attempts": 0} for it in ITEMS}, "calls": []}


def load_state(path: Path) -> dict[str, Any]:
    """The campaign's state at ``path`` (a fresh one where there is none), with any item or rate added
    to the code since it was written."""
    state = json.loads(path.read_text()) if path.is_file() else new_state()
    for it in ITEMS:
        state["items"].setdefault(it.id, {"status": "pending", "attempts": 0})
    for k, v in PRIOR_RATES.items():
        state["rates"].setdefault(k, dict(v))
    return state


def save_state(state: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def predict(item: Item, state: dict[str, Any]) -> float:
    """Predicted device seconds of ``item``: ``BASE_S + PER_MODEL_S x models + units x rate[kind]``
    (the throughput figure: ``BASE_S + COMPILE_S + units x rate``, its airbench one at a time)."""
    rate = float(state["rates"][item.kind]["seconds"])
    if item.kind == "throughput":
        return BASE_S + COMPILE_S + item.units * rate
    if item.kind == "seconds":
        return BASE_S + item.units * rate
    return BASE_S + PER_MODEL_S * item.total_models + item.units * rate


def plan(state: dict[str, Any], budget_s: float, only: list[str] | None = None,
         skip: set[str] | frozenset[str] = frozenset()) -> tuple[list[Item], list[str]]:
    """The items a call of ``budget_s`` device seconds runs, in order, and one line per pending item it
    leaves for later. Order: the throughput figure, then the sample-level items, the DP-SGD
    vectorisation figure, then the population-level items, each group by ``value / predicted seconds``; an item runs if ``SAFETY x`` its prediction fits what the
    items before it leave (the last END_RESERVE_S kept for writing the results); ``skip``: items already
    tried in this call."""
    rank = {"device": 0, "sample": 1, "extra": 1.5, "population": 2}
    pending = [it for it in ITEMS if state["items"][it.id]["status"] != "done" and (only is None or it.id in only)
               and it.id not in skip]
    pending.sort(key=lambda it: (rank[it.level], -it.value / predict(it, state)))
    left = budget_s - END_RESERVE_S
    chosen, later = [], []
    for it in pending:
        p = predict(it, state)
        if SAFETY * p <= left:
            chosen.append(it)
            left -= p
        else:
            later.append(f"{it.id}: predicted {p:.0f} s does not fit ({left:.0f} s left of the budget)")
    return chosen, later


def update_rate(state: dict[str, Any], item: Item, measured_s: float, device: str) -> None:
    """Replace the item's kind's rate with what it measured (``(measured - base) / units``)."""
    if item.kind in ("throughput", "seconds") or item.units <= 0:
        return
    seconds = max(1e-4, (measured_s - BASE_S - PER_MODEL_S * item.total_models) / item.units)
    state["rates"][item.kind] = {"seconds": seconds, "unit": state["rates"][item.kind]["unit"],
                                 "source": f"measured: {item.id} on {device}, {measured_s:.1f} s"}


def apply_throughput(state: dict[str, Any], fig: dict[str, Any]) -> None:
    """From the throughput figure: the group size of the stacked items (the largest G within 10% of the
    best models per second) and the stacked airbench rate there (seconds per model-epoch)."""
    key = f"models_per_second_{fig['project_epochs']}_epochs"
    rows = [r for r in fig["rows"] if r.get("mode") == "stacked" and not r.get("oom") and "variant" not in r]
    if not rows:
        return
    best = max(r[key] for r in rows)
    g = max(r["G"] for r in rows if r[key] >= 0.9 * best)
    row = next(r for r in rows if r["G"] == g)
    state["group_size"] = g
    state["rates"]["airbench"] = {
        "seconds": row["seconds_per_epoch"] / g * 2540 / fig["train_images_per_model"], "unit": "model-epoch",
        "source": f"measured: throughput, stacked G = {g} on {fig['device']}"}


# --- reading the results --------------------------------------------------------------------------


def _fpr_key(results: dict[str, Any]) -> str:
    return repr(float(results["headline_fpr"]))


def _experiments(results: dict[str, Any], item: Item) -> dict[str, dict[str, Any]]:
    if item.level == "population":
        return {"population": results["population"]}
    by = results.get("sample_by_canary") or {results["sample"]["canary"]: results["sample"]}
    return {c: by[c] for c in (item.canaries or tuple(by)) if c in by}


def _best_of(exp: dict[str, Any], attack: str, k: str) -> dict[str, Any] | None:
    """The best primary variant of ``attack`` at FPR key ``k`` in one experiment: TPR, CI, variant."""
    rows = [a for a in exp["attacks"] if a["name"] == attack and a["primary"]]
    if not rows:
        return None
    a = max(rows, key=lambda r: r["tpr_at_fpr"][k])
    return {"tpr": a["tpr_at_fpr"][k], "ci": a["tpr_ci"][k], "variant": a["variant"], "resolved": a["resolved"][k]}


def summarize(results: dict[str, Any], item: Item) -> dict[str, Any]:
    """The item's answer from its results.json: per experiment the headline and the compared attacks'
    best primary variants at the headline FPR, and the figure set beside the paper's (the compared
    attack, best over the experiments read)."""
    k = _fpr_key(results)
    exps = _experiments(results, item)
    attack = "lira" if item.level == "population" else item.attack
    per = {}
    for name, exp in exps.items():
        per[name] = {"test_accuracy": exp["test_accuracy"]["mean"],
                     "headline": {"attack": f"{exp['best']['name']}:{exp['best']['variant']}",
                                  "tpr": exp["best"]["tpr_at_fpr"][k], "ci": exp["best"]["tpr_ci"][k]},
                     **{a: _best_of(exp, a, k) for a in (attack, *item.compare)}}
    found = [(n, e[attack]) for n, e in per.items() if e.get(attack)]
    top = max(found, key=lambda ne: ne[1]["tpr"]) if found else (None, None)
    return {"fpr": float(results["headline_fpr"]), "attack": attack, "experiments": per,
            "figure": top[1], "figure_experiment": top[0],
            "test_accuracy": sum(e["test_accuracy"] for e in per.values()) / max(1, len(per)),
            "compare": {a: max((e[a]["tpr"] for e in per.values() if e.get(a)), default=None) for a in item.compare}}


# --- running an item -------------------------------------------------------------------------------


@dataclass
class Context:
    data_dir: Path
    device: str
    runs: Path
    work: Path  # the repository root whose CAMPAIGN_DIR and docs receive the results
    toy: bool
    python: str = sys.executable
    log: Callable[[str], None] = print
    extra: dict[str, list[str]] = field(default_factory=dict)


def _run(cmd: list[str], timeout_s: float, log: Callable[[str], None]) -> int:
    """Run ``cmd`` with its output in the log; SIGINT at ``timeout_s`` (a harness run keeps its finished
    models), SIGKILL 20 s later. Returns the exit code (-2 when stopped for time). Interrupted itself
    (the device call's own limit), it stops the command the same way, within 8 s, and re-raises."""
    log(f"$ {' '.join(cmd)}  (stop after {timeout_s:.0f} s)")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1, start_new_session=True)

    def pump() -> None:  # the command's output, line by line, into the log
        assert proc.stdout is not None
        for line in proc.stdout:
            log("  " + line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s
    stopped = False
    try:
        while proc.poll() is None:
            now = time.monotonic()
            if not stopped and now > deadline:
                log(f"  (stopping: {timeout_s:.0f} s passed)")
                os.killpg(proc.pid, signal.SIGINT)
                stopped, deadline = True, now + 20
            elif stopped and now > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.2)
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(8)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(2)
        raise
    reader.join(5)
    return -2 if stopped else proc.returncode


def run_item(item: Item, ctx: Context, state: dict[str, Any], timeout_s: float) -> tuple[str, dict[str, Any] | None]:
    """Run one item; return (status, summary): ``done`` with its summary, ``interrupted`` or ``failed``."""
    out_dir = ctx.work / CAMPAIGN_DIR
    if item.id == "dpsgd-vmap":
        tmp = ctx.runs / "dpsgd-vmap"
        path = tmp / "dpsgd.json"
        path.unlink(missing_ok=True)
        cmd = [ctx.python, str(REPO / "benchmarks" / "bench_stacked_cnn.py"), "dpsgd", "--device", ctx.device,
               "--out", str(tmp), *item.args, *(item.toy if ctx.toy else ())]
        rc = _run(cmd, timeout_s, ctx.log)
        if rc != 0 or not path.is_file():
            return ("interrupted" if rc == -2 else "failed"), None
        return "done", {"dpsgd": json.loads(path.read_text())}
    if item.kind == "throughput":
        tmp = ctx.runs / "throughput"
        cmd = [ctx.python, str(REPO / "benchmarks" / "bench_stacked_cnn.py"), "throughput", "--data-dir",
               str(ctx.data_dir), "--device", ctx.device, "--out", str(tmp), *item.args,
               *(item.toy if ctx.toy else ())]
        path = tmp / "throughput.json"
        path.unlink(missing_ok=True)  # an earlier attempt's, on the same machine
        rc = _run(cmd, timeout_s, ctx.log)
        fig = json.loads(path.read_text()) if path.is_file() else {}
        if not fig.get("sweep_complete"):  # the variants may be cut short; every G must have run
            return ("interrupted" if rc == -2 else "failed"), None
        apply_throughput(state, fig)
        return "done", {"throughput": fig, "group_size": state["group_size"]}
    args = [*harness_args(item, ctx.toy)]
    if item.stacked and state.get("group_size"):
        args += ["--set", f"run.group_size={state['group_size']}"]
    args += ctx.extra.get(item.id, [])
    run_out = ctx.runs / item.id
    run_out.mkdir(parents=True, exist_ok=True)
    cmd = [ctx.python, "-m", "harness.cli", "evaluate", *args, "--data-dir", str(ctx.data_dir), "--device",
           ctx.device, "--out", str(run_out)]
    rc = _run(cmd, timeout_s, ctx.log)
    if rc != 0:
        return ("interrupted" if rc == -2 else "failed"), None
    found = [p for p in run_out.iterdir() if (p / "results.json").is_file()]
    if len(found) != 1:
        ctx.log(f"  {item.id}: expected one finished run under {run_out}, found {len(found)}")
        return "failed", None
    text = (found[0] / "results.json").read_text()
    from harness.core import jsonio

    results = jsonio.loads(text)
    out_dir.mkdir(parents=True, exist_ok=True)
    with gzip.open(out_dir / f"{item.id}.results.json.gz", "wt") as f:
        f.write(text)
    return "done", summarize(results, item)


def device_info(device: str) -> str:
    import torch

    name = torch.cuda.get_device_name() if device.startswith("cuda") and torch.cuda.is_available() else device
    return f"{name}, torch {torch.__version__}"


def run_campaign(ctx: Context, state_path: Path, budget_s: float, only: list[str] | None = None,
                 out: Path | None = None, clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """One call: run the planned items within ``budget_s`` seconds, saving the state after each."""
    t_start = clock()
    state = load_state(state_path)
    device = device_info(ctx.device)
    call = {"started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "device": device,
            "budget_s": budget_s, "toy": ctx.toy, "ran": []}
    state["calls"].append(call)
    chosen, later = plan(state, budget_s, only)
    ctx.log(f"campaign: {len(chosen)} item(s) planned within {budget_s:.0f} s on {device} (planned again after "
            "each item, with what it measured): " + ", ".join(f"{it.id} ({predict(it, state):.0f} s)" for it in chosen))
    for line in later:
        ctx.log(f"  later: {line}")
    tried: set[str] = set()
    try:
        while True:  # planned again after every item: a measured rate changes what fits
            chosen, _ = plan(state, budget_s - (clock() - t_start), only, tried)
            if not chosen:
                break
            item = chosen[0]
            tried.add(item.id)
            predicted = predict(item, state)
            rec = state["items"][item.id]
            rec["attempts"] = rec.get("attempts", 0) + 1
            t0 = clock()
            ctx.log(f"=== {item.id}: {item.question} (predicted {predicted:.0f} s)")
            interrupted = False
            left = budget_s - (clock() - t_start) - END_RESERVE_S
            try:
                status, summary = run_item(item, ctx, state, min(left, STOP_FACTOR * predicted + STOP_GRACE_S))
            except KeyboardInterrupt:
                status, summary, interrupted = "interrupted", None, True
            except Exception:  # the campaign's own failure on this item: logged, and the call goes on
                ctx.log(traceback.format_exc())
                status, summary = "failed", None
            measured = clock() - t0
            rec.update({"status": status, "predicted_s": round(predicted, 1), "measured_s": round(measured, 1),
                        "device": device, "when": datetime.now(timezone.utc).isoformat(timespec="seconds")})
            call["ran"].append({"item": item.id, "status": status, "predicted_s": round(predicted, 1),
                                "measured_s": round(measured, 1)})
            ctx.log(f"=== {item.id}: {status} in {measured:.1f} s (predicted {predicted:.0f} s)")
            if status == "done":
                update_rate(state, item, measured, device)
                summary = {"item": item.id, "question": item.question, "level": item.level, "scale": item.scale,
                           "args": list(item.args), "toy": ctx.toy, "device": device, "predicted_s": predicted,
                           "measured_s": measured, "when": rec["when"], **(summary or {})}
                path = ctx.work / CAMPAIGN_DIR / f"{item.id}.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(summary, indent=1) + "\n")
                rec["result"] = str(CAMPAIGN_DIR / f"{item.id}.json")
            call["used_s"] = round(clock() - t_start, 1)
            save_state(state, state_path)
            if out is not None:
                pack_update(ctx.work, state_path, out)
            if interrupted:
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        ctx.log("campaign: interrupted; the state keeps what finished")
    finally:
        call["used_s"] = round(clock() - t_start, 1)
        save_state(state, state_path)
        write_docs(ctx.work, state)
        if out is not None:
            pack_update(ctx.work, state_path, out)
    return state


# --- bringing the results home ----------------------------------------------------------------------


def pack_update(work: Path, state_path: Path, out: Path) -> Path:
    """``OUT/campaign-update.tar.gz``: the state and every result file under the campaign folder."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (UPDATE_TAR + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(state_path, arcname=str(CAMPAIGN_DIR / STATE_NAME))
        for p in sorted((work / CAMPAIGN_DIR).glob("*")):
            if p.name != STATE_NAME and p.is_file():
                tar.add(p, arcname=str(CAMPAIGN_DIR / p.name))
    os.replace(tmp, out / UPDATE_TAR)
    shutil.copy(state_path, out / "campaign-state.json")
    return out / UPDATE_TAR


def apply_update(archive: Path, work: Path) -> list[str]:
    """Unpack an update archive into ``work`` (only files directly under the campaign folder are
    accepted) and re-write the docs tables from its state; return the paths written."""
    written = []
    with tarfile.open(archive, "r:gz") as tar:
        for m in tar.getmembers():
            p = Path(m.name)
            if not m.isfile() or p.parent != CAMPAIGN_DIR or p.name in ("", ".", ".."):
                raise SystemExit(f"error: {archive}: unexpected member {m.name!r} (only {CAMPAIGN_DIR}/FILE)")
            data = tar.extractfile(m)
            assert data is not None
            dest = work / p
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data.read())
            written.append(str(p))
    state = load_state(work / CAMPAIGN_DIR / STATE_NAME)
    write_docs(work, state)
    return written + [str(DOCS)]


# --- the docs tables ------------------------------------------------------------------------------


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def harness_figures(results: dict[str, Any], item: Item) -> dict[str, Any]:
    """What the harness itself prints for the item, from its results.json: per experiment read, the
    compared attacks' primary reads at the level's figure FPR (plotting position, the read the
    leak ranks) and the level's leak with its one-sided 95% lower bound; the experiment whose
    compared-attack read is largest (the paper's max over canaries)."""
    best: dict[str, Any] | None = None
    for name, exp in _experiments(results, item).items():
        fig = exp.get("figure") or {}
        reads = {}
        for a in (item.attack if item.level != "population" else "lira", *item.compare):
            rows = [r for r in exp["attacks"] if r["name"] == a and r["primary"] and r.get("reading")]
            if rows:
                reads[a] = max(v for r in rows for v in r["reading"].values())
        leak = fig.get("leak") or {}
        cand = {"experiment": name, "fpr": fig.get("fpr"), "reads": reads, "leak": leak.get("tpr"),
                "leak_lower": leak.get("lower"), "leak_by": leak.get("name")}
        key = next(iter(reads.values()), -1.0)
        if best is None or key > next(iter(best["reads"].values()), -1.0):
            best = cand
    return best or {}


def _ours(fig: dict[str, Any], multi: bool) -> str:
    """The campaign table's "ours" cell: the compared attacks' reads, then the level's leak."""
    if not fig:
        return "-"
    reads = "; ".join(f"{a} {_pct(v)}" for a, v in fig["reads"].items()) or "-"
    at = "" if fig.get("fpr") in (None, 0.001) else f" @{100 * fig['fpr']:.2g}%"
    where = f" ({fig['experiment']})" if multi else ""
    leak = "" if fig.get("leak") is None else (f"; leak {_pct(fig['leak'])} (≥ {100 * fig['leak_lower']:.1f}, "
                                              f"{fig['leak_by']})")
    return f"{reads}{at}{where}{leak}"


def _read_results_json(work: Path, rec: dict[str, Any]) -> dict[str, Any] | None:
    p = rec.get("result")
    if not p:
        return None
    gz = (work / p).with_name(Path(p).name.replace(".json", ".results.json.gz"))
    if not gz.is_file():
        return None
    with gzip.open(gz, "rt") as f:
        return json.load(f)


def campaign_rows(work: Path, state: dict[str, Any]) -> list[str]:
    """The campaign table of docs/gpu.md, one row per harness item: our figure beside the paper's."""
    head = ["| item | question | scale | ours: TPR at 0.1% FPR as the harness prints it (the compared attack's "
            "read; the level's leak, ≥ its 95% lower bound) | paper | test acc (ours; paper) | "
            "device s (predicted; measured) | status |", "|---|---|---|---|---|---|---|---|"]
    rows = []
    for it in ITEMS:
        if it.level in ("device", "extra"):
            continue
        rec = state["items"][it.id]
        paper = PAPER.get(it.paper or "")
        col = 0 if it.level == "population" else 1
        paper_fig = "-" if paper is None else f"{_pct(paper[col])} ({'LiRA' if col == 0 else paper[5]})"
        paper_acc = "-" if paper is None else _pct(paper[2 if it.level == "population" else 3])
        predicted = predict(it, state)
        res = _read_result(work, rec)
        if rec["status"] == "done" and res is not None:
            full = _read_results_json(work, rec)
            ours = "results.json.gz missing" if full is None else _ours(harness_figures(full, it), len(res.get("experiments", {})) > 1)
            acc = f"{_pct(res.get('test_accuracy'))}; {paper_acc}"
            dev = f"{res.get('predicted_s', predicted):.0f}; {res.get('measured_s', 0):.0f}"
            status = f"done{' (toy)' if res.get('toy') else ''}, {res.get('device', '')}, {res.get('when', '')[:10]}"
        else:
            ours, acc = "pending", f"-; {paper_acc}"
            dev = f"{predicted:.0f}; -"
            status = rec["status"] + (f" ({rec['attempts']} tries)" if rec.get("attempts") else "")
        rows.append(f"| {it.id} | {it.question} | {it.scale} | {ours} | {paper_fig} | {acc} | {dev} | {status} |")
    return head + rows


def throughput_rows(work: Path, state: dict[str, Any]) -> list[str]:
    head = ["| G | mode | models/s (60-epoch models) | projected s, 2 x 64 models | images/s | peak GiB | "
            "test acc | note |", "|---|---|---|---|---|---|---|---|"]
    res = _read_result(work, state["items"]["throughput"])
    if state["items"]["throughput"]["status"] != "done" or res is None:
        return head + ["| 1, 8, 16, 32, 64 | alone, stacked | pending | pending | pending | pending | pending | "
                       "pending: `bash benchmarks/gpu_run.sh campaign` on a lent GPU |"]
    fig = res["throughput"]
    key = f"models_per_second_{fig['project_epochs']}_epochs"
    pkey = f"projected_seconds_2x64_models_{fig['project_epochs']}_epochs"
    rows = []
    for r in fig["rows"]:
        if r.get("oom"):
            rows.append(f"| {r['G']} | {r.get('variant', 'stacked')} | out of memory | | | | | |")
            continue
        note = ""
        if "variant" in r:
            note = (f"{r['speedup_vs_plain']:.2f}x plain; logits differ by {r['max_logit_difference_vs_plain']:.2g} "
                    f"of their scale; plain acc {_pct(r['plain_test_accuracy'])}")
        rows.append(f"| {r['G']} | {r.get('variant', r['mode'])} | {r[key]:.3g} | {r[pkey]:.0f} | "
                    f"{r['images_per_second']:.0f} | {r.get('peak_memory_gib', 0):.1f} | {_pct(r['test_accuracy'])} | "
                    f"{note} |")
    rows.append(f"| | | | | | | | {fig['device']}, torch {fig['torch']}, {fig['epochs_timed']} timed epochs"
                f"{' (toy)' if fig.get('toy') else ''}; campaign group size {res.get('group_size')} |")
    return head + rows


def dpsgd_rows(work: Path, state: dict[str, Any]) -> list[str]:
    head = ["| G | one model at a time, s | nested vmap, s | speed-up | largest difference | device |",
            "|---|---|---|---|---|---|"]
    res = _read_result(work, state["items"]["dpsgd-vmap"])
    if state["items"]["dpsgd-vmap"]["status"] != "done" or res is None:
        return head + ["| 1, 4, 8, 16 | pending | pending | pending | pending | "
                       "pending: `bash benchmarks/gpu_run.sh campaign` on a lent GPU |"]
    fig = res["dpsgd"]
    return head + [f"| {r['G']} | {r['sequential_seconds']:.4f} | {r['vmap_seconds']:.4f} | {r['speedup']:.2f}x | "
                   f"{r['max_difference']:.2g} | {fig['device']}, torch {fig['torch']}{' (toy)' if res.get('toy') else ''} |"
                   for r in fig["rows"]]


def _read_result(work: Path, rec: dict[str, Any]) -> dict[str, Any] | None:
    p = rec.get("result")
    if not p or not (work / p).is_file():
        return None
    return json.loads((work / p).read_text())


def replace_section(text: str, name: str, lines: list[str]) -> str:
    """Replace the lines between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` (both kept)."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if start not in text or end not in text:
        raise ValueError(f"{DOCS} has no {start} ... {end} section")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return head + start + "\n" + "\n".join(lines) + "\n" + end + tail


def write_docs(work: Path, state: dict[str, Any]) -> None:
    """Re-write docs/gpu.md's campaign and throughput tables under ``work`` from the state."""
    path = work / DOCS
    text = path.read_text()
    text = replace_section(text, "campaign-table", campaign_rows(work, state))
    text = replace_section(text, "stacked-throughput", throughput_rows(work, state))
    text = replace_section(text, "dpsgd-vmap", dpsgd_rows(work, state))
    path.write_text(text)


# --- command line ---------------------------------------------------------------------------------


def toy_work(work: Path) -> None:
    """A toy work folder: docs/gpu.md copied in (the toy run's tables go there, not into the checkout)."""
    (work / DOCS).parent.mkdir(parents=True, exist_ok=True)
    if not (work / DOCS).is_file():
        shutil.copy(REPO / DOCS, work / DOCS)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=None, help="a CIFAR-10 folder (the subset); default "
                    ".gpu/data/cifar10-subset where it exists (a lent GPU), else ../shared/data/cifar10-subset")
    ap.add_argument("--device", default=None, help="default: cuda where torch sees one, else cpu")
    ap.add_argument("--budget-s", type=float, default=None, help="device seconds this call may use (default 360; "
                    "--toy: 1e6, so that every item runs: the predictions are the GPU's, scaled from toy timings)")
    ap.add_argument("--runs", type=Path, default=None, help="harness runs (kept: a later call on the same "
                    "machine resumes them); default /tmp/gpu-runs")
    ap.add_argument("--out", type=Path, default=None, help="also write OUT/campaign-update.tar.gz (the device's $OUT)")
    ap.add_argument("--state", type=Path, default=None, help=f"default {CAMPAIGN_DIR / STATE_NAME} (--toy: under --work)")
    ap.add_argument("--work", type=Path, default=None, help="--toy: the folder its state, results and docs copy go "
                    f"to (default {TOY_WORK}, ignored by git)")
    ap.add_argument("--only", nargs="+", default=None, metavar="ITEM", help="run only these items")
    ap.add_argument("--toy", action="store_true", help="every item at toy scale (the CPU test)")
    ap.add_argument("--plan", action="store_true", help="print what a call of --budget-s would run, and stop")
    ap.add_argument("--apply", type=Path, default=None, metavar="ARCHIVE", help="unpack a campaign-update.tar.gz "
                    "into this checkout and re-write docs/gpu.md's tables")
    ap.add_argument("--docs", action="store_true", help="re-write docs/gpu.md's tables from the state, and stop")
    args = ap.parse_args(argv)
    if args.only:
        unknown = sorted(set(args.only) - {it.id for it in ITEMS})
        if unknown:
            ap.error(f"unknown item(s) {', '.join(unknown)}; known: {', '.join(it.id for it in ITEMS)}")
    if args.toy and args.work is None:
        args.work = REPO / TOY_WORK  # the toy's state, results and docs copy stay out of the checkout's files
    if args.work is not None and not args.toy:
        ap.error("--work is for --toy (a real call writes the campaign folder and docs/gpu.md of this checkout)")
    if args.budget_s is None:
        args.budget_s = TOY_BUDGET_S if args.toy else 360.0
    if args.budget_s <= END_RESERVE_S:
        ap.error(f"--budget-s must exceed {END_RESERVE_S:.0f} s")
    work = args.work.resolve() if args.work else REPO
    if args.toy:
        toy_work(work)
    state_path = args.state or work / CAMPAIGN_DIR / STATE_NAME
    if args.apply is not None:
        if not args.apply.is_file():
            ap.error(f"--apply: no file {args.apply}")
        for p in apply_update(args.apply, work):
            print(f"wrote {p}")
        return
    state = load_state(state_path)
    if args.docs:
        write_docs(work, state)
        print(f"wrote {work / DOCS}")
        return
    if args.plan:
        chosen, later = plan(state, args.budget_s, args.only)
        for it in chosen:
            print(f"run   {it.id}: predicted {predict(it, state):.0f} s ({it.kind}: {it.units:g} "
                  f"{state['rates'][it.kind]['unit']}s x {state['rates'][it.kind]['seconds']:.3g} s)")
        for line in later:
            print(f"later {line}")
        return
    if args.data_dir is None:
        args.data_dir = next((p for p in DATA_DIRS if (p / "cifar-10-batches-py").is_dir()), None)
    if args.data_dir is None or not args.data_dir.is_dir():
        ap.error("--data-dir must name a CIFAR-10 folder (.gpu/data/cifar10-subset on a lent GPU, "
                 "../shared/data/cifar10-subset here)")
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    data_dir = args.data_dir.resolve()
    if args.toy:
        sys.path.insert(0, str(REPO / "benchmarks"))
        from bench_gpu import toy_cifar

        toy_data = work / "toy-data"
        if not toy_data.is_dir():
            toy_cifar(data_dir, toy_data)
            ood = data_dir.parent / "ood_imagenet_samples.pt"  # ../shared/data keeps it beside the subset
            if not (toy_data / ood.name).is_file() and ood.is_file():
                shutil.copy(ood, toy_data / ood.name)
        data_dir = toy_data
    runs = (args.runs or (work / "runs" if args.toy else Path(tempfile.gettempdir()) / "gpu-runs")).resolve()
    ctx = Context(data_dir=data_dir, device=device, runs=runs, work=work, toy=args.toy,
                  log=lambda s: print(s, flush=True))
    state = run_campaign(ctx, state_path, args.budget_s, args.only, args.out)
    left = [i for i, r in state["items"].items() if r["status"] != "done"]
    print(f"campaign: {len(ITEMS) - len(left)} of {len(ITEMS)} items done"
          + (f"; not yet: {', '.join(left)}" if left else ""), flush=True)


if __name__ == "__main__":
    main()
