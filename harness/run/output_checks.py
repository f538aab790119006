"""The checks of an outside trainer's model outputs, before ``harness import`` writes anything.

harness.run.external builds the plan and the run directory; this module decides whether the files
of an outputs folder are what the plan asked for (docs/external-models.md, The import). They run in
two passes, so that a mistake anywhere in the folder is found without reading any model's outputs
first: the **cheap** pass reads every file's names, array headers (shapes, dtypes) and small arrays
(fingerprint, experiment, run_id) without loading the outputs (:func:`scan_outputs`,
:func:`read_header`, :func:`check_run_ids`); the **expensive** pass loads each file's outputs
(:func:`check_output_file`) and then checks the models together (:func:`check_models`).

| check | what it catches | what it cannot catch |
|---|---|---|
| names (cheap) | files and folders that are not the plan's (`notes.txt`, `model_3.npz`, `model_0064.npz` at S = 64, a temp file without a leading dot) | a file under the right name holding another model's outputs (the checks below) |
| file (cheap) | unreadable or truncated .npz, unknown or missing arrays, another plan's fingerprint, a file in another experiment's folder, wrong dtypes, wrong shapes (naming the axis: query rows, views, classes), features where the plan has none | arrays of the right shape whose values are wrong (the checks below) |
| run identity (cheap) | files written by different training runs (different `run_id`), or some files with a `run_id` and some without: two runs mixed in one folder | a mix of runs that wrote no `run_id` (a one-line warning says the import cannot tell) |
| values (per file) | NaN or infinity (located), probabilities where log-probabilities belong, a claimed `test_accuracy` more than half a point from the one `test_logits` give; outputs computed on another plan's images and stamped with this plan's fingerprint (named as such: a confident model at chance on this plan's test images and on every query row of known label) | - |
| outputs (together) | a model answering every query alike (all zeros), models with identical outputs, an experiment's files identical to another experiment's (a folder copied and its `experiment` rewritten) | near-identical models (the model-difference check) |
| utility | models at chance accuracy on the test set (one-sided binomial test at 0.001), named by their cause where one is plain: logits negated, classes rolled or permuted (:func:`class_order_outputs`), or another plan's outputs | weak but above-chance models |
| test outputs | `test_logits` that are not the model's own (:func:`test_outputs_findings`: every file's copied from model 0), constant query rows with varying test outputs | a model whose test outputs and rows were both copied |
| trainers | two trainers or settings in one folder whatever their run ids (:func:`trainers_findings`: answer scale or test loss in two groups) | two trainers alike in scale and loss |
| rows | query rows that are not the plan's at view 0, in any model: on the population rows (the test images the plan queries, whose accuracy must match the model's accuracy from `test_logits` on the same images) and on the audit rows whose image is the original training image (a prediction must be its canary label or its original label, at about the test accuracy); a (views, queries, classes) or (queries, classes, views) array reshaped to (queries, views, classes) is named with its fix (every other axis order is tried), rows permuted or shifted are named by part (audit, population) | scrambles of views 1..A-1 alone, or of rows whose expected label the plan does not know (OOD, blank or uniform canaries, near-duplicates) where no population rows are planned; models too weak to tell their rows from chance |
| model difference | models that are near-copies of one another (e.g. every model a copy of model 0 plus N(0, 1e-3) noise): the relative difference of two models' outputs (:func:`difference_matrix`) below :data:`MIN_DIFFERENCE`, within an experiment or across two | copies with noise of about 0.3% of their outputs' spread or more (0.03 logits on the quick preset) (the membership check does not catch them either); honest models that barely depend on their training data are refused alike |
| membership | files swapped or permuted between models, a model trained on another set than the plan's or its complement, models trained on another membership than the plan's (provenance: mislabeled canaries answered with their random label by models the plan says never saw them) (harness.core.checks; `--force` imports anyway, marked forced) | models that fit no member at all (DP-SGD at a small epsilon looks the same) |

Each check raises a ConfigError whose one line names the cause and the files; nothing is written
before every check has passed.
"""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
from dataclasses import dataclass
from itertools import permutations
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from harness.core.checks import ALPHA, label_rows, probability_rows
from harness.core.errors import ConfigError

#: arrays an output file may hold: name -> (required, what it is)
OUTPUT_ARRAYS = {
    "logits": (True, "the model's outputs (Q, A, K) over the query views, float16 or float32"),
    "plan_fingerprint": (True, "plan.json's fingerprint, a string"),
    "experiment": (True, "the experiment the model was trained for (its folder's name), a string"),
    "test_logits": (True, "the model's outputs (T, K) on data.npz's x_test as it is (no view), float16 or float32: "
                          "the import computes the model's test accuracy from them"),
    "test_accuracy": (False, "the model's accuracy on the test set, a number in [0, 1]: checked against the one its "
                             "test_logits give"),
    "train_seconds": (False, "seconds the model took to train, a number >= 0"),
    "run_id": (False, "an identifier of the training run that wrote the file, a string: the same in every file of "
                      "one run (a resumed run included), another for another trainer or other settings; files of "
                      "different runs are refused"),
    "features": (False, "features (2, R, A, C, D) on ssl_views.npz's v1 and v2, float16 or float32: required where "
                        "the plan has SSL views (a white-box attack), refused elsewhere"),
}
#: arrays the cheap pass reads in full (a few bytes each); the others only by their headers
SMALL_ARRAYS = ("plan_fingerprint", "experiment", "run_id", "test_accuracy", "train_seconds")
#: how far a claimed test_accuracy may lie from the one the test_logits give: half a point, or two test
#: images on a test set of fewer than 400 (a trainer's own evaluation may round or batch differently)
ACCURACY_TOLERANCE = 0.005
#: what ``--probabilities`` clips probabilities at before taking their log (a probability of 0 has none)
PROBABILITY_FLOOR = 1e-30
#: the smallest relative difference (:func:`difference_matrix`) two models' outputs may have. Measured
#: (benchmarks/bench_model_difference.py, docs/external-models.md, The import): at least 0.041 between two
#: models of one experiment and 0.014 across experiments in every built-in defense's quick run (DP-SGD at
#: every noise included), 3e-4 between logistic regressions trained on different halves (models nearly
#: determined by their data); 1.3e-8 for copies of one model plus N(0, 1e-3) noise (3.7e-8 in float16),
#: 1.3e-6 with N(0, 0.01), 1.3e-4 with N(0, 0.1)
MIN_DIFFERENCE = 1e-5
#: the model-difference check reads at most this many output entries (rows x classes) per model, rows evenly spaced
MAX_DIFFERENCE_ENTRIES = 1 << 18
OUTPUT_NAME = re.compile(r"^model_(\d{4,})\.npz$")
#: the axes of ``logits``, in the plan's order
AXES = ("queries", "views", "classes")


def output_name(index: int) -> str:
    return f"model_{index:04d}.npz"


class PlanLike(Protocol):
    """What the checks read of a plan (harness.run.external.Plan)."""

    path: Path
    meta: dict[str, Any]

    @property
    def fingerprint(self) -> str: ...

    @property
    def experiments(self) -> list[str]: ...

    @property
    def num_models(self) -> int: ...

    def load_level(self, experiment: str) -> Any: ...


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


# --- names -----------------------------------------------------------------------------------------


def scan_outputs(plan: PlanLike, outputs_dir: Path) -> dict[str, dict[int, Path]]:
    """The output files present per experiment; anything that cannot be one of the plan's is refused."""
    if not outputs_dir.is_dir():
        what = "is a file" if outputs_dir.exists() else "does not exist"
        raise ConfigError(f"the outputs folder {outputs_dir} {what}; it holds one folder per experiment "
                          f"({', '.join(plan.experiments)}) with model_0000.npz ...")
    exps = plan.experiments
    s = plan.num_models
    for p in sorted(outputs_dir.iterdir()):
        if p.name.startswith("."):
            continue
        if p.name not in exps:
            raise ConfigError(f"{p} is not an experiment of this plan: the outputs folder holds one folder per "
                              f"experiment ({', '.join(exps)})")
        if not p.is_dir():
            raise ConfigError(f"{p} is a file; it must be a folder of model_0000.npz ...")
    found: dict[str, dict[int, Path]] = {e: {} for e in exps}
    for e in exps:
        folder = outputs_dir / e
        if not folder.is_dir():
            continue
        for p in sorted(folder.iterdir()):
            if p.name.startswith("."):
                continue
            m = OUTPUT_NAME.match(p.name)
            if m is None:
                raise ConfigError(f"{p} is not an output file of this plan: the files are named model_0000.npz to "
                                  f"{output_name(s - 1)}")
            i = int(m.group(1))
            if i >= s or p.name != output_name(i):
                raise ConfigError(f"{p}: the plan has {s} models per experiment (model_0000.npz to "
                                  f"{output_name(s - 1)}); this file is not one of them")
            found[e][i] = p
    return found


# --- one file: the cheap pass ----------------------------------------------------------------------


@dataclass(frozen=True)
class FileHeader:
    """What the cheap pass read of one output file: its arrays' shapes and dtypes, and its run_id."""

    experiment: str
    index: int
    path: Path
    shapes: dict[str, tuple[tuple[int, ...], np.dtype]]
    run_id: str | None


def _unreadable(f: Path, e: BaseException) -> ConfigError:
    why = str(e).splitlines()[0] if str(e) else ""
    return ConfigError(f"{f} is not a readable .npz file ({type(e).__name__}{': ' + why if why else ''}; a "
                       "truncated or unfinished write?): write it again with numpy.savez")


def _npz_headers(f: Path) -> tuple[dict[str, tuple[tuple[int, ...], np.dtype]], dict[str, np.ndarray]]:
    """The shape and dtype of every array of an .npz file, from the .npy headers alone, and the
    small arrays (:data:`SMALL_ARRAYS`) in full; a ConfigError for a file that is not a readable .npz."""
    from numpy.lib import format as npy

    shapes: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    small: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(f) as zf:
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    raise ValueError(f"member {info.filename!r} is not an array")
                name = info.filename[:-4]
                with zf.open(info) as fp:
                    if name in SMALL_ARRAYS:
                        small[name] = npy.read_array(fp, allow_pickle=False)
                        shapes[name] = (small[name].shape, small[name].dtype)
                        continue
                    version = npy.read_magic(fp)
                    if version == (1, 0):
                        shape, _, dtype = npy.read_array_header_1_0(fp)
                    elif version == (2, 0):
                        shape, _, dtype = npy.read_array_header_2_0(fp)
                    else:  # version 3 (utf-8 field names): read it whole
                        fp.seek(0)
                        a = npy.read_array(fp, allow_pickle=False)
                        shape, dtype = a.shape, a.dtype
                shapes[name] = (tuple(shape), np.dtype(dtype))
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as e:
        raise _unreadable(f, e) from None
    return shapes, small


def _text(a: np.ndarray, key: str, f: Path, expected: str, how: str) -> str | None:
    """The one string an array holds (numpy's unicode dtype), None if it holds anything else; the
    expected string saved as bytes is refused as such (the right value in the wrong type)."""
    if a.size == 1 and a.dtype.kind == "S":
        raw = bytes(a.reshape(()))
        if raw.decode("utf-8", "replace") == expected:
            raise ConfigError(f"{f}: {key} is the right value saved as bytes (dtype {a.dtype}); save it as a string: "
                              f"{how} (in Python 3, str, not bytes)")
        return raw.decode("utf-8", "replace")
    return str(a.reshape(())) if a.size == 1 and a.dtype.kind == "U" else None


def _scalar(arrays: dict[str, np.ndarray], key: str, f: Path) -> float:
    a = np.asarray(arrays[key])
    if a.size != 1 or not (np.issubdtype(a.dtype, np.number) and not np.issubdtype(a.dtype, np.complexfloating)):
        raise ConfigError(f"{f}: {key} must be one number, got an array of shape {a.shape} and dtype {a.dtype}")
    v = float(a.reshape(()))
    if not np.isfinite(v):
        raise ConfigError(f"{f}: {key} is {v}, not a finite number")
    return v


def _run_id(a: np.ndarray, f: Path) -> str:
    """The file's run_id: one short line of text saved as a string."""
    if a.size != 1 or a.dtype.kind != "U":
        raise ConfigError(f"{f}: run_id must be one string (np.array(run_id), str, not bytes), got an array of shape "
                          f"{a.shape} and dtype {a.dtype}")
    rid = str(a.reshape(()))
    if not rid.strip() or len(rid) > 200 or any(ch in rid for ch in "\n\r\t"):
        raise ConfigError(f"{f}: run_id must be one short line of text, got {rid[:60]!r}")
    return rid


def check_header(plan: PlanLike, experiment: str, f: Path, shapes: dict[str, tuple[tuple[int, ...], np.dtype]],
                 small: dict[str, np.ndarray]) -> str | None:
    """The checks that need no model output: the arrays' names, the fingerprint, the experiment, the
    dtypes and shapes of logits, test_logits and features, and the small arrays' types. Returns the
    file's run_id (None where it has none)."""
    e = plan.meta["experiments"][experiment]
    q, a, k = e["logits_shape"]
    names = list(shapes)
    unknown = sorted(set(names) - set(OUTPUT_ARRAYS))
    if unknown:
        raise ConfigError(f"{f} holds array {unknown[0]!r}, which an output file does not have (its arrays: "
                          f"{', '.join(OUTPUT_ARRAYS)})")
    absent = [n for n, (req, _) in OUTPUT_ARRAYS.items() if req and n not in names]
    if absent:
        raise ConfigError(f"{f} lacks {absent[0]!r} ({OUTPUT_ARRAYS[absent[0]][1]})")
    theirs = _text(small["plan_fingerprint"], "plan_fingerprint", f, plan.fingerprint, 'np.array(plan["fingerprint"])')
    if theirs != plan.fingerprint:
        shown = f"fingerprint {theirs[:12]}" if theirs else f"plan_fingerprint {small['plan_fingerprint']!r:.40}"
        raise ConfigError(f"{f} was written for another plan ({shown}; this plan's is {plan.fingerprint[:12]}): "
                          f"train from the files of {plan.path} and write its fingerprint")
    written_for = _text(small["experiment"], "experiment", f, experiment, "np.array(name)")
    if written_for != experiment:
        if written_for in plan.experiments:
            raise ConfigError(f"{f} was written for experiment {written_for!r} but lies in the folder of {experiment!r}: "
                              "the experiment folders are swapped or mixed up; move each file to the folder its "
                              "experiment array names")
        raise ConfigError(f"{f}: experiment is {written_for!r:.60}, which is not an experiment of this plan "
                          f"({', '.join(plan.experiments)}); write the name of the experiment the model was trained for")
    shape, dtype = shapes["logits"]
    _float_dtype(dtype, "logits", f)
    parts = ", ".join(f"{p['stop'] - p['start']} {p['name']}" for p in e["query_parts"])
    if len(shape) != 3:
        raise ConfigError(f"{f}: logits have shape {shape}; the plan expects ({q}, {a}, {k}): {q} query images "
                          f"({parts}) x {a} views x {k} classes")
    if shape[0] != q:
        raise ConfigError(f"{f}: logits have {shape[0]} query rows; the plan's query set of {experiment} has "
                          f"{q} ({parts}: {e['files']['query']}, in that order)")
    if shape[1] != a:
        v = plan.meta["views"]
        raise ConfigError(f"{f}: logits have {shape[1]} view(s) per query image; the plan has {a} (flip "
                          f"{v['flip']}, shift {v['shift']}: {e['files']['query']}'s views, or harness.views.views)")
    if shape[2] != k:
        raise ConfigError(f"{f}: logits have {shape[2]} classes; the dataset has {k}")
    if "features_shape" not in e and "features" in shapes:
        raise ConfigError(f"{f} holds features, but this plan has no white-box attack to read them (no SSL views): "
                          "leave them out, or make the plan with one (--set attack.names=[lira,rmia,threshold,"
                          "contrastive])")
    if "features_shape" in e:
        want = e["features_shape"]
        if "features" not in shapes:
            raise ConfigError(f"{f} lacks 'features' {tuple(want)} + (D,): this plan's white-box attack reads the "
                              f"model's features on {e['files']['ssl_views']}'s v1 and v2")
        fshape, fdtype = shapes["features"]
        if fdtype not in (np.float16, np.float32):
            raise ConfigError(f"{f}: features have dtype {fdtype}; write them as float16 or float32")
        if len(fshape) != 5 or list(fshape[:4]) != want or fshape[4] < 1:
            raise ConfigError(f"{f}: features have shape {fshape}; the plan expects {tuple(want)} + (D,): "
                              f"(v1 and v2, {want[1]} repetitions, {want[2]} views, {want[3]} audit samples, any "
                              "width D)")
    tshape, tdtype = shapes["test_logits"]
    _float_dtype(tdtype, "test_logits", f)
    t, k_ = e["test_logits_shape"]
    if tuple(tshape) != (t, k_):
        raise ConfigError(f"{f}: test_logits have shape {tshape}; the plan expects ({t}, {k_}): the model's "
                          f"outputs on the {t} test images of {plan.path / 'data.npz'} (x_test, as they are) x {k_} "
                          "classes")
    for key in ("test_accuracy", "train_seconds"):
        if key in small:
            _scalar(small, key, f)
    return _run_id(small["run_id"], f) if "run_id" in small else None


def _float_dtype(dtype: np.dtype, key: str, f: Path) -> None:
    if dtype not in (np.float16, np.float32):
        raise ConfigError(f"{f}: {key} have dtype {dtype}; write them as float16 or float32")


def read_header(plan: PlanLike, experiment: str, index: int, f: Path) -> FileHeader:
    """The cheap pass over one file: :func:`check_header` on its .npy headers and small arrays,
    without loading its outputs."""
    shapes, small = _npz_headers(f)
    rid = check_header(plan, experiment, f, shapes, small)
    return FileHeader(experiment=experiment, index=index, path=f, shapes=shapes, run_id=rid)


def _relative(outputs_dir: Path, f: Path) -> str:
    try:
        return str(f.relative_to(outputs_dir))
    except ValueError:
        return str(f)


def check_run_ids(headers: list[FileHeader], outputs_dir: Path) -> str | None:
    """Run identity: every file must carry the same ``run_id``, or none may. A ConfigError where the
    files name two runs or more (or some name one and others none); a one-line warning where none
    names one (returned), None where all name the same."""
    runs: dict[str | None, list[FileHeader]] = {}
    for h in headers:
        runs.setdefault(h.run_id, []).append(h)
    if not headers or list(runs) == [None]:
        return ("no output file carries a run_id, so the import cannot tell the outputs of two training runs mixed "
                "in one folder; write one in every file (docs/external-models.md: the examples do)") if headers else None
    if len(runs) == 1:
        return None
    order = sorted(runs, key=lambda r: (-len(runs[r]), str(r)))
    shown = "; ".join(f"{'no run_id' if r is None else 'run_id ' + repr(r[:40])} in {len(runs[r])} file"
                      f"{'s' if len(runs[r]) > 1 else ''}, e.g. {_relative(outputs_dir, runs[r][0].path)}"
                      for r in order[:3]) + (f"; {len(order) - 3} more" if len(order) > 3 else "")
    raise ConfigError(f"{outputs_dir} mixes the outputs of {len(runs)} training runs ({shown}): the models of one "
                      "audit must come from one run (one trainer, one setting); train the other files again with "
                      "that run, or import each run's outputs from a folder of its own")


# --- what the plan knows of every query row ---------------------------------------------------------


@dataclass(frozen=True)
class RowLabels:
    """What one experiment's plan knows of its query rows and test set: per part, the rows whose
    label a model's prediction should match (``population``: the test images queried; ``audit``:
    the audit samples whose image is the original training image), the labels each row may take
    (``accepted`` (Q, 2), -1 for none: the canary's label and the original image's label), the test
    labels and the population rows' places in the test set."""

    experiment: str
    parts: dict[str, np.ndarray]
    accepted: np.ndarray
    test_labels: np.ndarray
    population_rows: np.ndarray  # the query rows of the population part
    population_test: np.ndarray  # their indices into x_test
    query_shape: tuple[int, int, int]
    audit_original: np.ndarray  # (C,) the audit samples' labels in the training pool (before any canary)

    @classmethod
    def of(cls, experiment: str, meta: dict[str, Any], level: Any, x_train: np.ndarray, y_train: np.ndarray,
           test_labels: np.ndarray) -> "RowLabels":
        """From plan.json's experiment record ``meta``, the level's design (harness.run.runstore.LevelDesign)
        and the plan's data."""
        q = int(meta["logits_shape"][0])
        accepted = np.full((q, 2), -1, np.int64)
        spans = {p["name"]: (int(p["start"]), int(p["stop"])) for p in meta["query_parts"]}
        parts: dict[str, np.ndarray] = {}
        a0, a1 = spans["audit"]
        audit = np.asarray(level.design.audit_indices)
        c = level.canaries
        natural = (np.asarray(c.x) == x_train[audit]).reshape(len(audit), -1).all(1)
        accepted[a0:a1, 0] = c.y
        accepted[a0:a1, 1] = np.where(y_train[audit] != c.y, y_train[audit], -1)
        parts["audit"] = a0 + np.flatnonzero(natural)
        pop_rows = np.zeros(0, np.int64)
        pop_test = np.asarray(level.population_indices, np.int64)
        if "population" in spans:
            p0, p1 = spans["population"]
            pop_rows = np.arange(p0, p1)
            accepted[p0:p1, 0] = test_labels[pop_test]
            parts["population"] = pop_rows
        return cls(experiment, {k: v for k, v in parts.items() if len(v)}, accepted, np.asarray(test_labels),
                   pop_rows, pop_test, tuple(int(x) for x in meta["logits_shape"]), np.asarray(y_train[audit]))

    def hits(self, pred: np.ndarray) -> dict[str, tuple[int, int]]:
        """Per part, (rows whose prediction ``pred`` (Q,) is one of their accepted labels, rows)."""
        ok = (pred[:, None] == self.accepted).any(-1)
        return {name: (int(ok[rows].sum()), len(rows)) for name, rows in self.parts.items()}

    def chance(self, pred: np.ndarray, part: str) -> float:
        """What the part's rows in a random order would give: sum_k P(pred = k) P(k accepted)."""
        rows = self.parts[part]
        k = int(max(pred.max(initial=0), self.accepted.max(initial=0))) + 1
        p = np.bincount(pred[rows], minlength=k) / len(rows)
        acc = self.accepted[rows]
        q = sum(np.bincount(acc[:, j][acc[:, j] >= 0], minlength=k) for j in range(acc.shape[1])) / len(rows)
        return float(p @ q)

    def expected(self, test_pred: np.ndarray, part: str) -> float:
        """The part's accuracy a model with test predictions ``test_pred`` should show: on the
        population rows, its accuracy on those very test images; on the audit rows, its test accuracy
        (a non-member's; a member's prediction may be its canary label too)."""
        if part == "population":
            return float((test_pred[self.population_test] == self.test_labels[self.population_test]).mean())
        return float((test_pred == self.test_labels).mean())


# --- one file: the expensive pass --------------------------------------------------------------------


@dataclass(frozen=True)
class ModelOutputs:
    """One output file, checked: its arrays and the file's SHA-256."""

    experiment: str
    index: int
    path: Path
    sha256: str
    logits: np.ndarray
    test_accuracy: float  # computed from test_logits
    train_seconds: float | None
    features: np.ndarray | None = None
    test_logits: np.ndarray | None = None
    claimed_accuracy: float | None = None  # the file's own test_accuracy, where it has one
    converted: bool = False  # probabilities turned into log-probabilities (--probabilities)
    run_id: str | None = None


def _softmax_top(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, np.float64)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e.max(-1) / e.sum(-1)


def class_order_outputs(test_logits: np.ndarray, labels: RowLabels) -> str | None:
    """Why a model at or below chance accuracy looks like a trained model whose classes are in another
    order, or None (issue 65: negated or class-rolled logits were told "another plan's files"):

    - **negated**: its *least* likely class is the label on far more test images than its most likely
      (the logits' negatives, or losses, were written);
    - **permuted**: some one-to-one map of its classes onto the dataset's (the best by
      ``scipy.optimize.linear_sum_assignment`` on the confusion counts) makes it accurate: a roll by r
      (class k answered as k + r) is named as such.

    Either must beat the accuracy as written by a one-sided binomial test at :data:`ALPHA` and reach at
    least twice the chance accuracy."""
    from scipy.optimize import linear_sum_assignment
    from scipy.stats import binom

    from harness.core.checks import chance_accuracy

    y = np.asarray(labels.test_labels)
    z = np.asarray(test_logits, np.float64)
    n, k = z.shape
    chance = chance_accuracy(y)
    acc = float((z.argmax(-1) == y).mean())

    def better(rate: float) -> bool:
        return rate >= 2 * chance and float(binom.sf(round(rate * n) - 1, n, max(acc, chance))) <= ALPHA

    low = float((z.argmin(-1) == y).mean())
    if better(low):
        return (f"its logits look negated: its least likely class is the label of {_pct(low)} of the {n} test images, "
                f"its most likely of {_pct(acc)}: write the logits (higher = more likely), not their negatives or "
                "per-class losses")
    pred = z.argmax(-1)
    counts = np.zeros((k, k), np.int64)
    np.add.at(counts, (pred, y), 1)
    rows, cols = linear_sum_assignment(-counts)
    mapped = float(counts[rows, cols].sum() / n)
    if better(mapped) and not np.array_equal(rows, cols):
        shift = {int((c - r) % k) for r, c in zip(rows, cols)}
        r = shift.pop() if len(shift) == 1 else None
        r = None if r is None else (r if r <= k // 2 else r - k)
        how = (f"rolled by {r} (its class k is the dataset's class k {'+' if r > 0 else '-'} {abs(r)}, modulo {k})"
               if r is not None else
               "permuted (" + ", ".join(f"its {a} is {b}" for a, b in zip(rows, cols) if a != b)[:120] + ")")
        return (f"its classes look {how}: read so, it gets {_pct(mapped)} of the {n} test images right, as written "
                f"{_pct(acc)}: write the outputs in the dataset's class order (data.npz's labels)")
    return None


def foreign_outputs(logits: np.ndarray, test_logits: np.ndarray, claimed: float | None,
                    labels: RowLabels) -> str | None:
    """Why a model's outputs look computed on another plan's images, or None: its test accuracy is at
    chance on this plan's test set, every part of its query rows of known label fits them no better
    than chance (one-sided binomial tests at :data:`harness.core.checks.ALPHA`), and it is not an
    untrained model: its answers on the test images are confident (a mean top probability more than
    half way from chance to 1)."""
    from scipy.stats import binom

    from harness.core.checks import at_chance, chance_accuracy

    y = labels.test_labels
    test_pred = np.asarray(test_logits).argmax(-1)
    acc = float((test_pred == y).mean())
    chance = chance_accuracy(y)
    if not at_chance(acc, len(y), chance):
        return None
    pred = np.asarray(logits)[:, 0].argmax(-1)
    rows = []
    for part, (hit, n) in labels.hits(pred).items():
        c = labels.chance(pred, part)
        if binom.sf(hit - 1, n, c) <= ALPHA:  # this part fits its labels: the rows are this plan's
            return None
        rows.append(f"{_pct(hit / n)} of its {n} {part} query rows (rows in a random order: {_pct(c)})")
    if not rows:
        return None
    top = float(_softmax_top(test_logits).mean())
    if top <= (1 + chance) / 2:  # an untrained model, or outputs with nothing in them (all zeros)
        return None
    why = f"though its answers are confident (mean top probability {_pct(top)}" + \
        (f", and the file claims a test accuracy of {_pct(claimed)})" if claimed is not None else ")")
    return (f"its outputs fit none of this plan's labels ({_pct(acc)} of the {len(y)} test images, where always "
            f"answering the most frequent class gives {_pct(chance)}; {'; '.join(rows)}), {why}: outputs of a model "
            "trained and queried on another plan's files, stamped with this plan's fingerprint?")


def check_output_file(plan: PlanLike, experiment: str, index: int, f: Path, labels: RowLabels,
                      probabilities: bool = False) -> ModelOutputs:
    """Read and check one model's output file; a ConfigError (one line, naming the file) otherwise.
    ``labels``: what the plan knows of the experiment's rows and test set (the model's test accuracy
    is computed from its test_logits); ``probabilities``: take the log of outputs that are
    probabilities (``--probabilities``), which are refused otherwise."""
    try:
        data = f.read_bytes()
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {n: z[n] for n in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as e_:
        raise _unreadable(f, e_) from None
    rid = check_header(plan, experiment, f, {n: (a.shape, a.dtype) for n, a in arrays.items()},
                       {n: arrays[n] for n in SMALL_ARRAYS if n in arrays})
    names = list(arrays)
    logits = arrays["logits"]
    bad = ~np.isfinite(logits)
    if bad.any():
        first = np.unravel_index(int(np.argmax(bad)), logits.shape)
        raise ConfigError(f"{f}: logits hold {int(bad.sum())} NaN or infinite value(s) (the first at query image "
                          f"{first[0]}, view {first[1]}, class {first[2]}); the attacks need finite outputs")
    features = arrays.get("features")
    if features is not None:
        nbad = int((~np.isfinite(features)).sum())
        if nbad:
            raise ConfigError(f"{f}: features hold {nbad} NaN or infinite value(s); the attacks need finite features")
    test_logits = arrays["test_logits"]
    t = len(test_logits)
    bad = ~np.isfinite(test_logits)
    if bad.any():
        raise ConfigError(f"{f}: test_logits hold {int(bad.sum())} NaN or infinite value(s) (the first at test image "
                          f"{int(np.argmax(bad.any(-1)))}); the import needs finite outputs")
    converted = False
    as_probs = probability_rows(logits), probability_rows(test_logits)
    if as_probs[0] != as_probs[1]:
        raise ConfigError(f"{f}: {'logits' if as_probs[0] else 'test_logits'} are probabilities (rows in [0, 1] summing "
                          f"to 1) but {'test_logits' if as_probs[0] else 'logits'} are not: write both as logits or "
                          "log-probabilities")
    if as_probs[0]:
        if not probabilities:
            raise ConfigError(f"{f}: its logits are probabilities (every "
                              "row in [0, 1], summing to 1), which the attacks would read as logits: write "
                              "log-probabilities (np.log of them, or the log_softmax of the logits) or the logits, or "
                              "pass --probabilities to have the import take their log")
        with np.errstate(divide="ignore"):
            logits, test_logits = (np.log(np.maximum(a.astype(np.float32), np.float32(PROBABILITY_FLOOR)))
                                   for a in (logits, test_logits))
        converted = True
    elif probabilities:
        raise ConfigError(f"{f}: --probabilities, but its logits are not probabilities (rows in [0, 1] summing to 1): "
                          "pass --probabilities only for outputs that all are")
    acc = float((test_logits.argmax(-1) == labels.test_labels).mean())
    claimed = _scalar(arrays, "test_accuracy", f) if "test_accuracy" in names else None
    if claimed is not None and not 0.0 <= claimed <= 1.0:
        raise ConfigError(f"{f}: test_accuracy is {claimed:g}; write a fraction in [0, 1]")
    tolerance = max(ACCURACY_TOLERANCE, 2 / max(t, 1))
    if claimed is not None and abs(claimed - acc) > tolerance:
        if why := foreign_outputs(logits, test_logits, claimed, labels):
            raise ConfigError(f"{f}: {why} Train and query from the files of {plan.path}")
        raise ConfigError(f"{f}: test_accuracy is {100 * claimed:.1f}%, but its test_logits give {100 * acc:.1f}% on "
                          f"the {t} test images: write the accuracy of these outputs, or leave test_accuracy out (the "
                          "import computes it)")
    secs = _scalar(arrays, "train_seconds", f) if "train_seconds" in names else None
    if secs is not None and secs < 0:
        raise ConfigError(f"{f}: train_seconds is {secs:g}; it must be >= 0")
    return ModelOutputs(experiment=experiment, index=index, path=f, sha256=_sha256(data), logits=logits,
                        test_accuracy=acc, train_seconds=secs, features=features, test_logits=test_logits,
                        claimed_accuracy=claimed, converted=converted, run_id=rid)


# --- the models together ------------------------------------------------------------------------------


def _first(findings: list[str]) -> str:
    """The first finding, and how many more there are."""
    return findings[0] + (f" ({len(findings) - 1} more finding{'s' if len(findings) > 2 else ''} of this check)"
                          if len(findings) > 1 else "")


def _files(names: list[str], limit: int = 4) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def copied_experiments(models: dict[str, dict[int, ModelOutputs]], kept: list[int], outputs_dir: Path) -> list[str]:
    """Files of one experiment whose logits are byte for byte another experiment's file's: an
    experiment folder copied into another (its experiment array rewritten). One finding per pair of
    experiments."""
    seen: dict[tuple[str, tuple[int, ...], str], tuple[str, int]] = {}
    copies: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for e, files in models.items():
        for i in kept:
            a = np.ascontiguousarray(files[i].logits)
            key = (hashlib.sha256(a.tobytes()).hexdigest(), a.shape, str(a.dtype))
            if key in seen and seen[key][0] != e:
                copies.setdefault((seen[key][0], e), []).append((seen[key][1], i))
            seen.setdefault(key, (e, i))
    findings = []
    for (src, dst), pairs in copies.items():
        i, j = pairs[0]
        findings.append(f"{_relative(outputs_dir, models[dst][j].path)} holds the very logits of "
                        f"{_relative(outputs_dir, models[src][i].path)} ({len(pairs)} of the {len(kept)} files of {dst} "
                        f"are copies of {src}'s): an experiment's folder copied into another, its experiment array "
                        f"rewritten? Each experiment's models train on its own {dst}/train.npz")
    return findings


def utility_findings(plan: PlanLike, models: dict[str, dict[int, ModelOutputs]], kept: list[int],
                     labels: dict[str, RowLabels], names: dict[str, list[str]], outputs_dir: Path) -> str | None:
    """Models at chance accuracy (harness.core.checks.utility_check): the first finding, named as
    another plan's outputs where :func:`foreign_outputs` says so."""
    from harness.core.checks import utility_check

    test_labels = next(iter(labels.values())).test_labels
    utility = utility_check({e: [models[e][i].test_accuracy for i in kept] for e in models}, test_labels, names)
    if utility.passed:
        return None
    for e, bad in utility.record["at_chance"].items():
        for j in bad:
            out = models[e][kept[j]]
            order = class_order_outputs(out.test_logits, labels[e])
            if order:
                return (f"{out.path}: {order} ({len(bad)} of the {len(kept)} files of {e} are at or below chance on "
                        "this plan's test images)")
            why = foreign_outputs(out.logits, out.test_logits, out.claimed_accuracy, labels[e])
            if why:
                return (f"{out.path}: {why} Train and query from the files of {plan.path} "
                        f"({len(bad)} of the {len(kept)} files of {e} are at chance on this plan's test images)")
    return (f"{outputs_dir}: {_first(utility.findings)}: a model at chance has learnt nothing to audit; train it "
            "again")


def answer_scale(logits: np.ndarray, rows: np.ndarray | None) -> float:
    """A model's answer scale, as attacks.lira.model_scales reads it: the spread of its view-0 outputs
    on ``rows`` (the population rows; all rows where None), each row centred over its classes."""
    x = np.asarray(logits[:, 0] if rows is None else logits[rows, 0], np.float64)
    return max(float((x - x.mean(-1, keepdims=True)).std()), 1e-12)


def trainers_findings(models: dict[str, dict[int, ModelOutputs]], kept: list[int], labels: dict[str, RowLabels],
                      names: dict[str, list[str]], outputs_dir: Path) -> str | None:
    """The trainers check (harness.core.checks.trainers_check) on the outputs' test loss and answer
    scale: the files of two trainers (or settings) in one outputs folder are refused whatever their
    run ids say (issue 65: 8 MLPs and 8 logistic regressions with one forged run_id were accepted)."""
    from harness.core.checks import trainers_check

    from harness.core.checks import mean_cross_entropy

    stats = {e: {"scale": [answer_scale(models[e][i].logits, lab.population_rows if len(lab.population_rows) else None)
                           for i in kept],
                 "loss": [mean_cross_entropy(models[e][i].test_logits, lab.test_labels) for i in kept]}
             for e, lab in labels.items()}
    res = trainers_check(stats, names)
    if res.passed:
        return None
    return (f"{outputs_dir}: {_first(res.findings)}; the models of one audit come from one trainer and one setting: "
            "import each trainer's outputs from a folder of its own")


def constant_rows_findings(models: dict[str, dict[int, ModelOutputs]], kept: list[int],
                           outputs_dir: Path) -> str | None:
    """Models that answer every query row at view 0 alike while their test outputs vary (issue 65: such
    files were told their rows were scrambled): named as constant rows."""
    for e, files in models.items():
        constant = [i for i in kept if (lambda v: (v == v[:1]).all())(np.asarray(files[i].logits)[:, 0])
                    and not (lambda t: (t == t[:1]).all())(np.asarray(files[i].test_logits))]
        if constant:
            return (f"{outputs_dir}: {e}: {_files([files[i].path.name for i in constant])} answer every query row at view "
                    f"0 with the same output, though their test outputs differ from image to image: write each query "
                    "row's own output (query.npz's image q at view a)")
    return None


def test_outputs_findings(models: dict[str, dict[int, ModelOutputs]], kept: list[int], labels: dict[str, RowLabels],
                          outputs_dir: Path) -> str | None:
    """Test outputs that are not the model's own (issue 65: every file's ``test_logits`` copied from one
    model): the population rows at view 0 are test images, so a model's ``test_logits`` on those images
    must answer them as its own ``logits`` do. Per model i, ``a_ij`` is the share of the population
    images on which model i's test predictions equal model j's row predictions; a model whose test
    outputs agree with another model's rows better than with its own, beyond the binomial noise
    (``a_ij - a_ii > max(0.02, 4 sqrt(2 a (1 - a) / n))``), or with its own on fewer than half of the
    images, is refused, naming the model its test outputs belong to."""
    for e, lab in labels.items():
        if not len(lab.population_rows):
            continue
        test = np.stack([models[e][i].test_logits[lab.population_test].argmax(-1) for i in kept])
        rows = np.stack([models[e][i].logits[lab.population_rows, 0].argmax(-1) for i in kept])
        agree = (test[:, None, :] == rows[None, :, :]).mean(-1)  # (S, S): i's test predictions vs j's rows
        n = test.shape[1]
        for a, i in enumerate(kept):
            own = agree[a, a]
            others = agree[a].copy()
            others[a] = -1.0
            b = int(others.argmax())
            p = (own + others[b]) / 2
            margin = max(0.02, 4 * float(np.sqrt(2 * p * (1 - p) / n)))
            if others[b] - own > margin:
                return (f"{outputs_dir}: {e}/{output_name(i)}'s test_logits answer the {n} test images its logits "
                        f"query (the population rows at view 0) as {e}/{output_name(kept[b])}'s logits do "
                        f"({_pct(others[b])} agree), not as its own ({_pct(own)}): test outputs copied from another "
                        "model? Write each model's own outputs on x_test")
            if own < 0.5:
                return (f"{outputs_dir}: {e}/{output_name(i)}'s test_logits agree with its own logits on only "
                        f"{_pct(own)} of the {n} test images both answer (the population rows at view 0): they are not "
                        "this model's outputs on x_test")
    return None


#: the axis orders a trainer may have computed its outputs in, other than the plan's (queries, views, classes)
LAYOUTS = [p for p in permutations(range(3)) if p != (0, 1, 2)]


def _read_back(logits: np.ndarray, layout: tuple[int, ...]) -> np.ndarray:
    """``logits`` (Q, A, K) read as an array of axis order ``layout`` that was reshaped (not
    transposed) to (Q, A, K), put back in the plan's order."""
    shape = tuple(logits.shape[p] for p in layout)
    return np.transpose(np.asarray(logits).reshape(shape), tuple(int(x) for x in np.argsort(layout)))


def _fails(hit: int, n: int, expected: float, chance: float, tests: int) -> bool:
    """A part of a model's rows fits its labels worse than an honest model could: below the midpoint
    of what the model's test outputs give and what rows in a random order give, and significantly
    below the former (one-sided binomial, Bonferroni over ``tests`` at ALPHA)."""
    from scipy.stats import binom

    return hit / n < (expected + chance) / 2 and float(binom.cdf(hit, n, expected)) < ALPHA / max(tests, 1)


@dataclass(frozen=True)
class RowFailure:
    experiment: str
    index: int  # plan model index
    part: str
    rate: float
    expected: float
    chance: float
    n: int


def row_failures(logits: list[np.ndarray], test_pred: list[np.ndarray], labels: RowLabels, indices: list[int],
                 tests: int) -> list[RowFailure]:
    """Per model and part, the rows that fit their labels worse than an honest model could (:func:`_fails`)."""
    out = []
    for i, z, tp in zip(indices, logits, test_pred):
        pred = np.asarray(z)[:, 0].argmax(-1)
        for part, (hit, n) in labels.hits(pred).items():
            exp, ch = labels.expected(tp, part), labels.chance(pred, part)
            if _fails(hit, n, exp, ch, tests):
                out.append(RowFailure(labels.experiment, i, part, hit / n, exp, ch, n))
    return out


def check_rows(models: dict[str, dict[int, ModelOutputs]], kept: list[int], labels: dict[str, RowLabels],
               outputs_dir: Path) -> str | None:
    """The rows check (module docstring): each model's query rows of known label at view 0 against
    what its test outputs give; the first experiment that fails is named with the axis that looks
    scrambled (a reshape of another axis order where one reads the rows back)."""
    tests = sum(len(kept) * len(labels[e].parts) for e in models)
    for e, files in models.items():
        lab = labels[e]
        if not lab.parts:
            continue
        logits = [files[i].logits for i in kept]
        test_pred = [np.asarray(files[i].test_logits).argmax(-1) for i in kept]
        failed = row_failures(logits, test_pred, lab, kept, tests)
        if not failed:
            continue
        bad = sorted({f.index for f in failed})
        where = f"every model ({len(kept)})" if len(bad) == len(kept) else \
            f"{_files([files[i].path.name for i in bad])} ({len(bad)} of {len(kept)} models)"
        worst = min(failed, key=lambda f: f.rate - (f.expected + f.chance) / 2)
        shown = (f"at view 0, {_pct(worst.rate)} of the {worst.n} {worst.part} rows of {_relative(outputs_dir, files[worst.index].path)} "
                 f"get their label, where its test outputs give {_pct(worst.expected)} and rows in a random order "
                 f"{_pct(worst.chance)}")
        pos = {i: j for j, i in enumerate(kept)}
        for layout in LAYOUTS:
            back = [_read_back(logits[pos[i]], layout) for i in bad]
            if not row_failures(back, [test_pred[pos[i]] for i in bad], lab, bad, tests):
                moved = [AXES[a] for j, a in enumerate(layout) if a != j]
                names = ", ".join(AXES[a] for a in layout)
                shape = tuple(lab.query_shape[a] for a in layout)
                return (f"{outputs_dir}: {e}: the {' and '.join(moved)} axes of the logits look scrambled in {where}: "
                        f"{shown}. They read back right as an array of ({names}) = {shape} reshaped to (queries, "
                        f"views, classes) = {lab.query_shape}: a reshape does not reorder axes; write "
                        f"np.transpose(a, {tuple(int(x) for x in np.argsort(layout))}) of that array")
        parts = sorted({f.part for f in failed})
        if parts == ["audit"] and "population" in lab.parts:
            what = "audit rows look permuted or shifted (the population rows are right)"
        elif parts == ["population"] and "audit" in lab.parts:
            what = "population rows look permuted or shifted (the audit rows are right)"
        else:
            what = "query rows look scrambled (no other axis order reads them back)"
        return (f"{outputs_dir}: {e}: the {what} in {where}: {shown}. Write row q of the logits for query.npz's "
                "image q, in its order (audit samples, then population samples), from the files of this plan")
    return None


def difference_matrix(outputs: np.ndarray) -> np.ndarray:
    """(S, S) relative difference of S models' outputs (S, R, K) on the same R rows: with each row
    centred over its classes (softmax cannot tell logits that differ by a constant), the mean squared
    difference of models i and j over the sum of their variances over rows (mean over classes),
    ``d_ij = mean (c_i - c_j)^2 / (v_i + v_j)``: about 1 - the correlation of their outputs for models
    of equal spread, 0 for copies, 1 for unrelated outputs. At most :data:`MAX_DIFFERENCE_ENTRIES`
    entries per model are read (rows evenly spaced); the diagonal is infinite."""
    x = np.asarray(outputs)
    s, r, k = x.shape
    keep = max(2, min(r, MAX_DIFFERENCE_ENTRIES // max(k, 1)))
    if keep < r:
        x = x[:, np.unique(np.linspace(0, r - 1, keep).round().astype(np.int64))]
    c = x.astype(np.float64)
    c -= c.mean(-1, keepdims=True)
    v = c.var(axis=1).mean(-1)
    flat = c.reshape(s, -1)
    sq = (flat ** 2).sum(1)
    d = np.maximum(sq[:, None] + sq[None] - 2 * flat @ flat.T, 0.0) / flat.shape[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(v[:, None] + v[None] > 0, d / (v[:, None] + v[None]), 0.0)
    np.fill_diagonal(rel, np.inf)
    return rel


def check_difference(models: dict[str, dict[int, ModelOutputs]], kept: list[int], labels: dict[str, RowLabels],
                     outputs_dir: Path, threshold: float = MIN_DIFFERENCE) -> str | None:
    """The model-difference check (module docstring): within each experiment on every query row at
    view 0, and across experiments on the population rows (the same test images in every
    experiment); models that serve labels only are left out (two of them may predict alike)."""
    groups: list[tuple[str, list[tuple[str, int]], np.ndarray]] = []
    for e, files in models.items():
        members = [(e, i) for i in kept if not label_rows(files[i].logits[:, 0])]
        if len(members) > 1:
            groups.append((e, members, np.stack([files[i].logits[:, 0] for _, i in members])))
    common = [e for e in models if len(labels[e].population_rows)]
    if len(common) > 1:
        members = [(e, i) for e in common for i in kept if not label_rows(models[e][i].logits[:, 0])]
        if len({e for e, _ in members}) > 1:
            groups.append(("across experiments", members,
                           np.stack([models[e][i].logits[labels[e].population_rows, 0] for e, i in members])))
    for what, members, outs in groups:
        d = difference_matrix(outs)
        if what == "across experiments":  # pairs within one experiment were read on all its rows above
            same = np.array([e for e, _ in members])
            d[same[:, None] == same[None]] = np.inf
        close = np.argwhere(np.triu(d < threshold, 1))
        if not len(close):
            continue
        i, j = (int(x) for x in close[np.argmin(d[close[:, 0], close[:, 1]])])
        near = sorted({int(x) for x in close.ravel()})
        files = [_relative(outputs_dir, models[e][k].path) for e, k in (members[x] for x in near)]
        off = d[np.isfinite(d)]
        return (f"{outputs_dir}: {what}: {len(near)} of {len(members)} models are near-copies of one another "
                f"({_files(files)}): the outputs of {files[near.index(i)]} and {files[near.index(j)]} differ by "
                f"{d[i, j]:.1e} of their spread (relative difference, threshold {threshold:g}; independently trained "
                f"models of every built-in defense differ by 0.01 or more, these models' median pair "
                f"{float(np.median(off)):.1e}): train each model on its own training set from its own seed")
    return None


def check_models(plan: PlanLike, models: dict[str, dict[int, ModelOutputs]], kept: list[int],
                 labels: dict[str, RowLabels], outputs_dir: Path, force: bool) -> list[str]:
    """The checks of the models together, before anything is written, in this order: outputs constant
    or identical across models, experiments copied from one another, models at chance accuracy, the
    rows check, the model-difference check, and the membership-consistency check of each model's
    outputs against the plan's membership (harness.core.checks; docs/protocol.md, Checks). A
    ConfigError (one line, naming the files) for the first that fails; a failed membership check
    only without ``force``. Returns the checks ``force`` accepted."""
    from harness.core.checks import LevelOutputs, check_columns, degenerate_outputs, label_scores, membership_check, \
        membership_stats, provenance_stats
    from harness.plugins import resolve

    names = {e: [output_name(i) for i in kept] for e in plan.experiments}  # the files of OUTPUTS/<experiment>/
    outputs = degenerate_outputs({e: LevelOutputs.of([np.concatenate([models[e][i].logits.reshape(-1, models[e][i].logits.shape[-1]),
                                                                      models[e][i].test_logits])
                                                      for i in kept]) for e in plan.experiments}, names)
    if not outputs.passed:
        raise ConfigError(f"degenerate outputs in {outputs_dir}: {_first(outputs.findings)}")
    copies = copied_experiments(models, kept, outputs_dir)
    if copies:
        raise ConfigError(f"{outputs_dir}: {_first(copies)}")
    for finding in (utility_findings(plan, models, kept, labels, names, outputs_dir),
                    constant_rows_findings(models, kept, outputs_dir),
                    check_rows(models, kept, labels, outputs_dir),
                    test_outputs_findings(models, kept, labels, outputs_dir),
                    trainers_findings(models, kept, labels, names, outputs_dir),
                    check_difference(models, kept, labels, outputs_dir)):
        if finding:
            raise ConfigError(finding)
    stats = []
    for e in plan.experiments:
        ld = plan.load_level(e)
        c = ld.design.audit_size
        cols = check_columns(c)  # as the attack phase: at most MAX_CHECK_SAMPLES audit samples, evenly spaced
        logits = np.stack([models[e][i].logits[cols, 0] for i in kept])
        prov = None
        if getattr(resolve("canaries", ld.canary), "random_wrong_label", False):  # the provenance test
            prov = provenance_stats(logits.argmax(-1), ld.canaries.y[cols], labels[e].audit_original[cols],
                                    ld.design.membership[kept][:, cols], logits.shape[-1])
        stats.append(membership_stats(e, label_scores(logits, ld.canaries.y[cols]), ld.design.membership[kept][:, cols],
                                      prov))
    member = membership_check(stats, names)
    if member.passed:
        return []
    if not force:
        raise ConfigError(f"membership check failed in {outputs_dir}: {_first(member.findings)}; train model i on "
                          "train.npz's "
                          f"train_indices[train_offsets[i]:train_offsets[i+1]] and write its outputs as model_i.npz of "
                          "its experiment (docs/external-models.md), or pass --force to import anyway (marked forced)")
    return ["membership"]
