"""``harness audit-one-run DEFENSE``: one trained model audited: the DP audit bracket from the one-run
membership design (harness.api.audit_dp_one_run) or the label-flip game (harness.api.audit_one_run)."""

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


#: the designs: the label-flip game (label-DP defenses) and the one-run membership design (DP-SGD)
DESIGNS = ("auto", "label-flip", "membership")


def _design_of(defense: str, design: str) -> str:
    """``auto``: the membership design for a DP-SGD defense (defenses.dpsgd.DPSGD), else the label-flip game."""
    if design != "auto":
        return design
    from defenses.dpsgd import DPSGD
    from harness.plugins import resolve

    return "membership" if issubclass(resolve("defenses", defense), DPSGD) else "label-flip"


@app.command("audit-one-run")
def audit_one_run(
    defense: str = typer.Argument(..., help="defense name or path/to/file.py:ClassName"),
    preset: str = typer.Option("quick", help="quick | cifar10 | paper, or a YAML file"),
    data_dir: Optional[str] = typer.Option(None, "--data-dir", help="dataset folder (cifar10) or .npz file"),
    design: str = typer.Option("auto", help="membership (m canaries, each in one model's training set with "
                               "probability 1/2: the DP audit bracket) or label-flip (the label-DP game); auto: "
                               "membership for DP-SGD defenses, label-flip otherwise"),
    canaries: Optional[int] = typer.Option(None, help="number of canaries (default: 1000 for the membership design, "
                                           "100 for the label-flip game)"),
    canary: Optional[str] = typer.Option(None, help="membership design: the canary kind (mislabeled, blank, ood, "
                                         "uniform; default mislabeled)"),
    shadows: Optional[int] = typer.Option(None, help="membership design: shadow models for LiRA or RMIA (even; "
                                          "default 0: the loss threshold on the target alone)"),
    attack: Optional[str] = typer.Option(None, help="membership design: loss, lira or rmia (default: lira with "
                                         "--shadows, loss without)"),
    confidence: Optional[float] = typer.Option(None, help="membership design: confidence of every lower bound "
                                               "(default 0.95)"),
    gdp_correction: Optional[str] = typer.Option(None, "--gdp-correction", help="membership design: how the GDP "
                                                 "reading of the ROC accounts for its threshold choice: bonferroni "
                                                 "(over every threshold, the default) or split (chosen on half of the "
                                                 "guesses, read on the other)"),
    tau: list[float] = typer.Option([], help="label-flip game: abstention thresholds in [0.5, 0.99] (default: "
                                    "0.50, 0.51, ... 0.99 for the weighted game, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99 for "
                                    "paper and clopper-pearson)"),
    game: Optional[str] = typer.Option(None, help="label-flip game: the headline game: weighted (the paper's text: "
                                       "all C-2 alternatives, weighted ACGR; the default), paper (the same guesses, the "
                                       "authors' code's estimator) or clopper-pearson (one alternative, exact binomial); "
                                       "all three are saved"),
    epochs: Optional[int] = typer.Option(None, help="training epochs"),
    seed: Optional[int] = typer.Option(None),
    device: Optional[str] = typer.Option(None),
    out: Optional[str] = typer.Option(None, help="folder for the result (default: the preset's run.out)"),
    set_: list[str] = typer.Option([], "--set", help="override any config field"),
    wait: bool = typer.Option(False, "--wait", help="membership design: wait for another process using the same "
                              "audit folder instead of stopping"),
    as_json: bool = typer.Option(False, "--json", help="print the result as one JSON object"),
    debug: bool = typer.Option(False, "--debug", help="print full tracebacks of a defense's errors"),
) -> None:
    """One trained model: the DP audit bracket from m canaries (membership design, DP-SGD) or the
    label-flip memorization game (Malek et al. 2021, Game 3): epsilon lower bounds from one run."""
    with guard(debug, interrupted="nothing was saved"):
        from harness.api import audit_dp_one_run, audit_one_run as play  # inside the guard: Ctrl-C while it loads
        from harness.core.errors import ConfigError

        if design not in DESIGNS:
            raise ConfigError(f"--design must be one of {', '.join(DESIGNS)}, got {design!r}")
        chosen = _design_of(defense, design)
        overrides = {**parse_set_options(set_),
                     **flag_overrides(epochs=epochs, seed=seed, device=device, out=out, data_dir=data_dir)}
        if chosen == "membership":
            _refuse(("--tau", bool(tau)), ("--game", game is not None), design="membership")
            from harness.cli.common import ProgressView

            with guard(debug, interrupted="every finished model is kept in the audit's folder; the same command "
                       "resumes"), ProgressView() as view:
                res, folder = audit_dp_one_run(defense, preset, overrides, canaries=1000 if canaries is None else canaries,
                                               canary=canary or "mislabeled", shadows=shadows or 0, attack=attack,
                                               confidence=0.95 if confidence is None else confidence,
                                               gdp_correction=gdp_correction or "bonferroni", wait=wait, progress=view)
            if as_json:
                print(json.dumps(res))
                return
            _print_bracket(res, folder)
            return
        _refuse(("--canary", canary is not None), ("--shadows", shadows is not None), ("--attack", attack is not None),
                ("--confidence", confidence is not None), ("--gdp-correction", gdp_correction is not None),
                ("--wait", wait), design="label-flip")
        game = game or "weighted"
        n = 100 if canaries is None else canaries
        with console.status(f"training one {defense} model with {n} label-flip canaries..."):
            res, path = play(defense, preset, overrides, canaries=n, taus=tau or None, game=game)
    if as_json:
        print(json.dumps(res))
        return
    _print_game(res, defense, game, n, path)


def _refuse(*flags: tuple[str, bool], design: str) -> None:
    """No flag is ignored: one that the chosen design does not read is a ConfigError."""
    from harness.core.errors import ConfigError

    given = [name for name, used in flags if used]
    if given:
        other = "label-flip" if design == "membership" else "membership"
        raise ConfigError(f"{', '.join(given)} belong(s) to the {other} design; this audit uses the {design} design "
                          f"(--design {other} to run that one)")


def _print_bracket(res: dict[str, Any], folder: Any) -> None:
    from harness.audit.bracket_text import print_bracket

    spec, tgt, br = res["spec"], res["target"], res["bracket"]
    att = br["attack"]
    print_bracket(console, br, f"DP audit bracket: {res['defense']} ({res['preset']}), {spec['canaries']} "
                               f"{spec['canary']} canaries in one model ({att['members']} included), {att['variant']}")
    one = br["one_run"]
    for key, what in (("fdp_at", "f-DP"), ("steinke_at", "Steinke et al.")):
        at = one.get(key)
        if at:
            console.print(f"  {what}: {at['correct']} of {at['guesses']} guesses right ({at['set']}), at level "
                          f"{one['alpha']:g} / {one['tests']} tests", highlight=False)
    console.print(f"Target: test accuracy {100 * tgt['test_accuracy']:.1f}% on {tgt['train_size']} training samples "
                  f"({spec['canaries']} of the {res['pool_size']} pool samples are canaries). Saved: "
                  f"{folder / 'result.json'}; the bracket's figure: {folder / 'report.html'}", highlight=False)


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
