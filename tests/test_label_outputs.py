"""Outputs that carry only the argmax count as labels (issue 54): a served 5 x one-hot(argmax) (constant
confidence, MemGuard-like) or its softmax gets the label-only attack added to the leak's candidates,
as exact one-hot rows do; ordinary logits do not. The rule reads one model at a time: within each
model, every answer with the same argmax is the same answer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from harness.audit.attack_phase import LABEL_ONLY_NOTE, carries_only_argmax, is_one_hot
from harness.cli import app

runner = CliRunner()

TINY = ["--models", "6", "--audit-size", "20", "--epochs", "2", "--set", "train.width=32", "--set",
        "attack.bootstrap=20", "--workers", "1", "--level", "population"]

PLUGIN = '''
import numpy as np

from defenses.base import ServedModel
from defenses.undefended import Undefended


class ArgmaxServed(ServedModel):
    """The network's argmax as `scale` x one-hot, or (softmax) its softmax: a fixed confidence per label."""

    def __init__(self, inner, scale, softmax):
        self.inner, self.scale, self.softmax = inner, scale, softmax

    def query(self, x):
        z = self.inner.query(x)
        out = self.scale * np.eye(z.shape[1], dtype=np.float32)[z.argmax(1)]
        if self.softmax:
            out = np.exp(out) / np.exp(out).sum(1, keepdims=True)
        return out.astype(np.float32)


class ScaledOneHot(Undefended):
    name = "scaled-one-hot"
    description = "serves 5 x one-hot(argmax)"
    adaptive_attacks = ("lira",)
    param_defaults = {"softmax": False}

    def fit(self, train, ctx):
        return ArgmaxServed(super().fit(train, ctx), 5.0, bool(self.params["softmax"]))

    def fit_group(self, trains, ctxs):
        served = super().fit_group(trains, ctxs)
        return None if served is None else [ArgmaxServed(m, 5.0, bool(self.params["softmax"])) for m in served]
'''


def _answers(models: int = 3, rows: int = 40, views: int = 9, classes: int = 10, seed: int = 0) -> np.ndarray:
    """(S, C, A, K) logits of ``models`` different random models."""
    return np.random.default_rng(seed).normal(0, 3, (models, rows, views, classes)).astype(np.float32)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


def test_any_answer_that_is_a_function_of_its_argmax_reads_as_labels_and_logits_do_not():
    """One-hot rows, 5 x one-hot, its softmax and its log-softmax, one fixed confidence vector per label
    (MemGuard-like: another per model), and 5 x one-hot plus a constant per row (the same
    probabilities), stored as float32 or float16: labels. Logits, logits of which one model carries
    only its argmax, and an argmax-only answer with one entry of one row moved by 0.01: not labels;
    nor a model answering one class only, or one whose rows each have another argmax (no row shows
    what another with its argmax gets)."""
    z = _answers()
    onehot = np.eye(10, dtype=np.float32)[z.argmax(-1)]
    rng = np.random.default_rng(1)
    fixed = rng.dirichlet(np.ones(10), (3, 10)).astype(np.float32)  # per model, a confidence vector per label
    fixed[:, np.arange(10), np.arange(10)] += 1.0  # whose argmax is its label
    per_label = np.stack([fixed[m][z[m].argmax(-1)] for m in range(3)])
    shifted = 5 * onehot + rng.normal(0, 10, (*z.shape[:-1], 1)).astype(np.float32)
    labels = {"one-hot": onehot, "5 x one-hot": 5 * onehot, "softmax": _softmax(5 * onehot),
              "log-softmax": np.log(_softmax(5 * onehot)), "fixed per label": per_label, "shift per row": shifted,
              "float16": (5 * onehot).astype(np.float16)}
    for name, out in labels.items():
        assert carries_only_argmax(out), name
    assert is_one_hot(onehot) and not is_one_hot(5 * onehot)  # the exact form is the narrower test
    mixed = z.copy()
    mixed[1] = 5 * onehot[1]
    moved = 5 * onehot
    moved[2, 7, 3, (int(onehot[2, 7, 3].argmax()) + 1) % 10] += 0.01
    one_class = np.zeros_like(onehot)
    one_class[..., 4] = 5.0
    distinct = 5 * np.eye(10, dtype=np.float32)[np.arange(10)].reshape(1, 10, 1, 10)
    for name, out in {"logits": z, "softmax of logits": _softmax(z), "one model of logits": mixed,
                      "one entry moved": moved, "one class": one_class, "each row another class": distinct,
                      "empty": z[:, :0]}.items():
        assert not carries_only_argmax(out), name
    # an exact one-hot answer needs no second row to show it
    assert carries_only_argmax(np.eye(3)[[0, 2, 1]]) and carries_only_argmax(np.eye(10)[None, None, None, [3]])


def test_argmax_only_outputs_are_decided_by_every_row_past_the_first_thousand():
    """With more rows per model than the check reads first (PREFIX_ROWS), a fixed confidence vector per
    label is still a label answer, and one entry moved after those rows, or within them, is not."""
    from harness.audit.attack_phase import PREFIX_ROWS

    z = _answers(models=2, rows=300, views=9)  # 2 700 rows per model
    assert z.shape[1] * z.shape[2] > 2 * PREFIX_ROWS
    fixed = np.random.default_rng(2).dirichlet(np.ones(10), 10).astype(np.float32) + np.eye(10, dtype=np.float32)
    per_label = fixed[z.argmax(-1)]
    assert carries_only_argmax(per_label)
    for row in (PREFIX_ROWS + 500, 5):
        moved = per_label.copy()
        c, a = divmod(row, z.shape[2])
        moved[1, c, a, (int(moved[1, c, a].argmax()) + 1) % 10] += 0.01
        assert not carries_only_argmax(moved), row


@pytest.mark.parametrize("softmax", [False, True], ids=["5x-one-hot", "softmax-of-5x-one-hot"])
def test_a_served_argmax_only_output_gets_the_label_only_attack_with_a_note(tmp_path, finished_run, softmax):
    """A plugin serving 5 x one-hot(argmax), or its softmax, trained and attacked: the note is recorded
    and printed, label-only is an adaptation and one of the leak's candidates; the undefended run (real
    logits) gets neither."""
    f = tmp_path / "argmax_plugin.py"
    f.write_text(PLUGIN)
    out = tmp_path / "o"
    res = runner.invoke(app, ["evaluate", f"{f}:ScaledOneHot", "--out", str(out), *TINY, "--set",
                              f"defense_params.softmax={str(softmax).lower()}"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    (run_dir,) = out.iterdir()
    r = json.loads((run_dir / "results.json").read_text())
    assert LABEL_ONLY_NOTE in r["notes"]
    assert "label-only attack was added automatically" in " ".join(res.output.split())
    # label-only first (the pre-specified attack), then the per-model-scale read every run gets (issue 65)
    assert r["attack_roles"]["adapted"] == ["label-only", "lira-scaled"]
    assert "label-only" in r["population"]["ranked_attacks"]
    assert any(c.startswith("population/label-only:") for c in r["population"]["figure"]["leak"]["labels"])
    with np.load(run_dir / "population" / "signals" / "model_0000.npz") as s:
        served = s["logits"]
    assert not is_one_hot(served) and len(np.unique(served)) == 2  # two values: the label's and the rest's
    plain = json.loads((Path(finished_run) / "results.json").read_text())
    assert "label-only" not in plain["attack_roles"]["adapted"] and "notes" not in plain


def test_the_same_labels_read_the_same_whatever_their_encoding(tmp_path):
    """Issue 65: one model's labels served as one-hot rows, as 10 x one-hot and as the softmax of 5 x
    one-hot read exactly the same: every attack variant's ROC at both levels, the leak, the declared
    headline (the run's outputs replaced by each encoding of their argmax, then re-attacked). Before
    the outputs were read as one-hot rows, LiRA's variance floor saw the scale (the issue measured
    51.9% against 77.5%)."""
    import shutil

    from harness.audit.attack_phase import evaluate_run
    from harness.run.runstore import RunDir

    out = tmp_path / "runs"
    both_levels = [a for a in TINY if a not in ("--level", "population")]
    res = runner.invoke(app, ["evaluate", "undefended", "--out", str(out), *both_levels])
    assert res.exit_code == 0, res.output
    (finished_run,) = out.iterdir()
    encodings = {"one-hot": lambda hot: hot, "10 x one-hot": lambda hot: 10 * hot,
                 "softmax of 5 x one-hot": lambda hot: _softmax(5 * hot)}
    reads = {}
    for name, encode in encodings.items():
        run = tmp_path / name.replace(" ", "_")
        shutil.copytree(finished_run, run)
        for f in run.glob("*/signals/*.npz"):
            with np.load(f) as z:
                arrays = dict(z)
            logits = arrays["logits"]
            hot = np.eye(logits.shape[-1], dtype=np.float32)[logits.argmax(-1)]
            arrays["logits"] = encode(hot).astype(logits.dtype)
            np.savez(f, **arrays)
        results, _ = evaluate_run(RunDir(run))
        assert LABEL_ONLY_NOTE in results["notes"]
        reads[name] = {lv: ({(a["name"], a["variant"]): (a["auc"], a["tpr_at_fpr"]) for a in results[lv]["attacks"]},
                            results[lv]["figure"]["leak"]["tpr"], (results[lv]["figure"].get("declared") or {}).get("tpr"))
                       for lv in ("population", "sample")}
    first, *others = reads.values()
    assert first and all(other == first for other in others)
    assert any(len(attacks) > 3 for attacks, _, _ in first.values())  # LiRA, RMIA, ... all read, not one

