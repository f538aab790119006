"""The attack phase: read the saved signals of a level, run the attacks, compute the metrics.

Nothing here trains a model: ``harness attack RUN_DIR`` re-runs it on any finished run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from attacks.base import Attack, AttackInput
from defenses.base import Defense
from harness.config import ConfigError, ExperimentConfig
from harness.metrics import AttackMetrics, evaluate_scores
from harness.registry import resolve
from harness.runstore import RunDir, RunDirError

HEADLINE_FPR = 0.001


def fpr_key(t: float) -> str:
    """JSON key of a target FPR: ``repr`` of the float ("0.0", "0.001", "0.01")."""
    return repr(float(t))


def headline_fpr(cfg: ExperimentConfig) -> float:
    return HEADLINE_FPR if HEADLINE_FPR in cfg.attack.fprs else min(cfg.attack.fprs, default=0.0)


def attack_names(cfg: ExperimentConfig, defense: Defense) -> list[str]:
    """The configured attacks, then the defense's adaptive and ablation attacks, without repeats."""
    return list(dict.fromkeys([*cfg.attack.names, *defense.adaptive_attacks, *defense.ablation_attacks]))


def load_attacks(names: list[str]) -> list[Attack]:
    out = []
    for n in names:
        cls = resolve("attacks", n)
        out.append(cls())
    return out


@dataclass(frozen=True)
class LevelSignals:
    signals: dict[str, np.ndarray]  # name -> (S, C, ...)
    metas: list[dict[str, Any]]


def load_level_signals(run: RunDir, level: str, num_models: int) -> LevelSignals:
    """Stack every model's signals; refuse if any model of the level is unfinished."""
    per_model = [run.read_signals(level, s) for s in range(num_models)]
    missing = [s for s, m in enumerate(per_model) if m is None]
    if missing:
        raise RunDirError(
            f"{level} level: {len(missing)} of {num_models} models have no finished signals "
            f"(e.g. model {missing[0]}); re-run `harness evaluate` with the same arguments to finish training"
        )
    names = set.intersection(*(set(m.arrays) for m in per_model))  # type: ignore[union-attr]
    signals = {n: np.stack([m.arrays[n] for m in per_model]) for n in sorted(names)}  # type: ignore[union-attr]
    return LevelSignals(signals=signals, metas=[m.meta for m in per_model])  # type: ignore[union-attr]


EPS_DELTA = 1e-5  # delta of the empirical epsilon lower bounds (the accountants' delta)


def _eps_lower_json(scores: np.ndarray, membership: np.ndarray) -> dict[str, Any]:
    """Empirical epsilon lower bound of DP auditing for one attack variant (harness.bounds.empirical):
    Clopper-Pearson 95% limits, maximized over thresholds with a Bonferroni correction (so the
    maximum stays a valid 95% bound), and the optimistic uncorrected maximum beside it."""
    from harness.bounds.empirical import epsilon_lower_bound_roc

    valid = epsilon_lower_bound_roc(scores, membership, delta=EPS_DELTA, alpha=0.05, bonferroni=True)
    naive = epsilon_lower_bound_roc(scores, membership, delta=EPS_DELTA, alpha=0.05, bonferroni=False)
    return {
        "epsilon": valid.epsilon,
        "epsilon_uncorrected": naive.epsilon,
        "delta": EPS_DELTA,
        "confidence": 0.95,
        "tpr": valid.tpr,
        "fpr": valid.fpr,
        "direction": valid.direction,
    }


def run_privacy(results: dict[str, Any]) -> dict[str, Any] | None:
    """The ``privacy`` record of a results.json (the first level that has one), or None."""
    return next((results[lv]["privacy"] for lv in ("population", "sample")
                 if lv in results and results[lv].get("privacy")), None)


def _privacy_json(metas: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The DP guarantee the models report (defense_info with an epsilon): the weakest over models."""
    infos = [m.get("defense_info") or {} for m in metas]
    if not all("epsilon" in i for i in infos):
        return None
    worst = max(infos, key=lambda i: float("inf") if i["epsilon"] is None else i["epsilon"])
    return {**worst, "epsilon_min": min(i["epsilon"] for i in infos)}


def _bounds_json(privacy: dict[str, Any], fprs: list[float]) -> dict[str, Any] | None:
    """Provable bounds for DP-SGD (Poisson-subsampled Gaussian): optimal advantage and TPR@FPR."""
    from harness.bounds.sgm import SgmBound

    try:
        q, z, t = float(privacy["sample_rate"]), float(privacy["noise_multiplier"]), int(privacy["steps"])
    except (KeyError, TypeError, ValueError):
        return None
    b = SgmBound.compute(q, z, t)
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
    }


def _headline_key(hk: str):
    return lambda e: (e["tpr_at_fpr"][hk], e["tpr_at_fpr"].get(fpr_key(0.0), 0), e["auc"])


def evaluate_level(
    run: RunDir, level: str, cfg: ExperimentConfig, attacks: list[Attack], headline_attacks: list[str] | None = None
) -> tuple[dict[str, Any], dict[tuple[str, str], AttackMetrics]]:
    """Run every attack variant on one experiment. Returns its results object and the metrics
    (with ROC curves) keyed by (attack, variant). The headline (``best``) is the maximum over the
    variants of ``headline_attacks`` (all attacks when None)."""
    ld = run.load_level(level)
    ls = load_level_signals(run, level, cfg.audit.models)
    inp = AttackInput(signals=ls.signals, labels=ld.canaries.y, membership=ld.design.membership)
    entries, curves = [], {}
    for attack in attacks:
        lacking = sorted(attack.needs - set(ls.signals))
        if lacking:
            raise ConfigError(f"attack {attack.name!r} needs signals {lacking}, which this run did not save")
        for variant, scores in attack.score(inp).items():
            m = evaluate_scores(
                scores,
                ld.design.membership,
                ld.canaries.evaluated,
                cfg.attack.fprs,
                bootstrap=cfg.attack.bootstrap,
                confidence=cfg.attack.confidence,
                seed=cfg.seed,
            )
            curves[(attack.name, variant)] = m
            entries.append({"name": attack.name, "variant": variant, **_metrics_json(m),
                            "eps_lower": _eps_lower_json(scores[:, ld.canaries.evaluated],
                                                         ld.design.membership[:, ld.canaries.evaluated])})
    hk = fpr_key(headline_fpr(cfg))
    pool = [e for e in entries if headline_attacks is None or e["name"] in headline_attacks]
    best = max(pool, key=_headline_key(hk))
    accs = np.array([m["test_accuracy"] for m in ls.metas])
    result = {
        "canary": ld.canary,
        "num_evaluated": int(ld.canaries.evaluated.sum()),
        "num_guesses": int(best["num_pos"] + best["num_neg"]),
        "test_accuracy": {"mean": float(accs.mean()), "std": float(accs.std(ddof=1)) if len(accs) > 1 else 0.0,
                          "per_model": accs.tolist()},
        "attacks": entries,
        "headline_attacks": sorted({e["name"] for e in pool}),
        "best": {"name": best["name"], "variant": best["variant"], "tpr_at_fpr": best["tpr_at_fpr"],
                 "tpr_ci": best["tpr_ci"], "resolved": best["resolved"]},
        "privacy": _privacy_json(ls.metas),
        "compute": {
            "train_seconds_total": float(sum(m["train_seconds"] for m in ls.metas)),
            "query_seconds_total": float(sum(m["query_seconds"] for m in ls.metas)),
            "devices": sorted({m["device"] for m in ls.metas}),
        },
    }
    return result, curves


def evaluate_run(
    run: RunDir, levels: list[str] | None = None, attack_overrides: dict[str, Any] | None = None
) -> tuple[dict[str, Any], dict]:
    """Attack every level of a finished run; return results.json's content and the ROC curves.

    ``attack_overrides`` (dotted ``attack.*`` keys only: they do not change any model) update the
    run's attack settings, which are then saved in its config.json.
    """
    from harness import __version__
    from harness.config import apply_overrides, validate_config
    from harness.runner import make_defense
    from harness.runstore import atomic_write_json

    cfg = run.load_config()
    if attack_overrides:
        bad = [k for k in attack_overrides if not k.startswith("attack.")]
        if bad:
            raise ConfigError(f"only attack.* settings can change after training, not {', '.join(bad)}")
        cfg = validate_config(apply_overrides(cfg.model_dump(mode="json"), attack_overrides))
        atomic_write_json(run.config_path, cfg.model_dump(mode="json"))
    manifest = run.load_manifest()
    defense = make_defense(cfg)
    attacks = load_attacks(attack_names(cfg, defense))
    levels = levels or run.levels()
    t0 = time.perf_counter()
    results: dict[str, Any] = {
        "defense": cfg.defense,
        "preset": cfg.preset,
        "dataset": cfg.data.name,
        "num_models": cfg.audit.models,
        "audit_size": cfg.audit.size,
        "seed": cfg.seed,
        "harness_version": __version__,
        "trained_with_version": manifest.get("harness_version"),
        "fingerprint": manifest["fingerprint"],
        "headline_fpr": headline_fpr(cfg),
        "config": cfg.model_dump(mode="json"),
    }
    curves: dict[str, dict] = {}
    by_canary: dict[str, dict[str, Any]] = {}
    for level in levels:
        if level == "population":  # the strongest of all black-box attacks (ablations excluded)
            pool = [a.name for a in attacks if a.name not in defense.ablation_attacks]
            results[level], curves[level] = evaluate_level(run, level, cfg, attacks, pool)
        else:  # sample level: the headline is the best of the defense's adaptive attacks
            res, curves[level] = evaluate_level(run, level, cfg, attacks, list(defense.adaptive_attacks))
            by_canary[res["canary"]] = res
    if by_canary:
        hk = fpr_key(headline_fpr(cfg))
        strongest = max(by_canary.values(), key=lambda r: _headline_key(hk)(r["best"] | {"auc": 0.0}))
        results["sample"] = {**strongest, "canaries": list(by_canary)}
        results["sample_by_canary"] = by_canary
    privacy = run_privacy(results)
    if privacy is not None:
        results["bounds"] = _bounds_json(privacy, cfg.attack.fprs)
    results["timings"] = {**manifest.get("timings", {}), "attack_seconds": time.perf_counter() - t0}
    return results, curves
