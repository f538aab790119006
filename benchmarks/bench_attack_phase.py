"""The whole attack phase at population scale: ``harness attack RUN_DIR`` on a synthetic run directory
of S models x C audit samples x A query views x K classes (the paper preset's attacks: LiRA, RMIA and
the global threshold, 14 variants; metrics, 1000 bootstrap replicates, the level figures, the
headline test, both epsilon lower bounds, results.json, the CSVs and the ROC files).

    python benchmarks/bench_attack_phase.py [--models 16 32 64] [--samples 5000 20000 50000]
        [--signals weak strong] [--views 18] [--classes 10] [--population 1000] [--dtype float16]
        [--work DIR] [--vs REV] [--json]

Each case is a real run directory made by the harness itself (``harness.run.runner.prepare_run`` on a
synthetic npz dataset, the ``paper`` preset with ``data.name=npz``, ``audit.size=C``,
``audit.models=S``, the population level only), whose S models' signals files are written by
``RunDir.write_signals`` from synthetic logits (float16, as ``audit.signal_dtype=float16`` stores
them) in place of trained models:

- per audit sample i a fixed logit pattern (its label's logit raised by 2, every view, class N(0, 1)
  and a per-sample offset), per model and sample a view-shared N(0, 0.5) and per view an N(0, 0.3)
  term; a member model raises the label's logit by ``d_i``, drawn per sample from an exponential
  distribution of mean 0.12 (``weak``: AUC 0.52 to 0.55, as a real population level), 0.6
  (``medium``: the test's golden run, tests/test_attack_phase_scale.py) or 3 (``strong``: AUC
  about 0.96). The population samples (RMIA's z) are drawn the same way,
  members of no model.

``harness attack RUN_DIR`` then runs in a child process (``python -m harness.cli attack``, output to
a file), and the benchmark prints its wall seconds, its CPU seconds (user + system, from the child's
``wait4`` resource usage), its peak resident memory (the child's ``ru_maxrss``), the bytes it wrote
(results.json, the CSVs, ``roc/``) and the headline figures of its results.json. ``--vs REV`` runs
the same attack phase with the code of commit REV too (``git archive`` into a temporary folder, run
with ``PYTHONPATH`` there) and compares the two results.json files' numbers. REV gets its own run
directory, built by REV's code from the same draws (this script in a child process with ``PYTHONPATH``
there): a run directory records the whole config, and an older harness refuses the config keys
added since (``audit.repeat_queries``, say). ``--work DIR`` keeps the run directories there (a later call re-uses
them: building a 64 x 50 000 case writes about 1.2 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
STRENGTH = {"weak": 0.12, "medium": 0.6, "strong": 3.0}


def _dataset(path: Path, train: int, test: int, classes: int, seed: int) -> None:
    """A synthetic npz dataset: tiny 4x4 grey images (the attack phase never reads a pixel)."""
    rng = np.random.default_rng(seed)
    y_train = np.arange(train) % classes
    y_test = np.arange(test) % classes
    np.savez(path, x_train=rng.integers(0, 256, (train, 1, 4, 4), dtype=np.uint8), y_train=y_train,
             x_test=rng.integers(0, 256, (test, 1, 4, 4), dtype=np.uint8), y_test=y_test)


def build_run(where: Path, models: int, samples: int, views: int, classes: int, population: int, dtype: str,
              signals: str, seed: int = 0, levels: str = "population", overrides: dict[str, Any] | None = None) -> Path:
    """A finished run directory of synthetic signals (module docstring); returns its path. Re-used when
    ``where`` already holds a finished one. ``levels``: ``population``, ``sample`` (mislabeled canaries,
    the undefended defense's) or ``both``; ``overrides`` are further config settings."""
    from harness.defense_config import build_config
    from harness.run.runner import prepare_run
    from harness.run.runstore import RunDir

    run_path = where / "run"
    done = where / "BUILT"
    if done.is_file():
        return run_path
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    data = where / "data.npz"
    _dataset(data, samples + 1000, population + 200, classes, seed)
    cfg = build_config("paper", {
        "defense": "undefended", "data.name": "npz", "data.path": str(data), "audit.models": models,
        "audit.size": samples, "audit.population_samples": population, "audit.signal_dtype": dtype,
        "run.level": levels, "run.out": str(where), "run.device": "cpu", "seed": seed, **(overrides or {}),
    })
    prep = prepare_run(cfg, run_path)
    run = RunDir(run_path)
    rng = np.random.default_rng([seed, 0xA77])
    for level in prep.levels:
        ld = run.load_level(level)
        member = ld.design.membership  # (S, C)
        labels = ld.canaries.y
        pop_labels = np.load(data)["y_test"][ld.population_indices]
        onehot = np.arange(classes)[None, None, :] == labels[:, None, None]  # (C, 1, K)
        base = (rng.standard_normal((samples, 1, classes), dtype=np.float32) + 2.0 * onehot
                + rng.standard_normal((samples, 1, 1), dtype=np.float32)).astype(np.float32)
        gain = (rng.exponential(STRENGTH[signals], samples).astype(np.float32))[:, None, None] * onehot
        z_onehot = np.arange(classes)[None, None, :] == pop_labels[:, None, None]
        z_base = (rng.standard_normal((population, 1, classes), dtype=np.float32) + 2.0 * z_onehot
                  + rng.standard_normal((population, 1, 1), dtype=np.float32)).astype(np.float32)
        fp = run.level_fingerprint(level)

        def draw(b: np.ndarray) -> np.ndarray:
            n = b.shape[0]
            return (b + 0.5 * rng.standard_normal((n, 1, classes), dtype=np.float32)
                    + 0.3 * rng.standard_normal((n, views, classes), dtype=np.float32))

        for s in range(models):
            logits = draw(base) + member[s][:, None, None] * gain
            meta = {"model_index": s, "level": level, "level_fingerprint": fp, "seed": s, "train_size": 0,
                    "test_accuracy": 0.9 - 0.001 * s, "train_accuracy_audit_members": None, "train_seconds": 0.0,
                    "query_seconds": 0.0, "device": "cpu", "torch_threads": 1, "host": "synthetic",
                    "defense_info": {}, "model_saved": False}
            run.write_signals(level, s, {"logits": logits.astype(dtype),
                                         "population_logits": draw(z_base).astype(dtype)}, meta)
            del logits
    done.write_text("ok\n")
    return run_path


def env_with(code: Path) -> dict[str, str]:
    """This environment with the harness at ``code`` first on ``PYTHONPATH``; a ``PYTHONPATH`` already set
    stays after it (the GPU machines' carried wheels: benchmarks/gpu_run.sh)."""
    path = os.pathsep.join(p for p in (str(code), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def build_with(code: Path, where: Path, args: argparse.Namespace, models: int, samples: int, signals: str) -> Path:
    """``build_run`` by the harness at ``code`` (this script in a child process, ``PYTHONPATH`` there)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--build-into", str(where), "--models", str(models), "--samples", str(samples),
           "--signals", signals, "--views", str(args.views), "--classes", str(args.classes),
           "--population", str(args.population), "--dtype", args.dtype]
    proc = subprocess.run(cmd, cwd=code, env=env_with(code), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{code}: building the run directory failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return where / "run"


def attack_once(code: Path, run_path: Path, log: Path) -> dict[str, Any]:
    """``harness attack RUN_DIR`` with the code at ``code``: wall and CPU seconds, peak RSS, bytes written."""
    for f in ("results.json", "table.csv", "attacks.csv"):
        (run_path / f).unlink(missing_ok=True)
    shutil.rmtree(run_path / "roc", ignore_errors=True)
    env = {**env_with(code), "COLUMNS": "160"}
    env.pop("HARNESS_CHECK_RESULTS_SCHEMA", None)
    cmd = [sys.executable, "-m", "harness.cli", "attack", str(run_path)]
    with log.open("w") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=code, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{code}: harness attack failed ({proc.returncode}):\n{log.read_text()[-4000:]}")
    roc = sum(f.stat().st_size for f in (run_path / "roc").glob("*")) if (run_path / "roc").is_dir() else 0
    other = sum((run_path / f).stat().st_size for f in ("results.json", "table.csv", "attacks.csv"))
    results = json.loads((run_path / "results.json").read_text())
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mib": usage.ru_maxrss / 1024,
            "roc_bytes": roc, "bytes_written": roc + other, "roc_files": len(list((run_path / "roc").glob("*"))),
            "results": results}


def headline(results: dict[str, Any]) -> dict[str, Any]:
    """The figures a reader looks at: the declared variant's own TPR at 0.1% FPR with its CI, the
    leak (the strongest figure in a results.json from before harness 0.4, which a --vs REV run may
    write), the primary LiRA's AUC."""
    lv = results["population"]
    k = "0.001"
    lira = next(a for a in lv["attacks"] if a["name"] == "lira" and a["primary"])
    leak = ((lv.get("figure") or {}).get("leak") or {}).get("tpr") if "figure" in lv else \
        lv["strongest"]["tpr_at_fpr"][k]
    return {"headline": f"{lv['best']['name']}:{lv['best']['variant']}", "tpr@0.1%": lv["best"]["tpr_at_fpr"][k],
            "ci": lv["best"]["tpr_ci"][k], "strongest@0.1%": float("nan") if leak is None else leak,
            "lira_auc": lira["auc"], "variants": len(lv["attacks"])}


def numbers(obj: Any, path: str = "") -> dict[str, Any]:
    """Every number of a results.json by its key path (timings, versions and the config left out)."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            if path == "" and k in ("timings", "harness_version", "config", "created"):
                continue
            out.update(numbers(v, f"{path}/{k}"))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.update(numbers(v, f"{path}/{i}"))
    else:
        out[path] = obj
    return out


def compare(a: dict[str, Any], b: dict[str, Any]) -> tuple[int, float, list[str], list[str]]:
    """(values both hold, largest absolute difference of their numbers, keys both hold whose values differ
    otherwise, keys only one holds: results.json keys added since the older commit)."""
    na, nb = numbers(a), numbers(b)
    worst, other = 0.0, []
    for k in sorted(set(na) & set(nb)):
        x, y = na[k], nb[k]
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool):
            if x != y and not (x != x and y != y):
                worst = max(worst, abs(float(x) - float(y)))
        elif x != y:
            other.append(k)
    return len(set(na) & set(nb)), worst, other, sorted(set(na) ^ set(nb))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--samples", type=int, nargs="+", default=[5000, 20000, 50000])
    ap.add_argument("--signals", nargs="+", choices=sorted(STRENGTH), default=["weak", "strong"])
    ap.add_argument("--views", type=int, default=18)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--population", type=int, default=1000, help="population samples z (RMIA's)")
    ap.add_argument("--dtype", choices=["float16", "float32"], default="float16")
    ap.add_argument("--work", type=Path, default=None, help="keep (and re-use) the run directories here")
    ap.add_argument("--vs", default=None, help="also run the attack phase with the code of this commit")
    ap.add_argument("--json", action="store_true", help="one JSON line per case as well")
    ap.add_argument("--build-into", type=Path, default=None, help=argparse.SUPPRESS)  # build_with's child
    args = ap.parse_args()
    if args.build_into is not None:
        build_run(args.build_into, args.models[0], args.samples[0], args.views, args.classes, args.population,
                  args.dtype, args.signals[0])
        return
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-attack-phase-"))
    other = None
    if args.vs:
        other = Path(tempfile.mkdtemp(prefix="bench-attack-vs-"))
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.vs], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(other)], input=archive, check=True)
    print(f"{os.cpu_count()} CPU cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    try:
        for s in args.models:
            for c in args.samples:
                for sig in args.signals:
                    where = work / f"S{s}-C{c}-A{args.views}-K{args.classes}-Z{args.population}-{args.dtype}-{sig}"
                    t0 = time.perf_counter()
                    run_path = build_run(where, s, c, args.views, args.classes, args.population, args.dtype, sig)
                    built = time.perf_counter() - t0
                    row: dict[str, Any] = {"models": s, "samples": c, "views": args.views, "classes": args.classes,
                                           "population": args.population, "dtype": args.dtype, "signals": sig,
                                           "build_s": built}
                    for tag, code in (("this", REPO), ("vs", other)):
                        if code is None:
                            continue
                        if tag == "vs":
                            run_path = build_with(code, where / f"vs-{args.vs}", args, s, c, sig)
                        r = attack_once(code, run_path, where / f"attack-{tag}.log")
                        res = r.pop("results")
                        (where / f"results-{tag}.json").write_text(json.dumps(res))
                        r["headline"] = headline(res)
                        row[tag] = r
                        h = r["headline"]
                        print(f"S={s} C={c} {sig} [{'this checkout' if tag == 'this' else args.vs}]: "
                              f"wall {r['wall_s']:.1f} s, CPU {r['cpu_s']:.1f} s, "
                              f"peak RSS {r['peak_rss_mib']:.0f} MiB, "
                              f"wrote {r['bytes_written'] / 2**20:.1f} MiB (ROC {r['roc_bytes'] / 2**20:.1f} MiB in "
                              f"{r['roc_files']} files); headline {h['headline']} TPR@0.1% {100 * h['tpr@0.1%']:.2f}% "
                              f"[{100 * h['ci'][0]:.2f}, {100 * h['ci'][1]:.2f}], leak "
                              f"{100 * h['strongest@0.1%']:.2f}%, LiRA AUC {h['lira_auc']:.4f}", flush=True)
                    if other is not None:
                        a = json.loads((where / "results-this.json").read_text())
                        b = json.loads((where / "results-vs.json").read_text())
                        n, worst, diff, one_side = compare(a, b)
                        row["compare"] = {"values": n, "max_abs_diff": worst, "other_differences": diff,
                                          "keys_in_one_only": one_side}
                        print(f"  results.json, this checkout vs {args.vs}: {n} values in both, largest difference "
                              f"{worst:.3g}" + (f", other differences: {', '.join(diff[:8])}" if diff else "")
                              + (f"; keys in one only: {', '.join(one_side[:8])}" if one_side else ""), flush=True)
                        row["cpu_ratio"] = row["this"]["cpu_s"] / row["vs"]["cpu_s"]
                        row["rss_ratio"] = row["this"]["peak_rss_mib"] / row["vs"]["peak_rss_mib"]
                        print(f"  this checkout / {args.vs}: CPU {row['cpu_ratio']:.2f}x, "
                              f"peak RSS {row['rss_ratio']:.2f}x", flush=True)
                    if args.json:
                        print(json.dumps(row), flush=True)
                    if args.work is None:
                        shutil.rmtree(where, ignore_errors=True)
    finally:
        if other is not None:
            shutil.rmtree(other, ignore_errors=True)
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
