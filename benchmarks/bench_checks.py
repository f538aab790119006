"""The checks of a run's saved outputs (harness.core.checks): measured on finished runs, on planted
faults, and on simulated runs without any fault. docs/protocol.md (Checks) quotes its output.

    python benchmarks/bench_checks.py [RUNS...] [--null 2000] [--seed 0] [--markdown]
    python benchmarks/bench_checks.py --cost RUN_DIR   # the checks' CPU share of RUN_DIR's attack phase

For every finished run under RUNS (default runs/bench, where benchmarks/bench_defenses.py puts every
built-in defense's quick run):

- the membership-consistency statistics of each experiment as the attack phase computes them (median
  and smallest own-members AUC, the largest pair z and own z, against the run's threshold), the
  outputs check (constant or identical models), the utility check (models at chance), and whether
  any model's served outputs are probability rows (what ``harness import`` refuses);
- planted faults on the same signals: models 3 and 5 of each experiment swapped, and model 7's
  membership row shuffled (its outputs fit a set other than its design's): whether the check names
  them, with their z.

``--markdown`` prints, after the runs, one table row per run (docs/protocol.md's tables): the
models, the threshold, each experiment's median own-members AUC, the largest z of the run with its
design's masks, and the experiments where the planted swap and the planted shuffle are named.

Then the false-alarm rate on ``--null`` simulated runs of 32 models, 200 audit samples and two
experiments, each model's scores drawn as a per-sample difficulty plus noise plus a member shift:
(a) no member shift (nothing fits: the pair tests are exact there); (b) the same small shift for
every model (a DP-SGD-like weak fit); (c) a shift drawn per model from 0 to 0.5 noise units
(models that fit their members unequally); (d) a strong shift (3) with a noise scale per model drawn
as exp(N(0, 0.3^2)) (models whose outputs stray from the others' unequally); (e) the same shift, one
model's noise x 4 (an honest outlier: it fits its members, far less cleanly than the others). A false
alarm is a run the check fails.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from harness.audit.attack_phase import load_level_signals
from harness.core.checks import (LevelOutputs, degenerate_outputs, label_scores, membership_check, membership_stats,
                                  probability_rows, utility_check)
from harness.core import jsonio
from harness.run.runstore import RunDir

REPO = Path(__file__).resolve().parents[1]


def run_dirs(paths: list[Path]) -> list[Path]:
    found = []
    for p in paths:
        found += sorted(f.parent for f in p.rglob("results.json") if (f.parent / "manifest.json").is_file())
    return found


def measure(run_path: Path) -> str:
    """Print what the checks find on one run and on its planted faults; return its markdown row."""
    run = RunDir(run_path)
    cfg = run.load_config()
    results = jsonio.loads((run_path / "results.json").read_text())
    name = results["defense"] + (f" ({', '.join(results['sample']['canaries'])})" if "sample" in results else "")
    y_test = run.load_data().y_test
    stats, outputs, accs, probs, planted = [], {}, {}, [], []
    for level in run.levels():
        ld = run.load_level(level)
        ls = load_level_signals(run, level, cfg.audit.models)
        served = ls.signals["logits"]
        scores = label_scores(served[:, :, 0], ld.canaries.y)
        m = ld.design.membership
        stats.append(membership_stats(level, scores, m))
        pop = ls.signals.get("population_logits")
        outputs[level] = LevelOutputs.of([served[i] if pop is None else
                                          np.concatenate([served[i].reshape(-1, served.shape[-1]),
                                                          pop[i].reshape(-1, pop.shape[-1])]) for i in range(len(served))])
        accs[level] = [meta["test_accuracy"] for meta in ls.metas]
        probs.append(any(probability_rows(served[i]) for i in range(len(served))))
        swapped = scores.copy()
        swapped[[3, 5]] = swapped[[5, 3]]
        shuffled = m.copy()
        shuffled[7] = np.random.default_rng(0).permutation(shuffled[7])
        planted.append((level, membership_stats(level, swapped, m), membership_stats(level, scores, shuffled)))
    check = membership_check(stats)
    t = check.record["threshold_z"]
    out = degenerate_outputs(outputs)
    ut = utility_check(accs, y_test)
    print(f"\n{name}: {run_path.name}")
    print(f"  membership: {'passed' if check.passed else 'FAILED'} (threshold z {t:.2f} over {check.record['tests']} "
          f"tests); outputs: {'passed' if out.passed else 'FAILED'}; utility: {'passed' if ut.passed else 'FAILED'} "
          f"(chance {100 * ut.record['chance']:.1f}%, lowest model {100 * min(min(a) for a in accs.values()):.1f}%); "
          f"probability rows: {'yes' if any(probs) else 'no'}")
    for level, rec in check.record["experiments"].items():
        print(f"  {level:28s} AUC median {rec['median_auc']:.3f} min {rec['min_auc']:.3f}; largest pair z "
              f"{rec['max_pair_z']:6.2f}, own z {rec['max_own_z']:5.2f}")
    for line in check.findings + out.findings + ut.findings:
        print(f"  finding: {line}")
    swaps, shuffles = [], []
    for level, sw, sh in planted:
        swap_named = bool(max(sw.pair_z[3, 5], sw.pair_z[5, 3]) > t)
        shuffle_named = bool(sh.own_z[7] > t or sh.pair_z[7].max() > t)
        print(f"  planted in {level:19s} swap 3<->5: z {sw.pair_z[3, 5]:5.1f}, {sw.pair_z[5, 3]:5.1f} "
              f"({'named' if swap_named else 'missed'}); shuffled 7: own z "
              f"{sh.own_z[7]:5.1f} ({'named' if shuffle_named else 'missed'})")
        swaps += [level] * swap_named
        shuffles += [level] * shuffle_named
    recs = check.record["experiments"]
    largest = max(max(r["max_pair_z"] if r["max_pair_z"] is not None else -np.inf, r["max_own_z"]) for r in recs.values())
    passed = "passed" if check.passed and out.passed and ut.passed else "**failed**"
    return (f"| {name} | {len(stats[0].own_z)} | {t:.2f} | "
            + ", ".join(f"{level} {r['median_auc']:.2f}" for level, r in recs.items())
            + f" | {largest:.2f} | {passed} | {', '.join(swaps) or 'none'} | {', '.join(shuffles) or 'none'} |")


def simulate(rng: np.random.Generator, shift: np.ndarray, s: int = 32, c: int = 200, experiments: int = 2,
             noise: np.ndarray | None = None) -> bool:
    """Whether the membership check fails on one simulated run whose masks are right (module docstring);
    ``noise``: each model's noise scale (default 1)."""
    stats = []
    for e in range(experiments):
        m = np.zeros((s, c), bool)
        for j in range(c):  # each sample a member of exactly half of the models, as the harness's design
            m[rng.permutation(s)[: s // 2], j] = True
        scale = np.ones(s) if noise is None else noise
        scores = rng.normal(size=(1, c)) * 3 + rng.normal(size=(s, c)) * scale[:, None] + shift[:, None] * m
        stats.append(membership_stats(f"e{e}", scores, m))
    return not membership_check(stats).passed


#: the attack phase's functions that are the checks (harness.core.checks and the attack phase's calls into it)
CHECK_FUNCTIONS = {("checks.py", "membership_stats"), ("checks.py", "of"), ("checks.py", "label_scores"),
                   ("attack_phase.py", "run_checks"), ("attack_phase.py", "trainer_statistics"),
                   ("attack_phase.py", "level_provenance")}


def cost(run_dir: Path) -> None:
    """The checks' share of one attack phase (``harness attack RUN_DIR``'s work, in process, under
    cProfile): each check function's cumulative CPU seconds and their sum over the phase's. Run it on
    ``benchmarks/bench_attack_phase.py --work DIR``'s 64 x 50 000 case for the population scale."""
    import cProfile
    import pstats
    import time

    from harness.audit.attack_phase import evaluate_run
    from harness.run.runstore import RunDir

    prof = cProfile.Profile()
    t0 = time.process_time()
    prof.enable()
    evaluate_run(RunDir(run_dir))
    prof.disable()
    total = time.process_time() - t0
    rows = {f"{f.split('/')[-1]}:{fn}": ct for (f, _, fn), (_, _, _, ct, _) in pstats.Stats(prof).stats.items()
            if (f.split("/")[-1], fn) in CHECK_FUNCTIONS}
    checks = sum(rows.values())
    print(f"attack phase of {run_dir}: {total:.1f} CPU-s under cProfile; the checks {checks:.2f} CPU-s "
          f"({100 * checks / total:.1f}% of it, {100 * checks / (total - checks):.1f}% added to the rest)")
    for k, v in sorted(rows.items(), key=lambda kv: -kv[1]):
        print(f"  {k}: {v:.2f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=Path, default=[REPO / "runs" / "bench"])
    ap.add_argument("--null", type=int, default=2000, help="simulated runs per false-alarm scenario (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--markdown", action="store_true", help="print a markdown table of the runs (docs/protocol.md)")
    ap.add_argument("--cost", type=Path, default=None, help="only measure the checks' share of RUN_DIR's attack phase")
    args = ap.parse_args(argv)
    if args.cost is not None:
        cost(args.cost)
        return 0
    rows = [measure(path) for path in run_dirs(args.runs)]
    if args.markdown and rows:
        print("\n| defense (canaries) | models | threshold z | median own-members AUC | largest z | checks "
              "| swap 3<->5 named in | shuffled 7 named in |\n|---|---|---|---|---|---|---|---|")
        print("\n".join(rows))
    if args.null:
        rng = np.random.default_rng(args.seed)
        spread = lambda: np.exp(rng.normal(0, 0.3, 32))  # noqa: E731  per-model noise scales (x0.55-1.8 for most)
        scenarios = {"(a) no member shift": (lambda: np.zeros(32), None),
                     "(b) shift 0.2 for every model": (lambda: np.full(32, 0.2), None),
                     "(c) shift U(0, 0.5) per model": (lambda: rng.uniform(0, 0.5, 32), None),
                     "(d) shift 3 for every model, noise scale exp(N(0, 0.3^2)) per model": (lambda: np.full(32, 3.0), spread),
                     "(e) shift 3 for every model, one model's noise x 4": (lambda: np.full(32, 3.0),
                                                                            lambda: np.r_[4.0, np.ones(31)])}
        print(f"\nfalse alarms on {args.null} simulated runs each (32 models, 200 audit samples, 2 experiments):")
        for label, (shift, noise) in scenarios.items():
            alarms = sum(simulate(rng, shift(), noise=None if noise is None else noise()) for _ in range(args.null))
            print(f"  {label}: {alarms} of {args.null} ({100 * alarms / args.null:.2f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
