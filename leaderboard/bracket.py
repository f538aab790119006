"""The audit bracket on a page: one figure and one table (docs/bounds.md, "The audit bracket").

- :func:`bracket_svg`: TPR vs FPR on log axes from 1e-5 to 1: the attack's ROC (solid), the
  provable TPR bound of the claimed mechanism (solid, dark), and for each lower bound the curve of
  the mechanism it rules out (dotted: the (eps, delta) line min(1, e^eps FPR + delta) of Steinke et
  al.'s epsilon, the only lower bound on the trainer's epsilon; dashed: mu-GDP, Phi(Phi^-1(FPR) + mu),
  at the f-DP bound and at the GDP reading, whose confidence is nominal); the chance diagonal grey.
  The true trade-off of the trainer lies below the provable curve, and the bounds say it is not
  entirely below the curves they rule out.
- :func:`bracket_table`: every bound with its confidence (the GDP reading's marked nominal), what it
  assumes, its paper and "claimed / this" for the PLD and the accountant's epsilon (for Steinke et
  al.'s epsilon only: the other two bound mu); the ratio to the epsilon lower bound, and the mu-GDP
  the other two rule out.
- :func:`bracket_section`: both, for the run's page and the leaderboard entry
  (:func:`leaderboard.site.entry_html`) and the page of ``harness audit-one-run``
  (:func:`leaderboard.one_run_page.one_run_page`).
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

import numpy as np

from harness.audit.bracket_text import _eps, bracket_rows, delta_text, summary_line, tpr_points
from harness.bounds.bracket import current_bracket
from leaderboard.plots import LOG_MIN, _label, _points, roc_axes

#: legend names of the lower bounds
SHORT_LEGEND = {"steinke": "Steinke et al.", "fdp": "f-DP (one run)", "gdp": "GDP (nominal)"}
#: colours: attack, provable bound, Steinke, f-DP, GDP reading
COLOURS = {"roc": "#1f77b4", "upper": "#222222", "steinke": "#d62728", "fdp": "#2ca02c", "gdp": "#ff7f0e"}


def lower_curves(bracket: dict[str, Any], fprs: np.ndarray) -> list[tuple[str, str, np.ndarray]]:
    """(key, label, TPR at ``fprs``) of the mechanism each lower bound rules out: the (eps, delta)
    line of the epsilon lower bound, the mu-GDP curve of each mu bound."""
    from harness.bounds.gdp import blow_up

    out = []
    bracket = current_bracket(bracket)
    delta = float(bracket["delta"])
    for lb in bracket["lower"]:
        if lb.get("kind") == "mu":
            if not lb.get("mu"):
                continue
            tpr = blow_up(fprs, float(lb["mu"]))
            label = f"{SHORT_LEGEND[lb['key']]}: rules out μ < {float(lb['mu']):.3g}"
        else:
            if lb["epsilon"] <= 0:
                continue
            tpr = np.minimum(1.0, np.exp(min(float(lb["epsilon"]), 700.0)) * fprs + delta)
            label = f"{SHORT_LEGEND[lb['key']]}: ε ≥ {_eps(lb['epsilon'])}"
        out.append((lb["key"], label, np.asarray(tpr, dtype=np.float64)))
    return out


def bracket_svg(bracket: dict[str, Any], title: str, width: int = 660, height: int = 440) -> str:
    """The bracket's figure (module docstring); every label escaped."""
    left, right, top, bottom = 60, width - 250, 30, height - 45
    fprs = np.logspace(math.log10(LOG_MIN), 0, 61)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot bracket" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_label(title, 200)}">',
             f'<title>{escape(title, quote=True)}</title>',
             f'<text x="{(left + right) / 2}" y="18" text-anchor="middle" font-size="13">{_label(title, 60)}</text>']
    parts += roc_axes(left, right, top, bottom, height)
    legend: list[tuple[str, str, str]] = []  # (label, colour, dash)

    def curve(label: str, f: Any, t: Any, colour: str, dash: str, w: float) -> None:
        pts = _points(f, t, left, right, top, bottom)
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<polyline class="curve" fill="none" stroke="{colour}" stroke-width="{w}"{dashed} points="{pts}">'
                     f'<title>{escape(label, quote=True)}</title></polyline>')
        legend.append((label, colour, dash))

    claimed = bracket.get("claimed") or {}
    if claimed.get("tpr_curve"):
        c = claimed["tpr_curve"]
        curve(f"provable TPR ≤ (PLD ε {_eps(claimed.get('epsilon_pld'))})", c["fpr"], c["tpr"],
              COLOURS["upper"], "", 2.0)
    roc = bracket["attack"]["roc"]
    att = bracket["attack"]
    curve(f"attack: {att.get('variant', att.get('name'))}", roc["fpr"], roc["tpr"], COLOURS["roc"], "", 1.8)
    for key, label, tpr in lower_curves(bracket, fprs):
        curve(label, fprs, tpr, COLOURS[key], "2 2" if key == "steinke" else "6 3", 1.4)
    for i, (label, colour, dash) in enumerate(legend):
        ly = top + 12 + 16 * i
        d = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<line x1="{right + 10}" y1="{ly - 4}" x2="{right + 30}" y2="{ly - 4}" stroke="{colour}" '
                     f'stroke-width="2"{d}/>')
        parts.append(f'<text x="{right + 34}" y="{ly}" font-size="10"><title>{escape(label, quote=True)}</title>'
                     f'{_label(label, 40)}</text>')
    ly = top + 12 + 16 * len(legend) + 6
    parts.append(f'<text x="{right + 10}" y="{ly}" font-size="9" fill="#666">dashed/dotted: the mechanism each</text>')
    parts.append(f'<text x="{right + 10}" y="{ly + 11}" font-size="9" fill="#666">lower bound rules out</text>')
    parts.append("</svg>")
    return "".join(parts)


def bracket_table(bracket: dict[str, Any]) -> str:
    """The table (module docstring) with the summary line and the attack's TPR against the provable
    bound at 0.1%, 1% and 10% FPR."""
    heads = ("side", "bound", f"ε (δ = {delta_text(bracket['delta'])})", "μ-GDP ruled out: μ <", "confidence",
             "valid under", "claimed PLD ε / this", "accountant's ε / this")
    cls = {"side": ' class="name"', "bound": ' class="wrap"', "assumes": ' class="wrap"'}
    head = "".join(f"<th{cls['side'] if i < 2 else ''}>{escape(h)}</th>" for i, h in enumerate(heads))
    keys = ("side", "bound", "epsilon", "mu", "confidence", "assumes", "ratio_pld", "ratio_rdp")
    body = "".join("<tr>" + "".join(f"<td{cls.get(k, '')}>{escape(r[k])}</td>" for k in keys) + "</tr>"
                   for r in bracket_rows(bracket))
    tprs = "; ".join(f"TPR@{100 * f:g}%: attack {100 * t:.1f}%"
                     + (f", provable ≤ {100 * u:.1f}%" if u is not None else "") for f, t, u in tpr_points(bracket))
    # in a scroll box: eight columns of long bound names are wider than a phone (the page is not)
    return (f'<div class="scroll"><table class="bracket"><tr>{head}</tr>{body}</table></div>'
            f"<p><b>{escape(summary_line(bracket))}</b></p><p class=\"muted\">{escape(tprs)}</p>")


def bracket_section(bracket: dict[str, Any] | None) -> str:
    """The bracket's heading, note, figure and table for an entry page ("" when there is none)."""
    if not bracket:
        return ""
    bracket = current_bracket(bracket)
    att = bracket["attack"]
    title = f"Audit bracket: {att.get('name')} on the {att.get('canary')} canaries"
    note = (f"Guesses: {att.get('variant')}, {att.get('level')}, {att.get('victims')} victim model(s) x "
            f"{att.get('canaries')} canaries. Upper side: what the DP claim allows. Below it: Steinke et al.'s "
            "one-run ε, a lower bound on the trainer's ε and the only one the ratio uses; the one-run f-DP bound, "
            "the μ-GDP it rules out (a statement about μ, not the trainer's ε); the GDP reading, the same kind, "
            "at a nominal confidence only (its limits treat the guesses as independent trials, and they are not). "
            "Each bound is named with what it assumes (docs/bounds.md, The audit bracket).")
    return (f'<h2>Audit bracket</h2><p class="muted">{escape(note)}</p><div class="plots">'
            f"{bracket_svg(bracket, title)}</div>{bracket_table(bracket)}")
