"""``harness audit-one-run DEFENSE``: the label-flip game on one model (harness.api.audit_one_run)."""

from __future__ import annotations

import json
from typing import Any, Optional

import typer
from rich.table import Table

from harness.cli.app import app
from harness.cli.common import console, flag_overrides, guard
from harness.core.config import parse_set_options

#: the taus shown in the table (besides the best one) when the game tried more than 10
SHOWN_TAUS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)


@app.command("audit-one-run")
def audit_one_run(
    defense: str = typer.Argument(..., help="defense name or path/to/file.py:ClassName"),
    preset: str = typer.Option("quick", help="quick | cifar10 | paper, or a YAML file"),
    data_dir: Optional[str] = typer.Option(None, "--data-dir", help="dataset folder (cifar10) or .npz file"),
    canaries: int = typer.Option(100, help="number of label-flip canaries in the one trained model"),
    tau: list[float] = typer.Option([], help="abstention thresholds in [0.5, 0.99] (default: 0.50, 0.51, ... 0.99 "
                                    "for the weighted game, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99 for paper and "
                                    "clopper-pearson)"),
    game: str = typer.Option("weighted", help="the headline game: weighted (the paper's text: all C-2 alternatives, "
                             "weighted ACGR), paper (the same guesses, the authors' code's estimator) or "
                             "clopper-pearson (one alternative, exact binomial); all three are saved"),
    epochs: Optional[int] = typer.Option(None, help="training epochs"),
    seed: Optional[int] = typer.Option(None),
    device: Optional[str] = typer.Option(None),
    out: Optional[str] = typer.Option(None, help="folder for the JSON result (default: the preset's run.out)"),
    set_: list[str] = typer.Option([], "--set", help="override any config field"),
    as_json: bool = typer.Option(False, "--json", help="print the result as one JSON object"),
    debug: bool = typer.Option(False, "--debug", help="print full tracebacks of a defense's errors"),
) -> None:
    """Label-flip memorization game on ONE trained model (Malek et al. 2021, Game 3): an epsilon lower bound."""
    with guard(debug, interrupted="nothing was saved"):
        from harness.api import audit_one_run as play  # inside the guard: Ctrl-C while it loads

        overrides = {**parse_set_options(set_),
                     **flag_overrides(epochs=epochs, seed=seed, device=device, out=out, data_dir=data_dir)}
        with console.status(f"training one {defense} model with {canaries} label-flip canaries..."):
            res, path = play(defense, preset, overrides, canaries=canaries, taus=tau or None, game=game)
    if as_json:
        print(json.dumps(res))
        return
    _print_game(res, defense, game, canaries, path)


#: footnotes for the rows whose interval is not the normal one: (mark, note)
INTERVAL_NOTES = {
    "exact-canaries": ("‡", "every active canary at the same rate: the normal interval would have zero width (at a "
                            "rate of 1, ε ≥ inf); the interval is exact over the canaries instead (docs/bounds.md)."),
    "rule-of-three": ("†", "every guess right (or every one wrong, flipped): the authors' rule of three, "
                           "ACGR ≥ 1 - 3 / N_eff (docs/bounds.md)."),
    "all-correct-few": ("*", "every guess right (or every one wrong, flipped) with at most 50 active canaries: the "
                             "authors' code takes no evidence from it (ACGR ≥ 1/2)."),
}


def _print_game(res: dict[str, Any], defense: str, game: str, canaries: int, path: Any) -> None:
    g = res[game]
    rows = g["rows"]
    best = next((i for i, r in enumerate(rows) if r["tau"] == g.get("best_tau")),
                max(range(len(rows)), key=lambda i: rows[i]["epsilon_lo"]))
    shown = [i for i, r in enumerate(rows) if i == best or len(rows) <= 10 or round(r["tau"], 2) in SHOWN_TAUS]
    rate = "CGR" if game == "clopper-pearson" else "ACGR"
    table = Table(title=f"label-flip game ({game}): {defense} ({res['preset']}), {canaries} canaries, one model",
                  title_justify="left")
    for col in ("tau", "guesses", f"{rate} [95% CI]", "ε (point)", "ε ≥ (95%)"):
        table.add_column(col, justify="right")
    for i in shown:
        r = rows[i]
        ci = f"{r[rate.lower()]:.3f} [{r[rate.lower() + '_lo']:.3f}, {r[rate.lower() + '_hi']:.3f}]" if r["num_guesses"] else "-"
        if r.get("flipped"):
            ci += " ⇄"
        if r.get("interval") in INTERVAL_NOTES:
            ci += " " + INTERVAL_NOTES[r["interval"]][0]
        table.add_row(f"{r['tau']:.2f}" + (" (best)" if i == best else ""), str(r["num_guesses"]), ci,
                      f"{r['epsilon']:.2f}", f"{r['epsilon_lo']:.2f}")
    console.print(table)
    for kind in dict.fromkeys(rows[i].get("interval") for i in shown):
        if kind in INTERVAL_NOTES:
            console.print(f"{INTERVAL_NOTES[kind][0]} {INTERVAL_NOTES[kind][1]}", highlight=False)
    if any(rows[i].get("flipped") for i in shown):
        console.print("⇄ the mean rate was below 1/2: the authors' code flips it to 1 - rate (the DP definition is "
                      "symmetric).", highlight=False)
    console.print(f"Empirical label-ε ≥ {g['best_epsilon_lo']:.2f} at the best of {len(rows)} taus (the paper's figure: "
                  f"tau chosen after the fact); {g['best_epsilon_lo_bonferroni']:.2f} with the Bonferroni correction "
                  f"(valid). Valid: {g['validity']}.", highlight=False)
    console.print(f"Estimator: {g['estimator']}.", highlight=False)
    for other in (k for k, v in res.items() if k != game and isinstance(v, dict) and "estimator" in v):
        console.print(f"The {other} game on the same model: ε ≥ {res[other]['best_epsilon_lo']:.2f} "
                      f"(corrected {res[other]['best_epsilon_lo_bonferroni']:.2f}).", highlight=False)
    claim = f" Claimed label ε: {res['label_epsilon']:.3g}." if res.get("label_epsilon") is not None else ""
    info = res.get("defense_info") or {}
    if "label_epsilon_data_dependent" in info:  # PATE-FM: its data-dependent analysis and its teachers
        claim += (f" Data-dependent label ε on this run's votes: {info['label_epsilon_data_dependent']:.3g} (not a DP "
                  f"guarantee). Teacher ensemble: {100 * info['ensemble_accuracy']:.1f}% of the "
                  f"{info['queries_answered']} released labels correct ({info['queries_asked']} queries asked).")
    console.print(f"Test accuracy {100 * res['test_accuracy']:.1f}%.{claim} Saved: {path}", highlight=False)
