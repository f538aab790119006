"""The audit bracket of a DP claim: the accountant's epsilon and the provable TPR-at-FPR curve above,
the empirical lower bounds from the attack below, the attack's ROC in between (docs/bounds.md, "The
audit bracket"). Pure assembly of numbers computed elsewhere; :func:`build_bracket` returns the JSON
record that results.json (``bracket``), ``harness audit-one-run`` and the run's HTML page read.

- **Claimed** (upper side): the epsilon the trainer's accountant reports at delta (Opacus's RDP, or
  its PRV accountant) and the tight epsilon of the same Poisson-subsampled Gaussian mechanism from
  its privacy-loss distribution (:class:`harness.bounds.sgm.SgmBound`, never above the RDP figure);
  the provable TPR at each FPR of that mechanism (Mahloujifar et al. 2022, Corollary 11).
- **Lower bounds** (each a 1 - alpha statement, named with what it assumes): Steinke, Nasr and
  Jagielski's one-run epsilon (valid for the trainer's (eps, delta) under any dependence between the
  guesses), Mahloujifar, Melis and Chaudhuri's one-run f-DP bound on the Gaussian mu (valid under
  any dependence; its epsilon is that of mu-GDP) on the same guesses, and the GDP reading of the ROC
  (Nasr et al. 2023; its Clopper-Pearson limits treat the guesses as independent).
- **Ratio**: claimed epsilon / the largest epsilon lower bound ("how far the claim may be from the
  truth"; infinite where no lower bound is above 0), for the PLD and the RDP figure.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: FPRs of the provable curve and of the lower bounds' curves in the figure (1e-5 to 1)
CURVE_FPRS = tuple(float(f) for f in np.logspace(-5, 0, 26))

#: which lower bound is which: key -> (name, paper, what it is valid under)
LOWER_BOUNDS = {
    "steinke": ("one-run ε (Steinke et al.)", "Steinke, Nasr, Jagielski, NeurIPS 2023, Thm 3.3 + Prop. 5.7",
                "one training run, any dependence between the guesses; bounds the trainer's (ε, δ)"),
    "fdp": ("one-run f-DP μ (Mahloujifar et al.)", "Mahloujifar, Melis, Chaudhuri, ICML 2025 (arXiv 2410.22235)",
            "one training run, any dependence between the guesses; bounds the Gaussian μ (ε: that of μ-GDP)"),
    "gdp": ("GDP reading of the ROC (Nasr et al.)", "Nasr et al., USENIX Security 2023 (GDP reading)",
            "Clopper-Pearson on FPR and FNR, threshold choice corrected; treats the guesses as independent trials "
            "(ε: that of μ-GDP)"),
}


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
    guesses (name, variant, level, canary, victims, canaries)."""
    conf = 1 - float(one_run["alpha"])
    lower = [
        {"key": "steinke", "epsilon": float(one_run["epsilon_steinke"]), "mu": None, "confidence": conf,
         "at": one_run.get("steinke_at")},
        {"key": "fdp", "epsilon": float(one_run["epsilon_fdp"]), "mu": float(one_run["mu"]), "confidence": conf,
         "at": one_run.get("fdp_at")},
        {"key": "gdp", "epsilon": float(gdp["epsilon"]), "mu": float(gdp["mu"]), "confidence": 1 - float(gdp["alpha"]),
         "at": {"threshold": gdp.get("threshold"), "fpr_hi": gdp.get("fpr_hi"), "fnr_hi": gdp.get("fnr_hi"),
                "correction": gdp.get("correction"), "tests": gdp.get("tests")}},
    ]
    for lb in lower:
        name, paper, valid = LOWER_BOUNDS[lb["key"]]
        lb.update(name=name, paper=paper, valid=valid,
                  ratio_pld=_ratio(claimed.get("epsilon_pld"), lb["epsilon"]),
                  ratio_rdp=_ratio(claimed.get("epsilon_rdp"), lb["epsilon"]))
    best = max(lower, key=lambda lb: lb["epsilon"])
    return {
        "delta": float(claimed["delta"]),
        "claimed": claimed,
        "lower": lower,
        "best_lower": {"key": best["key"], "epsilon": best["epsilon"]},
        "ratio_pld": _ratio(claimed.get("epsilon_pld"), best["epsilon"]),
        "ratio_rdp": _ratio(claimed.get("epsilon_rdp"), best["epsilon"]),
        "one_run": one_run,
        "gdp": gdp,
        "attack": {**attack, "roc": roc},
    }


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
