"""Evaluate every built-in defense at one preset; print the results table, and with --markdown
write the preset's results page (docs/results.md for quick, docs/results-PRESET.md otherwise) and,
for cifar10-scatter, the README's results table, from the same runs.

    python benchmarks/bench_defenses.py [--preset quick] [--data-dir PATH] [--out runs/bench]
                                        [--defenses undefended,hamp,...] [--workers 2] [--no-comparisons]
                                        [--markdown]

The README's table: ``--preset cifar10-scatter --data-dir ../shared/data/cifar10-subset --out
runs/bench-scatter --no-comparisons --markdown`` (real CIFAR-10 images; the defenses the preset's
``not_applicable`` names get a one-line row saying why, and ``dpsgd-eps3`` is Tramer and Boneh's
epsilon = 3 setting beside the paper's three DP-SGD levels).

Runs ``harness evaluate DEFENSE`` (resuming finished runs) for each defense, plus the comparison
runs the notes need (SELENA with plain mislabeled canaries beside its duplicates, each DP-SGD level
with uniform-noise canaries beside the paper's three). The table: population-level vs
each level's leak (the plain maximum of a fixed set of primary attacks, the ranked figure) and
declared headline (the best of the defense's served declared attacks; ``!`` where the headline test
finds a candidate of the leak that beats it) at the level's figure FPR, the sample/population ratio
of the leaks with its CI, RMIA's primary variant,
test accuracy, the DP epsilon (or label-DP epsilon), the run's one-run empirical epsilon lower
bound, and each run's own time (the
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
#: the cifar10-scatter preset's rows: the three paper-style DP-SGD levels and ``dpsgd-eps3`` (Tramer and
#: Boneh's epsilon = 3 setting); the defenses it names under ``not_applicable`` get a one-line row
SCATTER_DEFENSES = ["undefended", "hamp", "relaxloss", "selena", "dpsgd-medium", "dpsgd-high", "dpsgd-veryhigh",
                    "dpsgd-eps3", "ssl-simclr", "ssl-moco", "dfkd", "alibi", "agibi", "pate-fm", "subsample"]
PRESET_DEFENSES = {"cifar10-scatter": SCATTER_DEFENSES}
#: the preset whose compact table the README shows (real images); the others' pages are docs/results-<preset>.md,
#: the quick preset's docs/results.md
README_PRESET = "cifar10-scatter"
README_START, README_END = "<!-- results-table:start -->", "<!-- results-table:end -->"
ROW_NAMES: dict[str, str] = {}
#: Aerni et al.'s Table 1 (CIFAR-10, WRN16-4 or ResNet-18, 64 models): population-level LiRA and sample-level
#: adaptive TPR at 0.1% FPR, test accuracy (../shared/reference/misleading_evals_table1.csv)
PAPER_TABLE1 = {
    "undefended": (0.134, 1.000, 0.9452), "hamp": (0.021, 0.285, 0.8829), "relaxloss": (0.022, 0.741, 0.8886),
    "selena": (0.068, 0.527, 0.9305), "ssl-simclr": (0.058, 0.406, 0.8818), "ssl-moco": (0.020, 0.650, 0.8844),
    "dfkd": (0.013, 0.722, 0.9239), "dpsgd-medium": (0.007, 0.027, 0.8829), "dpsgd-high": (0.022, 0.095, 0.9113),
    "dpsgd-veryhigh": (0.048, 0.632, 0.9189),
}


def run(defense: str, args: argparse.Namespace, *extra: str) -> tuple[dict, float]:
    out = Path(args.out) / (defense + ("-" + "-".join(e.strip("-") for e in extra) if extra else ""))
    data = ["--data-dir", args.data_dir] if args.data_dir else []
    models = ["--models", str(args.models_of[defense])] if defense in args.models_of else []
    run_dir, _ = evaluate_into(out, defense, "--preset", args.preset, "--workers", str(args.workers), *extra, *data,
                               *models)
    results = jsonio.loads((run_dir / "results.json").read_text())
    return results, run_seconds(results)


def run_seconds(results: dict) -> float:
    """The run's own time: preparing and training (summed over the invocations that trained it) and
    its latest attack phase, from results.json's ``timings``."""
    t = results["timings"]
    return t.get("prepare_seconds", 0.0) + t.get("train_wall_seconds", 0.0) + t.get("attack_seconds", 0.0)


def pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _fpr_note(level: dict) -> str:
    f = (level.get("figure") or {}).get("fpr")
    return "" if f is None or f == 0.001 else f" @{100 * f:g}%"


def figure_cell(rec: dict | None) -> str:
    """A figure record: its TPR with its two-sided CI (one variant) or one-sided lower bound (a best of several)."""
    if not rec:
        return "unresolved"
    if rec.get("ci"):
        lo, hi = rec["ci"]
        return f"{pct(rec['tpr'])} [{100 * lo:.1f}, {100 * hi:.1f}]"
    return pct(rec["tpr"]) + ("" if rec.get("lower") is None else f" (≥ {100 * rec['lower']:.1f})")


def leak(level: dict, with_attack: bool = False) -> str:
    """The level's leak (the ranked figure) at its figure FPR, and its attack."""
    fig = level.get("figure") or {}
    rec = fig.get("leak")
    att = f" ({rec['name']}:{rec['variant']})" if with_attack and rec else ""
    return figure_cell(rec) + _fpr_note(level) + att


def headline(level: dict) -> str:
    """The level's declared headline at its figure FPR (the author's claim), with '!' where the
    headline test finds a variant that beats it (the variant, both TPRs and the FPR of that comparison)."""
    fig = level.get("figure") or {}
    out = figure_cell(fig.get("declared")) + _fpr_note(level)
    flag = fig.get("flag") or {}
    if flag.get("flagged") and flag.get("top"):
        t = flag["top"]
        out += f" **!** ({t['name']} {pct(t['tpr'])} vs {pct(t['headline_tpr'])} at {100 * t['fpr']:g}%, p = {flag['p_value']:.3f})"
    return out


def ratio(results: dict) -> str:
    """Sample / population leak with its bootstrap CI; both TPRs and a lower bound where there is no point ratio."""
    r = results.get("sample_population_ratio") or {}
    if r.get("ratio") is not None and r.get("ci"):
        lo, hi = r["ci"]
        return f"{r['ratio']:.1f}x [{lo:.1f}, {hi:.1f}]"
    if r.get("lower") is not None:
        return f"≥ {r['lower']:.1f}x"
    return "-"


def primary(level: dict, attack: str) -> dict | None:
    return next((e for e in level["attacks"] if e["name"] == attack and e.get("primary")), None)


def primary_tpr(level: dict, attack: str, fpr: str | None = None) -> str:
    """An attack's primary variant's own TPR (plotting position; its own read, not the leak) at the
    level's figure FPR, or at ``fpr`` where given (one of the figure FPRs the run read)."""
    e = primary(level, attack)
    f = fpr if fpr is not None else repr(float((level.get("figure") or {}).get("fpr") or 0.001))
    v = None if e is None else (e.get("reading") or {}).get(f)
    if v is None and e is not None and fpr is not None:  # not a figure FPR of the run: the paper-style read
        v = (e.get("tpr_at_fpr") or {}).get(fpr)
    return "-" if v is None else pct(v)


def one_run_eps(level: dict) -> str:
    """The level's one-run epsilon lower bound (95%, pre-specified; "n.c." where not certifiable at the design)."""
    rec = level.get("one_run_epsilon") or {}
    if rec.get("certifiable") is False:
        return "n.c."
    return "-" if rec.get("epsilon") is None else f"{rec['epsilon']:.2f}"


def epsilon(r: dict) -> str:
    eps = (run_privacy(r) or {}).get("epsilon")
    label_eps = (run_label_privacy(r) or {}).get("label_epsilon")
    return f"{eps:.3g}" if eps is not None else f"label {label_eps:.3g}" if label_eps is not None else "-"


def notes_for(d: str, extra: tuple[str, ...], r: dict, args: argparse.Namespace) -> list[str]:
    """The comparison lines of one defense (running the extra evaluations they need)."""
    pop, smp, out = r["population"], r["sample"], []
    if d == "hamp":
        out.append(f"HAMP, sample level (primary variants): label-only {primary_tpr(smp, 'label-only')}, "
                   f"LiRA on the defended outputs {primary_tpr(smp, 'lira')}, LiRA on the raw outputs (ablation, not "
                   f"in the leak) {primary_tpr(smp, 'lira-raw')} (each variant's own TPR at the figure FPR).")
    if d == "selena" and not args.no_comparisons:
        m, wall_m = run(d, args, "--level", "sample", "--canary", "mislabeled")
        out.append(f"SELENA, sample level, leak: duplicates canaries {leak(smp)} against plain mislabeled "
                   f"canaries {leak(m['sample'])} (`--level sample --canary mislabeled`, {wall_m:.0f} s).")
    if d.startswith("ssl-"):
        for fpr in ("0.001", "0.01"):
            how = "each its own" if fpr == "0.001" else "each its own paper-style read, (floor(tN) + 1) / (N + 1)"
            out.append(f"{d}, TPR@{100 * float(fpr):g}% FPR (primary variants, {how}), population / sample by canary: "
                       + "; ".join(f"{name} ({primary(pop, name)['access']}) {primary_tpr(pop, name, fpr)} / "
                                   + ", ".join(f"{c} {primary_tpr(v, name, fpr)}" for c, v in r["sample_by_canary"].items())
                                   for name in ("contrastive", "contrastive-blackbox", "lira", "lira-sslview", "rmia")) + ".")
    if extra:
        out.append(f"{' '.join((d, *extra))}, sample level, leak by canary: "
                   + ", ".join(f"{c} {leak(v)}" for c, v in r["sample_by_canary"].items()) + ".")
    if d.startswith("dpsgd") and not args.no_comparisons:
        u, wall_u = run(d, args, "--level", "sample", "--canary", "uniform")
        out.append(f"{d}, sample level, leak by canary: "
                   + ", ".join(f"{c} {leak(v)}" for c, v in r["sample_by_canary"].items())
                   + f"; uniform noise (not the paper's canary) {leak(u['sample'])} (`--canary uniform`, "
                   f"{wall_u:.0f} s).")
    return out


PAPER_HEAD = ("\n| defense | paper: population / sample TPR | paper: test acc | here: population / sample leak | "
              "here: test acc | canaries leak more than the population here? (the ratio's 95% CI) |\n|---|---|---|---|---|---|")


def _tpr(level: dict) -> float | None:
    return ((level.get("figure") or {}).get("leak") or {}).get("tpr")


def _direction(paper_more: bool, results: dict) -> str:
    """Whether the sample level leaks more than the population here, told by the ratio's 95% interval.

    Yes where the interval (or the one-sided lower bound, where there is no point ratio) lies above 1, no where
    the interval lies below 1, not told apart otherwise; then beside it whether the paper's Table 1 agrees.
    """
    r = results.get("sample_population_ratio") or {}
    if r.get("ratio") is not None and r.get("ci"):
        lo, hi = r["ci"]
        here = "yes" if lo > 1 else "no" if hi < 1 else None
    elif r.get("lower") is not None:
        here = "yes" if r["lower"] > 1 else None
    else:
        return "unresolved"
    paper = "yes" if paper_more else "no"
    if here is None:
        return f"not told apart (the paper: {paper})"
    return f"{here}, as in the paper" if here == paper else f"{here} (the paper: {paper})"


FULL_HEAD = ("| defense | leak, sample (ranked) | declared headline, sample (canaries) | leak, population | "
             "declared headline, population | sample / population leak [95% CI] | RMIA pop. / sample | "
             "test acc (pop.) | test acc (sample) | epsilon | one-run ε ≥ (95%) | wall |\n" + "|---" * 12 + "|")
README_HEAD = ("| defense | leak, sample (ranked) | declared headline, sample | leak, population | sample / population | "
               "test acc | ε |\n|---|---|---|---|---|---|---|")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default="runs/bench")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--defenses", default=None, help="comma-separated (default: the preset's list)")
    ap.add_argument("--no-comparisons", action="store_true",
                    help="skip the comparison runs of the notes (SELENA with plain mislabeled canaries, each DP-SGD "
                         "level with uniform-noise canaries)")
    ap.add_argument("--models-of", action="append", default=[], metavar="DEFENSE=S",
                    help="train S models per level for this defense instead of the preset's (its row says so); "
                         "repeatable")
    ap.add_argument("--markdown", action="store_true",
                    help="write the preset's results page (docs/results.md for quick, docs/results-PRESET.md "
                         f"otherwise) and, for {README_PRESET}, the README's results table, from these runs")
    args = ap.parse_args()
    try:
        args.models_of = {k: int(v) for k, v in (item.split("=") for item in args.models_of)}
    except ValueError:
        ap.error("--models-of takes DEFENSE=S, S an even number of models")
    if args.defenses is None:
        args.defenses = ",".join(PRESET_DEFENSES.get(args.preset, DEFENSES))
    from harness.core.config import load_preset_mapping, not_applicable

    preset_raw = load_preset_mapping(args.preset)
    full, compact, notes, warnings, versions, paper = [], [], [], [], set(), []
    for d in args.defenses.split(","):
        why = not_applicable(preset_raw, d)
        if why is not None:
            full.append(f"| {d} | does not apply: {why} |" + " |" * 10)
            compact.append(f"| {d} | does not apply: {why} |" + " |" * 5)
            continue
        extra = SUBSAMPLE if d == "subsample" else ()
        r, wall = run(d, args, *extra)
        versions.add(r["harness_version"])
        pop, smp = r["population"], r["sample"]
        name = ROW_NAMES.get(d, " ".join((d, *extra))) + (f" ({args.models_of[d]} models)" if d in args.models_of else "")
        decl = (smp.get("figure") or {}).get("declared") or {}
        full.append(
            f"| {name} | {leak(smp, with_attack=True)} | {headline(smp)} "
            f"({', '.join(smp.get('canaries', [smp['canary']]))}; {decl.get('name', '-')}, "
            f"{decl.get('access', 'black-box')}) | {leak(pop, with_attack=True)} | {headline(pop)} | {ratio(r)} | "
            f"{primary_tpr(pop, 'rmia')} / {primary_tpr(smp, 'rmia')} | "
            f"{pct(pop['test_accuracy']['mean'])} | {pct(smp['test_accuracy']['mean'])} | "
            f"{epsilon(r)} | {one_run_eps(r)} | {wall:.0f} s |")
        compact.append(f"| {name} | {leak(smp)} | {headline(smp)} | {leak(pop)} | {ratio(r)} | "
                       f"{pct(smp['test_accuracy']['mean'])} | {epsilon(r)} |")
        notes += notes_for(d, extra, r, args)
        if args.preset != "quick" and d in PAPER_TABLE1:
            pp, ps, pa = PAPER_TABLE1[d]
            lp, ls = _tpr(pop), _tpr(smp)
            paper.append(f"| {name} | {pct(pp)} / {pct(ps)} | {pct(pa)} | {pct(lp)} / {pct(ls)} | "
                         f"{pct(smp['test_accuracy']['mean'])} | {_direction(ps > pp, r)} |")
        warnings += [f"{name}: {w}" for w in r.get("warnings", [])]
    print(f"preset: {args.preset}\n{FULL_HEAD}\n" + "\n".join(full))
    for n in notes:
        print(f"- {n}")
    if paper:
        print(PAPER_HEAD + "\n" + "\n".join(paper))
    if args.markdown:
        write_markdown(args, full, compact, notes, warnings, versions, paper)


def write_markdown(args: argparse.Namespace, full: list[str], compact: list[str], notes: list[str],
                   warnings: list[str], versions: set[str], paper: list[str] | None = None) -> None:
    import torch

    command = "python benchmarks/bench_defenses.py --markdown" + "".join(
        f" --{k.replace('_', '-')} {v}" for k, v in (("preset", args.preset), ("data_dir", args.data_dir),
                                                     ("defenses", args.defenses), ("workers", args.workers))
        if v is not None and v != {"preset": "quick", "defenses": ",".join(PRESET_DEFENSES.get(args.preset, DEFENSES)),
                                   "workers": 2}.get(k)) + (" --no-comparisons" if args.no_comparisons else "") + "".join(
        f" --models-of {d}={n}" for d, n in args.models_of.items())
    made = (f"Made by `{command}` on {dt.date.today().isoformat()}: harness {', '.join(sorted(versions))}, torch "
            f"{torch.__version__}, {os.cpu_count()} CPU cores ({platform.machine()}), {args.workers} workers, seed 0. "
            "Every number on this page comes from that command's runs; re-running it resumes them (or trains them "
            "afresh in a new --out) and rewrites the page.")
    body = [
        f"# Results: every defense at the {args.preset} preset", "",
        "<!-- generated by benchmarks/bench_defenses.py --markdown: edit that script, not this file -->", "", made, "",
        "Population level: the audit samples as they are; sample level: the defense's canaries (all of them). Every "
        "figure is read at its level's figure FPR: 0.1%, or (marked @) the smallest FPR with 3 expected false "
        "positives. The **leak** (what ranks) is the plain maximum of a fixed set of primary attacks (the configured "
        "built-ins, the harness's adaptations, the served declared attacks), with its one-sided 95% lower bound (≥); "
        "the **declared headline** is the same over the defense's served declared attacks, with its 95% CI, marked "
        "**!** where the headline test (Bonferroni over every comparison of both levels, family-wise error 5%) finds "
        "a candidate of the leak that beats it, with that comparison; victim bootstrap and jackknife, conditional on "
        "the audit samples "
        "(docs/protocol.md, Headlines). The ratio is the two levels' leaks, a point only where the population leak is "
        "told from 0 on at least 10 expected true positives (else a lower bound, ≥). RMIA: its primary variant's own "
        "TPR at the figure FPR. Epsilon: the accountant's (Opacus RDP, delta 1e-5) for DP-SGD models, the label "
        "epsilon for label-DP; one-run ε: the run's one-run empirical lower bound, 95%, pre-specified (the first "
        "configured attack's primary variant, or the harness's adaptation, on the first canary experiment; "
        "docs/bounds.md). Wall: each run's own recorded time (preparing, training and attacks; "
        "interpreter start-up excluded).", "",
        FULL_HEAD, *full, "", "## Notes", "", *[f"- {n}" for n in notes], "",
        *(["## Against the paper's Table 1", "",
           "The paper's CIFAR-10 figures (WRN16-4 or ResNet-18 trained end to end on 50 000 images, 64 models, "
           "TPR at 0.1% FPR: LiRA at the population level, its adaptive attack on its canaries) beside this "
           "preset's leaks; docs/defenses.md discusses each row.", PAPER_HEAD, *paper, ""] if paper else []),
        "## Declared headlines the headline test finds beaten", "",
        *([f"- {w}" for w in warnings] or ["- none"]), "",
    ]
    page = REPO / "docs" / ("results.md" if args.preset == "quick" else f"results-{args.preset}.md")
    page.write_text("\n".join(body))
    readme = (REPO / "README.md").read_text()
    wrote_readme = args.preset == README_PRESET and README_START in readme and README_END in readme
    if wrote_readme:  # the README leads with the matched table now (bench_matched_utility.py): no such block
        table = (f"{README_START}\n{README_HEAD}\n" + "\n".join(compact) + f"\n\nRows are in the order the command "
                 "runs the defenses; the leaderboard ranks them by the sample-level leak, which no choice of declared "
                 f"attacks can lower. `{command}`; every column and more in [docs/{page.name}](docs/{page.name}).\n{README_END}")
        readme = re.sub(re.escape(README_START) + ".*?" + re.escape(README_END), lambda _: table, readme, flags=re.S)
        (REPO / "README.md").write_text(readme)
    print(f"wrote {page}" + (" and the README's results table" if wrote_readme else ""))


if __name__ == "__main__":
    main()
