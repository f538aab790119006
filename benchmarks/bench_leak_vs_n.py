"""Leak against training-set size on real images (issue 66): is "tiny data" why the average sample leaks?

    python benchmarks/bench_leak_vs_n.py --data-dir ../shared/data/cifar10-subset --out runs/matched
        [--pools 1000,2500,4585] [--models 64] [--noise 0.85] [--model scatter-linear] [--markdown]
    python benchmarks/bench_leak_vs_n.py --data-dir ../shared/data/cifar10-subset --out runs/cnn-n
        --model scatter-cnn --lr 0.02 --models 16 --canary mislabeled --markdown

On ``cifar10-scatter`` the undefended head's population level leaks far more than the paper's (67.7%
at 0.1% FPR against 13.4%: docs/defenses.md). The only size curve available offline is one inside the
5 085-image subset: the training pool is made smaller by holding more of it out as validation images
(``data.validation_size`` = 5 085 - n: they are never trained on, never audited), and the audit sizes
shrink with it (``audit.size`` and ``audit.population_samples`` = n / 9.17, rounded: 500 at the
preset's n = 4 585, so each model's share of audit samples and canaries stays that of the preset).
For each n: the undefended recipe and one DP-SGD setting (the ``dpsgd`` recipe at ``--noise``; its
epsilon grows as n falls, the sampling rate being batch / n), 64 models per level, audit seed 0.
``--model scatter-cnn`` runs the CNN head's undefended models at ``--lr`` (its anchor's, benchmarks/bench_cnn_head.py's
tune: 0.02; DP-SGD keeps its recipe's lr 4), and ``--canary mislabeled`` audits that experiment alone (DP-SGD's default is all three).

The runs go to OUT/undefended and OUT/dpsgd: with ``--out`` the matched comparison's folder
(benchmarks/bench_matched_utility.py), n = 4 585 is its anchor and its noise-0.85 frontier run, at no
cost. Prints one row per run (population and sample-level leak at 0.1% FPR with the leak's lower
bound, test accuracy, epsilon, wall); ``--markdown`` writes docs/leak-vs-n.md with the table and an
SVG figure (docs/leak-vs-n.svg).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
from pathlib import Path

from harness_cli import run_cli

REPO = Path(__file__).resolve().parents[1]
PRESET = "cifar10-scatter"
#: images of the cifar10-subset's training split (the pool is this less the validation images)
SUBSET_TRAIN = 5085
#: the preset's pool over its audit size (4 585 / 500)
POOL_PER_AUDIT = 4585 / 500


def results_of(stdout: str) -> dict:
    path = re.findall(r"^Results: (.+results\.json)$", stdout, flags=re.M)[-1]
    return json.loads(Path(path).read_text()) | {"_path": path}


def evaluate(args: argparse.Namespace, defense: str, pool: int, *extra: str) -> dict:
    audit = round(pool / POOL_PER_AUDIT)
    cmd = ["evaluate", defense, "--preset", PRESET, "--data-dir", args.data_dir, "--models", str(args.models),
           "--out", str(Path(args.out) / defense), "--seed", "0",
           "--set", f"data.validation_size={SUBSET_TRAIN - pool}", "--set", f"audit.size={audit}",
           "--set", f"audit.population_samples={audit}", *extra]
    if args.model != "scatter-linear":
        cmd += ["--set", f"train.model={args.model}"]
    if args.lr is not None and defense != "dpsgd":  # DP-SGD's recipe has its own lr (train.lr would set it)
        cmd += ["--set", f"train.lr={args.lr:g}"]
    if args.canary:
        cmd += ["--canary", args.canary]
    print("$ harness " + " ".join(cmd), flush=True)
    stdout, wall = run_cli(*cmd)
    r = results_of(stdout)
    r["_wall"] = wall
    return r


def facts(r: dict) -> dict:
    def leak(level: str) -> tuple[float | None, float | None]:
        f = ((r.get(level) or {}).get("figure") or {}).get("leak") or {}
        return f.get("tpr"), f.get("lower")

    s = r["sample"]
    eps = (s.get("privacy") or {}).get("epsilon")
    return {"pop": leak("population"), "sample": leak("sample"), "acc": s["test_accuracy"]["mean"],
            "acc_se": s["test_accuracy"].get("se"), "eps": eps,
            "wall": sum((r.get("timings") or {}).get(k, 0) or 0 for k in ("prepare_seconds", "train_wall_seconds",
                                                                          "attack_seconds"))}


def pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def svg(rows: list[tuple[str, int, dict]]) -> str:
    """Population and sample-level leak (log scale) against the pool n, one line per defense and level."""
    w, h, left, right, top, bottom = 680, 340, 70, 400, 30, 290
    import math

    ns = sorted({n for _, n, _ in rows})
    lo_n, hi_n = min(ns), max(ns)

    def x(n: int) -> float:
        return left + (right - left) * (math.log(n) - math.log(lo_n)) / max(1e-9, math.log(hi_n) - math.log(lo_n))

    def y(t: float) -> float:
        t = min(1.0, max(1e-3, t))
        return bottom - (bottom - top) * (math.log10(t) + 3) / 3

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
             f'font-size="12"><rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{left}" y="18" font-size="13">Leak at 0.1% FPR against training pool size (cifar10-scatter)</text>']
    for t in (0.001, 0.01, 0.1, 1.0):
        parts.append(f'<line x1="{left}" x2="{right}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#ddd"/>'
                     f'<text x="{left - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{100 * t:g}%</text>')
    for n in ns:
        parts.append(f'<line x1="{x(n):.1f}" x2="{x(n):.1f}" y1="{top}" y2="{bottom}" stroke="#eee"/>'
                     f'<text x="{x(n):.1f}" y="{bottom + 16}" text-anchor="middle">{n:,}</text>')
    parts.append(f'<text x="{(left + right) / 2}" y="{bottom + 36}" text-anchor="middle">training pool n '
                 '(images; log scale)</text>')
    styles = {("undefended", "sample"): ("#c0392b", ""), ("undefended", "pop"): ("#c0392b", "5 3"),
              ("dpsgd", "sample"): ("#2c3e50", ""), ("dpsgd", "pop"): ("#2c3e50", "5 3")}
    legend_y = top + 10
    for (d, level), (colour, dash) in styles.items():
        pts = [(n, f[level][0]) for name, n, f in rows if name == d and f[level][0] is not None]
        if not pts:
            continue
        xy = " ".join(f"{x(n):.1f},{y(t):.1f}" for n, t in sorted(pts))
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}" points="{xy}"/>')
        parts += [f'<circle cx="{x(n):.1f}" cy="{y(t):.1f}" r="3" fill="{colour}"/>' for n, t in pts]
        label = f"{d}, {'canaries (sample level)' if level == 'sample' else 'population level'}"
        parts.append(f'<line x1="{right + 15}" x2="{right + 40}" y1="{legend_y}" y2="{legend_y}" stroke="{colour}" '
                     f'stroke-width="2" stroke-dasharray="{dash}"/><text x="{right + 45}" y="{legend_y + 4}" '
                     f'font-size="10">{label}</text>')
        legend_y += 18
    parts.append("</svg>")
    return "\n".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--out", default="runs/matched")
    ap.add_argument("--pools", default="1000,2500,4585")
    ap.add_argument("--models", type=int, default=64)
    ap.add_argument("--noise", type=float, default=0.85)
    ap.add_argument("--model", default="scatter-linear", choices=["scatter-linear", "scatter-cnn"])
    ap.add_argument("--lr", type=float, default=None,
                    help="train.lr of the undefended runs (default: the preset's, the linear head's)")
    ap.add_argument("--canary", default=None, help="one canary experiment (default: each defense's own)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.model != "scatter-linear" and args.lr is None:
        ap.error(f"--model {args.model} needs --lr: the preset's lr (0.0005) is the linear head's; the CNN head's "
                 "anchor is 0.02 (benchmarks/bench_cnn_head.py, tune stage)")
    pools = [int(p) for p in args.pools.split(",")]
    if any(not 100 <= p < SUBSET_TRAIN for p in pools):
        ap.error(f"--pools must lie in [100, {SUBSET_TRAIN - 1}] (the subset's training images less validation)")
    rows: list[tuple[str, int, dict]] = []
    for pool in pools:
        rows.append(("undefended", pool, facts(evaluate(args, "undefended", pool))))
        rows.append(("dpsgd", pool, facts(evaluate(args, "dpsgd", pool, "--set",
                                                   f"defense_params.noise_multiplier={args.noise}"))))
    head = ("| run | pool n | audit C | population leak (≥ lower) | sample leak (≥ lower) | test acc ± SE | ε | wall |\n"
            "|---|---|---|---|---|---|---|---|")
    lines = []
    rows.sort(key=lambda r: r[1])  # by pool, whatever order --pools ran them in
    for name, pool, f in rows:
        label = name if name == "undefended" else f"dpsgd σ {args.noise:g}"
        eps = "-" if f["eps"] is None else f"{f['eps']:.3g}"
        lines.append(f"| {label} | {pool:,} | {round(pool / POOL_PER_AUDIT)} | {pct(f['pop'][0])} (≥ {pct(f['pop'][1])}) "
                     f"| {pct(f['sample'][0])} (≥ {pct(f['sample'][1])}) | {pct(f['acc'])} ± "
                     f"{100 * (f['acc_se'] or 0):.1f} | {eps} | {f['wall']:.0f} s |")
    table = head + "\n" + "\n".join(lines)
    print(table)
    if args.markdown:
        import torch

        command = (f"python benchmarks/bench_leak_vs_n.py --data-dir {args.data_dir} --out {args.out} --pools "
                   f"{args.pools} --models {args.models} --noise {args.noise:g}"
                   + (f" --model {args.model}" if args.model != "scatter-linear" else "")
                   + (f" --lr {args.lr:g}" if args.lr is not None else "")
                   + (f" --canary {args.canary}" if args.canary else "") + " --markdown")
        name = "leak-vs-n" + ("" if args.model == "scatter-linear" else f"-{args.model}")
        (REPO / "docs" / f"{name}.svg").write_text(svg(rows))
        page = [f"# Leak against training-set size ({args.model} head)", "",
                "<!-- generated by benchmarks/bench_leak_vs_n.py --markdown: edit that script, not this file -->", "",
                f"Made by `{command}` on {dt.date.today().isoformat()}: torch {torch.__version__}, {os.cpu_count()} "
                f"CPU cores ({platform.machine()}). The pool is the subset's 5 085 training images less the validation "
                "images held out (`data.validation_size`); the audit sizes shrink with it (n / 9.17); "
                f"{args.models} models per level, audit seed 0"
                + (f", sample level: {args.canary} canaries" if args.canary else "") + "; leaks at 0.1% FPR (the ranked figure, with its one-sided 95% lower bound).", "",
                f"![leak against n]({name}.svg)", "", table, ""]
        (REPO / "docs" / f"{name}.md").write_text("\n".join(page))
        print(f"wrote docs/{name}.md and docs/{name}.svg")


if __name__ == "__main__":
    main()
