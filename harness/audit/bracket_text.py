"""The audit bracket as text: its table rows, the attack's TPR beside the provable bound, the
"claimed / best lower bound" line (shared by the terminal report, ``harness audit-one-run`` and the
HTML page in leaderboard/bracket.py), and :func:`print_bracket` for the terminal."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _eps(v: Any) -> str:
    if v is None:
        return "-"
    v = float(v)
    return "∞" if math.isinf(v) else f"{v:.3g}"


def delta_text(d: Any) -> str:
    """1e-05 as 1e-5."""
    m, _, e = f"{float(d):g}".partition("e")
    return f"{m}e{int(e)}" if e else m


def _ratio(v: Any) -> str:
    if v is None:
        return "-"
    v = float(v)
    return "∞" if math.isinf(v) else f"{v:.3g}x"


def bracket_rows(bracket: dict[str, Any]) -> list[dict[str, str]]:
    """The table's rows as text: side, bound, epsilon, mu, confidence, assumption, claimed / this."""
    claimed = bracket.get("claimed") or {}
    d = delta_text(bracket["delta"])
    rows = []
    if claimed.get("epsilon_rdp") is not None:
        rows.append({"side": "claimed", "bound": f"accountant ({claimed.get('accountant', 'rdp')})",
                     "epsilon": _eps(claimed["epsilon_rdp"]), "mu": "-", "confidence": "proof",
                     "assumes": f"the DP-SGD analysis; δ = {delta_text(claimed.get('accountant_delta') or d)}",
                     "ratio_pld": "", "ratio_rdp": ""})
    if claimed.get("epsilon_pld") is not None:
        rows.append({"side": "claimed", "bound": "PLD, same mechanism (tight)", "epsilon": _eps(claimed["epsilon_pld"]),
                     "mu": "-", "confidence": "proof",
                     "assumes": (f"Poisson-subsampled Gaussian, q {claimed['sample_rate']:.4g}, noise "
                                 f"{claimed['noise_multiplier']:g}, {claimed['steps']} steps; δ = {d}"),
                     "ratio_pld": "", "ratio_rdp": ""})
    for lb in bracket["lower"]:
        rows.append({"side": "lower", "bound": f"{lb['name']} [{lb['paper']}]", "epsilon": _eps(lb["epsilon"]),
                     "mu": "-" if lb.get("mu") is None else f"{float(lb['mu']):.3g}",
                     "confidence": f"{100 * float(lb['confidence']):g}%", "assumes": lb["valid"],
                     "ratio_pld": _ratio(lb.get("ratio_pld")), "ratio_rdp": _ratio(lb.get("ratio_rdp"))})
    return rows


def tpr_points(bracket: dict[str, Any],
               fprs: tuple[float, ...] = (0.001, 0.01, 0.1)) -> list[tuple[float, float, float | None]]:
    """(FPR, the attack's TPR, the provable TPR bound) at a few FPRs."""
    roc = bracket["attack"]["roc"]
    curve = (bracket.get("claimed") or {}).get("tpr_curve")
    out = []
    for f in fprs:
        ok = [t for x, t in zip(roc["fpr"], roc["tpr"]) if x <= f + 1e-12]
        tpr = max(ok) if ok else 0.0
        up = float(np.interp(math.log10(f), np.log10(curve["fpr"]), curve["tpr"])) if curve else None
        out.append((f, tpr, up))
    return out


def summary_line(bracket: dict[str, Any]) -> str:
    """"claimed / best lower bound" in words."""
    best = bracket["best_lower"]
    claimed = bracket.get("claimed") or {}
    if best["epsilon"] <= 0:
        tail = (f" against the claimed ε {_eps(claimed['epsilon_pld'])} (PLD), {_eps(claimed.get('epsilon_rdp'))} "
                "(accountant): claimed / best lower bound = ∞" if claimed.get("epsilon_pld") is not None else "")
        return f"No lower bound is above 0 at this confidence{tail}."
    name = next(lb["name"] for lb in bracket["lower"] if lb["key"] == best["key"])
    if claimed.get("epsilon_pld") is None:
        return f"Best lower bound: ε ≥ {_eps(best['epsilon'])} ({name}); no DP claim to compare with."
    return (f"Claimed / best lower bound: ε {_eps(claimed['epsilon_pld'])} (PLD) / {_eps(best['epsilon'])} ({name}) = "
            f"{_ratio(bracket['ratio_pld'])}; the accountant's ε {_eps(claimed.get('epsilon_rdp'))} / "
            f"{_eps(best['epsilon'])} = {_ratio(bracket['ratio_rdp'])}.")


#: short names of the rows in the terminal table
SHORT = {"steinke": "one-run ε (Steinke et al. 2023)", "fdp": "one-run f-DP (Mahloujifar+ 2025)",
         "gdp": "GDP reading (Nasr et al. 2023)"}


def print_bracket(console: Any, bracket: dict[str, Any], title: str) -> None:
    """The bracket as a rich table on ``console`` (what each bound assumes as numbered notes below it),
    then the TPR points and the ratio line."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    eps_col = f"ε (δ={delta_text(bracket['delta'])})"
    for col, just in (("", "left"), ("bound", "left"), (eps_col, "right"), ("μ", "right"), ("conf.", "right"),
                      ("PLD ε / this", "right")):
        table.add_column(col, justify=just)
    rows = bracket_rows(bracket)
    lows = [lb for lb in bracket["lower"]]
    for r in rows:
        if r["side"] == "claimed":
            table.add_row("upper", r["bound"], r["epsilon"], r["mu"], r["confidence"], "")
    for i, lb in enumerate(lows, 1):
        r = rows[len(rows) - len(lows) + i - 1]
        table.add_row("lower", f"{SHORT[lb['key']]} [{i}]", r["epsilon"], r["mu"], r["confidence"], r["ratio_pld"])
    console.print(table)
    for i, lb in enumerate(lows, 1):
        console.print(f"  [{i}] {lb['paper']}: {lb['valid']}", highlight=False)
    pts = tpr_points(bracket)
    console.print("  ".join(f"TPR@{100 * f:g}%: attack {100 * t:.1f}%"
                            + (f" (provable ≤ {100 * u:.1f}%)" if u is not None else "") for f, t, u in pts),
                  highlight=False)
    console.print(summary_line(bracket), highlight=False)
