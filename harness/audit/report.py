"""Reports: results.json, the CSV exports, ROC curves and the terminal tables.

``results.json`` is documented in docs/results-json.md. The terminal table puts the population
level (audit samples as they are) and the sample level (the defense's canaries) side by side.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table

from harness.audit.attack_phase import run_label_privacy, run_privacy
from harness.audit.headline import fpr_key
from harness.core import jsonio
from harness.core.metrics import AttackMetrics, roc_file_curve
from harness.run.runstore import RunDir, commit_files, results_digest


def _targets(results: dict[str, Any]) -> list[float]:
    return [0.0, *results["config"]["attack"]["fprs"]]


def _levels(results: dict[str, Any]) -> list[str]:
    return [lv for lv in ("population", "sample") if lv in results]


def _best_entry(level_result: dict[str, Any]) -> dict[str, Any]:
    best = level_result["best"]
    return next(e for e in level_result["attacks"] if e["name"] == best["name"] and e["variant"] == best["variant"])


def summary_frame(results: dict[str, Any]) -> pd.DataFrame:
    """One row per level: canary, test accuracy, headline attack, TPR@FPR with its (selection-aware)
    CI, AUC and the empirical epsilon lower bounds of the headline variant."""
    rows = []
    for level in _levels(results):
        r = results[level]
        best = r["best"]
        entry = _best_entry(r)
        row: dict[str, Any] = {
            "level": level,
            "canary": r["canary"],
            "test_acc_mean": r["test_accuracy"]["mean"],
            "test_acc_std": r["test_accuracy"]["std"],
            "best_attack": f"{best['name']}:{best['variant']}",
            "best_attack_access": best.get("access", "black-box"),
        }
        for t in _targets(results):
            k = fpr_key(t)
            _tpr_columns(row, k, best["tpr_at_fpr"][k], best["tpr_ci"][k], best["resolved"][k])
        row["auc"] = entry["auc"]
        row["eps_lower_one_run"] = (entry.get("eps_lower_one_run") or {}).get("epsilon")
        row["eps_lower_nominal"] = entry["eps_lower"]["epsilon"] if "eps_lower" in entry else None
        row["num_guesses"] = r["num_guesses"]
        st = r.get("strongest")
        if st is not None:  # results.json files from before the strongest figure have none
            row["strongest_attack"] = f"{st['name']}:{st['variant']}"
            row["strongest_experiment"] = st["source"].split("/")[0]
            for t in _targets(results):
                k = fpr_key(t)
                _tpr_columns(row, f"strongest_{k}", st["tpr_at_fpr"][k], st["tpr_ci"][k], st["resolved"][k])
            row["strongest_beats_headline"] = st["beats_headline"]
            row["headline_test_p"] = st.get("test_p_value")
        rows.append(row)
    frame = pd.DataFrame(rows)
    return frame.rename(columns={c: c.replace("tpr@strongest_", "strongest_tpr@") for c in frame.columns})


def experiments(results: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(experiment name, its results object): population, then every sample-level canary."""
    out = [("population", results["population"])] if "population" in results else []
    by_canary = results.get("sample_by_canary") or ({results["sample"]["canary"]: results["sample"]}
                                                     if "sample" in results else {})
    return out + [(f"sample-{c}", r) for c, r in by_canary.items()]


def _is_headline(e: dict[str, Any], res: dict[str, Any]) -> bool:
    """Whether attack entry ``e`` is its experiment's headline (``res["best"]``, chosen by the tie
    rule of :func:`harness.audit.headline.select_best`): every table marks that same row."""
    return (e["name"], e["variant"]) == (res["best"]["name"], res["best"]["variant"])


def _tpr_columns(row: dict[str, Any], k: str, tpr: float, ci: list[float], resolved: bool) -> None:
    """TPR, its CI and the resolved flag; an unresolved TPR (FPR below 1/N_neg) and its CI are
    left empty (NaN), so that no CSV reader takes an unmeasurable figure for a measurement."""
    nan = float("nan")
    row[f"tpr@{k}"] = tpr if resolved else nan
    row[f"tpr@{k}_ci_low"], row[f"tpr@{k}_ci_high"] = tuple(ci) if resolved else (nan, nan)
    row[f"tpr@{k}_resolved"] = resolved


def attacks_frame(results: dict[str, Any]) -> pd.DataFrame:
    """Every attack variant of every experiment, one row each (``primary`` marks the variant that
    stands for its attack in headlines, ``headline`` the experiment's headline variant); an
    unresolved TPR is empty with ``tpr@<fpr>_resolved`` False."""
    rows = []
    for level, res in experiments(results):
        for e in res["attacks"]:
            row = {"experiment": level, "canary": res["canary"], "attack": e["name"], "variant": e["variant"],
                   "primary": bool(e.get("primary", False)), "access": e.get("access", "black-box")}
            row["headline"] = _is_headline(e, res)
            for k, v in e["tpr_at_fpr"].items():
                _tpr_columns(row, k, v, e["tpr_ci"][k], e["resolved"][k])
            row["auc"] = e["auc"]
            row["balanced_accuracy"] = e["balanced_accuracy"]
            row["eps_lower_nominal"] = e["eps_lower"]["epsilon"] if "eps_lower" in e else None
            row["eps_lower_one_run"] = (e.get("eps_lower_one_run") or {}).get("epsilon")
            rows.append(row)
    return pd.DataFrame(rows)


def json_bytes(obj: Any) -> bytes:
    """A JSON file's bytes as the run directory writes them (indent 2, trailing newline; valid JSON:
    a non-finite number is written as a string, harness.core.jsonio)."""
    return (jsonio.dumps(obj, indent=2, sort_keys=False) + "\n").encode()


def csv_files(results: dict[str, Any]) -> dict[str, bytes]:
    """table.csv (one row per level) and attacks.csv (every variant) from a results object."""
    return {"table.csv": summary_frame(results).to_csv(index=False).encode(),
            "attacks.csv": attacks_frame(results).to_csv(index=False).encode()}


#: when set (tests/conftest.py sets it), every results.json is validated against docs/results.schema.json
#: before it is written (needs jsonschema, in the test extra)
SCHEMA_CHECK_ENV = "HARNESS_CHECK_RESULTS_SCHEMA"
SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "results.schema.json"


def check_schema(results: dict[str, Any]) -> None:
    """Validate ``results``, as results.json holds it (non-finite numbers as strings:
    harness.core.jsonio), against docs/results.schema.json (a jsonschema ValidationError names the
    first violation); a no-op unless :data:`SCHEMA_CHECK_ENV` is set."""
    import os

    if not os.environ.get(SCHEMA_CHECK_ENV):
        return
    import jsonschema

    jsonschema.validate(jsonio.encode_nonfinite(results), json.loads(SCHEMA_PATH.read_text()),
                        cls=jsonschema.Draft202012Validator)


def write_outputs(run_path: Path, results: dict[str, Any], curves: dict[str, dict[tuple[str, str], AttackMetrics]]) -> None:
    """results.json, table.csv (summary), attacks.csv (all variants), roc/<level>__<attack>__<variant>.csv,
    config.json (the configuration these results were computed with, so the run's saved attack
    settings are those of its results) and manifest.json (with results.json's ``results_digest``,
    which every later read compares: RunDir.check_results), all replaced as one change, in which the
    ROC curves of attacks or variants these results no longer hold are deleted
    (:func:`harness.run.runstore.commit_files`): an interrupted attack phase leaves every one of them
    as it was, a finished one all of them new."""
    check_schema(results)
    manifest = {**RunDir(run_path).load_manifest(), "results_digest": results_digest(results)}
    files = {"results.json": json_bytes(results), **csv_files(results), "config.json": json_bytes(results["config"]),
             "manifest.json": json_bytes(manifest)}
    for level, by_attack in curves.items():
        for (name, variant), m in by_attack.items():
            roc = roc_file_curve(m.roc)  # the exact staircase where it is small (docs/results-json.md)
            df = pd.DataFrame({"fpr": roc.fpr, "tpr": roc.tpr, "threshold": roc.thresholds})
            files[f"roc/{level}__{name}__{variant}.csv"] = df.to_csv(index=False).encode()
    roc_dir = run_path / "roc"  # curves of attacks these results no longer hold go in the same change
    stale = sorted(f"roc/{f.name}" for f in roc_dir.glob("*.csv") if f"roc/{f.name}" not in files) \
        if roc_dir.is_dir() else []
    commit_files(run_path, files, remove=stale)


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def _tpr_cell(entry: dict[str, Any], t: float, num_neg: int, with_ci: bool = True) -> str:
    """TPR with its CI, or a notice when the FPR is below the resolution 1/N_neg."""
    k = fpr_key(t)
    if not entry["resolved"][k]:
        if entry.get("estimator") == "cross-fitted":  # read on half of the victims
            return "[yellow]unresolved: FPR < 1/(negatives of half the victims)[/]"
        return f"[yellow]unresolved: FPR < 1/{num_neg} negatives[/]"
    if not with_ci:
        return _pct(entry["tpr_at_fpr"][k])
    lo, hi = entry["tpr_ci"][k]
    ci = f" [dim][{100 * lo:.1f}, {100 * hi:.1f}][/]" if lo == lo else ""
    return _pct(entry["tpr_at_fpr"][k]) + ci


def _times(v: float) -> str:
    return "∞" if v == float("inf") else f"{v:.1f}"


def ratio_line(results: dict[str, Any]) -> str:
    """Sample- vs population-level headline at the headline FPR: the ratio with its bootstrap CI
    (``sample_population_ratio``), or the two figures alone where the ratio has no CI (no bootstrap,
    or a results.json from before the CI) or is infinite."""
    hk = fpr_key(results["headline_fpr"])
    at = f"TPR@{100 * results['headline_fpr']:g}% FPR"
    p, s = results["population"]["best"], results["sample"]["best"]
    if not (p["resolved"][hk] and s["resolved"][hk]):
        return (f"Sample vs population level at {100 * results['headline_fpr']:g}% FPR: unresolved "
                "(too few non-member guesses for that FPR).")
    pv, sv = p["tpr_at_fpr"][hk], s["tpr_at_fpr"][hk]
    if pv == 0:
        return f"Sample-level {at} is {_pct(sv)}; the population level found no member at this FPR."
    ratio = results.get("sample_population_ratio") or {}
    if ratio.get("ci") is None or ratio.get("ratio") is None:
        return f"Sample-level {at}: {_pct(sv)}; population level: {_pct(pv)} (no CI for their ratio: not shown)."
    lo, hi = ratio["ci"]
    return (f"Sample-level {at} is {_times(ratio['ratio'])}x [{_times(lo)}, {_times(hi)}] the population-level figure "
            f"({_pct(sv)} vs {_pct(pv)}; 95% CI, bootstrap over victim models).")


def _is_primary(e: dict[str, Any]) -> bool:
    """results.json files written before primary variants existed mark none: show all of theirs."""
    return bool(e.get("primary", True))


def _eps(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def trained_outside(results: dict[str, Any]) -> bool:
    """Whether the run's models were trained outside the harness (``harness import``)."""
    return results.get("provenance") == "external"


def defense_label(results: dict[str, Any]) -> str:
    """The defense as the reports and the leaderboard name it: for models trained outside the
    harness, their label (``harness import --name``) and that they were."""
    if trained_outside(results):
        name = str((results.get("external") or {}).get("name") or "external models")
        return f"{name} (trained outside the harness)"
    return str(results["defense"])


def machine_line(results: dict[str, Any]) -> str | None:
    """The machines of a run (results.json ``machine``, harness.core.machine) on one line: which
    trained its models and, where it is another, which ran the attacks; None before the record."""
    from harness.core.machine import describe

    rec = results.get("machine")
    if not isinstance(rec, dict):
        return None
    models = rec.get("models") or []
    parts = [f"{m['models']} models trained on {describe(m)}" for m in models]
    if trained_outside(results):
        parts.append("models trained outside the harness (their machine is not recorded)")
    elif not models:
        parts.append("the models' machine is not recorded (trained before the record)")
    here = rec.get("attack_phase")
    if here and all((here.get("cpu"), here.get("vector_extensions")) != (m.get("cpu"), m.get("vector_extensions"))
                    for m in models):
        parts.append(f"attacks on {describe(here)}")
    return "Machine: " + "; ".join(parts) + " (figures vary across CPUs within their CIs: README, Set up)"


def print_report(results: dict[str, Any], console: Console | None = None, *, details: bool = False) -> None:
    """The side-by-side table of the levels, then the primary variant of each attack (every variant
    with ``details``)."""
    console = console or Console()
    targets = _targets(results)
    ext = results.get("external") or {}
    planned = (f" (of {ext['models_planned']} planned: --partial)"
               if trained_outside(results) and ext.get("models_planned", results["num_models"]) != results["num_models"]
               else "")
    title = (
        f"{defense_label(results)} on {results['dataset']} ({results['preset']}): "
        f"{results['num_models']} models{planned}, {results['audit_size']} audit samples, seed {results['seed']}"
    )
    levels = _levels(results)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, caption_justify="left",
                  caption="TPR@x%: TPR at FPR <= x% of the headline (the best primary variant of the defense's "
                          "adaptive attacks, chosen at the headline FPR; cross-fitted over victim models where it is "
                          "a best of several); strongest: the same over every attack and variant that ran; ! where "
                          "the headline test (Hansen's SPA, family-wise over every variant, FPR and level) finds a "
                          "variant that beats the headline; [..]: 95% CI, percentile bootstrap over victim models")
    table.add_column("")
    for level in levels:
        table.add_column(f"{level} level", justify="right")
    bests = [_best_entry(results[lv]) for lv in levels]
    heads = [results[lv]["best"] for lv in levels]
    table.add_row("canary", *[results[lv]["canary"] for lv in levels])
    table.add_row("test accuracy", *[
        f"{100 * results[lv]['test_accuracy']['mean']:.1f} ± {100 * results[lv]['test_accuracy']['std']:.1f}%"
        for lv in levels])
    table.add_row("guesses (S x C)", *[str(results[lv]["num_guesses"]) for lv in levels])
    for t in targets:
        table.add_row(f"TPR@{100 * t:g}%", *[_tpr_cell(h, t, e["num_neg"]) for h, e in zip(heads, bests)])
    table.add_row("AUC", *[f"{e['auc']:.3f}" for e in bests])
    table.add_row("headline attack", *[f"{e['name']} {e['variant']} ({e.get('access', 'black-box')})" for e in bests])
    strongest = [results[lv].get("strongest") for lv in levels]
    if any(st is not None for st in strongest):  # every attack and variant that ran, beside the headline
        hf = results["headline_fpr"]
        test = results.get("headline_test") or {}
        tops = {lv: (rec.get("top") or {}).get("fpr") for lv, rec in test.get("levels", {}).items() if rec.get("flagged")}
        shown = [hf]  # where a level cannot resolve the headline FPR, the others too
        if any(not h["resolved"][fpr_key(hf)] for h in heads):
            shown += [t for t in targets if t > 0 and t != hf]
        shown += [t for t in targets if t in tops.values() and t not in shown]  # where the test found the gap
        for t in sorted(shown):
            table.add_row(f"strongest TPR@{100 * t:g}% (any attack)",
                          *["-" if st is None else _tpr_cell(st, t, e["num_neg"])
                            + (" [bold yellow]![/]" if st.get("beats_headline") and tops.get(lv) == t else "")
                            for lv, st, e in zip(levels, strongest, bests)])
        if any(st is not None and "optimistic_max" in st for st in strongest):
            table.add_row(f"  max over variants TPR@{100 * hf:g}% (optimistic)",
                          *["-" if st is None or "optimistic_max" not in st else
                            _tpr_cell(st["optimistic_max"], hf, e["num_neg"], with_ci=False)
                            + f" of {len(st['candidates'])}" for st, e in zip(strongest, bests)])
        if test.get("levels"):
            table.add_row("headline test p (SPA)", *[
                f"{test['levels'][lv]['p_value']:.3f}" + (" [bold yellow]![/]" if test["levels"][lv]["flagged"] else "")
                if lv in test["levels"] else "-" for lv in levels])
        table.add_row("strongest attack", *["-" if st is None else
                                            f"{st['name']} {st['variant']} ({st.get('access', 'black-box')})"
                                            + (f", {st['source'].split('/')[0]}" if lv == "sample" and
                                               len(results.get("sample_by_canary", {})) > 1 else "")
                                            for lv, st in zip(levels, strongest)])
    # every non-ablation attack's primary variant, beside the headline (e.g. RMIA beside LiRA)
    names = list(dict.fromkeys(e["name"] for lv in levels for e in results[lv]["attacks"]
                               if _is_primary(e) and e["name"] != "lira-raw"))
    for name in names:
        cells = []
        for lv in levels:
            e = next((a for a in results[lv]["attacks"] if a["name"] == name and _is_primary(a)), None)
            cells.append("-" if e is None else _tpr_cell(e, results["headline_fpr"], e["num_neg"], with_ci=False))
        table.add_row(f"  {name} TPR@{100 * results['headline_fpr']:g}%", *cells)
    table.add_row("empirical ε ≥ (one-run, 95%)",
                  *[_eps((e.get("eps_lower_one_run") or {}).get("epsilon")) for e in bests])
    table.add_row("empirical ε ≥ (nominal, 95%)",
                  *[_eps(e["eps_lower"]["epsilon"]) if "eps_lower" in e else "-" for e in bests])
    bounds = results.get("bounds")
    if bounds:
        table.add_row("DP ε (δ=1e-5)", *[f"{bounds['epsilon']:.3g}" for _ in bests])
        for k, v in bounds["tpr_at_fpr"].items():  # positive FPRs only (harness.audit.attack_phase._bounds_json)
            table.add_row(f"provable TPR@{100 * float(k):g}% ≤", *[_pct(v) for _ in bests])
    label = run_label_privacy(results)
    if label:  # ALIBI / AGIBI: a guarantee on labels only, beside the empirical bounds it should cap
        d = f", δ={label['label_delta']:g}" if label.get("label_delta") else ""
        # each level's own record where it has one (PATE-FM's epsilon depends on the queries each model asked)
        per_level = [results[lv].get("label_privacy") or label for lv in levels]
        table.add_row(f"label-DP ε{d} (labels only)", *[f"{lp['label_epsilon']:.3g}" for lp in per_level])
        if "label_epsilon_data_dependent" in label:  # PATE-FM: Papernot et al.'s Theorem 6 on the run's votes
            table.add_row("  data-dependent label ε (not a DP guarantee)",
                          *[f"{lp['label_epsilon_data_dependent']:.3g}" for lp in per_level])
        if "ensemble_accuracy" in label:  # PATE-FM: the teachers' released labels against the private ones
            table.add_row("  ensemble acc (released labels, mean)", *[_pct(lp["ensemble_accuracy"]) for lp in per_level])
    sub = (run_privacy(results) or {}).get("subsample_bounds")
    if sub:  # the subsample wrapper (Thudi et al.): positive-accuracy bound at the prior P1 / 2
        table.add_row(f"PosAcc ≤ (P1 {sub['prior']:g})",
                      *[f"{100 * sub['pos_acc_upper']:.1f}% (P1 0.5: {100 * sub['pos_acc_upper_without_subsampling']:.1f}%)"
                        for _ in bests])
    if len(results.get("sample_by_canary", {})) > 1:
        for c, r in results["sample_by_canary"].items():
            table.add_row(f"  sample, {c}", *(["" for _ in levels[:-1]] +
                                              [f"{_tpr_cell(r['best'], results['headline_fpr'], _best_entry(r)['num_neg'], with_ci=False)} "
                                               f"({r['best']['name']}, {r['best'].get('access', 'black-box')})"]))
    console.print(table)
    if "population" in results and "sample" in results:
        console.print(ratio_line(results), highlight=False)
    per_attack = Table(title="primary variant of each attack" if not details else "every attack variant",
                       title_justify="left", box=box.SIMPLE_HEAD, caption_justify="left",
                       caption="headline attacks: " + ", ".join(results[levels[-1]]["headline_attacks"])
                       + "; * primary variant; (headline): the experiment's headline (ties: TPR at FPR 0, then AUC, "
                       "then attack order); ε: one-run lower bound (95%)")
    for col in ("experiment", "attack", "access", "variant", f"TPR@{100 * results['headline_fpr']:g}%", "AUC", "ε ≥"):
        per_attack.add_column(col)
    for level, res in experiments(results):
        for e in res["attacks"]:
            if not details and not _is_primary(e):
                continue
            per_attack.add_row(level, e["name"], e.get("access", "black-box"),
                               e["variant"] + (" *" if e.get("primary") else "") + (" (headline)" if _is_headline(e, res) else ""),
                               _tpr_cell(e, results["headline_fpr"], e["num_neg"], with_ci=False), f"{e['auc']:.3f}",
                               _eps((e.get("eps_lower_one_run") or {}).get("epsilon")))
    console.print(per_attack)
    for note in results.get("notes", []):
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    for warning in results.get("warnings", []):
        console.print(f"[bold yellow]warning:[/] {warning}", highlight=False)
    skipped = {f"{lv}: {a}": why for lv, res in experiments(results) for a, why in res.get("skipped_attacks", {}).items()}
    for what, why in skipped.items():
        console.print(f"[yellow]skipped[/] {what} ({why})")
    if line := machine_line(results):
        console.print(line, highlight=False)
    tm = results.get("timings", {})
    comp = [r["compute"] for _, r in experiments(results)]
    devices = sorted({d for c in comp for d in c["devices"]})
    train_s = sum(c["train_seconds_total"] for c in comp)
    if trained_outside(results):
        ext = results.get("external") or {}
        console.print(
            f"Compute: {results['num_models'] * len(comp)} models trained outside the harness (plan "
            f"{str(ext.get('plan_fingerprint'))[:12]}, outputs {str(ext.get('outputs_sha256'))[:12]}); "
            + (f"{train_s:.0f} s of training reported by their outputs; " if train_s else "")
            + (f"attacks {tm['attack_seconds']:.1f} s" if "attack_seconds" in tm else ""), highlight=False)
        return
    console.print(
        f"Compute: {results['num_models'] * len(comp)} models, {train_s:.0f} s of training "
        f"(summed over models) on {', '.join(devices)}"
        + (f"; training phase {tm['train_wall_seconds']:.0f} s wall" if "train_wall_seconds" in tm else "")
        + (f"; attacks {tm['attack_seconds']:.1f} s" if "attack_seconds" in tm else "")
    )
