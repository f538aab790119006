"""Two runs side by side (``harness compare RUN_A RUN_B``, ``harness.compare``).

For each level, the leak and the declared headline of both runs at each run's figure FPR (they
must match to be compared), and for every attack variant both runs have, its TPR at one FPR
(default: run A's headline FPR; any other FPR both runs report, or 0, with ``--fpr`` / ``fpr=``): the difference (B - A) and whether the two 95% CIs overlap
(disjoint CIs: the runs differ beyond their bootstrap uncertainty). A TPR at an FPR the run cannot
resolve (fewer than 1/FPR non-member guesses) is no figure: it is marked unresolved, never compared.
What only one run has is listed rather than dropped: experiments (e.g. a DP-SGD run's ood and blank
canaries) and attacks (e.g. HAMP's label-only attack). The provable bounds of a DP run
(results.json ``bounds``) come with it (:attr:`Comparison.bounds`), and the config keys that differ
between the runs are listed, so that a difference can be traced to what changed.

:attr:`Comparison.verdict` says in one line what the difference is: the same code, config and data
(one run fingerprint) trained on another machine (results.json ``machine``: another CPU, vector
extensions, thread count or torch / numpy build) gives other bits and figures within each other's
95% CIs, which is no real difference (float training is deterministic on one machine, not across
instruction sets: harness.core.machine); disjoint CIs are one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from harness.audit.headline import fpr_key
from harness.audit.report import experiments
from harness.audit.results import Results
from harness.core.errors import ConfigError


@dataclass(frozen=True)
class Comparison:
    """Two runs lined up at one FPR.

    ``headlines``: one row per (level, figure: ``leak`` / ``declared``), each at its run's figure FPR
    (``fpr_a`` / ``fpr_b``); ``attacks``: one row per attack variant present in
    both runs (``primary``: the primary variant of its attack in either run; ``primary_a`` /
    ``primary_b``: in that run); in both tables ``tpr_a`` / ``tpr_b`` are None where the variant is
    absent or the FPR unresolved (``resolved_a`` / ``resolved_b``: False there, None where absent),
    and ``difference`` (B - A) is None unless both are figures; ``fpr``: the FPR compared;
    ``only_in_a`` / ``only_in_b``: the experiments (``sample-ood``) and the attacks of shared
    experiments (``sample-mislabeled/label-only``) that only that run has; ``config_differences``:
    dotted keys whose values differ (``a -> b``)."""

    a: Results
    b: Results
    fpr: float
    headlines: pd.DataFrame
    attacks: pd.DataFrame
    config_differences: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)
    verdict: str = ""

    @property
    def fprs(self) -> list[float]:
        """The FPRs this comparison could be made at: those both runs report (0 included)."""
        return comparable_fprs(self.a, self.b)

    @property
    def bounds(self) -> dict[str, dict[str, Any]]:
        """The provable bounds (results.json ``bounds``: DP-SGD's epsilon and TPR upper bounds) of
        the run(s) that have them: ``{"A": ..., "B": ...}``, without a run that has none."""
        return {name: r.bounds for name, r in (("A", self.a), ("B", self.b)) if r.bounds}


def reported_fprs(r: Results) -> list[float]:
    """The FPRs at which a run reports TPRs: 0 and its ``attack.fprs`` (the keys of its headlines
    for a results.json whose config lacks them)."""
    fprs = ((r.data.get("config") or {}).get("attack") or {}).get("fprs")
    if fprs is None:
        fprs = [float(k) for lv in r.levels for k in r.data[lv]["best"]["tpr_at_fpr"]]
    return sorted({0.0, *(float(f) for f in fprs)})


def comparable_fprs(a: Results, b: Results) -> list[float]:
    """The FPRs both runs report (0 included)."""
    in_b = {fpr_key(f) for f in reported_fprs(b)}
    return [f for f in reported_fprs(a) if fpr_key(f) in in_b]


def _check_fpr(a: Results, b: Results, fpr: float | None) -> float:
    """The FPR to compare at: ``fpr``, or A's headline FPR; ConfigError (one line) unless both runs
    report it."""
    common = comparable_fprs(a, b)
    choices = ", ".join(f"{f:g}" for f in common)
    if fpr is None:
        fpr = a.headline_fpr
        if fpr_key(fpr) not in {fpr_key(f) for f in common}:
            raise ConfigError(f"run A's headline FPR {fpr:g} is not among run B's FPRs (attack.fprs); give --fpr "
                              f"(fpr=) one both runs report: {choices}")
        return fpr
    try:
        fpr = float(fpr)
    except (TypeError, ValueError):
        raise ConfigError(f"--fpr (fpr=) must be a number, got {fpr!r}; both runs report {choices}") from None
    if fpr_key(fpr) not in {fpr_key(f) for f in common}:
        raise ConfigError(f"--fpr {fpr:g}: both runs report TPRs only at {choices} (0 and the attack.fprs of both)")
    return next(f for f in common if fpr_key(f) == fpr_key(fpr))


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _overlap(ci_a: list[float] | None, ci_b: list[float] | None) -> bool | None:
    """Whether two intervals share a point; None when either is missing or NaN."""
    if not ci_a or not ci_b or any(v != v for v in (*ci_a, *ci_b)):
        return None
    return bool(ci_a[0] <= ci_b[1] and ci_b[0] <= ci_a[1])


def _cell(rec: dict[str, Any] | None, k: str) -> tuple[str | None, float | None, list[float] | None, bool | None]:
    """(label, TPR, CI, resolved): TPR and CI None where the FPR is unresolved (resolved False) or
    the record or its FPR is absent (resolved None)."""
    if rec is None:
        return None, None, None, None
    label = f"{rec['name']}:{rec['variant']}"
    if k not in rec["tpr_at_fpr"]:
        return label, None, None, None
    if not rec.get("resolved", {}).get(k, True):
        return label, None, None, False
    return label, float(rec["tpr_at_fpr"][k]), list(rec["tpr_ci"].get(k) or []) or None, True


def _row(base: dict[str, Any], ra: dict[str, Any] | None, rb: dict[str, Any] | None, k: str) -> dict[str, Any]:
    la, ta, ca, sa = _cell(ra, k)
    lb, tb, cb, sb = _cell(rb, k)
    return {**base, "attack_a": la, "tpr_a": ta, "ci_a": ca, "resolved_a": sa, "attack_b": lb, "tpr_b": tb,
            "ci_b": cb, "resolved_b": sb, "difference": tb - ta if ta is not None and tb is not None else None,
            "cis_overlap": _overlap(ca, cb)}


def _figure_row(base: dict[str, Any], fa: dict[str, Any], fb: dict[str, Any], which: str) -> dict[str, Any]:
    """One level figure (``leak`` or ``declared``) of both runs: each TPR at its figure FPR, the
    interval (a single variant's CI, or [lower bound, 1] for a best of several), and whether the two
    agree: each point at or above the other's lower end. Runs read at different figure FPRs are not
    compared (``difference`` None)."""
    ra, rb = fa.get(which), fb.get(which)

    def iv(rec: dict[str, Any] | None) -> list[float] | None:
        if not rec:
            return None
        if rec.get("ci"):
            return [float(rec["ci"][0]), float(rec["ci"][1])]
        return None if rec.get("lower") is None else [float(rec["lower"]), 1.0]

    ta, tb = (float(ra["tpr"]) if ra else None), (float(rb["tpr"]) if rb else None)
    same = fa.get("fpr") is not None and fa.get("fpr") == fb.get("fpr")
    ca, cb = iv(ra), iv(rb)
    agree = None if not (same and ca and cb and ta is not None and tb is not None) else bool(
        ta >= cb[0] and tb >= ca[0] and ta <= cb[1] and tb <= ca[1])
    return {**base, "fpr_a": fa.get("fpr"), "fpr_b": fb.get("fpr"),
            "attack_a": f"{ra['name']}:{ra['variant']}" if ra else None, "tpr_a": ta, "ci_a": ca,
            "resolved_a": ra is not None if fa else None,
            "attack_b": f"{rb['name']}:{rb['variant']}" if rb else None, "tpr_b": tb, "ci_b": cb,
            "resolved_b": rb is not None if fb else None,
            "difference": tb - ta if same and ta is not None and tb is not None else None, "cis_overlap": agree}


def _one_sided(ea: dict[str, Any], eb: dict[str, Any]) -> list[str]:
    """The experiments of ``ea`` that ``eb`` lacks, then ``experiment/attack`` for each attack that
    ran in an experiment of both but only in ``ea``."""
    out = [e for e in ea if e not in eb]
    for exp in (e for e in ea if e in eb):
        in_b = {x["name"] for x in eb[exp]["attacks"]}
        out += [f"{exp}/{n}" for n in dict.fromkeys(x["name"] for x in ea[exp]["attacks"]) if n not in in_b]
    return out


def compare_results(a: Results, b: Results, fpr: float | None = None) -> Comparison:
    """The :class:`Comparison` of two runs' results at ``fpr`` (default: A's headline FPR); a
    ConfigError (one line) for an FPR that one of the runs does not report (module docstring)."""
    fpr = _check_fpr(a, b, fpr)
    k = fpr_key(fpr)
    heads = []
    for lv in ("population", "sample"):
        if lv not in a.data and lv not in b.data:
            continue
        fa, fb = ((r.data.get(lv) or {}).get("figure") or {} for r in (a, b))
        for which in ("leak", "declared"):
            heads.append(_figure_row({"level": lv, "figure": which}, fa, fb, which))
    rows = []
    ea, eb = dict(experiments(a.data)), dict(experiments(b.data))
    for exp in [e for e in ea if e in eb]:
        in_b = {(x["name"], x["variant"]): x for x in eb[exp]["attacks"]}
        for x in ea[exp]["attacks"]:
            y = in_b.get((x["name"], x["variant"]))
            if y is not None:
                pa, pb = bool(x.get("primary")), bool(y.get("primary"))
                rows.append(_row({"experiment": exp, "attack": x["name"], "variant": x["variant"],
                                  "primary": pa or pb, "primary_a": pa, "primary_b": pb}, x, y, k))
    fa, fb = _flat(a.data.get("config", {})), _flat(b.data.get("config", {}))
    diffs = {key: (fa.get(key), fb.get(key)) for key in sorted(set(fa) | set(fb))
             if fa.get(key) != fb.get(key) and not key.startswith("run.")}
    heads_frame = pd.DataFrame(heads)
    return Comparison(a=a, b=b, fpr=fpr, headlines=heads_frame, attacks=pd.DataFrame(rows),
                      config_differences=diffs, only_in_a=_one_sided(ea, eb), only_in_b=_one_sided(eb, ea),
                      verdict=verdict(a, b, heads, diffs, fpr))


def machines(r: Results) -> list[dict[str, Any]]:
    """The machines that trained a run's models (results.json ``machine.models``; empty for a run
    trained before the record, or outside the harness)."""
    return list(((r.data.get("machine") or {}).get("models")) or [])


def verdict(a: Results, b: Results, heads: list[dict[str, Any]], diffs: dict[str, tuple[Any, Any]], fpr: float) -> str:
    """One line: whether two runs differ for real (module docstring). ``heads``: the leak and declared
    rows of :func:`compare_results` (each at its level's figure FPR); ``diffs``: the config keys that differ."""
    from harness.core.machine import describe, numeric_identity

    at = f"{100 * fpr:g}% FPR"
    figures = [r for r in heads if r["tpr_a"] is not None and r["tpr_b"] is not None]
    disjoint = [f"{r['level']} {r['figure']}" for r in figures if r["cis_overlap"] is False]
    same_numbers = all(r["tpr_a"] == r["tpr_b"] and r["ci_a"] == r["ci_b"] for r in figures)
    real = (f"a real difference: the 95% CIs of the {', '.join(disjoint)} at {at} are disjoint" if disjoint else
            f"no difference beyond the bootstrap uncertainty: every figure's 95% CIs overlap at {at}" if figures else
            f"no figure is resolved at {at} in both runs, so none can be compared there (--fpr: another FPR)")
    same_run = a.data.get("fingerprint") == b.data.get("fingerprint")
    if not same_run or any(not k.startswith("attack.") for k in diffs):
        return f"Different runs (other config, data or code: run fingerprints differ): {real}."
    what = "same models" + (", other attack settings" if diffs else "")
    ma, mb = machines(a), machines(b)
    if not ma or not mb:
        return (f"Same code, config and data (run fingerprint {str(a.data.get('fingerprint'))[:12]}), {what}; the "
                f"machines that trained them are not recorded in both: {real}.")
    ia, ib = {numeric_identity(m) for m in ma}, {numeric_identity(m) for m in mb}
    if ia == ib:
        if same_numbers and not diffs:
            return (f"Same code, config, data and machine (run fingerprint {str(a.data.get('fingerprint'))[:12]}): the "
                    "numbers are identical, as they must be.")
        if diffs:
            return f"Same models on the same machine, other attack settings: {real}."
        return (f"Same code, config, data and machine, yet the numbers differ: a step that is not deterministic "
                f"(a GPU kernel, another thread count) changed the models; {real}.")
    other = f"A: {'; '.join(describe(m) for m in ma)} | B: {'; '.join(describe(m) for m in mb)}"
    if not figures:
        return f"Same code, config and data, another machine ({other}); {real}."
    if disjoint:
        return (f"Same code, config and data, another machine ({other}); yet {real}: more than the rounding of "
                "another CPU explains.")
    return (f"Same code, config and data, another machine ({other}): the figures differ as float training does across "
            f"CPUs (instruction sets round differently), {real}: no real difference.")
