"""The import's model-difference and rows checks (harness.run.output_checks) on every finished built-in
run, on near-copies of one model and on linear models: the margin docs/external-models.md quotes.

    python benchmarks/bench_model_difference.py [RUNS...] [--markdown] [--linear 16]

For every finished run under RUNS (default runs/bench, where benchmarks/bench_defenses.py puts every
built-in defense's quick run; a run counts once its results.json is written), each experiment's
saved signals are read as an import reads an outside model's outputs (the query rows: audit samples,
population samples, near-duplicates, at every view; the test outputs: the population rows at view 0,
where they cover the whole test set, as on digits):

- the relative difference of every pair of models (:func:`harness.run.output_checks.difference_matrix`
  on every query row at view 0), its smallest and median value per experiment, and across
  experiments on the population rows (what the check reads), against ``MIN_DIFFERENCE``;
- what :func:`harness.run.output_checks.check_difference` and :func:`check_rows` say of the run (a
  finding is a false alarm: these models were trained by the harness as planned);
- near-copies of the run's first model: every model its copy plus N(0, sigma) noise, for several
  sigma (the largest pair difference: the check refuses them below the threshold);
- with ``--linear N``: N logistic regressions (scikit-learn, two regularizations) trained on the
  training sets of the first run's population level, models nearly determined by their data: the
  most alike honest models we know of.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from harness.audit.attack_phase import load_level_signals
from harness.run.output_checks import MIN_DIFFERENCE, ModelOutputs, RowLabels, check_difference, check_rows, \
    difference_matrix
from harness.run.runstore import RunDir

REPO = Path(__file__).resolve().parents[1]
#: the noise of the near-copies, in logits
SIGMAS = (1e-3, 1e-2, 0.1, 0.3, 1.0)


def run_dirs(paths: list[Path]) -> list[Path]:
    found = []
    for p in paths:
        found += sorted(f.parent for f in p.rglob("results.json") if (f.parent / "manifest.json").is_file())
    return found


def as_outputs(run: RunDir, level: str, num_models: int) -> tuple[dict[int, ModelOutputs], RowLabels]:
    """A built-in level's saved signals as an import's checked outputs (module docstring), and what
    a plan knows of its rows."""
    ld = run.load_level(level)
    data = run.load_data()
    ls = load_level_signals(run, level, num_models)
    parts = [("audit", ls.signals["logits"])]
    for name, key in (("population", "population_logits"), ("neighbours", "neighbour_logits")):
        if key in ls.signals:
            parts.append((name, ls.signals[key]))
    spans, start = [], 0
    for name, a in parts:
        spans.append({"name": name, "start": start, "stop": start + a.shape[1]})
        start += a.shape[1]
    logits = np.concatenate([a for _, a in parts], axis=1)
    meta = {"logits_shape": list(logits.shape[1:]), "query_parts": spans}
    pop = np.asarray(ld.population_indices)
    whole = "population_logits" in ls.signals and np.array_equal(np.sort(pop), np.arange(len(data.y_test)))
    labels = RowLabels.of(level, meta, ld, data.x_train, data.y_train, data.y_test)
    models = {}
    for i in range(num_models):
        test = np.zeros((len(data.y_test), logits.shape[-1]), np.float32)
        if whole:
            test[pop] = ls.signals["population_logits"][i, :, 0]
        models[i] = ModelOutputs(experiment=level, index=i, path=Path(level) / f"model_{i:04d}.npz", sha256="",
                                 logits=logits[i], test_accuracy=float(ls.metas[i]["test_accuracy"]),
                                 train_seconds=None, test_logits=test if whole else None)
    return models, labels


def pair_stats(d: np.ndarray) -> tuple[float, float]:
    off = d[np.isfinite(d)]
    return float(off.min()), float(np.median(off))


def measure(path: Path) -> tuple[list[dict], dict[str, dict[int, ModelOutputs]]]:
    run = RunDir(path)
    cfg = run.load_config()
    s = cfg.audit.models
    models, labels = {}, {}
    for level in run.levels():
        models[level], labels[level] = as_outputs(run, level, s)
    rows = []
    for level, files in models.items():
        lo, med = pair_stats(difference_matrix(np.stack([files[i].logits[:, 0] for i in range(s)])))
        rows.append({"run": path.name, "defense": cfg.defense, "experiment": level, "models": s, "min": lo,
                     "median": med})
    common = [e for e in models if len(labels[e].population_rows)]
    if len(common) > 1:
        outs = np.stack([models[e][i].logits[labels[e].population_rows, 0] for e in common for i in range(s)])
        d = difference_matrix(outs)
        same = np.repeat(np.arange(len(common)), s)
        d[same[:, None] == same[None]] = np.inf
        lo, med = pair_stats(d)
        rows.append({"run": path.name, "defense": cfg.defense, "experiment": "across experiments", "models": s,
                     "min": lo, "median": med})
    kept = list(range(s))
    diff = check_difference(models, kept, labels, path)
    whole = all(m.test_logits is not None for f in models.values() for m in f.values())
    rows_found = check_rows(models, kept, labels, path) if whole else "not run (no test outputs)"
    for r in rows:
        r["difference_check"] = diff or "passed"
        r["rows_check"] = rows_found or "passed"
    return rows, models


def near_copies(models: dict[int, ModelOutputs], rng: np.random.Generator) -> list[dict]:
    base = models[0].logits[:, 0].astype(np.float64)
    out = []
    for sigma in SIGMAS:
        outs = base[None] + rng.normal(0, sigma, size=(len(models), *base.shape))
        for dtype in ("float32", "float16"):
            d = difference_matrix(outs.astype(dtype))
            off = d[np.isfinite(d)]
            out.append({"sigma": sigma, "dtype": dtype, "max": float(off.max()), "median": float(np.median(off))})
    return out


def linear_models(path: Path, n: int) -> list[dict]:
    """Logistic regressions on the training sets of models 0..n-1 of ``path``'s population level."""
    import warnings

    from sklearn.linear_model import LogisticRegression

    from harness.run.runner import training_set

    run = RunDir(path)
    data = run.load_data()
    ld = run.load_level("population")
    query = np.concatenate([ld.canaries.x, data.x_test[ld.population_indices]])
    feats = lambda x: (x.reshape(len(x), -1).astype(np.float64) / 255.0)  # noqa: E731
    out = []
    for c in (1.0, 0.01):
        outs = []
        for i in range(n):
            t = training_set(data, ld, i)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                clf = LogisticRegression(C=c, max_iter=5000).fit(feats(t.x), t.y)
            outs.append(clf.decision_function(feats(query)))
        lo, med = pair_stats(difference_matrix(np.stack(outs)))
        out.append({"C": c, "models": n, "min": lo, "median": med})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=Path, default=[REPO / "runs" / "bench"])
    ap.add_argument("--markdown", action="store_true", help="print the tables docs/external-models.md quotes")
    ap.add_argument("--linear", type=int, default=0, help="also train this many logistic regressions (scikit-learn)")
    ap.add_argument("--json", type=Path, help="write every measurement here")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    paths = run_dirs(args.runs)
    if not paths:
        print(f"no finished run under {', '.join(map(str, args.runs))}", file=sys.stderr)
        return 2
    rows, copies, first = [], [], None
    for p in paths:
        found, models = measure(p)
        rows += found
        for r in found:
            print(f"{r['defense']:16s} {r['run']:34s} {r['experiment']:22s} S={r['models']}: smallest pair difference "
                  f"{r['min']:.4f}, median {r['median']:.4f}")
        print(f"  difference check: {found[0]['difference_check']}; rows check: {found[0]['rows_check']}")
        if first is None:
            first = p
            copies = near_copies(next(iter(models.values())), np.random.default_rng(args.seed))
    lowest = min(rows, key=lambda r: r["min"])
    print(f"\nsmallest pair difference over every built-in run: {lowest['min']:.4f} ({lowest['defense']}, "
          f"{lowest['experiment']}); threshold MIN_DIFFERENCE = {MIN_DIFFERENCE:g}; false alarms: "
          f"{sum(r['difference_check'] != 'passed' for r in rows)} (difference), "
          f"{sum(r['rows_check'] not in ('passed', 'not run (no test outputs)') for r in rows)} (rows)")
    print(f"near-copies of model 0 of {first.name} (largest pair difference):")
    for c in copies:
        print(f"  sigma {c['sigma']:g} ({c['dtype']}): {c['max']:.2e} (median {c['median']:.2e})"
              f"{'  refused' if c['max'] < MIN_DIFFERENCE else '  passes'}")
    linear = linear_models(first, args.linear) if args.linear else []
    for r in linear:
        print(f"logistic regression C={r['C']:g} on {r['models']} training sets: smallest pair difference "
              f"{r['min']:.4f}, median {r['median']:.4f}")
    if args.markdown:
        print("\n| defense (run) | experiments | smallest pair difference within an experiment (median) | across "
              "experiments (median) | false alarm |")
        print("|---|---|---|---|---|")
        for run in dict.fromkeys(r["run"] for r in rows):
            mine = [r for r in rows if r["run"] == run]
            within = [r for r in mine if r["experiment"] != "across experiments"]
            across = [r for r in mine if r["experiment"] == "across experiments"]
            lo = min(within, key=lambda r: r["min"])
            alarm = "none" if all(r["difference_check"] == "passed" and r["rows_check"] in
                                  ("passed", "not run (no test outputs)") for r in mine) else "**yes**"
            print(f"| {mine[0]['defense']} ({run}) | {', '.join(r['experiment'] for r in within)} | {lo['min']:.3f} "
                  f"({lo['experiment']}; median {lo['median']:.3f}) | "
                  + (f"{across[0]['min']:.3f} ({across[0]['median']:.3f})" if across else "-") + f" | {alarm} |")
        for r in linear:
            print(f"| logistic regression, C = {r['C']:g} ({r['models']} training sets of the first run's population "
                  f"level) | population | {r['min']:.4f} (median {r['median']:.4f}) | - | - |")
        print("\n| near-copies: model 0 + N(0, sigma) | largest pair difference (float32) | (float16) | refused |")
        print("|---|---|---|---|")
        for sigma in SIGMAS:
            a, b = (next(c for c in copies if c["sigma"] == sigma and c["dtype"] == d) for d in ("float32", "float16"))
            print(f"| {sigma:g} | {a['max']:.1e} | {b['max']:.1e} | "
                  f"{'yes' if max(a['max'], b['max']) < MIN_DIFFERENCE else 'no'} |")
    if args.json:
        args.json.write_text(json.dumps({"threshold": MIN_DIFFERENCE, "runs": rows, "near_copies": copies,
                                         "linear": linear}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
