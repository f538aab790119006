"""The level figures where the truth is known, into one JSON: the headline test's size and power,
the leak's bias and coverage, the declared CI's coverage, the ratio's coverage unconditionally, and
real runs through `harness evaluate`.

    python benchmarks/bench_headline_test.py [--parts size,power,coverage,ratio,runs] [--sims 400]
        [--cover-sims 200] [--json benchmarks/results/headline_test.json]
    python benchmarks/bench_headline_test.py --docs   # docs/protocol.md's tables from the JSON, nothing run

Every number docs/protocol.md (Headlines) and the code's docstrings quote about the figures comes
from that JSON; ``--docs`` rewrites the tables between the ``<!-- headline-json:NAME -->`` markers.

1. **size** (harness.audit.calibration: leave-one-out LiRA with heterogeneous victims): how often the
   headline test fires under its null (no candidate's expected read above the declared headline's),
   at S = 8, 16, 32, 64 x C = 20, 50, 200, for five nulls: two exchangeable variants; the same with
   tied scores; victims that differ for one variant only (per-victim noise scale SD 0.8 and offset
   SD 0.3), its noise tuned until the two expected reads are equal; the same, strongly (scale SD 1.5,
   offset SD 0.8), once for a leak candidate and once for the declared variant. Beside the rule,
   on the same simulations, the rule it replaced (:func:`previous_rule_p`).
2. **power**: the declared variant's noise tuned so that the other's expected read is 1.5x or 3x
   its own, at S = 16, 32, 64 (C = 100), with plain victims and with the declared variant's victims
   differing strongly (a weak declaration whose read a few victims swing), with the gap achieved
   and two oracles of what any test of the printed difference could reach (:func:`envelope`), and
   the replaced rule beside.
3. **coverage**: the leak (the plain maximum of K candidates) against the largest expected read (the
   estimand): its bias, which is the maximum's selection bias, with its Monte Carlo SE, and the
   coverage of its one-sided lower bound and its CI; beside it, how far the expected read lies from
   the many-victim ROC (the S-victim read's own finite-S gap); the declared CI (one variant);
   on pools of one dominant variant with near-copies, all equal, one dominant with weak ones, and
   victims that differ with heavy-tailed (t3) noise, at S from 8 and C from 20; low TPRs (13-40 true
   positives, population-like memorization); and the bias of the plain maximum over 20 equal
   declared variants (what a declaration can add).
   **resolution**: the same selection bias were figures to need 5 or 10 expected false positives
   instead of 3 (a measured alternative, not the rule). **variant_ci**: each variant's own interval
   (its paper-style read at a reported FPR with the figures' one-variant rule) against its expected
   read, on one variant, with tied scores, and on the heterogeneous-victims t3 world.
4. **ratio**: the sample/population ratio, unconditionally: how often a point ratio is printed,
   its CI's coverage and mean, and the fallback lower bound's where it is not.
5. **verification**: the leaderboard's re-run check (harness.core.figure.runs_agree) on pairs of
   independent runs with other audit samples: how often an honest entry is refused (and by the rule
   it replaced), and how often the lowest leak of 10 seeds is accepted.
6. **runs** (`harness evaluate`, the quick preset, plugins in benchmarks/headline_plugins.py):
   undefended training declaring LiRA, the threshold attack only, and LiRA plus the threshold at 16
   models: the leak must not move with the declaration.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import norm

from harness.audit.calibration import (ToyWorld, Variants, coverage, flag_rate, ratio_coverage, read_draws,
                                       rerun_verification, tune_noise, variant_coverage)
from harness.audit.headline import level_fpr
from harness.defense_config import build_config

HERE = Path(__file__).resolve().parent
PLUGINS = HERE / "headline_plugins.py"
JSON = HERE / "results" / "headline_test.json"
PROTOCOL = HERE.parent / "docs" / "protocol.md"

SIZE_CELLS = [(s, c) for s in (8, 16, 32, 64) for c in (20, 50, 200)]
#: victims that differ for one variant only (the heterogeneous null)
HET = dict(victim_scale=(0.0, 0.8), victim_offset=(0.0, 0.3))
#: the same, strongly: for the leak's candidate (variant 1) or for the declared variant (variant 0)
STRONG = dict(victim_scale=(0.0, 1.5), victim_offset=(0.0, 0.8))
STRONG_DECLARED = dict(victim_scale=(1.5, 0.0), victim_offset=(0.8, 0.0))
#: the nulls of the size part, in the tables' order
NULLS = ("exchangeable", "ties", "heterogeneous", "strongly heterogeneous (leak)", "strongly heterogeneous (declared)")
#: the pools of the coverage part: name -> (variants, world keywords)
POOLS: dict[str, tuple[Variants, dict[str, Any]]] = {
    "dominant + near-copies": (Variants((0.3, 0.45, 0.5, 0.6)), {}),
    "all equal (K = 3)": (Variants((1.0, 1.0, 1.0)), {}),
    "dominant + weak": (Variants((0.3, 3.0, 4.0)), {}),
    "victims differ, t3 noise": (Variants((0.5, 0.7, 0.7), victim_scale=(0.0, 0.6, 0.3), victim_offset=(0.0, 0.3, 0.0),
                                          df=3.0), {"u_sd": 0.6, "scale_sd": 0.4, "mem_sd_victim": 0.5, "df": 3.0}),
}
COVER_CELLS = [(8, 20), (8, 200), (16, 50), (32, 200), (64, 50), (64, 200)]
#: low TPRs (population-like memorization): 13-40 expected true positives at the figure FPR
LOW_TPR = (Variants((1.0, 1.0)), {"mem_mean": 0.5, "mem_sd": 0.5})
LOW_CELLS = [(32, 200), (64, 200), (64, 100)]


def _cfg(**extra: Any) -> Any:
    return build_config("quick", {"attack.bootstrap": 200, "attack.fprs": [0.001, 0.01], **extra})


def _mc(p: float, n: int) -> float:
    """Binomial Monte Carlo standard error of a rate p over n runs."""
    return float(np.sqrt(max(p * (1 - p), 1e-12) / n))


def previous_rule_p(fam: Any, cfg: Any) -> float:
    """The rule the headline test replaced (issue 65): d over the larger of the paired bootstrap's and
    the delete-one-victim jackknife's SD of the difference, one-sided p from Hesterberg's expanded
    t_{S-1}, Bonferroni over the comparisons; measured beside the rule, never used by the harness."""
    from scipy.stats import t as student_t

    from harness.core.figure import read_sd

    ps = []
    decl = fam.declared
    s = decl[0].num_models
    for c in fam.ranked:
        if c.label in {h.label for h in decl}:
            continue
        d = c.reading[fam.fpr] - max(h.reading[fam.fpr] for h in decl)
        reps = c.samples[fam.fpr] - np.nanmax(np.stack([h.samples[fam.fpr] for h in decl]), axis=0)
        jack = c.jack(fam.fpr) - np.max(np.stack([h.jack(fam.fpr) for h in decl]), axis=0)
        sd = read_sd(reps, jack)
        if sd > 0:
            ps.append(float(student_t.sf(d / sd / np.sqrt(s / (s - 1)), s - 1)))
    return min(1.0, len(ps) * min(ps)) if ps else 1.0


PREVIOUS = {"previous rule": previous_rule_p}


def _null(name: str, world: ToyWorld, s: int, fpr: float) -> Variants:
    """The size part's null ``name`` (:data:`NULLS`) at S = ``s``: the heterogeneous ones tuned to
    equal expected reads."""
    if name == "exchangeable":
        return Variants((1.0, 1.0))
    if name == "ties":
        return Variants((1.0, 1.0), ties=True)
    het, j = {"heterogeneous": (HET, 1), "strongly heterogeneous (leak)": (STRONG, 1),
              "strongly heterogeneous (declared)": (STRONG_DECLARED, 0)}[name]
    return tune_noise(world, s, Variants((1.0, 1.0), **het), j, fpr, runs=150, steps=10)


def size(sims: int) -> list[dict[str, Any]]:
    cfg, rows = _cfg(), []
    for s, c in SIZE_CELLS:
        seed = s * 1000 + c
        world = ToyWorld.draw(c, seed)
        fpr = level_fpr(cfg, s * c // 2)
        for null in NULLS:
            v = _null(null, world, s, fpr)
            r = flag_rate(cfg, sims, models=s, samples=c, variants=v, seed=seed, world=world, also=PREVIOUS)
            rows.append({"S": s, "C": c, "null": null, "fpr": fpr, "rate": r.rate, "mc_se": _mc(0.05, sims),
                         "previous_rule": r.also["previous rule"], "simulations": sims, "untestable": r.untestable,
                         "noise": list(v.noise)})
            print(f"size S={s} C={c} {null}: {100 * r.rate:.1f}% of {sims} (previous rule "
                  f"{100 * r.also['previous rule']:.1f}%)", flush=True)
    return rows


#: runs of the design behind each power cell's expected reads and oracles (read_draws: no bootstrap)
ENVELOPE_RUNS = 1000


def envelope(world: ToyWorld, s: int, v: Variants, fpr: float, runs: int = ENVELOPE_RUNS) -> dict[str, Any]:
    """What any test of the printed difference d (the other variant's read minus the declared one's)
    could reach in a power cell: the two expected reads (the gap achieved), d's mean and SD over
    ``runs`` runs of the alternative, and two oracles at 5%: d over its own true SD above 1.645 (a
    test that divides d by its standard error, told that error exactly), and d above the 95% point of
    d under the exchangeable null at the declared variant's noise (both variants that noise: a test
    told the null distribution of d for that one null, valid for no other)."""
    alt = read_draws(world, s, v, fpr, runs=runs, seed=1)
    tau = v.noise[0]
    null = read_draws(world, s, Variants((tau, tau)), fpr, runs=runs, seed=2)
    d, d0 = alt[:, 1] - alt[:, 0], null[:, 1] - null[:, 0]
    sd = float(d.std(ddof=1))
    return {"reads": [float(x) for x in alt.mean(0)], "d_mean": float(d.mean()), "d_sd": sd,
            "d_sd_null": float(d0.std(ddof=1)), "oracle_z": float(np.mean(d > norm.isf(0.05) * sd)),
            "oracle_null": float(np.mean(d > np.quantile(d0, 0.95))), "envelope_runs": runs}


#: the power part's declarations: plain victims, and a declared variant whose victims differ strongly
POWER_KINDS = {"plain": {}, "declared victims differ": dict(victim_scale=(1.5, 0.0), victim_offset=(0.8, 0.0))}


def power(sims: int) -> list[dict[str, Any]]:
    cfg, rows = _cfg(), []
    for kind, het in POWER_KINDS.items():
        for s in (16, 32, 64):
            c = 100
            world = ToyWorld.draw(c, s * 1000 + c)
            fpr = level_fpr(cfg, s * c // 2)
            for gap in (1.5, 3.0):
                v = tune_noise(world, s, Variants((1.0, 0.0), **het), 0, fpr, runs=150, steps=10, ratio=gap)
                r = flag_rate(cfg, sims, models=s, samples=c, variants=v, seed=s * 1000 + c, world=world,
                              also=PREVIOUS)
                env = envelope(world, s, v, fpr)
                rows.append({"kind": kind, "S": s, "C": c, "gap": gap, "fpr": fpr, "rate": r.rate,
                             "previous_rule": r.also["previous rule"], "simulations": sims,
                             "mc_se": _mc(r.rate, sims), "noise": list(v.noise), **env})
                print(f"power {kind} S={s} gap {gap}x (reads {env['reads'][0]:.4f} / {env['reads'][1]:.4f}): "
                      f"{100 * r.rate:.1f}% of {sims} (previous rule {100 * r.also['previous rule']:.1f}%); oracles "
                      f"{100 * env['oracle_z']:.1f}% / {100 * env['oracle_null']:.1f}%", flush=True)
    return rows


def _row(pool: str, s: int, c: int, cov: Any, sims: int) -> dict[str, Any]:
    return {"pool": pool, "S": s, "C": c, "fpr": cov.fpr, "truth": cov.truth, "true_positives": cov.truth * s * c / 2,
            "leak_mean": cov.leak_mean, "bias": cov.leak_bias,
            "relative_bias": cov.leak_bias / cov.truth if cov.truth else None, "lower_covers": cov.leak_lower_covers,
            "declared_truth": cov.declared_truth, "declared_covers": cov.declared_covers,
            "declared_below": cov.declared_below, "simulations": sims, "truths": cov.rows["truths"],
            "bias_mc_se": float(np.hypot(cov.rows["leak_sd"] / np.sqrt(sims), cov.rows["truth_se"])),
            "roc_truths": cov.rows["roc_truths"], "roc_truth": max(cov.rows["roc_truths"])}


def coverage_part(sims: int, worlds: int) -> list[dict[str, Any]]:
    cfg = _cfg(**{"attack.fprs": [0.001, 0.002, 0.005, 0.01]})
    rows = []
    for name, (v, kw) in POOLS.items():
        for s, c in COVER_CELLS:
            seed = s + c
            world = ToyWorld.draw(c, seed, **kw)
            cov = coverage(cfg, sims, models=s, samples=c, variants=v, seed=seed, worlds=worlds, world=world)
            rows.append(_row(name, s, c, cov, sims))
            print(f"coverage {name} S={s} C={c}: bias {100 * cov.leak_bias:+.2f} pt, lower {100 * cov.leak_lower_covers:.1f}%,"
                  f" declared {100 * cov.declared_covers:.1f}%", flush=True)
    for s, c in LOW_CELLS:
        v, kw = LOW_TPR
        cov = coverage(cfg, sims, models=s, samples=c, variants=v, seed=s + c, worlds=worlds,
                       world=ToyWorld.draw(c, s + c, **kw))
        rows.append(_row("low TPR (population-like)", s, c, cov, sims))
        print(f"coverage low TPR S={s} C={c}: {rows[-1]['true_positives']:.0f} true positives, declared "
              f"{100 * cov.declared_covers:.1f}%, lower {100 * cov.leak_lower_covers:.1f}%", flush=True)
    s, c = 16, 50
    cov = coverage(cfg, sims, models=s, samples=c, variants=Variants((1.0,) * 20), seed=7, worlds=worlds)
    rows.append(_row("20 equal declared variants", s, c, cov, sims))
    print(f"coverage 20 equal S=16 C=50: bias {100 * cov.leak_bias:+.2f} pt", flush=True)
    return rows


#: the resolution part: pools and cells where the maximum's selection bias is largest at 3 expected false positives
RESOLUTION_ROWS = [("all equal (K = 3)", 32, 200), ("all equal (K = 3)", 64, 50), ("dominant + near-copies", 64, 50)]


def resolution_part(sims: int, worlds: int) -> list[dict[str, Any]]:
    """The leak's selection bias if figures needed more expected false positives (the figure FPR then
    higher): 3 (the rule), 5 and 10; not the harness's rule, a measured alternative."""
    import harness.core.figure as figure

    cfg, rows, real = _cfg(**{"attack.fprs": [0.001, 0.002, 0.005, 0.01]}), [], figure.MIN_FALSE_POSITIVES
    try:
        for k in (3, 5, 10):
            figure.MIN_FALSE_POSITIVES = k
            for name, s, c in RESOLUTION_ROWS:
                v, kw = POOLS[name]
                cov = coverage(cfg, sims, models=s, samples=c, variants=v, seed=s + c, worlds=worlds,
                               world=ToyWorld.draw(c, s + c, **kw))
                rows.append({"min_false_positives": k, **_row(name, s, c, cov, sims)})
                print(f"resolution k>={k} {name} S={s} C={c} at {100 * cov.fpr:g}%: bias {100 * cov.leak_bias:+.2f} pt",
                      flush=True)
    finally:
        figure.MIN_FALSE_POSITIVES = real
    return rows


def variant_ci_part(sims: int, worlds: int) -> list[dict[str, Any]]:
    """Each variant's own interval (attacks.csv, the details and entry-page tables: the paper-style
    read with harness.core.figure.interval) against its expected read, on one LiRA variant, the same
    with tied scores, and the heterogeneous-victims world with t3 noise, at the cells of the coverage part."""
    cfg, rows = _cfg(), []
    for name, (v, kw) in (("one variant", (Variants((0.5,)), {})), ("ties (scores on a 0.5 grid)", (Variants((0.5,), ties=True), {})),
                          ("victims differ, t3 noise", POOLS["victims differ, t3 noise"])):
        for s, c in COVER_CELLS:
            fpr = level_fpr(cfg, s * c // 2)
            r = variant_coverage(cfg, sims, models=s, samples=c, variants=v, fpr=fpr, seed=s + c, worlds=worlds,
                                 world=ToyWorld.draw(c, s + c, **kw))
            rows.append({"pool": name, "S": s, "C": c, **{k: getattr(r, k) for k in
                                                          ("fpr", "truth", "simulations", "mean", "covers", "below", "above",
                                                           "percentile_covers")}})
            print(f"variant CI {name} S={s} C={c} at {100 * fpr:g}%: covers {100 * r.covers:.1f}% "
                  f"(percentile: {100 * r.percentile_covers:.1f}%) "
                  f"(truth {100 * r.truth:.2f}, below {100 * r.below:.1f}%, above {100 * r.above:.1f}%)", flush=True)
    return rows


def ratio_part(sims: int, worlds: int) -> list[dict[str, Any]]:
    rows = []
    for fprs, (s, c), pop_mem in (([0.001, 0.01], (32, 200), 0.8), ([0.001, 0.01], (64, 200), 0.8),
                                  ([0.001, 0.01], (32, 200), 0.3), ([0.01], (16, 200), 0.8)):
        cfg = _cfg(**{"attack.fprs": fprs})
        r = ratio_coverage(cfg, sims, models=s, samples=c, seed=s + c, worlds=worlds, pop_mem=pop_mem)
        rows.append({"S": s, "C": c, "fpr": level_fpr(cfg, s * c // 2), "population_memorization": pop_mem,
                     **{k: getattr(r, k) for k in ("truth", "simulations", "defined", "covers", "mean",
                                                   "fallback_printed", "fallback_holds")}})
        print(f"ratio S={s} C={c} pop_mem {pop_mem}: defined {100 * r.defined:.0f}%, covers {100 * r.covers:.1f}%, "
              f"mean {r.mean:.2f} (truth {r.truth:.2f}), fallback holds {r.fallback_holds}", flush=True)
    return rows


def verification_part(pairs: int) -> list[dict[str, Any]]:
    cfg, rows = _cfg(), []
    for s, c in ((16, 50), (32, 200)):
        v = rerun_verification(cfg, pairs, models=s, samples=c, variants=Variants((1.0, 1.0)), shop=10)
        rows.append({"S": s, "C": c, "pairs": v.pairs, "shop": v.shop, "false_rejection": v.false_rejection,
                     "shopped_accepted": v.shopped_accepted, "old_false_rejection": v.old_false_rejection})
        print(f"verification S={s} C={c}: honest refused {100 * v.false_rejection:.1f}% (old rule "
              f"{100 * v.old_false_rejection:.1f}%), lowest of {v.shop} seeds accepted {100 * v.shopped_accepted:.1f}%",
              flush=True)
    return rows


def runs_part(out: Path) -> list[dict[str, Any]]:
    from harness_cli import evaluate_into

    from harness.core import jsonio

    rows = []
    for spec, label in (("undefended", "lira (the default)"), (f"{PLUGINS}:ThresholdOnly", "threshold only"),
                        (f"{PLUGINS}:LiraAndThreshold", "lira + threshold")):
        run_dir, _ = evaluate_into(out / spec.split(":")[-1], spec, "--models", "16")
        r = jsonio.loads((Path(run_dir) / "results.json").read_text())
        f = r["sample"]["figure"]
        rows.append({"declared": label, "models": 16, "fpr": f["fpr"], "leak": f["leak"]["tpr"],
                     "leak_lower": f["leak"]["lower"], "leak_attack": f["leak"]["name"],
                     "declared_tpr": f["declared"]["tpr"], "flagged": f["flag"]["flagged"],
                     "p_value": f["flag"]["p_value"]})
        print(f"run {label}: leak {100 * f['leak']['tpr']:.1f}% ({f['leak']['name']}), declared "
              f"{100 * f['declared']['tpr']:.1f}%, flag p = {f['flag']['p_value']:.3f}", flush=True)
    return rows


def _pct(v: float | None, d: int = 1) -> str:
    return "-" if v is None or v != v else f"{100 * v:.{d}f}%"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table's lines."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]


def _ratio_holds(r: dict[str, Any]) -> float:
    """How often the ratio's printed statement holds over every run: the CI covers where a point is
    printed, the fallback lower bound holds where it is printed instead (a run with neither states
    nothing, so nothing fails)."""
    rest = 1 - r["defined"]
    return (r["defined"] * r["covers"] + rest * r["fallback_printed"] * r["fallback_holds"]
            + rest * (1 - r["fallback_printed"]))


def tables(data: dict[str, Any]) -> dict[str, str]:
    """docs/protocol.md's tables from the JSON."""
    out = {}
    if "size" in data:
        by: dict[tuple[int, int], dict[str, Any]] = {}
        for r in data["size"]:
            by.setdefault((r["S"], r["C"]), {})[r["null"]] = r
        lines = _table(["S x C", "figure FPR", *(f"{k} (the rule replaced)" for k in NULLS)],
                       [[f"{s} x {c}", f"{100 * d['exchangeable']['fpr']:g}%",
                         *(f"{_pct(d[k]['rate'])} ({_pct(d[k]['previous_rule'])})" for k in NULLS)]
                        for (s, c), d in by.items()])
        n = data["size"][0]["simulations"]
        lines.append(f"\n{n} simulations per cell (Monte Carlo SE at 5%: {_pct(_mc(0.05, n))}).")
        out["size"] = "\n".join(lines)
    if "power" in data:
        out["power"] = "\n".join(_table(
            ["declared", "S x C", "figure FPR", "gap", "expected reads: declared / other (achieved gap)",
             "the test flags (Monte Carlo SE)", "the rule replaced", "oracle: d / its true SD",
             "oracle: the exchangeable null's 95% point"],
            [[r.get("kind", "plain"), f"{r['S']} x {r['C']}", f"{100 * r['fpr']:g}%", f"{r['gap']:g}x",
              f"{_pct(r['reads'][0], 2)} / {_pct(r['reads'][1], 2)} ({r['reads'][1] / r['reads'][0]:.2f}x)",
              f"{_pct(r['rate'])} ({_pct(r['mc_se'])})", _pct(r.get("previous_rule")), _pct(r["oracle_z"]),
              _pct(r["oracle_null"])]
             for r in data["power"]]))
    if "coverage" in data:
        out["coverage"] = "\n".join(_table(
            ["pool", "S x C", "FPR", "truth: largest expected read (true positives)", "leak mean",
             "bias (Monte Carlo SE)", "lower bound covers", "declared CI covers (truth below it)",
             "read vs many-victim ROC"],
            [[r["pool"], f"{r['S']} x {r['C']}", f"{100 * r['fpr']:g}%", f"{_pct(r['truth'])} ({r['true_positives']:.0f})",
              _pct(r["leak_mean"]),
              f"{100 * r['bias']:+.2f} pt ({100 * r['relative_bias']:+.1f}%; {100 * r['bias_mc_se']:.2f})",
              _pct(r["lower_covers"]), f"{_pct(r['declared_covers'])} ({_pct(r['declared_below'])})",
              f"{100 * (r['truth'] - r['roc_truth']):+.2f} pt"]
             for r in data["coverage"]]))
    if "resolution" in data:
        out["resolution"] = "\n".join(_table(
            ["expected false positives at least", "pool", "S x C", "figure FPR", "truth", "bias (Monte Carlo SE)"],
            [[str(r["min_false_positives"]), r["pool"], f"{r['S']} x {r['C']}", f"{100 * r['fpr']:g}%", _pct(r["truth"]),
              f"{100 * r['bias']:+.2f} pt ({100 * r['relative_bias']:+.1f}%; {100 * r['bias_mc_se']:.2f})"]
             for r in data["resolution"]]))
    if "variant_ci" in data:
        out["variant_ci"] = "\n".join(_table(
            ["pool", "S x C", "FPR", "truth: expected read", "mean read", "CI covers", "truth below / above it",
             "percentile interval covered (the rule replaced)"],
            [[r["pool"], f"{r['S']} x {r['C']}", f"{100 * r['fpr']:g}%", _pct(r["truth"], 2), _pct(r["mean"], 2),
              _pct(r["covers"]), f"{_pct(r['below'])} / {_pct(r['above'])}", _pct(r["percentile_covers"])]
             for r in data["variant_ci"]]))
    if "ratio" in data:
        out["ratio"] = "\n".join(_table(
            ["S x C", "FPR", "population memorization", "true ratio", "point printed", "CI covers", "mean",
             "fallback printed", "fallback holds", "what is printed holds (every run)"],
            [[f"{r['S']} x {r['C']}", f"{100 * r['fpr']:g}%", str(r["population_memorization"]), f"{r['truth']:.2f}",
              _pct(r["defined"], 0), _pct(r["covers"]), f"{r['mean']:.2f}", _pct(r["fallback_printed"], 0),
              _pct(r["fallback_holds"]), _pct(_ratio_holds(r))] for r in data["ratio"]]))
    if "verification" in data:
        out["verification"] = "\n".join(_table(
            ["S x C", "pairs", "honest entry refused", "the old rule refused", "lowest of 10 seeds accepted"],
            [[f"{r['S']} x {r['C']}", str(r["pairs"]), _pct(r["false_rejection"]), _pct(r["old_false_rejection"]),
              _pct(r["shopped_accepted"])] for r in data["verification"]]))
    if "runs" in data:
        out["runs"] = "\n".join(_table(
            ["declared", "models", "figure FPR", "leak (ranked)", "by", "declared headline", "flag (p)"],
            [[r["declared"], str(r["models"]), f"{100 * r['fpr']:g}%", f"{_pct(r['leak'])} (>= {_pct(r['leak_lower'])})",
              r["leak_attack"], _pct(r["declared_tpr"]), f"{'yes' if r['flagged'] else 'no'} ({r['p_value']:.3f})"]
             for r in data["runs"]]))
    return out


def write_docs(data: dict[str, Any], path: Path = PROTOCOL) -> list[str]:
    """Replace each ``<!-- headline-json:NAME -->`` ... ``<!-- /headline-json -->`` block of ``path``."""
    text, done = path.read_text(), []
    for name, table in tables(data).items():
        # a block's body never holds another block's start: an empty block ends at its own closing marker
        pat = re.compile(rf"(<!-- headline-json:{name} -->\n)(?:(?!<!-- headline-json:).)*?(<!-- /headline-json -->)", re.S)
        if pat.search(text):
            text = pat.sub(lambda m: m.group(1) + table + "\n" + m.group(2), text)
            done.append(name)
    path.write_text(text)
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="size,power,coverage,resolution,variant_ci,ratio,verification,runs")
    ap.add_argument("--sims", type=int, default=400, help="size and power: simulations per cell")
    ap.add_argument("--cover-sims", type=int, default=200, help="coverage and ratio: simulations per row")
    ap.add_argument("--worlds", type=int, default=200, help="runs averaged for each expected read (and pooled for "
                                                                 "each many-victim ROC)")
    ap.add_argument("--json", type=Path, default=JSON)
    ap.add_argument("--out", type=Path, default=Path("runs/headline"), help="runs part: where the runs go")
    ap.add_argument("--docs", action="store_true", help="only rewrite docs/protocol.md's tables from the JSON")
    a = ap.parse_args()
    data = json.loads(a.json.read_text()) if a.json.exists() else {}
    data.pop("one_sd_rules", None)  # a part of the rule the headline test replaced (issue 65)
    if not a.docs:
        parts = [p.strip() for p in a.parts.split(",") if p.strip()]
        t0 = time.time()
        for p in parts:
            data[p] = {"size": lambda: size(a.sims), "power": lambda: power(a.sims),
                       "coverage": lambda: coverage_part(a.cover_sims, a.worlds),
                       "resolution": lambda: resolution_part(a.cover_sims, a.worlds),
                       "ratio": lambda: ratio_part(a.cover_sims, a.worlds), "runs": lambda: runs_part(a.out),
                       "variant_ci": lambda: variant_ci_part(a.cover_sims, a.worlds),
                       "verification": lambda: verification_part(a.cover_sims)}[p]()
            a.json.parent.mkdir(parents=True, exist_ok=True)
            a.json.write_text(json.dumps(data, indent=1) + "\n")  # each part saved as soon as it is done
        print(f"wrote {a.json} ({time.time() - t0:.0f} s)")
    print("docs/protocol.md tables rewritten:", ", ".join(write_docs(data)) or "none (no markers)")


if __name__ == "__main__":
    main()
