"""The audit bracket as text: its table rows, the attack's TPR beside the provable bound, the
"claimed / ε lower bound" line with what the mu bounds rule out (shared by the terminal report,
``harness audit-one-run`` and the HTML page in leaderboard/bracket.py), and :func:`print_bracket`
for the terminal. The ratio divides by Steinke et al.'s one-run epsilon alone; the f-DP bound and the
GDP reading (nominal) are shown as the mu-GDP they rule out (harness/bounds/bracket.py)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from harness.bounds.bracket import NOMINAL_WHY, current_bracket


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


def _mu_note(lb: dict[str, Any], delta: Any) -> str:
    """The epsilon of the mu-GDP mechanism a ``mu`` bound rules out, as a secondary annotation."""
    if lb.get("epsilon_of_mu") is None or not lb.get("mu"):
        return ""
    return f" (that {float(lb['mu']):.3g}-GDP mechanism's ε at δ = {delta_text(delta)}: {_eps(lb['epsilon_of_mu'])})"


def confidence_text(lb: dict[str, Any]) -> str:
    """"95%", or "95% nominal" for a bound whose confidence is nominal (the GDP reading)."""
    return f"{100 * float(lb['confidence']):g}%" + (" nominal" if lb.get("nominal") else "")


def bracket_rows(bracket: dict[str, Any]) -> list[dict[str, str]]:
    """The table's rows as text: side, bound, epsilon, mu (the mu-GDP ruled out: every mu below it),
    confidence, assumption, claimed / this (for the epsilon lower bound only: "n/a" where a bound is
    on mu)."""
    bracket = current_bracket(bracket)
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
        genuine = lb.get("kind") == "epsilon"
        rows.append({"side": SIDE[lb["key"]], "bound": f"{lb['name']} [{lb['paper']}]",
                     "epsilon": _eps(lb["epsilon"]) if genuine else "-",
                     "mu": "-" if lb.get("mu") is None else f"{float(lb['mu']):.3g}",
                     "confidence": confidence_text(lb), "assumes": lb["valid"] + _mu_note(lb, bracket["delta"]),
                     "ratio_pld": _ratio(lb.get("ratio_pld")) if genuine else "n/a",
                     "ratio_rdp": _ratio(lb.get("ratio_rdp")) if genuine else "n/a"})
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
    """"claimed / the epsilon lower bound" in words (Steinke et al.'s one-run epsilon, the only genuine
    lower bound on the trainer's epsilon), then what the mu bounds rule out, outside the ratio."""
    bracket = current_bracket(bracket)
    best = bracket["epsilon_lower"]
    claimed = bracket.get("claimed") or {}
    name = RATIO_NAME[best["key"]]
    if best["epsilon"] <= 0:
        tail = (f" against the claimed ε {_eps(claimed['epsilon_pld'])} (PLD), {_eps(claimed.get('epsilon_rdp'))} "
                "(accountant): claimed / ε lower bound = ∞" if claimed.get("epsilon_pld") is not None else "")
        head = f"No ε lower bound is above 0 at this confidence ({name}: 0){tail}."
    elif claimed.get("epsilon_pld") is None:
        head = f"ε lower bound: ε ≥ {_eps(best['epsilon'])} ({name}); no DP claim to compare with."
    else:
        head = (f"Claimed / ε lower bound: ε {_eps(claimed['epsilon_pld'])} (PLD) / {_eps(best['epsilon'])} ({name}) = "
                f"{_ratio(bracket['ratio_pld'])}; the accountant's ε {_eps(claimed.get('epsilon_rdp'))} / "
                f"{_eps(best['epsilon'])} = {_ratio(bracket['ratio_rdp'])}.")
    return f"{head} {mu_line(bracket)}".rstrip()


def mu_line(bracket: dict[str, Any]) -> str:
    """What the f-DP bound and the GDP reading rule out, said to be outside the ratio (they bound the
    Gaussian mu, not the trainer's epsilon); "" where neither is above 0."""
    bracket = current_bracket(bracket)
    parts = [f"{MU_WORDS[lb['key']]} μ-GDP for μ < {float(lb['mu']):.3g} ({confidence_text(lb)})"
             for lb in bracket["lower"] if lb.get("kind") == "mu" and lb.get("mu")]
    if not parts:
        return ""
    return ("Outside the ratio (they bound μ, not the trainer's ε): " + "; ".join(parts) + ".")


#: the epsilon lower bound in the ratio's words
RATIO_NAME = {"steinke": "Steinke et al.'s one-run ε"}
#: the side column of each lower bound's row
SIDE = {"steinke": "lower: ε", "fdp": "rules out μ-GDP", "gdp": "rules out μ-GDP (nominal)"}
#: the mu bounds in words (:func:`mu_line`)
MU_WORDS = {"fdp": "the one-run f-DP bound rules out", "gdp": f"the GDP reading (nominal: {NOMINAL_WHY}) rules out"}
#: short names of the rows in the terminal table
SHORT = {"steinke": "one-run ε (Steinke et al. 2023)", "fdp": "one-run f-DP (Mahloujifar+ 2025)",
         "gdp": "GDP reading (Nasr et al. 2023), nominal"}
#: the terminal table's first column for each lower bound
TERMINAL_SIDE = {"steinke": "lower", "fdp": "rules out", "gdp": "rules out"}


def print_bracket(console: Any, bracket: dict[str, Any], title: str) -> None:
    """The bracket as a rich table on ``console`` (what each bound assumes as numbered notes below it),
    then the TPR points and the ratio line."""
    from rich import box
    from rich.table import Table

    bracket = current_bracket(bracket)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    eps_col = f"ε (δ={delta_text(bracket['delta'])})"
    # at 80 columns the bound's name keeps 19 ("PLD, same mechanism") and the ratio's header wraps
    for col, just, least, most in (("", "left", None, None), ("bound", "left", 19, None),
                                   (eps_col, "right", None, 10), ("μ <", "right", None, None),
                                   ("conf.", "right", None, 11), ("PLD ε / this", "right", None, 9)):
        table.add_column(col, justify=just, min_width=least, max_width=most)
    rows = bracket_rows(bracket)
    lows = list(bracket["lower"])
    for r in rows:
        if r["side"] == "claimed":
            table.add_row("upper", r["bound"], r["epsilon"], r["mu"], r["confidence"], "")
    for i, lb in enumerate(lows, 1):
        r = rows[len(rows) - len(lows) + i - 1]
        table.add_row(TERMINAL_SIDE[lb["key"]], f"{SHORT[lb['key']]} [{i}]", r["epsilon"], r["mu"], r["confidence"],
                      r["ratio_pld"])
    console.print(table)
    for i, lb in enumerate(lows, 1):
        console.print(f"  [{i}] {lb['paper']}: {lb['valid']}{_mu_note(lb, bracket['delta'])}", highlight=False)
    pts = tpr_points(bracket)
    console.print("  ".join(f"TPR@{100 * f:g}%: attack {100 * t:.1f}%"
                            + (f" (provable ≤ {100 * u:.1f}%)" if u is not None else "") for f, t, u in pts),
                  highlight=False)
    console.print(summary_line(bracket), highlight=False)
