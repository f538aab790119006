"""The attack phase: read the saved signals of a level, run the attacks, compute the metrics.

Nothing here trains a model: ``harness attack RUN_DIR`` re-runs it on any finished run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from attacks.base import Attack, AttackInput
from defenses.base import Defense
from harness.core.config import ConfigError, ExperimentConfig
from harness.run.attack_set import attack_names, check_declared_attacks, is_builtin_attack, load_attacks
from harness.core.checks import LevelOutputs, MembershipStats, check_columns, label_scores, membership_stats
from harness.audit.headline import (Candidate, LevelFamily, best_entry, fpr_key, headline_fpr, headline_test,
                                    headline_test_warning, level_figure, level_fpr, ratio_json, reading_fprs)
from harness.core.metrics import AttackMetrics, Roc, evaluate_scores, roc_file_curve, roc_on_grid
from harness.core.signals import NOT_SERVED
from harness.plugins import resolve
from harness.run.runstore import RunDir, RunDirError

#: appended to the reason a headline attack was skipped for want of a signal the run's models lack
HEADLINE_SKIPPED = "; it is one of the defense's headline attacks: this level's headline is taken without it"

LABEL_ONLY_NOTE = ("the served outputs carry only the predicted label (in every model, one-hot rows, or every answer "
                   "with the same argmax the same answer): the label-only attack was added automatically and is one "
                   "of the leak's candidates; every attack reads them as exact one-hot rows (any encoding of the same "
                   "labels reads the same)")


#: the note of a run whose random-serving check found random answers (:func:`serving_notes`)
RANDOM_SERVING_NOTE = ("the served outputs are random ({random} of {checked} models answered the same images "
                       "differently when asked twice): the lira-averaged attack (LiRA on the mean of R = {r} answers "
                       "per query view, audit.repeat_queries) was added automatically and is one of the leak's candidates")
RANDOM_UNAVERAGED_NOTE = ("the served outputs are random ({random} of {checked} models answered the same images "
                          "differently when asked twice), but audit.repeat_queries=1: no averaged answers were saved, so "
                          "the headline reads single noisy answers and may understate the leak; train with "
                          "--set audit.repeat_queries=8 (or more) for the lira-averaged attack")
KEYED_SERVING_NOTE = ("the served outputs are keyed to the input ({keyed} of {checked} models answered the same "
                      "images identically but copies {scales} off in a few pixels with a jump, not the change of a "
                      "model smooth in its input: noise seeded by the image itself): the lira-averaged attack (LiRA on "
                      "the mean of R = {r} answers per query view, each to a fresh perturbed copy {scales} off, "
                      "audit.repeat_queries) was added automatically and is one of the leak's candidates")
KEYED_UNAVERAGED_NOTE = ("the served outputs are keyed to the input ({keyed} of {checked} models answered copies {scales} "
                         "off in a few pixels with a jump, not the change of a model smooth in its input), but "
                         "audit.repeat_queries=1: no averaged answers were saved, so the headline reads single noisy "
                         "answers and may understate the leak; train with --set audit.repeat_queries=8 (or more) for the "
                         "lira-averaged attack")
DETERMINISTIC_NOTE = ("every model answered the same images identically when asked twice (deterministic serving): "
                      "no repeated queries were needed (audit.repeat_queries={r}), and lira-averaged, where it ran, "
                      "reads each model's one answer")


def serving_record(metas: list[dict[str, Any]]) -> dict[str, Any]:
    """A level's ``serving`` record in results.json from its models' records (``serving`` in each
    signals file's metadata, :func:`harness.run.signals.check_serving`): how many models were
    checked (0 for a run trained before the check) and found random, the largest difference between
    two answers to the same image, R of the averaged answers saved (1: none); the input-keyed
    check's models read and flagged, its statistics at the first scale (the largest median) and over
    the scales (the largest growth ratio; None for a run trained before the scales), and the scales
    of the flagged models' averaged copies (grey levels; a run trained before the scales: 1)."""
    recs = [m["serving"] for m in metas if isinstance(m.get("serving"), dict)]
    flagged = [r for r in recs if r.get("random")]
    keyed = [r for r in recs if r.get("keyed")]
    medians = [float(r["perturbed_median_difference"]) for r in recs if "perturbed_median_difference" in r]
    growth = [float(r["perturbed_growth"]) for r in recs if r.get("perturbed_growth") is not None]
    return {"checked_models": len(recs), "random_models": len(flagged),
            "max_abs_difference": max((float(r["max_abs_difference"]) for r in recs), default=None),
            "repeat_queries": max((int(r.get("repeat_queries", 1)) for r in flagged + keyed), default=1),
            # the input-keyed check (deterministic models of a run trained since it; 0 / None before)
            "keyed_checked_models": len(medians), "keyed_models": len(keyed),
            "max_perturbed_median_difference": max(medians, default=None),
            "max_perturbed_growth": max(growth, default=None),
            "keyed_scales": sorted({int(r.get("keyed_scale") or 1) for r in keyed})}


def _grey_levels(scales: list[int]) -> str:
    """``[1]`` -> "1 grey level", ``[8]`` -> "8 grey levels", ``[4, 8]`` -> "4 to 8 grey levels"."""
    lo, hi = min(scales), max(scales)
    return f"{lo} grey level{'s' if hi > 1 else ''}" if lo == hi else f"{lo} to {hi} grey levels"


def serving_notes(levels: dict[str, dict[str, Any]], repeat_queries: int, averaging_asked: bool
                  ) -> tuple[bool | None, bool | None, list[str]]:
    """(whether serving is random, whether it is input-keyed, the notes to record) from each
    level's :func:`serving_record`: None where no model was checked (trained before the check; for
    the keyed check, before it existed). With random or input-keyed serving the averaging attack
    is declared when R > 1, and said not to be otherwise; with deterministic serving, a note where
    the user asked for the averaging (R other than the default, or ``lira-averaged``)."""
    from harness.core.config import DEFAULT_REPEAT_QUERIES

    checked = sum(r["checked_models"] for r in levels.values())
    flagged = sum(r["random_models"] for r in levels.values())
    keyed_checked = sum(r.get("keyed_checked_models", 0) for r in levels.values())
    keyed = sum(r.get("keyed_models", 0) for r in levels.values())
    scales = sorted({sc for r in levels.values() for sc in r.get("keyed_scales", [])}) or [1]
    if not checked:
        return None, None, []
    is_keyed = keyed > 0 if keyed_checked else None
    notes = []
    if flagged:
        text = RANDOM_SERVING_NOTE if repeat_queries > 1 else RANDOM_UNAVERAGED_NOTE
        notes.append(text.format(random=flagged, checked=checked, r=repeat_queries))
    if keyed:
        text = KEYED_SERVING_NOTE if repeat_queries > 1 else KEYED_UNAVERAGED_NOTE
        notes.append(text.format(keyed=keyed, checked=checked, r=repeat_queries, scales=_grey_levels(scales)))
    if notes:
        return flagged > 0, is_keyed, notes
    if repeat_queries != DEFAULT_REPEAT_QUERIES or averaging_asked:
        return False, is_keyed, [DETERMINISTIC_NOTE.format(r=repeat_queries)]
    return False, is_keyed, []


def is_one_hot(logits: np.ndarray) -> bool:
    """Every row over the last axis is a one-hot vector: entries exactly 0 or 1, exactly one 1.
    Applied to a level's stacked served outputs (S, C, A, K): labels only in every model. Read one
    model at a time (no boolean array of the whole stack), stopping at the first that is not."""
    if not logits.size:
        return False
    for model in logits.reshape(-1, *logits.shape[-3:]) if logits.ndim >= 3 else [logits]:
        if not (np.all((model == 0) | (model == 1)) and np.all(model.sum(-1) == 1)):
            return False
    return True


def _same_answer_per_argmax(rows: np.ndarray) -> bool:
    """The (N, K) answers of one model carry only their argmax: every row equals the first row with
    its argmax (as log-probabilities, within the random-serving check's tolerance: a constant
    added per row is no difference), with evidence: at least two argmax values, and one of them
    shared by two rows (a model answering one class, or each row another class, shows nothing)."""
    from harness.run.signals import SERVING_TOLERANCE, log_probabilities

    def each_as_its_first(part: np.ndarray, evidence: bool) -> bool:  # each row equals its argmax's first row
        top = part.argmax(axis=-1)
        classes, first = np.unique(top, return_index=True)
        if evidence and (len(classes) < 2 or len(classes) == len(part)):
            return False
        lp = log_probabilities(part)
        return bool(np.allclose(lp, lp[first][np.searchsorted(classes, top)],
                                rtol=SERVING_TOLERANCE, atol=SERVING_TOLERANCE))

    # the first rows hold each of their argmax values' first row of all: a row among them that differs
    # from it decides, without the pass over every row that trained models' outputs would cost
    if len(rows) > PREFIX_ROWS and not each_as_its_first(rows[:PREFIX_ROWS], evidence=False):
        return False
    return each_as_its_first(rows, evidence=True)


#: rows :func:`_same_answer_per_argmax` checks first
PREFIX_ROWS = 1024


def carries_only_argmax(logits: np.ndarray) -> bool:
    """Every model's served outputs carry only the predicted label: one-hot rows (:func:`is_one_hot`),
    or any answer that is a function of its argmax (``c`` x one-hot(argmax), its softmax, a fixed
    confidence vector per label as MemGuard-like defenses serve: :func:`_same_answer_per_argmax`),
    all of which the label-only attack reads in full. Applied to a level's stacked served outputs
    (S, C, A, K), read one model at a time (float64 log-probabilities of one model's rows, never of
    the stack), stopping at the first model that is not."""
    if not logits.size:
        return False
    for model in logits.reshape(-1, *logits.shape[-3:]) if logits.ndim >= 3 else [logits]:
        if not (is_one_hot(model) or _same_answer_per_argmax(model.reshape(-1, model.shape[-1]))):
            return False
    return True


#: the served-output signals read as exact one-hot rows where a run serves labels only (:func:`one_hot_labels`)
LABEL_SIGNALS = ("logits", "logits_averaged")


def one_hot_labels(signals: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``signals`` with each of :data:`LABEL_SIGNALS` that carries only its argmax
    (:func:`carries_only_argmax`) replaced by exact one-hot rows of that argmax, in its dtype. A run that
    serves labels is then read the same whatever the encoding (one-hot, ``c`` x one-hot, its softmax,
    a fixed confidence vector per label): the argmax is all such outputs hold, and the attacks whose
    scores depend on the scale (LiRA's variance floor, RMIA's ratios) no longer read the encoding."""
    out = dict(signals)
    for name in LABEL_SIGNALS:
        x = signals.get(name)
        if x is None or is_one_hot(x) or not carries_only_argmax(x):
            continue
        hot = np.zeros_like(x)
        np.put_along_axis(hot, x.argmax(axis=-1)[..., None], 1, axis=-1)
        out[name] = hot
    return out


@dataclass(frozen=True)
class LevelSignals:
    signals: dict[str, np.ndarray]  # name -> (S, C, ...)
    metas: list[dict[str, Any]]


def load_level_signals(run: RunDir, level: str, num_models: int) -> LevelSignals:
    """Stack every model's signals (the signals all models hold) in their stored dtype; refuse if any
    model of the level is unfinished. Each model's file is read into a preallocated (S, ...) array
    and dropped, so the peak memory is the stacked signals plus one model's, not twice the stack.
    A signal of repeated queries (``Signal.averages``: ``logits_averaged``) that a model whose
    serving the check found deterministic did not save is the log-softmax of the signal it averages
    (R equal answers); a model without that record (trained before the check) leaves it out."""
    from harness.run.signals import BUILTIN_SIGNALS, log_probabilities

    signals: dict[str, np.ndarray] = {}
    lacking: dict[str, list[int]] = {}  # signal -> models without it
    metas: list[dict[str, Any]] = []
    missing: list[int] = []
    seen = 0
    for s in range(num_models):
        m = run.read_signals(level, s)
        if m is None:
            missing.append(s)
            continue
        for n, a in sorted(m.arrays.items()):
            if n not in signals and n not in lacking:  # first seen here: the models before lack it
                signals[n] = np.empty((num_models, *a.shape), a.dtype)
                if seen:
                    lacking[n] = [i for i in range(s) if i not in missing]
        for n in signals:
            if n not in m.arrays:
                lacking.setdefault(n, []).append(s)
                continue
            if m.arrays[n].shape != signals[n].shape[1:]:
                raise RunDirError(f"{level} level: model {s}'s {n!r} signal has shape {m.arrays[n].shape}, the "
                                  f"level's first model's {signals[n].shape[1:]}; the run directory mixes runs")
            signals[n][s] = m.arrays[n]
        metas.append(m.meta)
        seen += 1
    if missing:
        raise RunDirError(
            f"{level} level: {len(missing)} of {num_models} models have no finished signals "
            f"(e.g. model {missing[0]}); re-run `harness evaluate` with the same arguments to finish training"
        )
    for n, models in lacking.items():
        base = BUILTIN_SIGNALS[n].averages if n in BUILTIN_SIGNALS else None
        deterministic = all((metas[i].get("serving") or {}).get("random") is False
                            and not (metas[i].get("serving") or {}).get("keyed") for i in models)
        if base is not None and base in signals and base not in lacking and deterministic:
            for i in models:  # the mean of R equal answers
                signals[n][i] = log_probabilities(signals[base][i]).astype(signals[n].dtype)
        else:  # a signal some model lacks is not attackable
            del signals[n]
    return LevelSignals(signals=signals, metas=metas)


#: the scale-invariant LiRA the harness adds to every run's leak (attacks.lira.LiRAScaled)
SCALED = "lira-scaled"

#: why a run's attack that is neither in the leak's fixed set nor declared is left out of the figures
ABLATION = ("an ablation: neither a configured built-in attack, an adaptation the harness added, nor a served declared "
            "attack; reported, never in the figures")

EPS_DELTA = 1e-5  # delta of the empirical epsilon lower bounds (the accountants' delta)

#: the checks of a run's saved outputs (harness.core.checks), in the order results.json lists them
CHECKS = ("membership", "outputs", "utility", "trainers")
#: warnings a run's failed checks add at most (the record in results.json has every finding)
MAX_CHECK_WARNINGS = 3


def run_checks(stats: list[MembershipStats], outputs: dict[str, LevelOutputs], accuracies: dict[str, list[float]],
               test_labels: np.ndarray, forced: list[str],
               scales: dict[str, dict[str, list[float]]] | None = None) -> dict[str, Any]:
    """results.json's ``checks``: the membership-consistency, outputs and utility checks of
    :mod:`harness.core.checks` on every experiment, whether all passed, and which failed checks
    an import was told to accept (``forced``: ``harness import --force``); and the trainers check on
    ``scales`` (per experiment, each model's answer scale and test loss: two groups of models), recorded
    and warned of but not part of ``passed``."""
    from harness.core.checks import degenerate_outputs, membership_check, trainers_check, utility_check

    found = {"membership": membership_check(stats).record, "outputs": degenerate_outputs(outputs).record,
             "utility": utility_check(accuracies, test_labels).record}
    groups = {e: by for e, by in (scales or {}).items()}
    return {**found, "passed": all(r["passed"] for r in found.values()), "forced": list(forced),
            "trainers": trainers_check(groups).record}


def _eps_lower_json(scores: np.ndarray, membership: np.ndarray, roc: Roc | None = None) -> dict[str, Any]:
    """The *nominal* empirical epsilon lower bound of one attack variant (harness.bounds.empirical):
    Clopper-Pearson 95% limits on the pooled S x C guesses, maximized over thresholds with a
    Bonferroni correction, and the uncorrected maximum beside it. Nominal: it treats the pooled
    guesses as independent draws, which they are not (S models, shared shadows); the one-run bound
    (:func:`_one_run_json`) is the one valid under that dependence. ``roc``: the ROC of these scores,
    when the caller has it."""
    from harness.bounds.empirical import epsilon_lower_bound_roc

    valid = epsilon_lower_bound_roc(scores, membership, delta=EPS_DELTA, alpha=0.05, bonferroni=True, roc=roc)
    naive = epsilon_lower_bound_roc(scores, membership, delta=EPS_DELTA, alpha=0.05, bonferroni=False, roc=roc)
    return {
        "kind": "nominal",
        "epsilon": valid.epsilon,
        "epsilon_uncorrected": naive.epsilon,
        "delta": EPS_DELTA,
        "confidence": 0.95,
        "tpr": valid.tpr,
        "fpr": valid.fpr,
        "direction": valid.direction,
    }


def _one_run_json(scores: np.ndarray, membership: np.ndarray, num_canaries: int, alpha: float = 0.05
                  ) -> dict[str, Any]:
    """Steinke-Nasr-Jagielski one-run bound per victim, Bonferroni over victims (harness.bounds.one_run),
    at confidence 1 - ``alpha``."""
    from harness.bounds.one_run import one_run_bound

    return {"kind": "one-run", **one_run_bound(scores, membership, delta=EPS_DELTA, alpha=alpha,
                                               num_canaries=num_canaries).to_json()}


#: the error of each experiment's one-run epsilon (a 95% statement for the pre-specified attack alone)
ONE_RUN_ALPHA = 0.05

NOT_CERTIFIABLE = ("not certifiable at this design: even every guess right gives a p-value of {p:.2g}, above the "
                   "per-test level {level:.2g} (0.05 over {victims} victims x {grid} guess counts); the delta term "
                   "of the bound sets this floor, so more audit samples do not lower it, fewer victim models do")


def one_run_record(label: str, bound: dict[str, Any]) -> dict[str, Any]:
    """An experiment's one-run epsilon: the Steinke, Nasr and Jagielski bound of its pre-specified
    attack's primary variant (:func:`prespecified_attack`), a 95% statement with no selection over
    attacks; ``epsilon`` None with a ``reason`` where the design cannot certify any epsilon above 0."""
    out = {"epsilon": bound["epsilon"], "confidence": 1 - ONE_RUN_ALPHA, "delta": bound["delta"], "variant": label,
           "certifiable": bound.get("certifiable", True),
           **({"attainable_epsilon": bound["attainable_epsilon"]} if "attainable_epsilon" in bound else {}),
           "method": ("Steinke, Nasr, Jagielski 2023 one-run bound of the pre-specified attack's primary variant (the "
                      "adaptation the harness added, else the first configured attack), per victim with Bonferroni "
                      "over victims and guess counts")}
    if not out["certifiable"]:
        out["epsilon"] = None
        out["reason"] = NOT_CERTIFIABLE.format(p=bound["attainable_p"], level=ONE_RUN_ALPHA / (
            bound["num_victims"] * len(bound["grid"])), victims=bound["num_victims"], grid=len(bound["grid"]))
    return out


def _fdp_gdp_json(scores: np.ndarray, membership: np.ndarray, num_canaries: int) -> dict[str, Any]:
    """The bracket's lower bounds of one attack variant in a DP run (docs/bounds.md, The audit bracket):
    ``one_run_bounds``, the f-DP (Gaussian) and Steinke et al. one-run bounds on the same top-k
    guesses per victim (the grid and the Bonferroni correction of ``eps_lower_one_run``, whose epsilon
    the Steinke one equals), and ``gdp_lower``, the GDP reading of the pooled ROC (nominal: the
    Clopper-Pearson limits treat the S x C guesses as independent), Bonferroni over its thresholds."""
    from harness.bounds.fdp_one_run import one_run_bounds
    from harness.bounds.gdp import gdp_lower_bound_roc

    return {"one_run_bounds": one_run_bounds(scores, membership, delta=EPS_DELTA, alpha=0.05, num_canaries=num_canaries,
                                             sides=("top",)).to_json(),
            "gdp_lower": gdp_lower_bound_roc(scores, membership, alpha=0.05, delta=EPS_DELTA).to_json()}


def _bracket_json(results: dict[str, Any], privacy: dict[str, Any], sgm: Any = None) -> dict[str, Any] | None:
    """The audit bracket of a DP run (harness.bounds.bracket): the claimed side from the models'
    privacy record, the lower bounds and ROC of the sample-level headline variant; None where the
    record is not DP-SGD's or the headline entry lacks the bracket's bounds (a run attacked before
    they existed: ``harness attack RUN_DIR`` adds them)."""
    from harness.bounds.bracket import build_bracket, claimed_record

    level = "sample" if "sample" in results else "population"
    res = results.get(level)
    if not res:
        return None
    best = res["best"]
    entry = next((a for a in res["attacks"] if (a["name"], a["variant"]) == (best["name"], best["variant"])), None)
    claimed = claimed_record(privacy, EPS_DELTA, sgm)
    if entry is None or "one_run_bounds" not in entry or claimed is None:
        return None
    one = entry["one_run_bounds"]
    attack = {"name": entry["name"], "variant": entry["variant"], "level": level, "canary": res.get("canary"),
              "victims": one["num_victims"], "canaries": one["num_canaries"],
              "tpr_at_fpr": dict(entry["tpr_at_fpr"])}
    return build_bracket(claimed=claimed, one_run=one, gdp=entry["gdp_lower"], roc=entry["roc_curve"], attack=attack)


def run_privacy(results: dict[str, Any]) -> dict[str, Any] | None:
    """The ``privacy`` record of a results.json (the first level that has one), or None."""
    return next((results[lv]["privacy"] for lv in ("population", "sample")
                 if lv in results and results[lv].get("privacy")), None)


def _accuracy_se(metas: list[dict[str, Any]], key: str, images: int) -> dict[str, Any]:
    """``se`` (the accuracy's standard error over models and images, :mod:`harness.core.accuracy`) and
    ``images``, where every model stored its right answers under ``key``; {} otherwise (older runs,
    imported models)."""
    from harness.core.accuracy import estimate, table_of

    table = table_of(metas, key, images) if images else None
    if table is None:
        return {}
    est = estimate(table)
    return {"se": est.se, "images": images}


def _validation_accuracy(metas: list[dict[str, Any]], images: int) -> dict[str, Any]:
    """``validation_accuracy`` (mean, se, images, per_model) where the run holds a validation split
    out of its training pool (``data.validation_size``) and every model measured it; {} otherwise."""
    accs = [m.get("validation_accuracy") for m in metas]
    if not images or any(a is None for a in accs):
        return {}
    return {"validation_accuracy": {"mean": float(np.mean(accs)), "per_model": [float(a) for a in accs],
                                    **_accuracy_se(metas, "validation_correct", images)}}


def level_provenance(ld: Any, outputs: np.ndarray, pool_labels: np.ndarray, cols: np.ndarray) -> Any:
    """The membership-provenance test (harness.core.checks.provenance_stats) of a level whose canaries
    keep their pool image and take a random wrong label (``random_wrong_label``); None for others.
    ``outputs`` (S, len(cols), K): every model's outputs at view 0 on the audit samples ``cols``;
    ``pool_labels``: the training pool's labels (the canaries' original labels)."""
    from harness.core.checks import provenance_stats
    from harness.plugins import resolve

    if not getattr(resolve("canaries", ld.canary), "random_wrong_label", False):
        return None
    original = np.asarray(pool_labels)[np.asarray(ld.design.audit_indices)[cols]]
    return provenance_stats(np.asarray(outputs).argmax(-1), ld.canaries.y[cols], original,
                            ld.design.membership[:, cols], outputs.shape[-1])


def _member_accuracy(metas: list[dict[str, Any]]) -> dict[str, Any]:
    """``member_accuracy``: each model's accuracy on the audit samples it trained on, against the labels
    it trained with (population level: its train accuracy on those images; sample level: the share of
    its member canaries it fits, e.g. the wrong label of a mislabeled one); {} where a model lacks it."""
    accs = [m.get("train_accuracy_audit_members") for m in metas]
    if not accs or any(a is None for a in accs):
        return {}
    return {"member_accuracy": {"mean": float(np.mean(accs)), "per_model": [float(a) for a in accs]}}


def _privacy_json(metas: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The DP guarantee the models report (defense_info with an epsilon): the weakest over models.
    For models trained on a random fraction of their data (the ``subsample`` wrapper's
    ``subsample_rate``), the P1-aware bounds of Thudi et al. at that epsilon (:func:`_subsample_bounds`)."""
    infos = [m.get("defense_info") or {} for m in metas]
    if not all("epsilon" in i for i in infos):
        return None
    worst = max(infos, key=lambda i: float("inf") if i["epsilon"] is None else i["epsilon"])
    out = {**worst, "epsilon_min": min(i["epsilon"] for i in infos)}
    if "subsample_rate" in worst and "subsample_bounds" not in worst:  # runs before 0.3.0 stored them
        bounds = _subsample_bounds(worst.get("epsilon"), float(worst["subsample_rate"]))
        if bounds is not None:
            out = {**worst, "subsample_bounds": bounds, "epsilon_min": out["epsilon_min"]}
    return out


def _subsample_bounds(eps: float | None, rate: float) -> dict[str, float] | None:
    """Thudi et al. (TMLR 2024, sec. 4): an audit sample is a member with probability 1/2 and then
    kept with probability ``rate``, so its prior is P1 = rate / 2; the positive accuracy of any attack
    on an eps-DP trainer is at most ``(1 + e^{-eps} (1 - P1) / P1)^{-1}``, and the epsilon giving the
    same bound at 1/2 is ``eps + ln((1 - P1) / P1)``. None without a finite epsilon."""
    from harness.bounds.thudi import epsilon_for_prior, pos_acc_upper

    if eps is None or not np.isfinite(eps):
        return None
    p1 = rate / 2
    return {"prior": p1, "pos_acc_upper": pos_acc_upper(eps, p1),
            "pos_acc_upper_without_subsampling": pos_acc_upper(eps, 0.5),
            "equivalent_epsilon_at_half": epsilon_for_prior(eps, p1)}


#: what a label-DP model's record contributes to ``label_privacy`` as it is (from the model with the
#: largest label epsilon): the guarantee, and for PATE-FM its accounting and mechanism settings
LABEL_PRIVACY_KEYS = ("label_epsilon", "label_delta", "label_mechanism", "label_noise_scale", "label_accounting",
                      "label_epsilon_classic", "num_teachers", "sigma1", "sigma2", "threshold", "queries_requested")


def _label_privacy_json(metas: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The label-DP guarantee the models report (defense_info with a ``label_epsilon``: ALIBI, AGIBI,
    PATE-FM), the weakest over models, or None. It protects the labels only: neighbouring datasets
    differ in one label, so it bounds the label-flip game, not the presence of an image
    (docs/defenses.md). PATE-FM's models also give their data-dependent epsilon (the largest; not a
    publishable guarantee), their queries asked (the most) and answered (the fewest) and the mean
    accuracy of the labels their teachers released (``ensemble_accuracy``)."""
    infos = [m.get("defense_info") or {} for m in metas]
    if not infos or not all("label_epsilon" in i for i in infos):
        return None
    worst = max(infos, key=lambda i: i["label_epsilon"])
    out = {k: worst[k] for k in LABEL_PRIVACY_KEYS if k in worst}
    for key, how in (("label_epsilon_data_dependent", max), ("queries_asked", max), ("queries_answered", min),
                     ("ensemble_accuracy", lambda v: float(np.mean(v)))):
        if all(key in i for i in infos):
            out[key] = how([i[key] for i in infos])
    return out


def run_label_privacy(results: dict[str, Any]) -> dict[str, Any] | None:
    """The ``label_privacy`` record of a results.json (the first level that has one), or None."""
    return next((results[lv]["label_privacy"] for lv in ("population", "sample")
                 if lv in results and results[lv].get("label_privacy")), None)


def _sgm_of(privacy: dict[str, Any]) -> Any:
    """The :class:`harness.bounds.sgm.SgmBound` of a DP-SGD privacy record, or None (not DP-SGD's)."""
    from harness.bounds.sgm import SgmBound

    try:
        q, z, t = float(privacy["sample_rate"]), float(privacy["noise_multiplier"]), int(privacy["steps"])
    except (KeyError, TypeError, ValueError):
        return None
    return SgmBound.compute(q, z, t)


def _bounds_json(privacy: dict[str, Any], fprs: list[float], sgm: Any = None) -> dict[str, Any] | None:
    """Provable bounds for DP-SGD (Poisson-subsampled Gaussian): optimal advantage and TPR@FPR.
    ``sgm``: the mechanism's SgmBound (:func:`_sgm_of`), when the caller has it."""
    b = sgm if sgm is not None else _sgm_of(privacy)
    if b is None:
        return None
    q, z, t = b.q, b.noise, b.steps
    # Positive FPRs only: for this mechanism no test has TPR > 0 at a true FPR of exactly 0, while
    # the measured "TPR@0%" means no false positive among the S x C non-member guesses (a true FPR
    # up to about 1/num_neg), so a bound at 0 would be compared with a different quantity.
    targets = sorted({float(f) for f in fprs if f > 0})
    tprs = b.tpr_upper(np.array(targets))
    return {
        "mechanism": "poisson-subsampled gaussian",
        "sample_rate": q,
        "noise_multiplier": z,
        "steps": t,
        "epsilon": b.epsilon(EPS_DELTA),
        "delta": EPS_DELTA,
        "advantage": b.advantage(),
        "tpr_at_fpr": {fpr_key(f): float(v) for f, v in zip(targets, tprs)},
    }


def _metrics_json(m: AttackMetrics) -> dict[str, Any]:
    return {
        "tpr_at_fpr": {fpr_key(t): v for t, v in m.tpr_at_fpr.items()},
        "tpr_ci": {fpr_key(t): list(v) for t, v in m.tpr_ci.items()},
        "resolved": {fpr_key(t): v for t, v in m.resolved.items()},
        "auc": m.auc,
        "balanced_accuracy": m.balanced_accuracy,
        "num_pos": m.num_pos,
        "num_neg": m.num_neg,
        "roc_curve": roc_on_grid(m.roc),
    }


def trained_with_augmentation(cfg: ExperimentConfig) -> bool:
    """Whether the run's models trained on augmented images: ``train.augment`` when the defense reads
    it (every built-in does); True for a defense that does not read it (its recipe is its own)."""
    from harness.plugins import resolve

    fields, _, _ = resolve("defenses", cfg.defense).recipe_routing(dict(cfg.defense_params))
    return cfg.train.augment if fields is None or "augment" in fields else True


@dataclass(frozen=True)
class AttackRoles:
    """Which attacks make the level figures (docs/protocol.md, Headlines): ``ranked``, the leak's
    fixed set (configured built-ins by resolved class, the harness's adaptations, the served
    declared attacks); ``declared``, the defense's declared attacks (those that read what the
    deployed model serves make the declared headline, the others are ablations); ``prespecified``,
    the attack whose primary variant gives each experiment's one-run epsilon."""

    ranked: tuple[str, ...]
    declared: tuple[str, ...]
    prespecified: str | None
    own: tuple[str, ...] = ()  # the harness's own: the configured built-ins and the adaptations


@dataclass(frozen=True)
class LevelEvaluation:
    result: dict[str, Any]
    curves: dict[tuple[str, str], AttackMetrics]
    declared: list[Candidate]  # primary variants of the served declared attacks
    ranked: list[Candidate]  # primary variants of the leak's set, in canonical order (by label)
    excluded: dict[str, str]  # attacks left out of both figures, with the reason
    membership: MembershipStats | None = None  # the membership-consistency statistics (harness.core.checks)
    outputs: LevelOutputs | None = None  # constant and identical models
    scales: dict[str, list[float]] | None = None  # each model's answer scale and test loss: the trainers check


def evaluate_level(
    run: RunDir, level: str, cfg: ExperimentConfig, attacks: list[Attack], roles: AttackRoles,
    signals: LevelSignals | None = None, reading: tuple[float, ...] = (), labels_only: bool = False,
) -> LevelEvaluation:
    """Run every attack variant on one experiment; every variant is reported in ``attacks``. The
    primary variant of each attack of ``roles.ranked`` is a candidate of the leak, of each served
    attack of ``roles.declared`` one of the declared headline (:mod:`harness.audit.headline`); only
    those are read at the figure FPRs (``reading``: plotting position, with replicates and
    delete-one-victim reads). Attacks whose signals the run lacks (a run trained by an older
    version) are skipped and listed in ``skipped_attacks``, a declared attack too (its reason says
    the declared headline is taken without it; the run's ``notes`` repeat it); a level where none of
    the leak's attacks ran is an error. ``labels_only`` (a run that serves labels): the served outputs
    are read as exact one-hot rows (:func:`one_hot_labels`)."""
    ld = run.load_level(level)
    ls = signals if signals is not None else load_level_signals(run, level, cfg.audit.models)
    if labels_only:
        ls = LevelSignals(one_hot_labels(ls.signals), ls.metas)
    y_test, y_val, y_train = run.load_eval_labels()
    pop_labels = y_test[ld.population_indices] if len(ld.population_indices) else None
    inp = AttackInput(signals=ls.signals, labels=ld.canaries.y, membership=ld.design.membership,
                      population_labels=pop_labels, trained_with_augmentation=trained_with_augmentation(cfg))
    ev = ld.canaries.evaluated
    mem_ev = ld.design.membership[:, ev]
    if not reading:
        reading = reading_fprs(cfg, {level: int((~mem_ev).sum())})
    from harness.run.signals import attack_access, signal_table, unserved_access

    table = signal_table(attacks)
    entries, curves, declared, ranked, skipped, excluded = [], {}, [], [], {}, {}
    one_run: dict[str, Any] | None = None
    dp_run = _privacy_json(ls.metas) is not None
    for attack in attacks:
        lacking = sorted(attack.needs - set(ls.signals))
        inapplicable = [n for n in lacking if n in table and table[n].images == "neighbours"
                        and not ld.canaries.has_neighbours]
        if lacking and lacking == inapplicable:  # e.g. lira-neighbour where the canaries have no near-duplicates
            skipped[attack.name] = (f"not applicable: it reads {', '.join(inapplicable)}, and this experiment's "
                                    f"{ld.canary!r} canaries have no near-duplicate neighbours")
            continue
        if lacking:
            why = (f"needs signals {lacking}, which this run's models did not save (they were trained before this "
                   f"attack was configured, or by an older version); train a new run (--out or --run-dir) to "
                   f"include it")
            if attack.name in roles.declared:  # e.g. a SELENA run from before lira-neighbour read Split-AI
                why += HEADLINE_SKIPPED
            skipped[attack.name] = why
            continue
        access = attack_access(attack, table)
        unserved = unserved_access(attack, table)
        if unserved is not None:
            excluded[attack.name] = NOT_SERVED[unserved]
        elif attack.name not in roles.ranked:
            excluded[attack.name] = ABLATION
        figures = unserved is None and attack.name in roles.ranked
        variants = attack.score(inp)
        primary = attack.primary(list(variants), inp)
        if primary not in variants:
            raise ConfigError(f"attack {attack.name!r} declares primary variant {primary!r}, which it did not return")
        every = bool(np.all(ev))
        for variant in list(variants):
            scores = variants.pop(variant)  # each variant's scores are dropped as soon as it is measured
            read = figures and variant == primary  # only the figures' candidates are read at the figure FPRs
            m = evaluate_scores(scores, ld.design.membership, ev, cfg.attack.fprs, bootstrap=cfg.attack.bootstrap,
                                confidence=cfg.attack.confidence, seed=cfg.seed, reading_fprs=reading if read else ())
            scores_ev = scores if every else scores[:, ev]
            del scores
            entry = {"name": attack.name, "variant": variant, "primary": variant == primary, "access": access,
                     **_metrics_json(m),
                     "eps_lower": _eps_lower_json(scores_ev, mem_ev, m.roc)}
            if m.reading:  # the candidate's own TPR at each figure FPR (plotting position)
                entry["reading"] = {fpr_key(t): v for t, v in m.reading.items()}
            label = f"{level}/{attack.name}:{variant}"
            if variant == primary:
                entry["eps_lower_one_run"] = _one_run_json(scores_ev, mem_ev, num_canaries=len(ev), alpha=ONE_RUN_ALPHA)
                if attack.name == roles.prespecified:
                    one_run = one_run_record(label, entry["eps_lower_one_run"])
                if dp_run:  # the bracket's lower bounds (docs/bounds.md, The audit bracket)
                    entry.update(_fdp_gdp_json(scores_ev, mem_ev, num_canaries=len(ev)))
            del scores_ev
            m = replace(m, roc=roc_file_curve(m.roc))  # the full ROC's arrays go: its file keeps these points
            curves[(attack.name, variant)] = m
            if read:
                cand = Candidate(label, entry, ld.design.membership.shape[0], m.reading or {}, m.reading_samples,
                                 m.reading_jackknife, m.reading_audit)
                ranked.append(cand)
                if attack.name in roles.declared:
                    declared.append(cand)
            entries.append(entry)
        del variants
    if not ranked:
        whys = "; ".join(f"{a}: {skipped[a]}" for a in roles.ranked if a in skipped)
        raise ConfigError(f"{level}: none of the leak's attacks ({', '.join(roles.ranked)}) ran"
                          + (f" ({whys})" if whys else ""))
    ranked.sort(key=lambda c: c.label)  # one canonical order: a tie's source does not depend on declarations
    own = {c.label for c in ranked if c.entry["name"] in roles.own}
    figure = level_figure(declared, ranked, int((~mem_ev).sum()), cfg, excluded, own)
    accs = np.array([m["test_accuracy"] for m in ls.metas])
    result = {
        "canary": ld.canary,
        "canary_info": ld.canary_info,
        "num_evaluated": int(ev.sum()),
        "num_guesses": int(ranked[0].entry["num_pos"] + ranked[0].entry["num_neg"]),
        "num_population_samples": int(len(ld.population_indices)),
        "trained_with_augmentation": inp.trained_with_augmentation,
        "test_accuracy": {"mean": float(accs.mean()), "std": float(accs.std(ddof=1)) if len(accs) > 1 else 0.0,
                          "per_model": accs.tolist(), **_accuracy_se(ls.metas, "test_correct", len(y_test))},
        **_validation_accuracy(ls.metas, len(y_val)),
        **_member_accuracy(ls.metas),
        "attacks": entries,
        "attack_params": {a.name: a.params() for a in attacks if a.params()},
        "skipped_attacks": skipped,
        "headline_attacks": sorted({c.entry["name"] for c in declared}),
        "ranked_attacks": sorted({c.entry["name"] for c in ranked}),
        "best": best_entry(declared, figure["declared"], ranked),
        "figure": figure,
        "one_run_epsilon": one_run,
        "privacy": _privacy_json(ls.metas),
        "label_privacy": _label_privacy_json(ls.metas),
        "serving": serving_record(ls.metas),
        "compute": {
            "train_seconds_total": float(sum(m["train_seconds"] for m in ls.metas)),
            "query_seconds_total": float(sum(m["query_seconds"] for m in ls.metas)),
            "devices": sorted({m["device"] for m in ls.metas}),
        },
    }
    served = ls.signals["logits"]
    cols = check_columns(served.shape[1])  # at most MAX_CHECK_SAMPLES audit samples, evenly spaced
    stats = membership_stats(level, label_scores(served[:, cols, 0], ld.canaries.y[cols]), ld.design.membership[:, cols],
                             level_provenance(ld, served[:, cols, 0], y_train, cols))
    pop = ls.signals.get("population_logits")
    outputs = LevelOutputs.of(served[i] if pop is None else np.concatenate([served[i].reshape(-1, served.shape[-1]),
                                                                            pop[i].reshape(-1, pop.shape[-1])])
                              for i in range(len(served)))  # one model's outputs at a time
    return LevelEvaluation(result, curves, declared, ranked, excluded, stats, outputs, trainer_statistics(inp))


def trainer_statistics(inp: AttackInput) -> dict[str, list[float]]:
    """What the trainers check reads of a level's models: each one's answer scale
    (attacks.lira.model_scales) and, where population rows were saved, its mean cross-entropy on those
    test images at view 0 (harness.core.checks.trainers_check)."""
    from attacks.lira import model_scales
    from harness.core.checks import mean_cross_entropy

    out = {"scale": [float(x) for x in model_scales(inp)]}
    pop = inp.signals.get("population_logits")
    if pop is not None and pop.shape[1] and inp.population_labels is not None:
        out["loss"] = [mean_cross_entropy(pop[i, :, 0], inp.population_labels) for i in range(len(pop))]
    return out


def _recipe_fields(defense: Defense) -> dict[str, Any]:
    """Which ``train.*`` fields the defense reads, and which of its parameters replace others."""
    fields, aliases, _ = type(defense).recipe_routing(dict(defense.params))
    from harness.core.overrides import TRAIN_FIELDS

    return {"reads": sorted(fields) if fields is not None else list(TRAIN_FIELDS), "replaced_by": aliases}


def evaluate_run(
    run: RunDir, levels: list[str] | None = None, attack_overrides: dict[str, Any] | None = None,
    cfg: ExperimentConfig | None = None,
) -> tuple[dict[str, Any], dict]:
    """Attack every level of a finished run; return results.json's content and the ROC curves.

    ``cfg`` is the configuration to attack with (default: the run's config.json); it must describe
    the run's models (the run fingerprint is checked where it can be re-computed). ``attack_overrides``
    (dotted ``attack.*`` keys only: they do not change any model) update its attack settings.
    Nothing is written here: results.json records the configuration it was computed with
    (``config``), and :func:`harness.audit.report.write_outputs` saves that as the run's config.json in the
    same commit as the results, so the saved attack settings and the results change together.
    """
    from harness.core.version import __version__, models_version_of
    from harness.core.config import apply_overrides, validate_config
    from harness.plugins import make_defense

    cfg = cfg if cfg is not None else run.load_config()
    if attack_overrides:
        bad = [k for k in attack_overrides if not k.startswith("attack.")]
        if bad:
            raise ConfigError(f"only attack.* settings can change after training, not {', '.join(bad)}")
        from harness.core.overrides import run_attack_names, settle_attack_params

        merged = apply_overrides(cfg.model_dump(mode="json"), attack_overrides)
        merged = settle_attack_params(merged, attack_overrides,
                                      run_attack_names(merged, resolve("defenses", cfg.defense)))
        cfg = validate_config(merged)
    manifest = run.load_manifest()
    defense = make_defense(cfg)
    check_declared_attacks(defense, cfg.defense)
    refs = attack_names(cfg, defense)
    attacks = load_attacks(refs, cfg.attack.params)
    levels = levels or run.levels()
    t0 = time.perf_counter()
    results: dict[str, Any] = {
        "defense": cfg.defense,
        # the name the defense's class declares (a file plugin's ``name``, not its path)
        "defense_name": str(getattr(type(defense), "name", "") or ""),
        # a URL of the defense's paper or code that its class declares ("" for none): the board links it
        "defense_reference": str(getattr(type(defense), "reference", "") or ""),
        "preset": cfg.preset,
        "dataset": cfg.data.name,
        "num_models": cfg.audit.models,
        "audit_size": cfg.audit.size,
        "seed": cfg.seed,
        "harness_version": __version__,
        "trained_with_version": models_version_of(manifest),
        "fingerprint": manifest["fingerprint"],
        "data_fingerprint": manifest.get("data_fingerprint"),
        "created": manifest.get("created"),
        "headline_fpr": headline_fpr(cfg),
        "recipe_fields": _recipe_fields(defense),
        "config": cfg.model_dump(mode="json"),
    }
    if manifest.get("provenance") == "external":  # imported outputs of models trained elsewhere (harness import)
        results["provenance"] = "external"
        results["external"] = manifest.get("external", {})
    curves: dict[str, dict] = {}
    by_experiment: dict[str, dict[str, Any]] = {}
    sample_declared: list[Candidate] = []
    sample_ranked: list[Candidate] = []
    excluded: dict[str, str] = {}
    families: dict[str, LevelFamily] = {}
    # the leak's fixed set: configured built-ins (by resolved class), the adaptations added below, the
    # served declared attacks (unserved ones are ablations: evaluate_level); never a name a plugin chose
    configured = [a.name for a, ref in zip(attacks, refs) if ref in cfg.attack.names and is_builtin_attack(type(a))]
    declared = [a.name for a in attacks if a.name in defense.adaptive_attacks]
    adapted: list[str] = []
    first = load_level_signals(run, levels[0], cfg.audit.models) if levels else None  # read once, reused below
    labels_only = first is not None and carries_only_argmax(first.signals["logits"])
    if labels_only:
        # a defense that serves labels only is attacked by the attack adapted to labels (the paper's
        # section 5.1): added here, from the saved outputs, whatever the defense declared
        if "label-only" not in [a.name for a in attacks]:
            attacks = [*attacks, *load_attacks(["label-only"])]
        adapted.append("label-only")
        results["notes"] = [*results.get("notes", []), LABEL_ONLY_NOTE]
    # the random-serving check of every model (cheap: the metadata of the levels not loaded yet)
    served = {lv: serving_record(first.metas if lv == levels[0] else
                                 [m for i in range(cfg.audit.models) if (m := run.read_signals_meta(lv, i)) is not None])
              for lv in levels} if first is not None else {}
    is_random, is_keyed, serving_lines = serving_notes(served, cfg.audit.repeat_queries,
                                                       "lira-averaged" in [a.name for a in attacks])
    averaging = (is_random is True or is_keyed is True) and cfg.audit.repeat_queries > 1
    if averaging:
        # a model that answers the same image differently each time, or copies a few grey levels off
        # with a jump, is attacked with the mean of R answers (each to a fresh perturbed copy for
        # input-keyed serving), whatever the defense declared (as label-only for labels)
        if "lira-averaged" not in [a.name for a in attacks]:
            attacks = [*attacks, *load_attacks(["lira-averaged"])]
        adapted.append("lira-averaged")
    prespecified = (adapted or configured or declared or [None])[0]
    if first is not None:
        # every run: LiRA on each model's outputs at one scale (a per-model temperature, or labels served
        # at any scale, would otherwise read private to LiRA for that alone: attacks.lira.LiRAScaled)
        if SCALED not in [a.name for a in attacks]:
            attacks = [*attacks, *load_attacks([SCALED])]
        adapted.append(SCALED)
    roles = AttackRoles(ranked=tuple(dict.fromkeys([*configured, *adapted, *declared])), declared=tuple(declared),
                        prespecified=prespecified, own=tuple(dict.fromkeys([*configured, *adapted])))
    results["attack_roles"] = {"configured": configured, "adapted": adapted, "declared": declared,
                               "prespecified": roles.prespecified}
    if serving_lines:
        results["notes"] = [*results.get("notes", []), *serving_lines]
    results["serving"] = {"random": is_random, "input_keyed": is_keyed, "repeat_queries": cfg.audit.repeat_queries,
                          "averaging_attack": "lira-averaged" if averaging else None}
    # every level's figures are read at FPRs its pooled non-member guesses resolve (3 expected false
    # positives); the sample level's over all of its canary experiments, which it chooses among together
    designs = {lv: run.load_level(lv) for lv in levels}
    negatives = {lv: int((~ld.design.membership[:, ld.canaries.evaluated]).sum()) for lv, ld in designs.items()}
    level_negatives = {"population": negatives["population"]} if "population" in negatives else {}
    sample_negatives = [n for lv, n in negatives.items() if lv != "population"]
    if sample_negatives:
        level_negatives["sample"] = min(sample_negatives)
    reading = reading_fprs(cfg, level_negatives)
    pools: dict[str, list[Candidate]] = {}
    member_stats: list[MembershipStats] = []
    level_outputs: dict[str, LevelOutputs] = {}
    accuracies: dict[str, list[float]] = {}
    scales: dict[str, dict[str, list[float]]] = {}
    for level in levels:
        lev = evaluate_level(run, level, cfg, attacks, roles, first if level == levels[0] else None, reading,
                             labels_only)
        if lev.membership is not None and lev.outputs is not None:
            member_stats.append(lev.membership)
            level_outputs[level] = lev.outputs
        accuracies[level] = list(lev.result["test_accuracy"]["per_model"])
        if lev.scales is not None:
            scales[level] = lev.scales
        headline_skips = [f"{level}: declared attack {a} skipped ({why})"
                          for a, why in lev.result["skipped_attacks"].items() if why.endswith(HEADLINE_SKIPPED)]
        if headline_skips:
            results["notes"] = [*results.get("notes", []), *headline_skips]
        curves[level] = lev.curves
        excluded.update(lev.excluded)
        if level == "population":
            results[level] = lev.result
            pools["population"] = lev.ranked
            fpr = level_fpr(cfg, level_negatives["population"])
            if lev.declared and fpr is not None:
                families["population"] = LevelFamily(lev.declared, lev.ranked, fpr)
        else:
            by_experiment[level] = lev.result
            sample_declared += lev.declared
            sample_ranked += lev.ranked
    if by_experiment:
        # the sample level's figures: over the candidates of every canary experiment together
        pools["sample"] = sorted(sample_ranked, key=lambda c: c.label)
        own = {c.label for c in pools["sample"] if c.entry["name"] in roles.own}
        figure = level_figure(sample_declared, pools["sample"], level_negatives["sample"], cfg, excluded, own)
        fpr = figure["fpr"]
        if sample_declared and fpr is not None:
            families["sample"] = LevelFamily(sample_declared, pools["sample"], fpr)
        best = best_entry(sample_declared, figure["declared"], pools["sample"])
        headline_experiment = by_experiment[best["source"].split("/")[0]]
        first_experiment = next(iter(by_experiment.values()))  # pre-specified: the first canary experiment
        results["sample"] = {**headline_experiment, "canaries": [r["canary"] for r in by_experiment.values()],
                             "best": best, "figure": figure, "one_run_epsilon": first_experiment["one_run_epsilon"]}
        results["sample_by_canary"] = {r["canary"]: r for r in by_experiment.values()}
    test = headline_test(families, cfg)
    results["headline_test"] = test
    for lv in ("population", "sample"):
        if lv not in results:
            continue
        rec = test["levels"].get(lv)
        results[lv]["figure"]["flag"] = None if rec is None else {
            "flagged": rec["flagged"], "p_value": rec["p_value"], "top": rec["top"] if rec["flagged"] else None}
    # an import declares no attack (its "declared headline" is the harness's LiRA, nobody's claim): no warning
    warnings = [headline_test_warning(lv, test, results[lv]["figure"]["declared"]) for lv, rec in test["levels"].items()
                if rec["flagged"] and manifest.get("provenance") != "external"]
    if warnings:
        results["warnings"] = warnings
    # the run's one-run epsilon: pre-specified, the sample level's (its first canary experiment), else the population's
    results["one_run_epsilon"] = (results.get("sample") or results.get("population") or {}).get("one_run_epsilon")
    results["checks"] = run_checks(member_stats, level_outputs, accuracies, run.load_eval_labels()[0],
                                   (manifest.get("external") or {}).get("forced_checks", []), scales)
    forced = set(results["checks"]["forced"])
    failed = [f"{name} check failed{' (imported with --force)' if name in forced else ''}: {line}"
              for name in CHECKS for line in results["checks"][name]["findings"]]
    if failed:
        shown = failed[:MAX_CHECK_WARNINGS]
        if len(failed) > len(shown):
            shown[-1] += f" (and {len(failed) - len(shown)} more: results.json, checks)"
        results["warnings"] = [*results.get("warnings", []), *shown]
    if "population" in results and "sample" in results:
        results["sample_population_ratio"] = ratio_json(
            pools, level_negatives, cfg, {c.label for p in pools.values() for c in p if c.entry["name"] in roles.own})
    privacy = run_privacy(results)
    if privacy is not None:
        sgm = _sgm_of(privacy)
        results["bounds"] = _bounds_json(privacy, cfg.attack.fprs, sgm)
        bracket = _bracket_json(results, privacy, sgm) if sgm is not None else None
        if bracket is not None:
            results["bracket"] = bracket
    from harness.core.machine import machine_record, models_machines

    # the machines that trained the models (from their signals files) and the one that ran this phase
    results["machine"] = {"models": models_machines([m for lv in levels for i in range(cfg.audit.models)
                                                     if (m := run.read_signals_meta(lv, i)) is not None]),
                          "attack_phase": machine_record()}
    results["timings"] = {**manifest.get("timings", {}), "attack_seconds": time.perf_counter() - t0}
    return results, curves
