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


def accuracy_cell(acc: dict[str, Any] | None) -> str:
    """An accuracy record as ``mean ± SE`` (the SE over models and images: :mod:`harness.core.accuracy`),
    or ``mean (SD d over models)`` for a run whose models did not store their answers; "-" for none."""
    if not acc:
        return "-"
    if acc.get("se") is not None:
        return f"{100 * acc['mean']:.1f}% ± {100 * acc['se']:.1f}"
    return f"{100 * acc['mean']:.1f}% (SD {100 * acc.get('std', 0.0):.1f} over models)"


def _targets(results: dict[str, Any]) -> list[float]:
    return [0.0, *results["config"]["attack"]["fprs"]]


def _levels(results: dict[str, Any]) -> list[str]:
    return [lv for lv in ("population", "sample") if lv in results]


def _best_entry(level_result: dict[str, Any]) -> dict[str, Any]:
    best = level_result["best"]
    return next(e for e in level_result["attacks"] if e["name"] == best["name"] and e["variant"] == best["variant"])


def summary_frame(results: dict[str, Any]) -> pd.DataFrame:
    """One row per level: canary, test accuracy, the level's figure (its FPR, the leak with its lower
    bound and the variant giving it, the declared headline with its interval, the headline test's
    adjusted p-value and flag), the declared variant's AUC and the level's one-run epsilon."""
    rows = []
    nan = float("nan")
    for level in _levels(results):
        r = results[level]
        entry = _best_entry(r)
        fig = r.get("figure") or {}
        leak, decl, flag = fig.get("leak") or {}, fig.get("declared") or {}, fig.get("flag") or {}
        row: dict[str, Any] = {
            "level": level,
            "canary": r["canary"],
            "test_acc_mean": r["test_accuracy"]["mean"],
            "test_acc_std": r["test_accuracy"]["std"],
            "test_acc_se": r["test_accuracy"].get("se", nan),
            "validation_acc_mean": (r.get("validation_accuracy") or {}).get("mean", nan),
            "figure_fpr": fig.get("fpr"),
            "expected_false_positives": fig.get("expected_false_positives"),
            "leak_tpr": leak.get("tpr", nan),
            "leak_lower": nan if leak.get("lower") is None else leak["lower"],
            "leak_attack": f"{leak['name']}:{leak['variant']}" if leak else None,
            "leak_experiment": leak["source"].split("/")[0] if leak else None,
            "leak_candidates": leak.get("candidates") if leak else None,
            "declared_tpr": decl.get("tpr", nan),
            "declared_ci_low": (decl.get("ci") or [nan, nan])[0],
            "declared_ci_high": (decl.get("ci") or [nan, nan])[1],
            "declared_lower": nan if decl.get("lower") is None else decl["lower"],
            "declared_attack": f"{decl['name']}:{decl['variant']}" if decl else None,
            "declared_attack_access": decl.get("access") if decl else None,
            "headline_test_p": flag.get("p_value"),
            "headline_beaten": bool(flag.get("flagged", False)),
        }
        row["auc"] = entry["auc"]
        row["eps_lower_one_run"] = (r.get("one_run_epsilon") or {}).get("epsilon")
        row["num_guesses"] = r["num_guesses"]
        rows.append(row)
    return pd.DataFrame(rows)


def experiments(results: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(experiment name, its results object): population, then every sample-level canary."""
    out = [("population", results["population"])] if "population" in results else []
    by_canary = results.get("sample_by_canary") or ({results["sample"]["canary"]: results["sample"]}
                                                     if "sample" in results else {})
    return out + [(f"sample-{c}", r) for c, r in by_canary.items()]


def _is_headline(e: dict[str, Any], res: dict[str, Any]) -> bool:
    """Whether attack entry ``e`` is its experiment's headline (``res["best"]``, the declared variant
    that gives the declared figure: :func:`harness.audit.headline.best_entry`): every table marks that same row."""
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


def _times(v: float) -> str:
    return "∞" if v == float("inf") else f"{v:.1f}"


def figure_cell(rec: dict[str, Any] | None, ci: bool = True) -> str:
    """A figure record (``figure.leak`` / ``figure.declared``): its TPR, then the interval of a
    single variant or the one-sided lower bound of a best of several."""
    if not rec:
        return "[yellow]unresolved[/]"
    out = _pct(rec["tpr"])
    if ci and rec.get("ci"):
        lo, hi = rec["ci"]
        out += f" [dim][{100 * lo:.1f}, {100 * hi:.1f}][/]"
    elif ci and rec.get("lower") is not None:
        out += f" [dim](≥ {100 * rec['lower']:.1f})[/]"
    return out


def ratio_line(results: dict[str, Any]) -> str:
    """The sample level's leak over the population level's (``sample_population_ratio``): the ratio
    with its CI where the population leak is told apart from 0 on enough true positives; else both
    TPRs and, where finite, a lower bound on the ratio."""
    ratio = results.get("sample_population_ratio") or {}
    if ratio.get("fpr") is None:
        return "Sample vs population level: no figure FPR resolves at both levels (too few non-member guesses)."
    at = f"at {100 * ratio['fpr']:g}% FPR"
    sv, pv = ratio["sample"], ratio["population"]
    if ratio.get("ratio") is not None and ratio.get("ci") is not None:
        lo, hi = ratio["ci"]
        return (f"Leak {at}: sample level {_pct(sv)} is {_times(ratio['ratio'])}x [{_times(lo)}, {_times(hi)}] the "
                f"population level's {_pct(pv)} (95% CI, bootstrap over victim models).")
    low = ratio.get("lower")
    bound = f"; their ratio is at least {_times(low)} (95%)" if low is not None else ""
    return (f"Leak {at}: sample level {_pct(sv)}, population level {_pct(pv)} (told apart from 0 on too few guesses "
            f"for a point ratio{bound}).")


def _is_primary(e: dict[str, Any]) -> bool:
    """results.json files written before primary variants existed mark none: show all of theirs."""
    return bool(e.get("primary", True))


def _eps(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def one_run_cell(rec: dict[str, Any] | None) -> str:
    """A level's one-run epsilon: its value and the attack it is pre-specified on, or "not certifiable
    at this design" where no data could give one above 0 (harness.audit.attack_phase.one_run_record)."""
    if not rec:
        return "-"
    if rec.get("certifiable") is False:
        return "not certifiable at this design"
    most = rec.get("attainable_epsilon")
    cap = "" if most is None else f"; at most {_eps(most)} at this design"
    return f"{_eps(rec.get('epsilon'))} ({rec['variant'].split('/')[-1]}{cap})"


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
                  caption="leak: the largest TPR of a fixed set of primary attacks (the configured built-ins, the "
                          "adaptations the harness adds, the served declared attacks), a plain maximum, with its "
                          "one-sided 95% lower bound (≥, Bonferroni over the set); it ranks, and a declaration can "
                          "only raise it. declared headline: the same over the defense's served declared attacks "
                          "[95% CI]. Both at the level's figure FPR (at least 3 expected false positives), read at "
                          "the plotting position; estimand: the largest expected read at this design (S victims, these audit "
                          "samples); "
                          "victim bootstrap and jackknife (docs/protocol.md, Headlines). ! : the headline test "
                          "(Bonferroni over the leak's candidates and both levels) finds a candidate that beats "
                          "the declared headline")
    table.add_column("")
    for level in levels:
        table.add_column(f"{level} level", justify="right")
    bests = [_best_entry(results[lv]) for lv in levels]
    figs = [results[lv].get("figure") or {} for lv in levels]
    table.add_row("canary", *[results[lv]["canary"] for lv in levels])
    table.add_row("test accuracy", *[accuracy_cell(results[lv]["test_accuracy"]) for lv in levels])
    if any("validation_accuracy" in results[lv] for lv in levels):
        table.add_row("validation accuracy", *[accuracy_cell(results[lv].get("validation_accuracy")) for lv in levels])
    table.add_row("guesses (S x C)", *[str(results[lv]["num_guesses"]) for lv in levels])
    table.add_row("figure FPR (expected FP)", *["-" if f.get("fpr") is None else
                                               f"{100 * f['fpr']:g}% ({f['expected_false_positives']:.1f})"
                                               for f in figs])
    table.add_row("[bold]leak TPR (ranked)[/]", *[figure_cell(f.get("leak")) for f in figs])
    table.add_row("  by", *["-" if not f.get("leak") else
                            f"{f['leak']['name']} {f['leak']['variant']} ({f['leak']['access']})"
                            + (f", {f['leak']['source'].split('/')[0]}" if lv == "sample" and
                               len(results.get("sample_by_canary", {})) > 1 else "")
                            + f"; best of {f['leak']['candidates']}"
                            for lv, f in zip(levels, figs)])
    table.add_row("declared headline TPR", *[figure_cell(f.get("declared")) for f in figs])
    table.add_row("  attack", *["-" if not f.get("declared") else
                                f"{f['declared']['name']} {f['declared']['variant']} ({f['declared']['access']})"
                                for f in figs])
    test = results.get("headline_test") or {}

    def flag_cell(lv: str) -> str:
        rec = (test.get("levels") or {}).get(lv)
        if rec is None:
            return "-" if test.get("levels") is not None else "-"
        if not rec["flagged"]:
            return f"p = {rec['p_value']:.3f}"
        top = rec["top"]
        return (f"[bold yellow]![/] p = {rec['p_value']:.3f}: {top['name']} {top['variant']} "
                f"{_pct(top['tpr'])} vs {_pct(top['headline_tpr'])} at {100 * top['fpr']:g}% FPR")

    table.add_row("headline test (adjusted p)", *[flag_cell(lv) for lv in levels])
    table.add_row("AUC (declared variant)", *[f"{e['auc']:.3f}" for e in bests])
    table.add_row("empirical ε ≥ (one-run, 95%)", *[one_run_cell(results[lv].get("one_run_epsilon")) for lv in levels])
    table.add_row("pooled ε (indicative, no confidence)",
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
            f = r.get("figure") or {}
            table.add_row(f"  leak, {c} canaries", *(["" for _ in levels[:-1]] + [
                figure_cell(f.get("leak")) + ("" if f.get("fpr") is None else f" at {100 * f['fpr']:g}%")]))
    console.print(table)
    if "population" in results and "sample" in results:
        console.print(ratio_line(results), highlight=False)
    if results.get("bracket"):  # DP runs: the claim between its lower and upper bounds (docs/bounds.md)
        from harness.audit.bracket_text import print_bracket

        att = results["bracket"]["attack"]
        print_bracket(console, results["bracket"], f"DP audit bracket: {att['name']} {att['variant']}, {att['level']} "
                                                   f"level ({att['victims']} victims x {att['canaries']} canaries)")
    per_attack = Table(title="primary variant of each attack" if not details else "every attack variant",
                       title_justify="left", box=box.SIMPLE_HEAD, caption_justify="left",
                       caption="declared headline attacks: " + ", ".join(results[levels[-1]]["headline_attacks"])
                       + "; * primary variant; (headline): the experiment's declared headline variant; TPR: the "
                       "variant's own at its experiment's figure FPR (its own read, not the leak); ε: this variant's "
                       "one-run lower bound (95% for it alone)")
    for col in ("experiment", "attack", "access", "variant", "TPR at figure FPR", "AUC", "ε ≥"):
        per_attack.add_column(col)
    for level, res in experiments(results):
        fpr = (res.get("figure") or {}).get("fpr")
        for e in res["attacks"]:
            if not details and not _is_primary(e):
                continue
            v = (e.get("reading") or {}).get(fpr_key(fpr)) if fpr is not None else None
            per_attack.add_row(level, e["name"], e.get("access", "black-box"),
                               e["variant"] + (" *" if e.get("primary") else "") + (" (headline)" if _is_headline(e, res) else ""),
                               "-" if v is None else f"{_pct(v)} @{100 * fpr:g}%", f"{e['auc']:.3f}",
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
