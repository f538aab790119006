"""``harness compare RUN_A RUN_B``: two runs' headlines and attacks side by side (harness.api.compare)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich import box
from rich.table import Table

from harness.cli.app import app
from harness.cli.common import guard, table_console

UNRESOLVED = "unresolved"


def _unresolved(resolved: Any) -> bool:
    """Whether a ``resolved_a`` / ``resolved_b`` cell says False (None or NaN: the TPR is absent)."""
    return resolved is not None and resolved == resolved and not resolved


def _tpr(v: Any, ci: Any, resolved: Any) -> str:
    """A TPR with its CI; ``unresolved`` where the run cannot resolve the FPR; ``-`` where absent."""
    if _unresolved(resolved):
        return UNRESOLVED
    if v is None or v != v:
        return "-"
    has_ci = isinstance(ci, list) and len(ci) == 2 and all(x == x for x in ci)
    return f"{100 * v:.1f}%" + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if has_ci else "")


def _diff(row: Any) -> str:
    """B - A in points (flagged where the CIs are disjoint); ``unresolved`` where either TPR is."""
    d = row["difference"]
    if d is None or d != d:
        return UNRESOLVED if _unresolved(row["resolved_a"]) or _unresolved(row["resolved_b"]) else "-"
    flag = "" if row["cis_overlap"] is not False else " (CIs disjoint)"
    return f"{100 * d:+.1f} pt{flag}"


def _variant(row: Any) -> str:
    """The variant, ``*`` where it is its attack's primary variant in both runs, ``*A`` / ``*B`` in one."""
    mark = {(True, True): " *", (True, False): " *A", (False, True): " *B"}.get(
        (bool(row["primary_a"]), bool(row["primary_b"])), "")
    return row["variant"] + mark


def _bounds_line(run: str, b: dict[str, Any]) -> str:
    """One run's provable bounds (results.json ``bounds``) on one line."""
    tprs = ", ".join(f"TPR@{100 * float(k):g}% ≤ {100 * v:.1f}%" for k, v in b.get("tpr_at_fpr", {}).items())
    return (f"{run}: DP ε = {b['epsilon']:.3g} (δ={b.get('delta', 1e-5):g}, {b.get('mechanism', 'DP')})"
            + (f"; provable {tprs}" if tprs else ""))


@app.command()
def compare(
    run_a: Path = typer.Argument(..., help="a finished run directory"),
    run_b: Path = typer.Argument(..., help="another finished run directory"),
    fpr: Optional[float] = typer.Option(None, help="compare at this FPR (e.g. 0.01): 0 or one of both runs' "
                                                   "attack.fprs; default: A's headline FPR"),
    details: bool = typer.Option(False, help="every attack variant, not only the primary ones"),
) -> None:
    """Two runs side by side: each level's leak and declared headline (at their figure FPR) and the
    attacks, the difference (B - A) and whether their 95% intervals agree; what only one run has; the
    provable bounds of a DP run."""
    from harness.api import compare as compare_runs

    with guard():
        c = compare_runs(run_a, run_b, fpr=fpr)
    console = table_console()
    at = f"TPR@{100 * c.fpr:g}% FPR"
    heads = Table(title=f"A: {run_a}\nB: {run_b}", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("level", "figure", "FPR", "A", "A TPR", "B", "B TPR", "B - A"):
        heads.add_column(col)
    for _, r in c.headlines.iterrows():
        fprs = {f"{100 * v:g}%" for v in (r["fpr_a"], r["fpr_b"]) if v is not None and v == v}
        heads.add_row(r["level"], r["figure"], " / ".join(sorted(fprs)) or "-", str(r["attack_a"] or "-"),
                      _tpr(r["tpr_a"], r["ci_a"], r["resolved_a"]), str(r["attack_b"] or "-"),
                      _tpr(r["tpr_b"], r["ci_b"], r["resolved_b"]), _diff(r))
    console.print(heads)
    shown = c.attacks[c.attacks["primary"]] if len(c.attacks) and not details else c.attacks
    for run, b in c.bounds.items():
        console.print(_bounds_line(run, b), highlight=False)
    for run, only in (("A", c.only_in_a), ("B", c.only_in_b)):
        if only:
            console.print(f"only in {run}: {', '.join(only)}", highlight=False)
    if len(shown):
        table = Table(title="attacks in both runs" + ("" if details else " (primary variants)"), title_justify="left",
                      box=box.SIMPLE_HEAD, caption="* primary variant (*A, *B: in that run only)", caption_justify="left")
        for col in ("experiment", "attack", "variant", f"A {at}", f"B {at}", "B - A"):
            table.add_column(col)
        for _, r in shown.iterrows():
            table.add_row(r["experiment"], r["attack"], _variant(r), _tpr(r["tpr_a"], r["ci_a"], r["resolved_a"]),
                          _tpr(r["tpr_b"], r["ci_b"], r["resolved_b"]), _diff(r))
        console.print(table)
    if any(_unresolved(r[f"resolved_{x}"]) for f in (c.headlines, shown) for _, r in f.iterrows() for x in "ab"):
        console.print(f"unresolved: fewer than 3 expected false positives at {100 * c.fpr:g}% FPR (a TPR there is no "
                      f"figure); --fpr compares at another FPR both runs report: "
                      f"{', '.join(f'{f:g}' for f in c.fprs if f != c.fpr)}",
                      highlight=False)
    if c.config_differences:
        console.print("config differences (A -> B): " + "; ".join(f"{k}: {a!r} -> {b!r}"
                                                                  for k, (a, b) in c.config_differences.items()),
                      highlight=False)
    else:
        console.print("The two runs have the same config (run settings aside).")
    console.print(f"Verdict: {c.verdict}", highlight=False, soft_wrap=True)
