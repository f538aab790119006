"""``harness compare RUN_A RUN_B``: two runs' headlines and attacks side by side (harness.api.compare)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich import box
from rich.table import Table

from harness.cli.app import app
from harness.cli.common import console, guard


def _tpr(v: Any, ci: Any) -> str:
    if v is None or v != v:
        return "-"
    return f"{100 * v:.1f}%" + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if isinstance(ci, list) and ci else "")


def _diff(row: Any) -> str:
    d = row["difference"]
    if d is None or d != d:
        return "-"
    flag = "" if row["cis_overlap"] is not False else " (CIs disjoint)"
    return f"{100 * d:+.1f} pt{flag}"


@app.command()
def compare(
    run_a: Path = typer.Argument(..., help="a finished run directory"),
    run_b: Path = typer.Argument(..., help="another finished run directory"),
    details: bool = typer.Option(False, help="every attack variant, not only the primary ones"),
) -> None:
    """Two runs side by side: headlines, strongest figures and attacks, the difference (B - A) and
    whether their 95% CIs overlap."""
    from harness.api import compare as compare_runs

    with guard():
        c = compare_runs(run_a, run_b)
    at = f"TPR@{100 * c.fpr:g}% FPR"
    heads = Table(title=f"A: {run_a}\nB: {run_b}", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("level", "figure", "A", f"A {at}", "B", f"B {at}", "B - A"):
        heads.add_column(col)
    for _, r in c.headlines.iterrows():
        heads.add_row(r["level"], r["figure"], str(r["attack_a"] or "-"), _tpr(r["tpr_a"], r["ci_a"]),
                      str(r["attack_b"] or "-"), _tpr(r["tpr_b"], r["ci_b"]), _diff(r))
    console.print(heads)
    if len(c.attacks):
        table = Table(title="attacks in both runs" + ("" if details else " (primary variants)"), title_justify="left",
                      box=box.SIMPLE_HEAD)
        for col in ("experiment", "attack", "variant", f"A {at}", f"B {at}", "B - A"):
            table.add_column(col)
        for _, r in c.attacks.iterrows():
            if details or r["primary"]:
                table.add_row(r["experiment"], r["attack"], r["variant"], _tpr(r["tpr_a"], r["ci_a"]),
                              _tpr(r["tpr_b"], r["ci_b"]), _diff(r))
        console.print(table)
    if c.config_differences:
        console.print("config differences (A -> B): " + "; ".join(f"{k}: {a!r} -> {b!r}"
                                                                  for k, (a, b) in c.config_differences.items()),
                      highlight=False)
    else:
        console.print("The two runs have the same config (run settings aside).")
