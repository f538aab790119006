"""The audit bracket of a DP claim: the accountant's epsilon and the provable TPR-at-FPR curve above,
the empirical lower bounds from the attack below, the attack's ROC in between (docs/bounds.md, "The
audit bracket"). Pure assembly of numbers computed elsewhere; :func:`build_bracket` returns the JSON
record that results.json (``bracket``), ``harness audit-one-run`` and the run's HTML page read.

- **Claimed** (upper side): the epsilon the trainer's accountant reports at delta (Opacus's RDP, or
  its PRV accountant) and the tight epsilon of the same Poisson-subsampled Gaussian mechanism from
  its privacy-loss distribution (:class:`harness.bounds.sgm.SgmBound`, never above the RDP figure);
  the provable TPR at each FPR of that mechanism (Mahloujifar et al. 2022, Corollary 11).
- **Below it, three statements of two kinds** (``kind`` in each ``lower`` entry), each named with
  what it assumes:

  - ``epsilon``: Steinke, Nasr and Jagielski's one-run epsilon, a 1 - alpha lower bound on the
    trainer's epsilon at delta, valid under any dependence between the guesses. The only genuine
    epsilon lower bound here, and the only one the ratio uses.
  - ``mu``: Mahloujifar, Melis and Chaudhuri's one-run f-DP bound on the same guesses (valid under
    any dependence): it rules out mu-GDP for every mu below ``mu`` at 1 - alpha. ``epsilon_of_mu``
    is the epsilon at delta of the mu-GDP mechanism it rules out, an annotation: a trainer can be
    (eps, delta)-DP at that delta without being mu-GDP, so it is not a lower bound on the trainer's
    epsilon (:mod:`harness.bounds.gdp`).
  - ``mu``, ``nominal``: the GDP reading of the ROC (Nasr et al. 2023). Its Clopper-Pearson limits
    treat the guesses as independent trials; they are not (the guesses about one model share its
    training, and pooled S x C guesses also share the shadow models), so its 95% is nominal only.

- **Ratio**: claimed epsilon / the largest genuine epsilon lower bound (``epsilon_lower``: Steinke et
  al.'s; "how far the claim may be from the truth"; infinite where it is 0), for the PLD and the RDP
  figure. The f-DP and GDP figures are never in it: they bound mu, not the trainer's epsilon.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: FPRs of the provable curve and of the lower bounds' curves in the figure (1e-5 to 1)
CURVE_FPRS = tuple(float(f) for f in np.logspace(-5, 0, 26))

#: why the GDP reading's confidence is nominal (shown wherever its confidence is)
NOMINAL_WHY = "its Clopper-Pearson limits treat the guesses as independent trials, which they are not"

#: which lower bound is which: key -> (kind, nominal, name, paper, what it is valid under)
LOWER_BOUNDS = {
    "steinke": ("epsilon", False, "one-run ε (Steinke et al.)",
                "Steinke, Nasr, Jagielski, NeurIPS 2023, Thm 3.3 + Prop. 5.7",
                "one training run, any dependence between the guesses; a lower bound on the trainer's ε at δ "
                "(the one the ratio uses)"),
    "fdp": ("mu", False, "one-run f-DP (Mahloujifar et al.)",
            "Mahloujifar, Melis, Chaudhuri, ICML 2025 (arXiv 2410.22235)",
            "one training run, any dependence between the guesses; rules out μ-GDP for every μ below the bound: "
            "a statement about μ, not a lower bound on the trainer's ε"),
    "gdp": ("mu", True, "GDP reading of the ROC (Nasr et al.), nominal",
            "Nasr, Hayes, Steinke, Balle, Tramèr, Jagielski, Carlini, Terzis, USENIX Security 2023 (GDP reading)",
            "nominal confidence: Clopper-Pearson limits on FPR and FNR ({correction}) that treat the guesses as "
            "independent trials, which they are not (the guesses about one model share its training); rules out "
            "μ-GDP: a statement about μ, not a lower bound on the trainer's ε"),
}

#: how the GDP reading accounts for its threshold choice (:data:`harness.bounds.gdp.CORRECTIONS`)
GDP_CORRECTION_TEXT = {"bonferroni": "Bonferroni over every threshold of the ROC",
                       "split": "the threshold chosen on a random half of the guesses, read on the other"}


def _ratio(claimed: float | None, lower: float) -> float | None:
    if claimed is None or not math.isfinite(claimed):
        return None
    return math.inf if lower <= 0 else claimed / lower


def build_bracket(*, claimed: dict[str, Any], one_run: dict[str, Any], gdp: dict[str, Any],
                  roc: dict[str, list[float]], attack: dict[str, Any]) -> dict[str, Any]:
    """The bracket record. ``claimed``: epsilon_rdp (the accountant's), accountant, epsilon_pld, delta,
    the mechanism's sample_rate / noise_multiplier / steps and the provable ``tpr_curve``
    (:func:`claimed_record`); ``one_run``: :meth:`OneRunBounds.to_json`; ``gdp``:
    :meth:`GdpReading.to_json`; ``roc``: the attack's ROC points; ``attack``: what produced the
    guesses (name, variant, level, canary, victims, canaries).

    Each ``lower`` entry: ``key``, ``kind`` (``epsilon``: a lower bound on the trainer's epsilon;
    ``mu``: the mu-GDP it rules out), ``nominal``, ``name``, ``paper``, ``valid``, ``epsilon`` (the
    epsilon lower bound; null for a ``mu`` entry), ``mu`` and ``epsilon_of_mu`` (null for an
    ``epsilon`` entry), ``confidence`` (nominal where ``nominal``), ``at``, and ``ratio_pld`` /
    ``ratio_rdp`` (claimed / this; null for a ``mu`` entry). ``epsilon_lower``: the largest
    ``epsilon`` entry (key, epsilon), which ``ratio_pld`` and ``ratio_rdp`` divide by."""
    conf = 1 - float(one_run["alpha"])
    lower = [
        {"key": "steinke", "epsilon": float(one_run["epsilon_steinke"]), "mu": None, "epsilon_of_mu": None,
         "confidence": conf, "at": one_run.get("steinke_at")},
        {"key": "fdp", "epsilon": None, "mu": float(one_run["mu"]), "epsilon_of_mu": float(one_run["epsilon_fdp"]),
         "confidence": conf, "at": one_run.get("fdp_at")},
        {"key": "gdp", "epsilon": None, "mu": float(gdp["mu"]), "epsilon_of_mu": float(gdp["epsilon"]),
         "confidence": 1 - float(gdp["alpha"]),
         "at": {"threshold": gdp.get("threshold"), "fpr_hi": gdp.get("fpr_hi"), "fnr_hi": gdp.get("fnr_hi"),
                "correction": gdp.get("correction"), "tests": gdp.get("tests")}},
    ]
    for lb in lower:
        kind, nominal, name, paper, valid = LOWER_BOUNDS[lb["key"]]
        genuine = kind == "epsilon"
        if lb["key"] == "gdp":
            valid = valid.format(correction=GDP_CORRECTION_TEXT.get(str(gdp.get("correction")), "threshold choice corrected"))
        lb.update(kind=kind, nominal=nominal, name=name, paper=paper, valid=valid,
                  ratio_pld=_ratio(claimed.get("epsilon_pld"), lb["epsilon"]) if genuine else None,
                  ratio_rdp=_ratio(claimed.get("epsilon_rdp"), lb["epsilon"]) if genuine else None)
    best = max((lb for lb in lower if lb["kind"] == "epsilon"), key=lambda lb: lb["epsilon"])
    return {
        "delta": float(claimed["delta"]),
        "claimed": claimed,
        "lower": lower,
        "epsilon_lower": {"key": best["key"], "epsilon": best["epsilon"]},
        "ratio_pld": _ratio(claimed.get("epsilon_pld"), best["epsilon"]),
        "ratio_rdp": _ratio(claimed.get("epsilon_rdp"), best["epsilon"]),
        "one_run": one_run,
        "gdp": gdp,
        "attack": {**attack, "roc": roc},
    }


def current_bracket(bracket: dict[str, Any]) -> dict[str, Any]:
    """``bracket`` in the current record's form: one written before the f-DP and GDP figures were
    taken out of the ratio (it has ``best_lower``, and ``epsilon`` on every lower bound) is rebuilt
    from the bounds it holds (``one_run``, ``gdp``), so that an old results.json shows what a new
    one would."""
    if "epsilon_lower" in bracket or not {"claimed", "one_run", "gdp", "attack"} <= set(bracket):
        return bracket
    attack = {k: v for k, v in bracket["attack"].items() if k != "roc"}
    return build_bracket(claimed=bracket["claimed"], one_run=bracket["one_run"], gdp=bracket["gdp"],
                         roc=bracket["attack"]["roc"], attack=attack)


def claimed_record(privacy: dict[str, Any], delta: float, sgm: Any = None) -> dict[str, Any] | None:
    """The upper side from a DP-SGD model's privacy record (defense_info: epsilon, accountant,
    sample_rate, noise_multiplier, steps, delta): the accountant's epsilon, the PLD epsilon at
    ``delta`` and the provable curve; None where the record is not a Poisson-subsampled Gaussian's.
    ``sgm``: the mechanism's :class:`~harness.bounds.sgm.SgmBound`, when the caller has it."""
    from harness.bounds.sgm import SgmBound

    try:
        q, z, t = float(privacy["sample_rate"]), float(privacy["noise_multiplier"]), int(privacy["steps"])
    except (KeyError, TypeError, ValueError):
        return None
    if not (0 < q <= 1 and z > 0 and t >= 1):
        return None
    b = sgm if sgm is not None else SgmBound.compute(q, z, t)
    rdp = privacy.get("epsilon")
    return {
        "epsilon_rdp": None if rdp is None else float(rdp),
        "accountant": privacy.get("accountant", "rdp"),
        "accountant_delta": privacy.get("delta"),
        "epsilon_pld": float(b.epsilon(delta)),
        "delta": float(delta),
        "sample_rate": q,
        "noise_multiplier": z,
        "steps": t,
        # the grid alone (no refinement): every grid point is a valid bound, within ~1e-5 relative of
        # the refined curve (docs/bounds.md, The TPR-at-FPR curve), at half the cost
        "tpr_curve": {"fpr": list(CURVE_FPRS),
                      "tpr": [float(x) for x in b.tpr_upper(np.array(CURVE_FPRS), refine=False)]},
    }
