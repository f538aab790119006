"""The checks of the saved outputs on honest runs: how often they raise a false alarm (issue 65).

    python benchmarks/bench_check_false_alarms.py RUN_DIR_OR_FOLDER... [--reattack]

Every run under the given folders (each folder holding ``results.json`` counts) is an honest built-in
run: models the harness trained with the plan's membership, one trainer per run. For each it reads the
checks results.json records (``checks``: membership with its provenance test, outputs, utility,
trainers) and prints one row: the membership check's largest provenance z against its threshold (the
plan's non-members fitted like members), its largest pair / own z, the trainers check's smallest p
against its alpha over its tests (Bonferroni), and any finding. ``--reattack`` re-runs the attack phase first (``harness attack``:
the checks of the code on the path, on the saved signals; no retraining). The last line counts the
runs with a finding: on honest runs every one is a false alarm.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def runs_under(paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for p in map(Path, paths):
        found += [p] if (p / "results.json").is_file() else sorted(
            f.parent for f in p.rglob("results.json") if "entries" not in f.parts)  # not a leaderboard site's copies
    return sorted(set(found))


def row(run: Path) -> tuple[str, bool]:
    r = json.loads((run / "results.json").read_text())
    c = r.get("checks") or {}
    mem = c.get("membership") or {}
    exps = list((mem.get("experiments") or {}).values())
    provs = [e["max_provenance_z"] for e in exps if isinstance(e.get("max_provenance_z"), float)]
    prov = max(provs) if provs else float("nan")  # nan: no experiment with random-label canaries
    own = max((max(e.get("max_pair_z", float("-inf")), e.get("max_own_z", float("-inf"))) for e in exps),
              default=float("nan"))
    tr = c.get("trainers") or {}
    ps = [t.get("p_value") for e in (tr.get("experiments") or {}).values() for t in e.values()
          if isinstance(t, dict) and isinstance(t.get("p_value"), float)]
    findings = [f"{k}: {v.get('findings')}" for k, v in c.items() if isinstance(v, dict) and v.get("findings")]
    if mem and not mem.get("passed", True):
        findings.append("membership: not passed")
    if tr and not tr.get("passed", True):
        findings.append("trainers: not passed")
    alarm = bool(findings) or not c.get("passed", True)
    line = (f"| {r['defense']} | {r.get('preset')} | {r['num_models']} | {prov:.2f} (threshold {mem.get('threshold_z', float('nan')):.2f}) "
            f"| {own:.2f} | {min(ps) if ps else float('nan'):.4f} (threshold {tr.get('alpha', float('nan')) / max(1, tr.get('tests', 1)):.4f}) | "
            f"{'; '.join(findings) or 'none'} | {run.name} |")
    return line, alarm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--reattack", action="store_true")
    args = ap.parse_args()
    runs = runs_under(args.paths)
    if not runs:
        ap.error("no results.json under the given paths")
    print("| defense | preset | S | provenance z (threshold) | largest pair / own z (same threshold) | trainers: smallest p "
          "(alpha / tests) | "
          "findings | run |\n|---|---|---|---|---|---|---|---|")
    alarms = 0
    for run in runs:
        if args.reattack:
            subprocess.run([sys.executable, "-m", "harness.cli", "attack", str(run)], check=True,
                           stdout=subprocess.DEVNULL)
        line, alarm = row(run)
        alarms += alarm
        print(line, flush=True)
    print(f"{len(runs)} honest runs, {alarms} with a finding (every one a false alarm)")


if __name__ == "__main__":
    main()
