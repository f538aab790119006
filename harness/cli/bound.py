"""``harness bound``: provable membership-inference bounds from the command line (docs/bounds.md);
the numbers come from :mod:`harness.bounds.summary`, this module parses and prints.

    bound thudi --epsilon E [--delta D] --p1 P [--tpr T] [--tnr T] [--json]   accuracy bounds, prior bounds
    bound sgm --q Q --noise Z --steps T [--fpr F ...] [--delta D] [--json]      optimal DP-SGD bound
    bound dpsgd --batch-size B --dataset-size N --epochs E --noise Z [...]      same, T = E ceil(N/B), q = B/N (or 1/ceil(N/B))

``--json`` prints exactly one JSON object (non-finite numbers as null). Bad input prints one
``error:`` line to stderr and exits with code 2.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Optional

import typer
from rich.markup import escape
from rich.table import Table

from harness.cli.common import console, fail
from harness.bounds.summary import dpsgd_bounds, sgm_bounds, thudi_bounds
from harness.core.errors import ConfigError

bound_app = typer.Typer(
    add_completion=False, no_args_is_help=True,
    help="Provable membership-inference bounds from DP parameters (Thudi et al., Mahloujifar et al.).",
)


def _finite_or_none(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _finite_or_none(v) for k, v in x.items()}
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _compute(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``fn()``, with a bad input reported as one ``error:`` line and exit code 2."""
    try:
        return fn()
    except (ConfigError, ValueError) as e:
        fail(str(e))
        raise  # unreachable: fail exits


def _emit_json(obj: dict[str, Any]) -> None:
    typer.echo(json.dumps(_finite_or_none(obj), allow_nan=False))


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    return f"{x:.7g}"


def _row(table: Table, *cells: str) -> None:
    table.add_row(*(escape(c) for c in cells))


@bound_app.command()
def thudi(
    epsilon: float = typer.Option(..., help="epsilon of the (eps, delta)-DP trainer"),
    delta: float = typer.Option(0.0, help="delta of the (eps, delta)-DP trainer"),
    p1: float = typer.Option(..., "--p1", help="prior P(x in D) of the target point, in (0, 1)"),
    tpr: Optional[float] = typer.Option(None, help="the adversary's TPR floor (needed when delta > 0)"),
    tnr: Optional[float] = typer.Option(None, help="the adversary's TNR floor (negative accuracy, delta > 0)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Positive/negative accuracy bounds (Thudi et al.) beside the earlier advantage bounds."""
    res = _compute(lambda: thudi_bounds(epsilon, delta, p1, tpr, tnr))
    if as_json:
        _emit_json(res)
        return
    table = Table(title=f"MI bounds for ({epsilon:g}, {delta:g})-DP at prior P1 = {p1:g}", title_justify="left")
    for col in ("bound", "value", "quantity"):
        table.add_column(col)
    note = "" if delta == 0 else (" (TPR floor given)" if tpr else " (vacuous without --tpr)")
    _row(table, "Thudi positive accuracy <=", _fmt(res["pos_acc_upper"]), "precision Pr[x in D | 'member']" + note)
    _row(table, "Thudi positive accuracy >=", _fmt(res["pos_acc_lower"]), "precision")
    _row(table, "Thudi negative accuracy <=", _fmt(res["neg_acc_upper"]), "Pr[x not in D | 'non-member']")
    _row(table, "Thudi negative accuracy >=", _fmt(res["neg_acc_lower"]), "Pr[x not in D | 'non-member']")
    _row(table, "Thudi positive advantage <=", _fmt(res["positive_advantage"]), "2 (precision - P1), eps-DP")
    adv = res["advantage_bounds"]
    _row(table, "Yeom advantage <=", _fmt(adv["yeom"]), "e^eps - 1, eps-DP, clipped to 1")
    _row(table, "Erlingsson advantage <=", _fmt(adv["erlingsson"]), "1 - e^-eps + delta e^-eps")
    _row(table, "Humphries advantage <=", _fmt(adv["humphries"]), "(e^eps - 1 + 2 delta)/(e^eps + 1)")
    _row(table, "Sablayrolles advantage <=", _fmt(adv["sablayrolles"]), "2 (min(1, P1 + eps/4) - P1), eps-DP")
    _row(table, "Mahloujifar advantage <=", _fmt(adv["mahloujifar"]), "2 sigmoid(eps) - 1, P1 = 1/2")
    console.print(table)


def _print_sgm(res: dict[str, Any], title: str) -> None:
    table = Table(title=title, title_justify="left")
    for col in ("bound", "value", "note"):
        table.add_column(col)
    _row(table, "optimal advantage (TV) <=", _fmt(res["advantage"]), "Mahloujifar et al. Thm 6, PLD")
    _row(table, "Pinsker advantage <=", _fmt(res["advantage_pinsker"]), "sqrt(KL/2), clipped to 1")
    _row(table, f"epsilon at delta={res['delta']:g}", _fmt(res["epsilon"]), "PLD, add/remove")
    for k, v in res["tpr_at_fpr"].items():
        _row(table, f"TPR at FPR={k} <=", _fmt(v), "min over eps of the (eps, delta(eps)) trade-off")
    console.print(table)
    console.print(f"[dim]PLD discretization interval {res['value_discretization_interval']:g}[/]")


@bound_app.command("sgm")
def sgm_cmd(
    q: float = typer.Option(..., "--q", help="Poisson sampling rate, in (0, 1]"),
    noise: float = typer.Option(..., help="noise multiplier z = sigma / clipping norm"),
    steps: int = typer.Option(..., help="number of steps T"),
    fpr: list[float] = typer.Option([], "--fpr", help="FPR at which to bound the TPR (repeatable; default 0.001 0.01)"),
    delta: float = typer.Option(1e-5, help="delta for the reported epsilon"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Optimal MI bound of T Poisson-subsampled Gaussian steps (Mahloujifar et al.)."""
    res = _compute(lambda: sgm_bounds(q, noise, steps, fpr, delta))
    if as_json:
        _emit_json(res)
        return
    _print_sgm(res, f"DP-SGD MI bounds: q = {q:g}, noise = {noise:g}, T = {steps}")


@bound_app.command()
def dpsgd(
    batch_size: int = typer.Option(..., "--batch-size", help="expected batch size B"),
    dataset_size: int = typer.Option(..., "--dataset-size", help="training set size N"),
    epochs: float = typer.Option(..., help="epochs E"),
    noise: float = typer.Option(..., help="noise multiplier z = sigma / clipping norm"),
    fpr: list[float] = typer.Option([], "--fpr", help="FPR at which to bound the TPR (repeatable; default 0.001 0.01)"),
    delta: float = typer.Option(1e-5, help="delta for the reported epsilon"),
    poisson_rate: str = typer.Option("b_over_n", "--poisson-rate",
                                     help="b_over_n: q = B/N; paper: q = 1/ceil(N/B) (Opacus's loader, the paper's code)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """The sgm bound for DP-SGD hyperparameters: T = epochs * ceil(N/B), q = B/N or 1/ceil(N/B) (Poisson sampling)."""
    res = _compute(lambda: dpsgd_bounds(batch_size, dataset_size, epochs, noise, fpr, delta, poisson_rate))
    q, steps = res["q"], res["steps"]
    if as_json:
        _emit_json(res)
        return
    _print_sgm(res, f"DP-SGD MI bounds: B = {batch_size}, N = {dataset_size}, {epochs:g} epochs "
                    f"-> q = {q:.6g}, T = {steps}, noise = {noise:g}")


if __name__ == "__main__":  # pragma: no cover
    bound_app()
