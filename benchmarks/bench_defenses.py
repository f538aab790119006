"""Evaluate every built-in defense at one preset; print the results table, and with --markdown
write docs/results.md and the README's results table from the same runs.

    python benchmarks/bench_defenses.py [--preset quick] [--data-dir PATH] [--out runs/bench]
                                        [--defenses undefended,hamp,...] [--workers 2] [--markdown]

Runs ``harness evaluate DEFENSE`` (resuming finished runs) for each defense, plus the comparison
runs the notes need (SELENA with plain mislabeled canaries beside its duplicates, each DP-SGD level
with uniform-noise canaries beside the paper's three). The table: population-level vs
sample-level TPR@0.1% FPR of the headline attacks (the best primary variant of the defense's
adaptive attacks; cross-fitted over victim models where that is a best of several), beside each the
strongest figure (every attack variant that ran, cross-fitted; ``!`` where the headline test finds a
variant that beats the headline), the sample/population ratio with its
bootstrap CI, RMIA's primary variant, test accuracy, the DP epsilon (or label-DP epsilon), the
one-run empirical epsilon lower bound of the sample-level headline, and each run's own time (the
prepare, training and attack phases its results.json records over the invocations that trained
it; interpreter start-up excluded). The notes follow: HAMP's attacks, SELENA's canaries, DP-SGD's
per-canary figures, the SSL defenses' white-box vs black-box attacks at 0.1% and 1% FPR, the
subsample wrapper's per-canary figures.

``--markdown`` writes every number of docs/results.md from these runs (the file says which
command made it, when, and on what) and replaces the table between the README's
``results-table`` markers with the compact one.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
from pathlib import Path

from harness_cli import evaluate_into

from harness.audit.attack_phase import run_label_privacy, run_privacy
from harness.core import jsonio

REPO = Path(__file__).resolve().parents[1]
# ``subsample`` wraps DP-SGD (medium) and trains each model on a random half of the data
SUBSAMPLE = ("--inner", "dpsgd-medium", "--rate", "0.5")
DEFENSES = ["undefended", "hamp", "relaxloss", "selena", "dpsgd-medium", "dpsgd-high", "dpsgd-veryhigh", "ssl-simclr",
            "ssl-moco", "dfkd", "alibi", "agibi", "pate-fm", "subsample"]
README_START, README_END = "<!-- results-table:start -->", "<!-- results-table:end -->"


def run(defense: str, args: argparse.Namespace, *extra: str) -> tuple[dict, float]:
    out = Path(args.out) / (defense + ("-" + "-".join(e.strip("-") for e in extra) if extra else ""))
    data = ["--data-dir", args.data_dir] if args.data_dir else []
    run_dir, _ = evaluate_into(out, defense, "--preset", args.preset, "--workers", str(args.workers), *extra, *data)
    results = jsonio.loads((run_dir / "results.json").read_text())
    return results, run_seconds(results)


def run_seconds(results: dict) -> float:
    """The run's own time: preparing and training (summed over the invocations that trained it) and
    its latest attack phase, from results.json's ``timings``."""
    t = results["timings"]
    return t.get("prepare_seconds", 0.0) + t.get("train_wall_seconds", 0.0) + t.get("attack_seconds", 0.0)


def pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def headline(level: dict, which: str = "best") -> str:
    """TPR@0.1% of the headline (or of the strongest figure) with its CI, or 'unresolved'."""
    b = level[which]
    if not b["resolved"]["0.001"]:
        return "unresolved"
    lo, hi = b["tpr_ci"]["0.001"]
    return f"{pct(b['tpr_at_fpr']['0.001'])} [{100 * lo:.1f}, {100 * hi:.1f}]"


def strongest(results: dict, level_name: str, with_attack: bool = True) -> str:
    """The strongest figure (every attack variant that ran, cross-fitted), its attack, and '!' where
    the headline test finds a variant that beats the headline, with the FPR where it found the gap
    when that is not the headline FPR."""
    level = results[level_name]
    st = level["strongest"]
    flag = ""
    if st["beats_headline"]:
        top = (results.get("headline_test") or {}).get("levels", {}).get(level_name, {}).get("top") or {}
        at = top.get("fpr")
        flag = " **!**" + (f" (at {100 * at:g}% FPR)" if at is not None and at != results["headline_fpr"] else "")
    return headline(level, "strongest") + (f" ({st['name']}:{st['variant']})" if with_attack else "") + flag


def ratio(results: dict) -> str:
    """Sample / population headline ratio with its bootstrap CI, '-' without one."""
    r = results.get("sample_population_ratio") or {}
    if r.get("ratio") is None or not r.get("ci"):
        return "-"
    lo, hi = r["ci"]
    return f"{r['ratio']:.1f}x [{lo:.1f}, {'∞' if hi == float('inf') else f'{hi:.1f}'}]"


def primary(level: dict, attack: str) -> dict | None:
    return next((e for e in level["attacks"] if e["name"] == attack and e.get("primary")), None)


def primary_tpr(level: dict, attack: str, fpr: str = "0.001") -> str:
    e = primary(level, attack)
    return "-" if e is None else pct(e["tpr_at_fpr"][fpr])


def one_run_eps(level: dict) -> str:
    b = level["best"]
    e = next(a for a in level["attacks"] if a["name"] == b["name"] and a["variant"] == b["variant"])
    return f"{e['eps_lower_one_run']['epsilon']:.2f}"


def epsilon(r: dict) -> str:
    eps = (run_privacy(r) or {}).get("epsilon")
    label_eps = (run_label_privacy(r) or {}).get("label_epsilon")
    return f"{eps:.3g}" if eps is not None else f"label {label_eps:.3g}" if label_eps is not None else "-"


def notes_for(d: str, extra: tuple[str, ...], r: dict, args: argparse.Namespace) -> list[str]:
    """The comparison lines of one defense (running the extra evaluations they need)."""
    pop, smp, out = r["population"], r["sample"], []
    if d == "hamp":
        out.append(f"HAMP, sample level, TPR@0.1% (primary variants): label-only {primary_tpr(smp, 'label-only')}, "
                   f"LiRA on the defended outputs {primary_tpr(smp, 'lira')}, LiRA on the raw outputs (ablation, not "
                   f"in the strongest figure) {primary_tpr(smp, 'lira-raw')}.")
    if d == "selena":
        m, wall_m = run(d, args, "--level", "sample", "--canary", "mislabeled")
        out.append(f"SELENA, sample level, TPR@0.1%: duplicates canaries {headline(smp)} against plain mislabeled "
                   f"canaries {headline(m['sample'])} (`--level sample --canary mislabeled`, {wall_m:.0f} s).")
    if d.startswith("ssl-"):
        for fpr in ("0.001", "0.01"):
            out.append(f"{d}, TPR@{100 * float(fpr):g}% FPR (primary variants), population / sample by canary: "
                       + "; ".join(f"{name} ({primary(pop, name)['access']}) {primary_tpr(pop, name, fpr)} / "
                                   + ", ".join(f"{c} {primary_tpr(v, name, fpr)}" for c, v in r["sample_by_canary"].items())
                                   for name in ("contrastive", "contrastive-blackbox", "lira", "lira-sslview", "rmia")) + ".")
    if extra:
        out.append(f"{' '.join((d, *extra))}, sample level, TPR@0.1% by canary: "
                   + ", ".join(f"{c} {headline(v)}" for c, v in r["sample_by_canary"].items()) + ".")
    if d.startswith("dpsgd"):
        u, wall_u = run(d, args, "--level", "sample", "--canary", "uniform")
        out.append(f"{d}, sample level, TPR@0.1% by canary: "
                   + ", ".join(f"{c} {headline(v)}" for c, v in r["sample_by_canary"].items())
                   + f"; uniform noise (not the paper's canary) {headline(u['sample'])} (`--canary uniform`, "
                   f"{wall_u:.0f} s).")
    return out


FULL_HEAD = ("| defense | population TPR@0.1% [95% CI] | strongest, population | sample TPR@0.1% [95% CI] "
             "(canaries; headline from) | strongest, sample | sample / population [95% CI] | RMIA pop. / sample | "
             "test acc (pop.) | test acc (sample) | epsilon | one-run ε ≥ (sample) | wall |\n" + "|---" * 12 + "|")
README_HEAD = ("| defense | population TPR@0.1% | sample TPR@0.1% | strongest, sample | sample / population | "
               "test acc | ε |\n|---|---|---|---|---|---|---|")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default="runs/bench")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--defenses", default=",".join(DEFENSES))
    ap.add_argument("--markdown", action="store_true",
                    help="write docs/results.md and the README's results table from these runs")
    args = ap.parse_args()
    full, compact, notes, warnings, versions = [], [], [], [], set()
    for d in args.defenses.split(","):
        extra = SUBSAMPLE if d == "subsample" else ()
        r, wall = run(d, args, *extra)
        versions.add(r["harness_version"])
        pop, smp = r["population"], r["sample"]
        name = " ".join((d, *extra))
        full.append(
            f"| {name} | {headline(pop)} | {strongest(r, 'population')} | {headline(smp)} "
            f"({', '.join(smp.get('canaries', [smp['canary']]))}; headline from: {smp['canary']}, "
            f"{smp['best']['name']}, {smp['best'].get('access', 'black-box')}) | {strongest(r, 'sample')} | {ratio(r)} | "
            f"{primary_tpr(pop, 'rmia')} / {primary_tpr(smp, 'rmia')} | "
            f"{pct(pop['test_accuracy']['mean'])} | {pct(smp['test_accuracy']['mean'])} | "
            f"{epsilon(r)} | {one_run_eps(smp)} | {wall:.0f} s |")
        compact.append(f"| {name} | {headline(pop)} | {headline(smp)} | {strongest(r, 'sample', with_attack=False)} | {ratio(r)} | "
                       f"{pct(smp['test_accuracy']['mean'])} | {epsilon(r)} |")
        notes += notes_for(d, extra, r, args)
        warnings += [f"{name}: {w}" for w in r.get("warnings", [])]
    print(f"preset: {args.preset}\n{FULL_HEAD}\n" + "\n".join(full))
    for n in notes:
        print(f"- {n}")
    if args.markdown:
        write_markdown(args, full, compact, notes, warnings, versions)


def write_markdown(args: argparse.Namespace, full: list[str], compact: list[str], notes: list[str],
                   warnings: list[str], versions: set[str]) -> None:
    import torch

    command = "python benchmarks/bench_defenses.py --markdown" + "".join(
        f" --{k.replace('_', '-')} {v}" for k, v in (("preset", args.preset), ("data_dir", args.data_dir),
                                                     ("defenses", args.defenses), ("workers", args.workers))
        if v is not None and v != {"preset": "quick", "defenses": ",".join(DEFENSES), "workers": 2}.get(k))
    made = (f"Made by `{command}` on {dt.date.today().isoformat()}: harness {', '.join(sorted(versions))}, torch "
            f"{torch.__version__}, {os.cpu_count()} CPU cores ({platform.machine()}), {args.workers} workers, seed 0. "
            "Every number on this page comes from that command's runs; re-running it resumes them (or trains them "
            "afresh in a new --out) and rewrites the page.")
    body = [
        f"# Results: every defense at the {args.preset} preset", "",
        "<!-- generated by benchmarks/bench_defenses.py --markdown: edit that script, not this file -->", "", made, "",
        "Population level: the audit samples as they are; sample level: the defense's canaries (the strongest of "
        "them for the headline). The headline of a level is the best *primary* variant of the defense's adaptive "
        "attacks at 0.1% FPR, with a 95% CI from a bootstrap over victim models; where it is the best of several "
        "(canary experiments, attacks) it is cross-fitted: chosen on one half of the victim models, measured on the "
        "other. The strongest figure is the same cross-fitted best of every attack variant that ran, marked **!** "
        "where the headline test (Hansen's SPA, family-wise error 5% over every variant, FPR and level) finds a "
        "variant that beats the headline (docs/protocol.md, Headlines). Epsilon: the "
        "accountant's (Opacus RDP, delta 1e-5) for DP-SGD models, the label epsilon for label-DP; one-run ε: the "
        "valid empirical lower bound of the sample-level headline (docs/bounds.md). Wall: each run's own recorded "
        "time (preparing, training and attacks; interpreter start-up excluded).", "",
        FULL_HEAD, *full, "", "## Notes", "", *[f"- {n}" for n in notes], "",
        "## Headlines the headline test finds beaten", "",
        *([f"- {w}" for w in warnings] or ["- none"]), "",
    ]
    (REPO / "docs" / "results.md").write_text("\n".join(body))
    readme = (REPO / "README.md").read_text()
    if README_START in readme and README_END in readme:
        table = (f"{README_START}\n{README_HEAD}\n" + "\n".join(compact) + f"\n\n`{command}`; every column and "
                 f"more in [docs/results.md](docs/results.md).\n{README_END}")
        readme = re.sub(re.escape(README_START) + ".*?" + re.escape(README_END), lambda _: table, readme, flags=re.S)
        (REPO / "README.md").write_text(readme)
    print(f"wrote {REPO / 'docs' / 'results.md'} and the README's results table")


if __name__ == "__main__":
    main()
