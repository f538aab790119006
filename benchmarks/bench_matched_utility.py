"""The matched-utility comparison on real images (issue 64; Aerni et al.'s third principle, Figure 7):
every defense tuned to a utility target on the validation split, DP-SGD tuned to be most private at
the same targets, a DP-SGD frontier of full audits, and the table that compares each defense with
DP-SGD at its accuracy.

    python benchmarks/bench_matched_utility.py --data-dir ../shared/data/cifar10-subset --out runs/matched
        [--models 64] [--seeds 0,1] [--stages anchor,dpsgd,frontier,defenses,table] [--markdown]
    python benchmarks/bench_matched_utility.py ... --stages selena-paper,table --markdown   # SELENA K = 25, L = 10
    python benchmarks/bench_matched_utility.py ... --stages screenshot   # docs/leaderboard-{390,1280,1920}.png

Stages (each resumes: every command is a `harness tune` or `harness evaluate` that keeps what it trained):

1. ``anchor``: the undefended recipe of the preset (its best validation accuracy: harness/presets/
   cifar10-scatter.yaml says how it was tuned), audited at ``--models`` per level for each seed. Its
   sample-level validation accuracy (seed 0) is the anchor ``a`` every target is set from.
2. ``dpsgd``: ``harness tune dpsgd --min-accuracy a - gap`` for the paper's three DP-SGD levels (gaps to the
   paper's 94.52% undefended accuracy: medium 88.29% -> 6.2 points, high 91.13% -> 3.4, very high 91.89% ->
   2.6, as issue 64 sets them); every target re-reads the same grid's models (one tune.json a target).
3. ``frontier``: the settings of that grid whose validation accuracy lies between ``a - 10.5`` points and
   ``a``, at least 1 point apart, and a skipped one between any two more than 1.5 points apart
   (:func:`frontier_noises`), audited in full (``--models`` per level, every DP-SGD canary).
4. ``defenses``: HAMP, RelaxLoss, ALIBI and AGIBI tuned to ``a - 6.5`` points (the paper's "at least 88%"
   where undefended reads 94.52%) and audited; SELENA (no privacy knob) at the preset's setting; each
   for every seed (the tuned setting of seed 0).
5. ``table``: the matched-utility table (harness.audit.matched: the DP-SGD leak at each defense's test
   accuracy from the two frontier points around it, at most 2 points apart; the ratio's Bonferroni 95%
   interval; the verdict) and the real-image table (accuracy with its SE, member fit, train-test gap,
   the leak at 0.1% and 1% FPR, LiRA's own population read, epsilon). ``--markdown`` writes
   docs/results-matched.md and the README's matched-table block.
6. ``selena-paper`` (asked for by name: 24 minutes on 2 cores): SELENA at the paper's size, K = 25
   teachers and L = 10 per query, for the first seed; the table then has its row beside the preset's K = 5,
   L = 2.
7. ``screenshot`` (asked for by name; needs Chromium): the leaderboard of the first seed's runs and the
   frontier, built and screenshot by benchmarks/screenshot_leaderboard.py into docs/leaderboard-{width}.png
   (the site in OUT/site).

Every stage's wall time goes to OUT/matched.json (the issue's budget: the whole table under 90 minutes on
2 cores with the feature cache filled; each tune under 5 minutes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from harness_cli import run_cli

from harness.audit.matched import MAX_GAP, FrontierPoint, leak_ratio, read_frontier, sample_point

REPO = Path(__file__).resolve().parents[1]
PRESET = "cifar10-scatter"
#: the paper's undefended CIFAR-10 accuracy and its DP-SGD levels' (Table 1 / Table 3): the gaps below it
PAPER_UNDEFENDED = 0.9452
DPSGD_GAPS = {"medium": 0.062, "high": 0.034, "veryhigh": 0.026}
#: RelaxLoss's tuning target in the paper (at least 88% where undefended reads 94.52%), for every tuned heuristic
HEURISTIC_GAP = 0.065
TUNED = ("hamp", "relaxloss", "alibi", "agibi")
FIXED = ("selena",)
#: the ``selena-paper`` stage: SELENA at the paper's K = 25 teachers, L = 10 per query (the preset's: 5 and 2)
SELENA_PAPER = ("--set", "defense_params.num_teachers=25", "--set", "defense_params.num_query=10")
SELENA_PAPER_NAME = "selena K=25 L=10"
#: the frontier: settings from a - FRONTIER_SPAN to a (validation accuracy)
FRONTIER_SPAN = 0.105
#: frontier settings at least this far apart in validation accuracy (at most MAX_GAP apart where the grid allows)
MIN_STEP = 0.01
#: neighbours further apart than this (validation accuracy) get the skipped setting between them
MAX_FILL = 0.015
README_START, README_END = "<!-- matched-table:start -->", "<!-- matched-table:end -->"


def cli(*args: str) -> tuple[str, float]:
    print("$ harness " + " ".join(args), flush=True)
    return run_cli(*args)


def results_of(stdout: str) -> dict:
    """The results.json a `harness evaluate` printed (its last ``Results:`` line)."""
    path = re.findall(r"^Results: (.+results\.json)$", stdout, flags=re.M)[-1]
    return json.loads(Path(path).read_text()) | {"_path": path}


def base_args(args: argparse.Namespace) -> list[str]:
    return ["--preset", PRESET, "--data-dir", args.data_dir, "--models", str(args.models)]


def evaluate(args: argparse.Namespace, defense: str, out: Path, seed: int, *extra: str) -> dict:
    stdout, wall = cli("evaluate", defense, *base_args(args), "--out", str(out), "--seed", str(seed), *extra)
    r = results_of(stdout)
    r["_wall"] = wall
    return r


def tune(args: argparse.Namespace, defense: str, out: Path, target: float, name: str) -> dict:
    """`harness tune` to ``target``; its tune.json kept as tune-NAME.json (targets share the folder's models)."""
    _, wall = cli("tune", defense, *base_args(args), "--min-accuracy", f"{target:.4f}", "--out", str(out))
    shutil.copy(out / "tune.json", out / f"tune-{name}.json")
    data = json.loads((out / "tune.json").read_text())
    data["_wall"] = wall
    return data


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", required=True)
    p.add_argument("--out", default="runs/matched")
    p.add_argument("--models", type=int, default=64)
    p.add_argument("--seeds", default="0,1", help="audit draws of the anchor and the tuned defenses")
    p.add_argument("--stages", default="anchor,dpsgd,frontier,defenses,table")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    stages = args.stages.split(",")
    record_path = out / "matched.json"
    record = json.loads(record_path.read_text()) if record_path.is_file() else {"walls": {}}

    def save() -> None:
        record_path.write_text(json.dumps(record, indent=1))

    def timed(stage: str, fn) -> None:
        t0 = time.perf_counter()
        fn()
        record["walls"][stage] = time.perf_counter() - t0
        save()

    def anchor() -> None:
        for s in seeds:
            r = evaluate(args, "undefended", out / "undefended", s)
            record.setdefault("runs", {})[f"undefended/seed{s}"] = r["_path"]
            if s == seeds[0]:
                record["anchor_validation"] = r["sample"]["validation_accuracy"]["mean"]
        save()

    def a() -> float:
        if "anchor_validation" not in record:
            raise SystemExit("run the anchor stage first")
        return record["anchor_validation"]

    def dpsgd() -> None:
        record["dpsgd_tunes"] = {}
        for level, gap in DPSGD_GAPS.items():
            data = tune(args, "dpsgd", out / "dpsgd", a() - gap, level)
            record["dpsgd_tunes"][level] = {"target": a() - gap, "choice": data["choice"], "why": data["why"],
                                            "wall": data["_wall"]}
        save()

    def frontier() -> None:
        data = json.loads((out / "dpsgd" / "tune-medium.json").read_text())
        record["frontier"] = {}
        for sigma in frontier_noises(data, a()):
            r = evaluate(args, "dpsgd", out / "dpsgd", seeds[0], "--set", f"defense_params.noise_multiplier={sigma}")
            record["frontier"][str(sigma)] = r["_path"]
            save()

    def heuristics() -> None:
        record.setdefault("defenses", {})
        for d in TUNED:
            data = tune(args, d, out / d, a() - HEURISTIC_GAP, "target")
            record["defenses"][d] = {"target": a() - HEURISTIC_GAP, "choice": data["choice"], "why": data["why"],
                                     "tune_wall": data["_wall"], "runs": {}}
            save()
            if data["choice"] is None:
                continue
            for s in seeds:
                stdout, _ = cli("evaluate", "--from-tune", str(out / d / "tune-target.json"), "--seed", str(s))
                record["defenses"][d]["runs"][f"seed{s}"] = results_of(stdout)["_path"]
                save()
        for d in FIXED:
            record["defenses"][d] = {"runs": {}}
            for s in seeds:
                r = evaluate(args, d, out / d, s)
                record["defenses"][d]["runs"][f"seed{s}"] = r["_path"]
                save()

    def selena_paper() -> None:
        """SELENA at the paper's size (K = 25 teachers, L = 10 per query; issue 66), the first seed only."""
        record.setdefault("defenses", {})
        r = evaluate(args, "selena", out / "selena", seeds[0], *SELENA_PAPER)
        record["defenses"][SELENA_PAPER_NAME] = {"runs": {f"seed{seeds[0]}": r["_path"]}}
        save()

    for stage, fn in (("anchor", anchor), ("dpsgd", dpsgd), ("frontier", frontier), ("defenses", heuristics),
                      ("selena-paper", selena_paper)):
        if stage in stages:
            timed(stage, fn)
    if "table" in stages:
        write_tables(args, record, out)
    if "screenshot" in stages:
        first = f"seed{seeds[0]}"
        runs = [record["runs"][f"undefended/{first}"], *(rec["runs"][first] for rec in record["defenses"].values()
                                                           if first in rec["runs"]), *record["frontier"].values()]
        subprocess.run([sys.executable, str(Path(__file__).parent / "screenshot_leaderboard.py"),
                        *(str(Path(r).parent) for r in runs), "--out", str(out / "site"), "--png",
                        str(REPO / "docs" / "leaderboard-{width}.png")], check=True)


def frontier_noises(tune: dict, anchor: float) -> list[float]:
    """The grid's noise multipliers whose validation accuracy lies in [anchor - FRONTIER_SPAN, anchor],
    thinned from the most private: a setting joins when it reads at least MIN_STEP above the last one
    that joined (the least private one always joins: the frontier's top)."""
    pts = sorted(((s["validation_accuracy"]["mean"], s["params"]["defense_params.noise_multiplier"])
                  for s in tune["settings"] if anchor - FRONTIER_SPAN <= s["validation_accuracy"]["mean"] <= anchor),
                 key=lambda t: -t[1])  # most private first
    chosen: list[tuple[float, float]] = []
    for acc, sigma in pts:
        if not chosen or acc >= chosen[-1][0] + MIN_STEP or sigma == pts[-1][1]:
            chosen.append((acc, sigma))
    # where two chosen neighbours lie more than MAX_FILL apart, the skipped setting nearest their middle
    # joins (test accuracies scatter around the validation ones: a frontier read needs neighbours at most
    # MAX_GAP apart on the test set)
    filled = list(chosen)
    for (a0, s0), (a1, s1) in zip(chosen, chosen[1:]):
        between = [(acc, sigma) for acc, sigma in pts if s1 < sigma < s0]
        if a1 - a0 > MAX_FILL and between:
            filled.append(min(between, key=lambda t: abs(t[0] - (a0 + a1) / 2)))
    return [sigma for _, sigma in sorted(filled, key=lambda t: -t[1])]


def load(path: str) -> dict:
    return json.loads(Path(path).read_text())


def pct(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{100 * v:.{digits}f}%"


def leak_at(r: dict, fpr: str) -> float | None:
    """The plain maximum of the sample-level leak's candidates' reads at ``fpr`` (each candidate, a
    primary variant of one canary's experiment, read from ``sample_by_canary``)."""
    labels = set(((r["sample"].get("figure") or {}).get("leak") or {}).get("labels") or [])
    reads = [a["tpr_at_fpr"].get(fpr) for canary, lv in (r.get("sample_by_canary") or {}).items()
             for a in lv["attacks"] if f"sample-{canary}/{a['name']}:{a['variant']}" in labels]
    reads = [x for x in reads if x is not None]
    return max(reads) if reads else None


def lira_population(r: dict) -> float | None:
    """LiRA's primary variant at the population level at 0.1% FPR (the paper's Table 1 population column)."""
    for a in (r.get("population") or {}).get("attacks", []):
        if a["name"] == "lira" and a.get("primary"):
            return a["tpr_at_fpr"].get("0.001")
    return None


def row_facts(r: dict) -> dict:
    s, pop = r["sample"], r.get("population") or {}
    leak = s["figure"]["leak"]
    member = (pop.get("member_accuracy") or {}).get("mean")
    test = s["test_accuracy"]
    eps = (s.get("privacy") or {}).get("epsilon") or (s.get("label_privacy") or {}).get("epsilon")
    return {"acc": test["mean"], "acc_se": test.get("se"), "val": (s.get("validation_accuracy") or {}).get("mean"),
            "fit": (s.get("member_accuracy") or {}).get("mean"), "train": member,
            "gap": None if member is None else member - pop["test_accuracy"]["mean"],
            "leak": leak["tpr"], "lower": leak.get("lower"), "se": leak.get("se"), "leak1": leak_at(r, "0.01"),
            "pop_leak": ((pop.get("figure") or {}).get("leak") or {}).get("tpr"), "lira_pop": lira_population(r),
            "eps": eps}


def write_tables(args: argparse.Namespace, record: dict, out: Path) -> None:
    frontier = []
    for sigma, path in sorted(record.get("frontier", {}).items(), key=lambda kv: float(kv[0])):
        pt = sample_point(load(path), f"σ {sigma}")
        if pt is not None:
            frontier.append(pt)
    rows = []
    real = []
    for name, path in [(f"undefended (seed {k[-1]})", p) for k, p in record.get("runs", {}).items()] + \
            [(f"{d} (seed {k[-1]})", p) for d, rec in record.get("defenses", {}).items() for k, p in rec["runs"].items()] + \
            [(f"dpsgd σ {s}", p) for s, p in sorted(record.get("frontier", {}).items(), key=lambda kv: float(kv[0]))]:
        r = load(path)
        f = row_facts(r)
        real.append((name, f))
        if name.startswith("dpsgd"):
            continue
        reading = read_frontier(f["acc"], frontier)
        if reading.leak is None:
            rows.append(f"| {name} | {pct(f['acc'])} ± {100 * (f['acc_se'] or 0):.1f} | {pct(f['leak'])} | "
                        f"{reading.why} | | |")
            continue
        ratio = leak_ratio(f["leak"], f["se"], reading.leak, reading.se)
        between = " and ".join(p.label for p in reading.points)
        hi = "inf" if ratio.high == float("inf") else f"{ratio.high:.1f}"
        rows.append(f"| {name} | {pct(f['acc'])} ± {100 * (f['acc_se'] or 0):.1f} | {pct(f['leak'])} | "
                    f"{pct(reading.leak)} ({between}) | {ratio.value:.1f}x [{ratio.low:.1f}, {hi}] | {ratio.verdict} |")
    matched = ["| defense (audit seed) | test accuracy ± SE | leak (sample, 0.1% FPR) | DP-SGD's leak at that accuracy "
               "(frontier points) | ratio [95%] | verdict |", "|---|---|---|---|---|---|", *rows]
    facts = ["| run | test acc ± SE | validation acc | member canaries fitted | train-test gap (population) | leak 0.1% "
             "(≥ lower) | leak 1% | population leak | LiRA population | ε |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, f in real:
        eps = "-" if f["eps"] is None else f"{f['eps']:.3g}"
        gap = "-" if f["gap"] is None else f"{100 * f['gap']:.1f} points"
        facts.append(f"| {name} | {pct(f['acc'])} ± {100 * (f['acc_se'] or 0):.1f} | {pct(f['val'])} | {pct(f['fit'])} | "
                     f"{gap} | {pct(f['leak'])} (≥ {pct(f['lower'])}) | {pct(f['leak1'])} | {pct(f['pop_leak'])} | "
                     f"{pct(f['lira_pop'])} | {eps} |")
    print("\n".join(matched))
    print()
    print("\n".join(facts))
    if args.markdown:
        write_markdown(record, matched, facts, frontier)


def write_markdown(record: dict, matched: list[str], facts: list[str], frontier: list[FrontierPoint]) -> None:
    command = ("python benchmarks/bench_matched_utility.py --data-dir ../shared/data/cifar10-subset --out runs/matched "
               "--markdown")
    page = REPO / "docs" / "results-matched.md"
    tunes = record.get("dpsgd_tunes", {})
    runs = [*record.get("runs", {}).values(), *record.get("frontier", {}).values(),
            *(p for d, rec in record.get("defenses", {}).items() if d != SELENA_PAPER_NAME
              for p in rec.get("runs", {}).values())]

    def seconds(p: str) -> float:
        return sum(load(p)["timings"].get(k, 0.0) for k in ("prepare_seconds", "train_wall_seconds", "attack_seconds"))

    run_seconds = sum(seconds(p) for p in runs)
    paper_selena = record.get("defenses", {}).get(SELENA_PAPER_NAME, {}).get("runs", {})
    also = (f" The {SELENA_PAPER_NAME} row (SELENA at the paper's size): `--stages selena-paper,table --markdown`, "
            f"{sum(seconds(p) for p in paper_selena.values()) / 60:.0f} min, not in the budget." if paper_selena else "")
    tune_seconds = sum(t.get("wall", 0.0) for t in tunes.values()) + sum(
        rec.get("tune_wall", 0.0) for rec in record.get("defenses", {}).values())
    lines = [
        "# Matched utility on real images (cifar10-scatter)", "",
        f"Made by `{command}` on {dt.date.today().isoformat()} ({platform.machine()}, {os.cpu_count()} CPU cores). "
        f"Compute: {len(runs)} audits, {run_seconds / 60:.0f} min (each run's own recorded preparing, training and "
        f"attack time, 64 models per level), and the tunes, {tune_seconds / 60:.0f} min of wall time; "
        f"{(run_seconds + tune_seconds) / 60:.0f} min in all (the issue's budget: 90).{also}", "",
        f"Anchor (undefended at the preset's recipe, the best validation accuracy): {pct(record.get('anchor_validation'))} "
        "on the 500 validation images.", "",
        "## DP-SGD levels by utility", "",
        "| level | target (validation) | noise multiplier | ε | validation accuracy | confidence it meets the target |",
        "|---|---|---|---|---|---|",
    ]
    for level, t in tunes.items():
        c = t["choice"]
        if c is None:
            lines.append(f"| {level} | {pct(t['target'])} | - | - | {t['why']} | |")
            continue
        lines.append(f"| {level} | {pct(t['target'])} | {c['params']['defense_params.noise_multiplier']} | "
                     f"{c['defense_info'].get('epsilon', float('nan')):.3g} | {pct(c['validation_accuracy']['mean'])} ± "
                     f"{100 * c['validation_accuracy']['se']:.1f} | {c['confidence_meets_target']:.2f} |")
    lines += ["", "## The frontier", "", "| point | test accuracy | leak (sample, 0.1% FPR) ± SE |", "|---|---|---|"]
    lines += [f"| {p.label} | {pct(p.accuracy)} | {pct(p.leak)} ± {100 * p.se:.1f} |" for p in frontier]
    lines += ["", f"## Each defense against DP-SGD at its accuracy (neighbours at most {100 * MAX_GAP:g} points apart)", "",
              *matched, "", "## Every run", "", *facts, ""]
    page.write_text("\n".join(lines))
    readme = (REPO / "README.md").read_text()
    if README_START in readme and README_END in readme:
        k25 = " (the K=25 row: `--stages selena-paper,table`)" if paper_selena else ""
        block = f"{README_START}\n" + "\n".join(matched) + f"\n\n`{command}`{k25}; every run and the frontier in " \
                f"[docs/results-matched.md](docs/results-matched.md).\n{README_END}"
        readme = re.sub(re.escape(README_START) + ".*?" + re.escape(README_END), lambda _: block, readme, flags=re.S)
        (REPO / "README.md").write_text(readme)
    print(f"wrote {page}")


if __name__ == "__main__":
    main()
