"""The one-run canary design for DP audits (``harness audit-one-run`` on a DP-SGD defense; docs/bounds.md,
"The audit bracket").

The design the one-run theorems assume (Steinke, Nasr and Jagielski 2023, Theorem 3.3; Mahloujifar,
Melis and Chaudhuri 2025): m canaries, each **included independently with probability 1/2**
in ONE model's training set (the target), that model trained once, its canaries guessed, and the
guesses turned into lower bounds.

- **Canaries**: m pool samples (the prefix of a seeded permutation of the training pool) rewritten by
  the chosen generator (``mislabeled``, ``blank``, ``ood`` or ``uniform``, as ``harness evaluate``'s
  canaries, with ``audit.canary_params``); every other pool sample is in every model's training set,
  as in Steinke et al., whose canaries are training examples that are held out when excluded. The
  target's membership is m independent fair coins from their own seeded stream.
- **Guesses**: with no shadow models, the target's logit-scaled confidence in each canary's label on
  the plain query (the global loss threshold of Yeom et al., the harness's ``threshold`` attack);
  with ``shadows`` K > 0, K shadow models, each canary in exactly K/2 of them (drawn independently of
  the target's coins, so that the shadows carry no information about the target's membership), and
  online LiRA (Carlini et al. 2022) or online RMIA (Zarifzadeh et al. 2024) with the target as the
  victim and the K shadows as its references, each in its primary variant. The theorems need the
  guesses to depend on a canary's inclusion only through the target model: the shadows' membership
  is independent of it and every canary has K/2 IN and K/2 OUT references whatever the target's coin.
- **Bounds** (:func:`harness.bounds.fdp_one_run.one_run_bounds` on the target's scores, guesses
  "member" on the top k and "member"/"non-member" on the top and bottom k for a fixed grid of k;
  :func:`harness.bounds.gdp.gdp_lower_bound_roc`), with the accountant's epsilon, the PLD epsilon and
  the provable curve of the same mechanism: :func:`harness.bounds.bracket.build_bracket`.

Every model's signals are saved in the audit's own folder as it finishes (``model_000.npz`` the
target, ``shadows-K/model_001.npz``... the K shadows), so an interrupted audit resumes where it
stopped; the folder's name carries a fingerprint of everything that determines the target (the
target's coins do not depend on K, so adding shadows later reuses it). ``result.json`` and
``report.html`` hold the latest audit of the folder's design.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from harness.core.config import ConfigError, ExperimentConfig

#: the canary kinds of the design (generators that rewrite their own sample, without neighbours)
DESIGN_CANARIES = ("mislabeled", "blank", "ood", "uniform")
ATTACKS = ("loss", "lira", "rmia")
#: the config keys the design reads: one target and its shadows with their own canaries
ONE_RUN_DP_KEYS = ("seed", "data", "train", "defense_params", "run.device", "run.out", "run.deterministic",
                   "audit.canary_params", "audit.population_samples", "audit.signal_dtype", "attack.params.lira",
                   "attack.params.rmia")
DELTA = 1e-5

ProgressFn = Callable[[str, str], None]  # (kind: status | info, message)


@dataclass(frozen=True)
class OneRunSpec:
    """What the user chose: m canaries of kind ``canary``, K ``shadows``, the ``attack`` (None: LiRA
    with shadows, the loss threshold without), the confidence ``1 - alpha`` and the GDP reading's
    threshold ``correction``."""

    canaries: int
    canary: str = "mislabeled"
    shadows: int = 0
    attack: str | None = None
    alpha: float = 0.05
    correction: str = "bonferroni"

    def resolved_attack(self) -> str:
        return self.attack or ("lira" if self.shadows else "loss")


def check_overrides(overrides: dict[str, Any]) -> None:
    """Refuse an override the design would not read (ConfigError naming what it reads)."""
    for key in overrides:
        if not any(key == k or key.startswith(k + ".") for k in ONE_RUN_DP_KEYS):
            raise ConfigError(f"--set {key} does not apply to audit-one-run's DP design (one target model and its "
                              f"shadows, their own canaries: use --canaries, --canary, --shadows, --attack); it reads "
                              f"{', '.join(ONE_RUN_DP_KEYS)}")


def check_spec(spec: OneRunSpec, cfg: ExperimentConfig, pool_size: int) -> None:
    """Every user mistake as one ConfigError, before anything is trained."""
    from harness.bounds.gdp import CORRECTIONS

    if not 2 <= spec.canaries <= pool_size:
        raise ConfigError(f"--canaries must be between 2 and the training pool size {pool_size} "
                          f"({cfg.data.name}), got {spec.canaries}")
    if spec.canary not in DESIGN_CANARIES:
        raise ConfigError(f"--canary must be one of {', '.join(DESIGN_CANARIES)} for the DP design, got {spec.canary!r}")
    if spec.shadows < 0 or spec.shadows % 2:
        raise ConfigError(f"--shadows must be an even number >= 0 (each canary in exactly half of them), got "
                          f"{spec.shadows}")
    attack = spec.resolved_attack()
    if attack not in ATTACKS:
        raise ConfigError(f"--attack must be one of {', '.join(ATTACKS)}, got {attack!r}")
    if attack == "loss" and spec.shadows:
        raise ConfigError(f"--attack loss reads the target alone; the {spec.shadows} shadow models would be trained "
                          "for nothing: use --attack lira or rmia with --shadows, or --shadows 0")
    if attack == "lira" and spec.shadows < 4:
        raise ConfigError(f"--attack lira needs --shadows >= 4 (2 IN and 2 OUT shadow models per canary for its "
                          f"Gaussians), got {spec.shadows}")
    if attack == "rmia":
        if spec.shadows < 2:
            raise ConfigError(f"--attack rmia needs --shadows >= 2 (an IN and an OUT reference per canary), got "
                              f"{spec.shadows}")
        if cfg.audit.population_samples < 1:
            raise ConfigError("--attack rmia needs population samples: audit.population_samples >= 1")
    if not 0.0 < spec.alpha < 0.5:
        raise ConfigError(f"--confidence must lie in (0.5, 1), got {1 - spec.alpha}")
    if spec.correction not in CORRECTIONS:
        raise ConfigError(f"--gdp-correction must be one of {', '.join(CORRECTIONS)}, got {spec.correction!r}")


def one_run_design(pool_size: int, m: int, shadows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(canary pool indices (m,), membership (1 + K, m)): row 0 the target's m independent fair coins,
    rows 1..K the shadows' balanced membership (each canary in exactly K/2, from uniforms ranked per
    canary: :func:`harness.core.design.balanced_membership`), from streams independent of each other."""
    from harness.core.design import balanced_membership

    s_order, s_target, s_shadow = np.random.SeedSequence([seed, 0x1D9A]).spawn(3)
    idx = np.random.default_rng(s_order).permutation(pool_size)[:m].astype(np.int64)
    target = np.random.default_rng(s_target).random(m) < 0.5
    if shadows:
        shadow = balanced_membership(np.random.default_rng(s_shadow).uniform(size=(shadows, m)))
        return idx, np.vstack([target[None, :], shadow])
    return idx, target[None, :]


def _target_rmia(logits: np.ndarray, pop: np.ndarray, labels: np.ndarray, pop_labels: np.ndarray,
                 membership: np.ndarray, gamma: float, temperature: float, augmented: bool) -> np.ndarray:
    """Online RMIA scores of the target (row 0) with rows 1..K as its references: per query view,
    P(x) = (mean over IN references + mean over OUT references) / 2 and P(z) = the mean over all K,
    the score the fraction of (view, z) pairs with LR(x, z) >= gamma (attacks/rmia.py; primary
    variant: every view for models trained with augmentation, the plain query otherwise)."""
    from attacks.rmia import _log_mean, _logsumexp0, _view_log_prob

    views = range(logits.shape[2]) if augmented else range(1)
    k = logits.shape[0] - 1
    ref_in, ref_out = membership[1:], ~membership[1:]
    total = np.zeros(logits.shape[1], dtype=np.int64)
    for a in views:
        lx = _view_log_prob(logits, a, labels, temperature)
        lz = _view_log_prob(pop, a, pop_labels, temperature)
        log_px = np.logaddexp(_log_mean(lx[1:], ref_in), _log_mean(lx[1:], ref_out)) - np.log(2.0)
        log_pz = _logsumexp0(lz[1:]) - np.log(k)
        ratio_z = np.sort(lz[0] - log_pz)
        total += np.searchsorted(ratio_z, (lx[0] - log_px) - np.log(gamma), side="right")
    return total / (len(views) * pop.shape[1])


def target_scores(attack: str, signals: list[dict[str, np.ndarray]], labels: np.ndarray, pop_labels: np.ndarray,
                  membership: np.ndarray, augmented: bool, params: dict[str, Any]) -> tuple[np.ndarray, str]:
    """(scores (m,), variant) of the target (model 0): higher means "member" (module docstring)."""
    from attacks.scores import both_scores

    logits = np.stack([s["logits"] for s in signals]).astype(np.float64)  # (1 + K, m, A, C)
    if attack == "loss":
        return both_scores(logits[:1, :, :1], labels)["logit"][0, :, 0], "threshold:logit (plain query)"
    if attack == "lira":
        from attacks.base import AttackInput
        from attacks.lira import LiRA, lira_variants

        variants = lira_variants(logits, labels, membership, online=True, balanced=False)
        inp = AttackInput(signals={}, labels=labels, membership=membership, trained_with_augmentation=augmented)
        primary = LiRA().primary(list(variants), inp)
        return variants[primary][0], f"lira:{primary} ({membership.shape[0] - 1} shadows)"
    pop = np.stack([s["population_logits"] for s in signals]).astype(np.float64)
    rmia = {"gamma": 2.0, "temperature": 2.0, **{k: v for k, v in params.items() if k in ("gamma", "temperature")}}
    variant = f"online-{'aug' + str(logits.shape[2]) if augmented and logits.shape[2] > 1 else 'noaug'}"
    return (_target_rmia(logits, pop, labels, pop_labels, membership, float(rmia["gamma"]), float(rmia["temperature"]),
                         augmented),
            f"rmia:{variant} ({membership.shape[0] - 1} shadows, gamma {rmia['gamma']:g})")


def audit_dir(cfg: ExperimentConfig, spec: OneRunSpec, data_fingerprint: str) -> Path:
    """``<run.out>/audit-one-run-<defense>-<preset>-<fingerprint>``: the fingerprint hashes the trained
    config, the data, the models version, m and the canary kind (what determines the target; its
    membership does not depend on K, so an audit with shadows reuses the target of one without, and
    the K shadows live in ``shadows-K/``)."""
    from harness.run.fingerprint import fingerprint_of, sha256_json
    from harness.run.runner import defense_slug

    fp = sha256_json({"run": fingerprint_of(cfg, data_fingerprint), "canaries": spec.canaries, "canary": spec.canary,
                      "design": "one-run-dp-1"})
    return Path(cfg.run.out) / f"audit-one-run-{defense_slug(cfg.defense)}-{cfg.preset}-{fp[:12]}"


@dataclass(frozen=True)
class Plan:
    """An audit checked and designed, nothing trained: its folder, data, design and canaries."""

    cfg: ExperimentConfig
    spec: OneRunSpec
    folder: Path
    data: Any
    defense: Any
    pool_indices: np.ndarray
    membership: np.ndarray
    canaries: Any
    canary_info: dict[str, Any]


def plan(cfg: ExperimentConfig, spec: OneRunSpec) -> Plan:
    """Check everything that can be checked before training and design the audit (nothing written)."""
    from harness.core.data import load_dataset
    from harness.run.runner import check_defense_config, make_canaries, make_defense, resolve_device

    out = Path(cfg.run.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"run.out (--out) {out} is a file; it must be the folder for the audit's folder")
    data = load_dataset(cfg.data, cfg.seed)
    pool = len(data.y_train)
    check_spec(spec, cfg, pool)
    defense = make_defense(cfg)
    check_defense_config(defense, cfg)
    resolve_device(cfg.run.device)
    idx, membership = one_run_design(pool, spec.canaries, spec.shadows, cfg.seed)
    params = dict(cfg.audit.canary_params.get(spec.canary, {}))
    canaries, canary_info = make_canaries(cfg, data, spec.canary, params, idx)
    try:
        defense.check_train_size(int(pool - spec.canaries + membership.sum(axis=1).min()))
    except ValueError as e:
        raise ConfigError(f"{cfg.defense}: {e}") from None
    return Plan(cfg, spec, audit_dir(cfg, spec, data.fingerprint()), data, defense, idx, membership, canaries,
                canary_info)


def audit(p: Plan, progress: ProgressFn | None = None) -> dict[str, Any]:
    """Train the target (and K shadows) of the planned design, score the target's canaries and build
    the bracket; writes design.json, every model's signals and result.json into ``p.folder`` (hold its
    lock: the API does) and returns the result. Models already in the folder are reused."""
    from defenses.base import FitContext, LabeledImages
    from harness.audit.attack_phase import EPS_DELTA
    from harness.bounds.bracket import build_bracket, claimed_record
    from harness.bounds.fdp_one_run import one_run_bounds
    from harness.bounds.gdp import gdp_lower_bound_roc
    from harness.core.metrics import roc_curve, roc_on_grid, tpr_at_fpr
    from harness.run import plugin_errors
    from harness.run.runner import collect_signals, model_seed, population_indices, resolve_device, seed_global_rngs
    from harness.run.runstore import atomic_write_json, atomic_write_npz

    say = progress or (lambda kind, msg: None)
    cfg, spec, data, defense, folder = p.cfg, p.spec, p.data, p.defense, p.folder
    idx, membership, canaries, canary_info = p.pool_indices, p.membership, p.canaries, p.canary_info
    pool = len(data.y_train)
    keep = np.ones(pool, dtype=bool)
    keep[idx] = False
    device = resolve_device(cfg.run.device)
    atomic_write_json(folder / "design.json", {"canaries": spec.canaries, "canary": spec.canary,
                                               "pool_indices": idx.tolist(), "membership": membership[0].astype(int).tolist(),
                                               "canary_info": canary_info, "config": cfg.model_dump(mode="json")})
    if spec.shadows:
        atomic_write_json(folder / f"shadows-{spec.shadows}" / "design.json",
                          {"shadows": spec.shadows, "membership": membership[1:].astype(int).tolist()})
    pop_idx = population_indices(cfg, data)
    signals, metas = [], []
    for j in range(membership.shape[0]):
        role = "target" if j == 0 else f"shadow {j}/{spec.shadows}"
        where_j = folder if j == 0 else folder / f"shadows-{spec.shadows}"
        npz, meta_path = where_j / f"model_{j:03d}.npz", where_j / f"model_{j:03d}.json"
        if npz.is_file() and meta_path.is_file():
            with np.load(npz) as f:
                signals.append({k: f[k] for k in f.files})
            metas.append(json.loads(meta_path.read_text()))
            say("info", f"{role}: reused from {npz.relative_to(folder)} (trained by an earlier audit of this design)")
            continue
        member = membership[j]
        train = LabeledImages(np.concatenate([data.x_train[keep], canaries.x[member]]),
                              np.concatenate([data.y_train[keep], canaries.y[member]]),
                              data.num_classes, data.mean, data.std, data.augment)
        seed = model_seed(cfg.seed, j)
        say("status", f"training the {role} ({len(train)} samples, {int(member.sum())} of the {spec.canaries} canaries)")
        seed_global_rngs(seed)
        t0 = time.perf_counter()
        where = f"the one-run {role}"
        ctx = FitContext(seed=seed, device=device, train=cfg.train, params=defense.params)
        served = plugin_errors.call_defense(lambda: defense.fit(train, ctx), defense, cfg.defense, "fit", where)
        train_s = time.perf_counter() - t0
        checked = plugin_errors.check_served(served, canaries.x, data.num_classes, cfg.defense, where)

        def ask() -> tuple[dict[str, np.ndarray], dict[str, Any], float]:
            sig, serving = collect_signals(checked, cfg, defense, canaries.x, data.augment, data.x_test[pop_idx])
            checked.during = "test accuracy on the test set"
            return sig, serving, float((checked.query(data.x_test).argmax(1) == data.y_test).mean())

        sig, serving, acc = plugin_errors.call_defense(ask, served, cfg.defense, "query", where)
        keep_sig = {k: sig[k] for k in ("logits", "population_logits") if k in sig}
        meta = {"model_index": j, "role": role, "seed": seed, "train_size": len(train), "test_accuracy": acc,
                "train_seconds": train_s, "device": device, "defense_info": served.info(), "serving": serving}
        atomic_write_npz(npz, **keep_sig)  # the signals first: a model counts as done once both files exist
        atomic_write_json(meta_path, meta)
        signals.append(keep_sig)
        metas.append(meta)
        say("info", f"{role} trained in {train_s:.0f} s: test accuracy {100 * acc:.1f}%, saved {npz.relative_to(folder)}")
    attack = spec.resolved_attack()
    say("status", f"scoring the target's {spec.canaries} canaries ({attack}) and computing the bounds")
    augmented = bool(cfg.train.augment)
    scores, variant = target_scores(attack, signals, canaries.y, data.y_test[pop_idx], membership, augmented,
                                    dict(cfg.attack.params.get(attack, {})))
    target = membership[0]
    one = one_run_bounds(scores[None, :], target[None, :], delta=EPS_DELTA, alpha=spec.alpha,
                         sides=("top", "both"))
    gdp = gdp_lower_bound_roc(scores, target, alpha=spec.alpha, delta=EPS_DELTA, correction=spec.correction,
                              seed=cfg.seed)
    roc = roc_curve(scores, target)
    info = metas[0].get("defense_info") or {}
    claimed = claimed_record(info, EPS_DELTA) if "epsilon" in info else None
    attack_rec = {"name": attack, "variant": variant, "level": "one-run target", "canary": spec.canary,
                  "victims": 1, "canaries": spec.canaries, "members": int(target.sum()),
                  "tpr_at_fpr": {f"{f:g}": tpr_at_fpr(roc, f) for f in (0.001, 0.01, 0.1)}}
    bracket = build_bracket(claimed=claimed or {"delta": EPS_DELTA}, one_run=one.to_json(), gdp=gdp.to_json(),
                            roc=roc_on_grid(roc), attack=attack_rec)
    result = {
        "kind": "audit-one-run-dp",
        "defense": cfg.defense,
        "preset": cfg.preset,
        "dataset": cfg.data.name,
        "seed": cfg.seed,
        "spec": {**asdict(spec), "attack": attack},
        "pool_size": pool,
        "canary_info": canary_info,
        "target": {"test_accuracy": metas[0]["test_accuracy"], "train_size": metas[0]["train_size"],
                   "train_seconds": metas[0]["train_seconds"], "defense_info": info},
        "shadows": [{"test_accuracy": m["test_accuracy"], "train_seconds": m["train_seconds"]} for m in metas[1:]],
        "bracket": bracket,
        "config": cfg.model_dump(mode="json"),
    }
    atomic_write_json(folder / "result.json", result)  # the latest audit of this design (its spec says which)
    return result
