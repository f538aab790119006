"""One-run audit with the label-flip memorization game (Malek et al. 2021, "Antipodes of label
differential privacy: PATE and ALIBI", Game 3 and appendix B).

N training samples become canaries. Each gets two candidate labels, both different from its true
label, and is trained with one of them chosen by a fair coin (so the trained label y' is uniform
over the C - 1 wrong labels). After training ONE model, three games are played on the same model:

- ``weighted`` (the paper's appendix B as its text describes it, the default headline): each
  canary plays against all C - 2 alternatives y'' (neither its true label nor y'); the auditor
  guesses the more confident label and abstains when both are below tau or tied; the per-canary
  rates ACGR_i are combined in a weighted mean (weights: the numbers of guesses m_i) with a normal
  95% interval, SE = s sqrt(V2) / V1; tau is swept over [0.5, 0.99] in steps of 0.01
  (``harness.bounds.empirical.weighted_acgr_game``).
- ``paper``: the same guesses, estimated as the authors' released code does
  (``paper_acgr_game``): 7 taus, ties count as wrong, SE = s / sqrt(N_eff), a rate below 1/2
  flipped, the rule of three when every guess is right; the best row chosen as that code does.
- ``clopper-pearson``: one alternative per canary (the other candidate of its pair), an exact
  binomial interval over the guesses (``label_flip_game``), at the thresholds 0.5 ... 0.99.

eps >= ln(p/(1 - p)) at the interval's lower end p. All three treat the canaries of one run as
independent runs of the game (the paper's heuristic); the weighted and paper intervals are
large-sample normal approximations. Keeping the best tau is optimistic: the paper's figure; the
Bonferroni-corrected best (alpha / number of taus) is the valid one and is reported beside it.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import numpy as np
from scipy.special import softmax

from defenses.base import FitContext, LabeledImages
from harness.bounds.empirical import (LABEL_FLIP_THRESHOLDS, PAPER_GAME_TAUS, WEIGHTED_GAME_TAUS, label_flip_game,
                                      paper_acgr_game, paper_best, weighted_acgr_game)
from harness.run import plugin_errors
from harness.core.config import ConfigError, ExperimentConfig
from harness.core.data import load_dataset
from harness.run.runner import check_defense_config, make_defense, resolve_device


def two_wrong_labels(y: np.ndarray, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """(N, 2) distinct labels, both different from ``y``: uniform over ordered pairs of wrong classes."""
    if num_classes < 3:
        raise ConfigError("the label-flip game needs at least 3 classes (two wrong candidate labels)")
    a = rng.integers(0, num_classes - 1, size=len(y))
    a = np.where(a < y, a, a + 1)
    b = rng.integers(0, num_classes - 2, size=len(y))
    lo, hi = np.minimum(a, y), np.maximum(a, y)
    b = np.where(b < lo, b, np.where(b + 1 < hi, b + 1, b + 2))
    return np.stack([a, b], axis=1).astype(np.int64)


GAMES = ("weighted", "paper", "clopper-pearson")
GAME_NOTES = {
    "weighted": ("the paper's game as its text describes it (all C - 2 alternatives per canary, weighted ACGR, "
                 "normal 95% interval): "
                 "valid for many canaries, treating them as independent runs of the game"),
    "paper": ("the paper's game as the authors' code estimates it (normal 95% interval with SE s / sqrt(N_eff), "
              "which understates the SE of a weighted mean with unequal weights; the rule of three when every guess "
              "is right): valid for many canaries of equal weight, treating them as independent runs of the game"),
    "clopper-pearson": ("one alternative per canary, exact binomial 95% interval: valid treating the guesses as "
                        "independent trials"),
}
#: which estimator computed each game's rows (recorded in the result beside the headline)
GAME_ESTIMATORS = {
    "weighted": ("harness.bounds.empirical.weighted_acgr_game: 50 taus 0.50 ... 0.99, ties abstain, "
                 "SE = s sqrt(V2) / V1, exact interval over the canaries where every rate is equal"),
    "paper": ("harness.bounds.empirical.paper_acgr_game (the authors' memorization_attack/attack.py): 7 taus 0.5 ... "
              "0.99, ties count as wrong, SE = s / sqrt(N_eff), rate below 1/2 flipped, rule of three (N_eff > 50) "
              "when every guess is right"),
    "clopper-pearson": ("harness.bounds.empirical.label_flip_game: 7 taus 0.5 ... 0.99, one alternative per canary, "
                        "ties abstain, exact Clopper-Pearson interval"),
}


def alternatives(y: np.ndarray, trained: np.ndarray, num_classes: int) -> np.ndarray:
    """(N, C - 2) labels that are neither ``y`` nor ``trained`` (in increasing order)."""
    keep = np.ones((len(y), num_classes), bool)
    rows = np.arange(len(y))
    keep[rows, y] = False
    keep[rows, trained] = False
    return np.nonzero(keep)[1].reshape(len(y), num_classes - 2)


def play_games(prob: np.ndarray, y: np.ndarray, trained: np.ndarray, other: np.ndarray, game: str,
               taus: list[float] | None, alpha: float = 0.05) -> dict[str, Any]:
    """The three games on the served probabilities ``prob`` (N, C) of the N canaries; ``game`` names
    the headline (``game`` and ``headline_estimator`` in the result). Each game: its estimator, its
    rows (one per tau), the best lower bound as the paper reports it (the best tau, uncorrected) with
    that row's tau (the paper game: the row the authors' code picks, and its upper end), and the
    Bonferroni-corrected best over the swept taus."""
    rows = np.arange(len(y))
    alts = alternatives(y, trained, prob.shape[1])
    ct = prob[rows, trained]
    conf_alts = prob[rows[:, None], alts]
    out: dict[str, Any] = {"game": game, "headline_estimator": GAME_ESTIMATORS[game]}
    for name, grid, play in (
        ("weighted", WEIGHTED_GAME_TAUS, lambda t, a: weighted_acgr_game(ct, conf_alts, t, a)),
        ("paper", PAPER_GAME_TAUS, lambda t, a: paper_acgr_game(ct, conf_alts, t, a)),
        ("clopper-pearson", LABEL_FLIP_THRESHOLDS, lambda t, a: label_flip_game(ct, prob[rows, other], t, a)),
    ):
        ts = list(taus or grid)
        results = [play(t, alpha) for t in ts]
        corrected = [play(t, alpha / len(ts)) for t in ts]
        best = max(range(len(ts)), key=lambda i: results[i].epsilon_lo)
        out[name] = {
            "estimator": GAME_ESTIMATORS[name],
            "taus": ts,
            "rows": [asdict(r) for r in results],
            "best_epsilon_lo": results[best].epsilon_lo,
            "best_tau": ts[best],
            "best_epsilon_lo_bonferroni": max(r.epsilon_lo for r in corrected),
            "validity": GAME_NOTES[name],
        }
        if name == "paper":  # the authors' choice of row: ties on the lower end go to a larger finite upper end
            lo, hi, tau = paper_best([r.epsilon_lo for r in results], [r.epsilon_hi for r in results], ts)
            out[name].update(best_epsilon_lo=lo, best_epsilon_hi=hi, best_tau=tau)
    return out


def audit_one_run(cfg: ExperimentConfig, num_canaries: int, taus: list[float] | None = None,
                  game: str = "weighted") -> dict[str, Any]:
    """Train one model of ``cfg.defense`` with ``num_canaries`` label-flip canaries and play the three
    games; ``game`` ("weighted", the paper's text; "paper", the authors' code's estimator; or
    "clopper-pearson") is the headline."""
    if game not in GAMES:
        raise ConfigError(f"--game (game=) must be one of {', '.join(GAMES)}, got {game!r}")
    data = load_dataset(cfg.data, cfg.seed)
    n = len(data.y_train)
    if not 0 < num_canaries <= n:
        raise ConfigError(f"--canaries (canaries=) must be between 1 and the training pool size {n}, "
                          f"got {num_canaries}")
    if data.num_classes < 3:
        raise ConfigError("the label-flip game needs at least 3 classes (two wrong candidate labels)")
    rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, 0xA11B1]))
    idx = rng.permutation(n)[:num_canaries]
    pairs = two_wrong_labels(data.y_train[idx], data.num_classes, rng)
    coin = rng.integers(0, 2, size=num_canaries)
    trained = pairs[np.arange(num_canaries), coin]
    other = pairs[np.arange(num_canaries), 1 - coin]
    y = data.y_train.copy()
    y[idx] = trained
    train = LabeledImages(data.x_train, y, data.num_classes, data.mean, data.std, data.augment)
    defense = make_defense(cfg)
    check_defense_config(defense, cfg)
    try:  # the defense's own limits on the training set (PATE-FM: no more teachers than labeled examples)
        defense.check_train_size(n)
    except ValueError as e:
        raise ConfigError(f"{cfg.defense}: {e}") from None
    device = resolve_device(cfg.run.device)
    seed = int(np.random.SeedSequence([cfg.seed, 0xA11B2]).generate_state(1)[0])
    t0 = time.perf_counter()
    where = "the audited model"
    ctx = FitContext(seed=seed, device=device, train=cfg.train, params=defense.params)
    served = plugin_errors.call_defense(lambda: defense.fit(train, ctx), defense, cfg.defense, "fit", where)
    train_s = time.perf_counter() - t0
    checked = plugin_errors.check_served(served, data.x_train[idx], data.num_classes, cfg.defense, where)

    def ask() -> tuple[np.ndarray, float]:
        checked.during = "the canaries' outputs"
        p = softmax(checked.query(data.x_train[idx]).astype(np.float64), axis=1)
        checked.during = "test accuracy on the test set"
        return p, float((checked.query(data.x_test).argmax(1) == data.y_test).mean())

    prob, test_acc = plugin_errors.call_defense(ask, served, cfg.defense, "query", where)
    games = play_games(prob, data.y_train[idx], trained, other, game, taus)
    info = served.info()
    return {
        "defense": cfg.defense,
        "preset": cfg.preset,
        "dataset": cfg.data.name,
        "seed": cfg.seed,
        "num_canaries": num_canaries,
        "test_accuracy": test_acc,
        "train_seconds": train_s,
        "device": device,
        "defense_info": info,
        "label_epsilon": info.get("label_epsilon"),
        **games,
        "best_epsilon_lo": games[game]["best_epsilon_lo"],
        "best_epsilon_lo_bonferroni": games[game]["best_epsilon_lo_bonferroni"],
        "config": cfg.model_dump(mode="json"),
    }


#: the config keys audit-one-run reads: one model with its own label-flip canaries (the audit design,
#: the attacks and the executor settings do not apply)
ONE_RUN_KEYS = ("seed", "data", "train", "defense_params", "run.device", "run.out", "run.deterministic")


def check_one_run_overrides(overrides: dict[str, Any]) -> None:
    """Refuse an override that audit-one-run would not read (ConfigError naming what it reads)."""
    for key in overrides:
        if not any(key == k or key.startswith(k + ".") for k in ONE_RUN_KEYS):
            reads = ", ".join(k + "*" if "." not in k and k != "seed" else k for k in ONE_RUN_KEYS)
            raise ConfigError(f"--set {key} does not apply to audit-one-run (one model, its own label-flip "
                              f"canaries: use --canaries); it reads {reads}")

