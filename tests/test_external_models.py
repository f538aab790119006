"""Models trained outside the harness (issue 37): ``harness plan``, an outside trainer, ``harness import``.

- the plan's contents and hashes (and plan.json's schema, docs/plan.schema.json);
- ``harness.views``, the dependency-free reference, equals the harness's own views bit for bit;
- an outside trainer that runs the harness's own undefended recipe from the plan's files gives the
  built-in run's numbers exactly (same plan, same seeds);
- both examples (plain PyTorch, scikit-learn), with the harness made unimportable, end to end:
  plan -> train -> import -> report -> leaderboard, the same sample-versus-population story as the
  built-in undefended run (and the PyTorch one within the built-in run's CIs);
- every bad input a user can make is one error line, leaves nothing written, and the same command
  works once it is fixed; ``--partial``.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.core import jsonio

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()
#: a plan (and the built-in run it mirrors) of a few seconds: 6 models, 40 audit samples, 8 epochs of a 64-wide MLP
TINY = {"audit.models": 6, "audit.size": 40, "train.epochs": 8, "train.width": 64, "attack.bootstrap": 50}


def _plan_args(overrides: dict) -> list[str]:
    return [a for k, v in overrides.items() for a in ("--set", f"{k}={v}")]


def _plan(folder: Path, **extra) -> Path:
    res = runner.invoke(app, ["plan", str(folder), *_plan_args({**TINY, **extra})])
    assert res.exit_code == 0, res.output
    return folder


def _import(plan: Path, outputs: Path, out: Path, *extra: str):
    return runner.invoke(app, ["import", str(plan), "--outputs", str(outputs), "--out", str(out), *extra])


def _one_error(res) -> str:
    """The command failed with exactly one line of output, an ``error:`` line (no traceback, no status)."""
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


def _publish(run: Path, tmp_path: Path):
    """``harness submit`` a run and ``leaderboard add`` its bundle to a fresh site under ``tmp_path``;
    returns (the add command's result, the site, the entry's folder). Both commands must succeed."""
    bundle = tmp_path / "entry.tar.gz"
    assert runner.invoke(app, ["submit", str(run), "-o", str(bundle)]).exit_code == 0
    site = tmp_path / "site"
    res = runner.invoke(app, ["leaderboard", "add", str(bundle), "--site", str(site)])
    assert res.exit_code == 0, res.output
    (entry,) = (site / "entries").iterdir()
    return res, site, entry


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()} \
        if folder.exists() else {}


def fitted_test_outputs(y_test: np.ndarray, rng: np.random.Generator, k: int = 10) -> tuple[np.ndarray, float]:
    """(test_logits, their accuracy) of a model that is right about 80% of the time."""
    z = rng.normal(size=(len(y_test), k)).astype(np.float32)
    right = rng.random(len(y_test)) < 0.8
    z[np.flatnonzero(right), y_test[right]] += 6.0
    return z, float((z.argmax(-1) == y_test).mean())


def model_like_outputs(plan: Path, name: str, rng: np.random.Generator, right: float = 0.85, noise: float = 0.5
                       ) -> tuple[np.ndarray, np.ndarray, float]:
    """(logits (Q, A, K), test_logits (T, K), their test accuracy) of a made-up model of experiment
    ``name`` that answers like a trained one, for the import's checks: a base shared by every model
    of the experiment (each test image and query row answered with its label for a fraction
    ``right`` of them: the easy samples), plus this model's own N(0, ``noise``) noise; the population rows
    are its test outputs on those test images, and every view is view 0 plus a little noise."""
    import zlib

    meta = json.loads((plan / "plan.json").read_text())
    e = meta["experiments"][name]
    k = meta["num_classes"]
    q, a, _ = e["logits_shape"]
    with np.load(plan / "data.npz") as d, np.load(plan / e["files"]["query"]) as qf, \
            np.load(plan / e["files"]["design"]) as z:
        y_test, y, pop = d["y_test"], qf["y"].copy(), z["population_indices"]
        audit = z["audit_indices"]
        # the audit rows as a model that never trained on them answers: with the image's own label (a
        # mislabeled canary's random label is known only to the models that trained on it)
        y[:len(audit)] = d["y_train"][audit]
    shared = np.random.default_rng(zlib.crc32(f"{meta['fingerprint']}/{name}".encode()))

    def base(labels: np.ndarray) -> np.ndarray:
        z = shared.normal(size=(len(labels), k))
        hit = np.flatnonzero(shared.random(len(labels)) < right)
        z[hit, labels[hit]] += 6.0
        return z

    test_logits = (base(y_test) + noise * rng.normal(size=(len(y_test), k))).astype(np.float32)
    rows = base(y) + noise * rng.normal(size=(q, k))
    part = {p["name"]: (p["start"], p["stop"]) for p in e["query_parts"]}
    if "population" in part:
        rows[part["population"][0]:part["population"][1]] = test_logits[pop]
    logits = (rows[:, None, :] + 0.3 * rng.normal(size=(q, a, k))).astype(np.float32)
    logits[:, 0] = rows
    return logits, test_logits, float((test_logits.argmax(-1) == y_test).mean())


def synthetic_outputs(plan: Path, out: Path, seed: int = 0, models: list[int] | None = None) -> Path:
    """Output files of the right form for every model, of made-up models that answer like trained
    ones (:func:`model_like_outputs`) and fit no member: for the checks of the import."""
    meta = json.loads((plan / "plan.json").read_text())
    rng = np.random.default_rng(seed)
    for name in meta["experiments"]:
        for i in models if models is not None else range(meta["num_models"]):
            f = out / name / f"model_{i:04d}.npz"
            f.parent.mkdir(parents=True, exist_ok=True)
            logits, test_logits, acc = model_like_outputs(plan, name, rng)
            np.savez(f, logits=logits, plan_fingerprint=np.array(meta["fingerprint"]), experiment=np.array(name),
                     test_logits=test_logits, test_accuracy=np.array(acc))
    return out


def harness_recipe_trainer(plan: Path, out: Path, dtype: str = "float32",
                           rows: dict[str, dict[int, np.ndarray]] | None = None) -> Path:
    """An outside trainer that reads nothing but the plan's files and trains each model with the
    harness's own undefended recipe code (one stacked group per model), seeded from plan.json: its
    models must be the built-in run's. ``rows``: per experiment, training rows (of train.npz's x)
    that replace the plan's for some models (a trainer that does not follow the plan)."""
    from defenses.base import FitContext, LabeledImages
    from defenses.undefended import Undefended
    from harness.core.config import TrainConfig
    from harness.core.data import AugmentSpec

    meta = json.loads((plan / "plan.json").read_text())
    recipe = dict(meta["recipe"])
    aug = AugmentSpec(**recipe.pop("augmentation"))
    cfg = TrainConfig(**recipe)
    mean, std, k = tuple(meta["normalization"]["mean"]), tuple(meta["normalization"]["std"]), meta["num_classes"]
    with np.load(plan / "data.npz") as d:
        x_test, y_test = d["x_test"], d["y_test"]
    for name, e in meta["experiments"].items():
        with np.load(plan / e["files"]["train"]) as t, np.load(plan / e["files"]["query"]) as q:
            x, y, idx, off, views = t["x"], t["y"], t["train_indices"], t["train_offsets"], q["views"]
        for i in range(meta["num_models"]):
            mine = ((rows or {}).get(name) or {}).get(i)
            mine = idx[off[i]:off[i + 1]] if mine is None else mine
            ctx = FitContext(seed=meta["models"][i]["seed"], device="cpu", train=cfg)
            (served,) = Undefended().fit_group([LabeledImages(x[mine], y[mine], k, mean, std, aug)], [ctx])
            # queried part by part and view by view, as the harness's jobs query (same batches, same rounding)
            logits = np.concatenate([np.stack([served.query(views[p["start"]:p["stop"], a]) for a in
                                               range(views.shape[1])], axis=1) for p in e["query_parts"]])
            f = out / name / f"model_{i:04d}.npz"
            f.parent.mkdir(parents=True, exist_ok=True)
            test_logits = served.query(x_test)
            np.savez(f, logits=logits.astype(dtype), plan_fingerprint=np.array(meta["fingerprint"]),
                     experiment=np.array(name), test_logits=test_logits.astype(dtype),
                     test_accuracy=np.array(float((test_logits.argmax(1) == y_test).mean())))
    return out


def _blocked(*modules: str) -> str:
    """A python -c prefix that makes ``modules`` (and their submodules) unimportable: any import of
    them raises ImportError (a finder in front of every other; sys.modules is left alone, where a
    placeholder would confuse libraries that look for torch there, e.g. scipy)."""
    return ("import sys, importlib.abc\n"
            "class _Blocked(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            f"        if name.split('.')[0] in {modules!r}:\n"
            "            raise ImportError(f'{name} is blocked: this script must not need it')\n"
            "sys.meta_path.insert(0, _Blocked())\n")


def run_example(script: str, plan: Path, out: Path, blocked: tuple[str, ...]) -> subprocess.CompletedProcess:
    """Run examples/<script> on the plan with ``blocked`` modules unimportable (the harness, its
    training code, torch for the scikit-learn one): the example depends on none of them."""
    code = _blocked(*blocked) + (f"import runpy\nsys.argv = {[script, str(plan), '--outputs', str(out)]!r}\n"
                                 f"runpy.run_path({str(REPO / 'examples' / script)!r}, run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory) -> Path:
    return _plan(tmp_path_factory.mktemp("plan") / "plan")


@pytest.fixture(scope="module")
def builtin_run(tmp_path_factory) -> dict:
    """The built-in undefended run of the plan's settings (same seed, design, canaries, model seeds)."""
    from harness import evaluate

    out = tmp_path_factory.mktemp("builtin")
    return evaluate("undefended", overrides={**TINY, "run.out": str(out), "run.workers": 1}).data


# --- the views -------------------------------------------------------------------------------------


@pytest.mark.parametrize("flip,shift,shape", [(False, 1, (5, 1, 8, 8)), (True, 4, (3, 3, 32, 32)),
                                              (True, 0, (2, 3, 7, 5)), (False, 3, (4, 2, 6, 9)),
                                              (True, 2, (1, 1, 4, 4))])
def test_views_reference_is_bit_for_bit_the_harness_views(flip, shift, shape):
    import torch

    from harness.core.augment import shift_flip
    from harness.core.data import AugmentSpec
    from harness.run.signals import query_augmented
    from harness.views import query_offsets, views

    spec = AugmentSpec(flip=flip, shift=shift)
    x = np.random.default_rng(shift).integers(0, 256, shape, dtype=np.uint8)
    assert query_offsets(flip, shift) == spec.query_offsets()
    mine = views(x, flip, shift)
    assert mine.dtype == np.uint8 and mine.shape == (shape[0], len(spec.query_offsets()), *shape[1:])
    for a, (f, dy, dx) in enumerate(spec.query_offsets()):
        assert np.array_equal(mine[:, a], shift_flip(torch.from_numpy(x), dy, dx, f).numpy())
    seen: list[np.ndarray] = []  # the images the harness's signal code queries a model on, view by view

    def query(batch: np.ndarray) -> np.ndarray:
        seen.append(batch.copy())
        return np.zeros((len(batch), 2), np.float32)

    query_augmented(query, x, spec)
    assert np.array_equal(np.stack(seen, axis=1), mine)


def test_views_module_needs_numpy_only():
    tree = ast.parse((REPO / "harness" / "views.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported == {"numpy", "__future__"}
    code = _blocked("torch", "harness", "defenses") + (
        "import runpy, numpy as np\n"
        f"v = runpy.run_path({str(REPO / 'harness' / 'views.py')!r})['views']\n"
        "print(v(np.arange(16, dtype=np.uint8).reshape(1, 1, 4, 4), True, 1).shape)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "(1, 18, 1, 4, 4)", out.stderr
    for module in ("harness.run.runner", "torch"):  # the blocker the examples run under does block (a test of the test)
        out = subprocess.run([sys.executable, "-c", _blocked("harness", "torch") + f"import {module}"],
                             capture_output=True, text=True, cwd=REPO)
        assert out.returncode == 1 and "is blocked" in out.stderr


# --- the plan --------------------------------------------------------------------------------------


def test_plan_holds_the_harness_own_data_design_and_views(plan_dir):
    import hashlib

    import jsonschema

    from harness.core.config import validate_config
    from harness.run.external import build_plan, read_plan
    from harness.run.runner import build_level, model_seed, training_set
    from harness.views import views

    meta = json.loads((plan_dir / "plan.json").read_text())
    jsonschema.validate(meta, json.loads((REPO / "docs" / "plan.schema.json").read_text()),
                        cls=jsonschema.Draft202012Validator)
    files = {str(p.relative_to(plan_dir)) for p in plan_dir.rglob("*") if p.is_file()} - {"plan.json"}
    assert files == set(meta["files"]) and len(files) == 7  # data + (train, query, design) x 2 experiments
    for rel, digest in meta["files"].items():
        assert hashlib.sha256((plan_dir / rel).read_bytes()).hexdigest() == digest
    plan = read_plan(plan_dir)
    cfg = validate_config(meta["config"])
    assert cfg.defense == "external" and cfg.audit.models == 6 and list(meta["experiments"]) == ["population",
                                                                                                "sample-mislabeled"]
    assert build_plan(cfg).fingerprint == plan.fingerprint  # deterministic: the same settings, the same plan
    data = plan.load_data()
    s, c = 6, 40
    for name, canary in (("population", "none"), ("sample-mislabeled", "mislabeled")):
        ld = build_level(cfg, data, name, canary)
        e = meta["experiments"][name]
        with np.load(plan_dir / e["files"]["train"]) as t, np.load(plan_dir / e["files"]["query"]) as q:
            for i in range(s):  # model i's training set is exactly the harness's own, in the same order
                rows = t["train_indices"][t["train_offsets"][i]:t["train_offsets"][i + 1]]
                own = training_set(data, ld, i)
                assert np.array_equal(t["x"][rows], own.x) and np.array_equal(t["y"][rows], own.y)
                assert e["train_sizes"][i] == len(own)
            assert np.array_equal(t["membership"], ld.design.membership)
            assert np.array_equal(t["x"][t["audit_positions"]], ld.canaries.x)
            qx = np.concatenate([ld.canaries.x, data.x_test[ld.population_indices]])
            assert np.array_equal(q["x"], qx) and np.array_equal(q["views"], views(qx, False, 1))
            assert np.array_equal(q["y"], np.concatenate([ld.canaries.y, data.y_test[ld.population_indices]]))
        assert e["logits_shape"] == [c + len(ld.population_indices), 9, 10]
        saved = plan.load_level(name)
        assert saved.fingerprint("x") == ld.fingerprint("x")  # the design file is the harness's own
    assert [m["seed"] for m in meta["models"]] == [model_seed(0, i) for i in range(s)]
    if meta["experiments"]["sample-mislabeled"]["canary"] == "mislabeled":  # canaries applied, labels changed
        with np.load(plan_dir / "sample-mislabeled" / "train.npz") as t, np.load(plan_dir / "data.npz") as d:
            audit = t["audit_positions"]
            assert (t["y"][audit] != d["y_train"][audit]).all()


def test_plan_folder_is_written_once_and_checked(plan_dir, tmp_path):
    before = _snapshot(plan_dir)
    res = runner.invoke(app, ["plan", str(plan_dir), *_plan_args(TINY)])  # the same plan again: nothing written
    assert res.exit_code == 0 and "already holds this plan" in res.output and _snapshot(plan_dir) == before
    err = _one_error(runner.invoke(app, ["plan", str(plan_dir), *_plan_args({**TINY, "seed": 1})]))
    assert "holds another plan" in err and _snapshot(plan_dir) == before
    for args, says in ((["--models", "5"], "audit.models"), (["--set", "attack.names=[lira-raw]"], "raw_logits"),
                       (["--canary", "nonsense"], "nonsense"), (["--data-dir", str(tmp_path)], "data")):
        folder = tmp_path / "p"
        err = _one_error(runner.invoke(app, ["plan", str(folder), *args]))
        assert says in err and not folder.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    copy = tmp_path / "copy"
    shutil.copytree(plan_dir, copy)
    with np.load(copy / "population" / "query.npz") as q:
        arrays = {k: q[k] for k in q.files}
    arrays["views"][0, 0, 0, 0, 0] ^= 1
    np.savez(copy / "population" / "query.npz", **arrays)
    outputs = synthetic_outputs(plan_dir, tmp_path / "outputs")
    err = _one_error(_import(copy, outputs, tmp_path / "runs"))
    assert "population/query.npz differs from the file the plan lists" in err and not (tmp_path / "runs").exists()
    err = _one_error(runner.invoke(app, ["evaluate", "external", "--out", str(tmp_path / "runs")]))
    assert "trained outside the harness" in err and "harness import" in err and not (tmp_path / "runs").exists()


# --- the same numbers as the built-in run -----------------------------------------------------------


@pytest.mark.slow
def test_outside_trainer_with_the_builtin_recipe_gives_the_builtin_run_exactly(plan_dir, builtin_run, tmp_path):
    """Same plan, same seeds, the harness's recipe run from the plan's files alone: every number of
    every attack variant, the test accuracies and the headlines equal the built-in run's exactly
    (float16 outputs too would differ only by their rounding: the signals are float32)."""
    outputs = harness_recipe_trainer(plan_dir, tmp_path / "outputs")
    res = _import(plan_dir, outputs, tmp_path / "runs", "--name", "harness-recipe")
    assert res.exit_code == 0, res.output
    (run,) = (tmp_path / "runs").iterdir()
    mine = json.loads((run / "results.json").read_text())
    builtin_run = json.loads(jsonio.dumps(builtin_run))  # NaN as the file writes it ("NaN"), so NaN equals NaN
    assert mine["provenance"] == "external" and mine["external"]["name"] == "harness-recipe"
    for level in ("population", "sample"):
        a, b = builtin_run[level], mine[level]
        assert a["test_accuracy"] == b["test_accuracy"]
        assert [(x["name"], x["variant"], x["tpr_at_fpr"], x["tpr_ci"], x["auc"]) for x in a["attacks"]] == \
            [(x["name"], x["variant"], x["tpr_at_fpr"], x["tpr_ci"], x["auc"]) for x in b["attacks"]]
        assert a["best"]["tpr_at_fpr"] == b["best"]["tpr_at_fpr"] and a["best"]["tpr_ci"] == b["best"]["tpr_ci"]
    assert builtin_run["sample_population_ratio"] == mine["sample_population_ratio"]


# --- the examples, end to end -----------------------------------------------------------------------


def _story(results: dict) -> tuple[float, float]:
    """(population, sample) AUC of the headline variant."""
    def auc(level: dict) -> float:
        best = level["best"]
        return next(a["auc"] for a in level["attacks"] if (a["name"], a["variant"]) == (best["name"], best["variant"]))

    return auc(results["population"]), auc(results["sample"])


def _run_ids(outputs: Path) -> dict[str, str]:
    """Each output file's run_id, by its path in the folder."""
    out = {}
    for f in sorted(outputs.rglob("model_*.npz")):
        with np.load(f) as z:
            out[str(f.relative_to(outputs))] = str(z["run_id"])
    return out


def _overlap(a: dict, b: dict, fpr: str = "0.01") -> bool:
    (lo1, hi1), (lo2, hi2) = a["best"]["tpr_ci"][fpr], b["best"]["tpr_ci"][fpr]
    return lo1 <= hi2 and lo2 <= hi1


@pytest.mark.slow
def test_pytorch_example_end_to_end(plan_dir, builtin_run, tmp_path):
    """examples/external_torch.py with the harness unimportable, then import, report, compare, submit,
    and the leaderboard marks the entry trained outside the harness (its verification refused)."""
    outputs = tmp_path / "outputs"
    blocked = ("harness", "defenses", "attacks", "canaries")
    done = run_example("external_torch.py", plan_dir, outputs, blocked)
    assert done.returncode == 0, done.stderr
    assert len(list(outputs.rglob("model_*.npz"))) == 12
    ids = _run_ids(outputs)
    assert len(set(ids.values())) == 1 and next(iter(ids.values())).startswith("external_torch-")
    (outputs / "sample-mislabeled" / "model_0003.npz").unlink()  # an interrupted run, resumed: the same run_id
    assert run_example("external_torch.py", plan_dir, outputs, blocked).returncode == 0
    assert _run_ids(outputs) == ids
    runs = tmp_path / "runs"
    res = _import(plan_dir, outputs, runs, "--name", "torch-mlp")
    assert res.exit_code == 0, res.output
    assert "run_id" not in res.output  # no warning: every file names the run
    (run,) = runs.iterdir()
    results = json.loads((run / "results.json").read_text())
    pop, sample = _story(results)
    b_pop, b_sample = _story(builtin_run)
    assert sample > pop + 0.2 and b_sample > b_pop + 0.2  # canaries leak far more than the population, as built in
    for level in ("population", "sample"):  # the same recipe and seeds: within the built-in run's CIs
        assert _overlap(results[level], builtin_run[level]), level
    assert runner.invoke(app, ["report", str(run)]).exit_code == 0
    assert runner.invoke(app, ["attack", str(run), "--set", "attack.bootstrap=60"]).exit_code == 0
    err = _one_error(runner.invoke(app, ["evaluate", "--run-dir", str(run)]))
    assert "trained outside the harness" in err
    res, site, entry = _publish(run, tmp_path)
    assert "no training to re-run" in res.output, res.output
    assert json.loads((entry / "entry.json").read_text())["trained_outside"] is True
    assert "| torch-mlp | trained outside |" in (site / "leaderboard.md").read_text()
    assert ">trained outside</span>" in (site / "index.html").read_text()  # the row's provenance tag
    assert "the training cannot be re-run" in (entry / "index.html").read_text()
    err = _one_error(runner.invoke(app, ["leaderboard", "verify", entry.name, "--rerun", str(run),
                                         "--site", str(site)]))
    assert "trained outside the harness" in err


@pytest.mark.slow
def test_sklearn_example_end_to_end(plan_dir, tmp_path):
    """examples/external_sklearn.py with the harness and torch unimportable: the same story."""
    outputs = tmp_path / "outputs"
    done = run_example("external_sklearn.py", plan_dir, outputs, ("harness", "defenses", "torch"))
    assert done.returncode == 0, done.stderr
    ids = set(_run_ids(outputs).values())
    assert len(ids) == 1 and ids.pop().startswith("external_sklearn-")
    res = _import(plan_dir, outputs, tmp_path / "runs", "--name", "sklearn-mlp")
    assert res.exit_code == 0, res.output
    (run,) = (tmp_path / "runs").iterdir()
    pop, sample = _story(json.loads((run / "results.json").read_text()))
    assert sample > pop + 0.2


# --- bad input, as a user makes it -----------------------------------------------------------------


def _truncate(f: Path) -> None:
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])


def _rewrite(f: Path, **changes) -> None:
    with np.load(f) as z:
        arrays = {k: z[k] for k in z.files}
    arrays.update(changes)
    for k in [k for k, v in changes.items() if v is None]:
        del arrays[k]
    np.savez(f, **arrays)


def _nan(f: Path) -> None:
    with np.load(f) as z:
        logits = z["logits"].copy()
    logits[3, 2, 1] = np.nan
    _rewrite(f, logits=logits)


BAD = {
    "another plan's file": (lambda f, other: shutil.copy(other, f), "was written for another plan"),
    "a model missing": (lambda f, other: f.unlink(), "1 of 12 model outputs are missing (population: 2;"),
    "wrong shape": (lambda f, other: _rewrite(f, logits=np.zeros((100, 9, 10), np.float32)), "100 query rows"),
    "wrong classes": (lambda f, other: _rewrite(f, logits=np.zeros((537, 9, 3), np.float32)), "3 classes"),
    "NaN": (lambda f, other: _nan(f), "1 NaN or infinite value(s) (the first at query image 3, view 2, class 1)"),
    "truncated npz": (lambda f, other: _truncate(f), "is not a readable .npz file"),
    "wrong number of views": (lambda f, other: _rewrite(f, logits=np.zeros((537, 1, 10), np.float32)),
                              "1 view(s) per query image; the plan has 9"),
    "float64": (lambda f, other: _rewrite(f, logits=np.zeros((537, 9, 10))), "dtype float64"),
    "no fingerprint": (lambda f, other: _rewrite(f, plan_fingerprint=None), "lacks 'plan_fingerprint'"),
    "a misnamed array": (lambda f, other: _rewrite(f, logit=np.zeros(1)), "holds array 'logit'"),
    "a model too many": (lambda f, other: shutil.copy(f, f.with_name("model_0006.npz")), "the plan has 6 models"),
    "accuracy of 95": (lambda f, other: _rewrite(f, test_accuracy=np.array(95.0)), "test_accuracy is 95"),
}


@pytest.fixture(scope="module")
def other_plan_file(tmp_path_factory) -> Path:
    """An output file written for another plan (another seed) of the same sizes."""
    tmp = tmp_path_factory.mktemp("other")
    other = _plan(tmp / "plan", seed=1)
    return synthetic_outputs(other, tmp / "outputs", models=[2]) / "population" / "model_0002.npz"


@pytest.mark.parametrize("case", list(BAD))
def test_bad_outputs_are_one_line_write_nothing_and_the_fix_works(case, plan_dir, other_plan_file, tmp_path):
    damage, says = BAD[case]
    outputs = synthetic_outputs(plan_dir, tmp_path / "outputs")
    damage(outputs / "population" / "model_0002.npz", other_plan_file)
    runs = tmp_path / "runs"
    runs.mkdir()
    err = _one_error(_import(plan_dir, outputs, runs))
    assert says in err and "population/model_000" in err, err
    assert list(runs.iterdir()) == []  # no run directory, no temp folder
    shutil.rmtree(outputs)
    synthetic_outputs(plan_dir, outputs)  # the user writes the outputs again
    res = _import(plan_dir, outputs, runs)
    assert res.exit_code == 0, res.output
    assert len(list(runs.iterdir())) == 1


def test_import_refuses_a_wrong_folder_or_plan_and_reimports_idempotently(plan_dir, tmp_path):
    outputs = synthetic_outputs(plan_dir, tmp_path / "outputs")
    runs = tmp_path / "runs"
    assert "is not an audit plan" in _one_error(_import(outputs, outputs, runs))
    assert "does not exist" in _one_error(_import(plan_dir, tmp_path / "nowhere", runs))
    (outputs / "sample-ood").mkdir()
    assert "is not an experiment of this plan" in _one_error(_import(plan_dir, outputs, runs))
    (outputs / "sample-ood").rmdir()
    assert "an import takes attack.* settings" in _one_error(_import(plan_dir, outputs, runs, "--set", "train.lr=1"))
    assert not runs.exists()
    res = _import(plan_dir, outputs, runs, "--set", "attack.bootstrap=30")
    assert res.exit_code == 0, res.output
    (run,) = runs.iterdir()
    first = json.loads((run / "results.json").read_text())
    assert first["config"]["attack"]["bootstrap"] == 30 and first["num_models"] == 6
    assert first["external"]["test_accuracy"] == "test outputs" and first["external"]["test_accuracy_claimed"] == "all"
    res = _import(plan_dir, outputs, runs, "--set", "attack.bootstrap=30")  # the same outputs: same run, attacked again
    assert res.exit_code == 0 and "already holds these outputs" in res.output, res.output
    assert [p.name for p in runs.iterdir()] == [run.name]
    again = json.loads((run / "results.json").read_text())
    assert again["sample"]["attacks"] == first["sample"]["attacks"]
    other = synthetic_outputs(plan_dir, tmp_path / "outputs2", seed=5)  # other outputs of the same plan: another run
    err = _one_error(runner.invoke(app, ["import", str(plan_dir), "--outputs", str(other), "--run-dir", str(run)]))
    assert "holds another run" in err
    assert _import(plan_dir, other, runs).exit_code == 0 and len(list(runs.iterdir())) == 2


def test_test_accuracy_is_computed_from_the_test_outputs_and_a_claim_that_disagrees_is_refused(plan_dir, tmp_path):
    """The utility is the harness's own measurement on the whole test set (each file's test_logits),
    never the trainer's word: a claimed test_accuracy off by more than half a point is refused."""
    outputs = synthetic_outputs(plan_dir, tmp_path / "outputs")
    f = outputs / "population" / "model_0004.npz"
    with np.load(f) as z, np.load(plan_dir / "data.npz") as d:
        want = float((z["test_logits"].argmax(-1) == d["y_test"]).mean())
        assert len(z["test_logits"]) == len(d["y_test"]) == 497  # the whole test set
    _rewrite(f, test_accuracy=np.array(0.972))  # the all-zero-logits submission's claimed utility
    err = _one_error(_import(plan_dir, outputs, tmp_path / "runs"))
    assert "model_0004.npz: test_accuracy is 97.2%, but its test_logits give" in err
    assert f"give {100 * want:.1f}% on the 497 test images" in err and not (tmp_path / "runs").exists()
    _rewrite(f, test_accuracy=np.array(want + 0.004))  # within half a point: a trainer's own rounding
    for g in outputs.rglob("model_0001.npz"):
        _rewrite(g, test_accuracy=None)  # no claim: computed
    res = _import(plan_dir, outputs, tmp_path / "runs")
    assert res.exit_code == 0, res.output
    (run,) = (tmp_path / "runs").iterdir()
    results = json.loads((run / "results.json").read_text())
    assert results["external"]["test_accuracy"] == "test outputs"
    assert results["external"]["test_accuracy_claimed"] == "some"
    assert results["population"]["test_accuracy"]["per_model"][4] == want  # not the claim


# --- --partial --------------------------------------------------------------------------------------


def test_partial_audits_the_models_present_while_balanced(tmp_path):
    plan = _plan(tmp_path / "plan12", **{"audit.models": 12})
    outputs = synthetic_outputs(plan, tmp_path / "outputs")
    (outputs / "sample-mislabeled" / "model_0003.npz").unlink()
    runs = tmp_path / "runs"
    err = _one_error(_import(plan, outputs, runs))
    assert "1 of 24 model outputs are missing (sample-mislabeled: 3;" in err and "--partial" in err
    res = _import(plan, outputs, runs, "--partial")
    assert res.exit_code == 0, res.output
    assert "--partial: auditing 10 of 12 models" in res.output and "model 11 is left out too" in res.output
    (run,) = runs.iterdir()
    r = json.loads((run / "results.json").read_text())
    assert r["num_models"] == 10 and r["external"]["models_planned"] == 12 and r["external"]["models_audited"] == 10
    assert r["external"]["plan_model_indices"] == [0, 1, 2, 4, 5, 6, 7, 8, 9, 10]
    assert r["external"]["missing"] == {"sample-mislabeled": [3]}
    with np.load(run / "population" / "design.npz") as z, np.load(plan / "population" / "design.npz") as p:
        assert np.array_equal(z["membership"], p["membership"][r["external"]["plan_model_indices"]])


def test_partial_refuses_an_unbalanced_design(tmp_path):
    plan = _plan(tmp_path / "plan8", **{"audit.models": 8})
    with np.load(plan / "population" / "design.npz") as z:
        members = np.flatnonzero(z["membership"][:, 0])  # the 4 models audit sample 0 is a member of
    outputs = synthetic_outputs(plan, tmp_path / "outputs", models=[i for i in range(8) if i not in members[:2]])
    runs = tmp_path / "runs"
    err = _one_error(_import(plan, outputs, runs, "--partial"))
    assert "leave the design unbalanced" in err and "is a member of 2" in err
    assert not runs.exists()


# --- white-box features -----------------------------------------------------------------------------


def test_features_on_the_plans_ssl_views_give_the_harness_own_contrastive_signal(plan_dir, tmp_path):
    """A plan with the white-box contrastive attack exports the SSL view pairs the harness's own signal
    compares; an outside model's features on them become that signal exactly, and the attack runs
    (white-box). Features where the plan has no SSL views, or missing or misshapen ones, are refused."""
    from harness.core.data import AugmentSpec
    from harness.run.external import read_plan
    from harness.run.signals import contrastive_similarity, signal_seed

    import jsonschema

    plan = _plan(tmp_path / "plan", **{"attack.names": "[lira,rmia,threshold,contrastive]"})
    meta = json.loads((plan / "plan.json").read_text())
    jsonschema.validate(meta, json.loads((REPO / "docs" / "plan.schema.json").read_text()),
                        cls=jsonschema.Draft202012Validator)
    outputs = synthetic_outputs(plan, tmp_path / "outputs")

    def embed(i: int):  # a model's "features": elementwise, so batching cannot change a bit
        w = np.random.default_rng(i).normal(size=64).astype(np.float32)
        return lambda x: np.tanh(x.reshape(len(x), -1).astype(np.float32) / 255 * w)

    for name, e in meta["experiments"].items():
        assert e["features_shape"] == [2, 6, 9, 40]
        with np.load(plan / e["files"]["ssl_views"]) as z:
            v = np.stack([z["v1"], z["v2"]])
        for i in range(6):
            _rewrite(outputs / name / f"model_{i:04d}.npz",
                     features=embed(i)(v.reshape(-1, 1, 8, 8)).reshape(*v.shape[:4], 64))
    f = outputs / "population" / "model_0001.npz"
    good = f.read_bytes()
    runs = tmp_path / "runs"
    for change, says in (({"features": None}, "lacks 'features' (2, 6, 9, 40) + (D,)"),
                         ({"features": np.zeros((2, 6, 9, 39, 4), np.float32)},
                          "features have shape (2, 6, 9, 39, 4)")):
        _rewrite(f, **change)
        assert says in _one_error(_import(plan, outputs, runs)) and not runs.exists()
        f.write_bytes(good)
    res = _import(plan, outputs, runs)
    assert res.exit_code == 0, res.output
    (run,) = runs.iterdir()
    p = read_plan(plan)
    for name in meta["experiments"]:
        want = contrastive_similarity(embed(4), p.load_level(name).canaries.x, AugmentSpec(False, 1), signal_seed(0))
        with np.load(run / name / "signals" / "model_0004.npz") as z:
            assert np.array_equal(z["contrastive_features"], want)
    results = json.loads((run / "results.json").read_text())
    assert {a["access"] for a in results["sample"]["attacks"] if a["name"] == "contrastive"} == {"white-box"}
    # features for a plan without SSL views: refused, not silently ignored
    other = synthetic_outputs(plan_dir, tmp_path / "other")
    _rewrite(other / "population" / "model_0000.npz", features=np.zeros((2, 6, 9, 40, 4), np.float32))
    assert "has no white-box attack to read them" in _one_error(_import(plan_dir, other, tmp_path / "runs2"))
    other = synthetic_outputs(plan_dir, tmp_path / "other")
    err = _one_error(_import(plan_dir, other, tmp_path / "runs2", "--set", "attack.names=[lira,contrastive]"))
    assert "features on SSL views this plan does not export" in err and not (tmp_path / "runs2").exists()
