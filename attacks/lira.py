"""LiRA, the likelihood-ratio attack (Carlini et al., S&P 2022), as the misleading-evaluations
paper runs it, evaluated leave-one-out.

For victim model t and audit sample i, the other S-1 models are shadows: those trained with i (IN)
and without it (OUT). Per query augmentation a, fit Gaussians to the shadows' scores
``N(mu_in[i,a], sigma_in[i,a]^2)`` and ``N(mu_out[i,a], sigma_out[i,a]^2)`` (means; unbiased
standard deviations, ddof=1). The victim's observed score x[t,i,a] is turned into

- **online**: ``mean_a [log N(x; mu_in, sigma_in) - log N(x; mu_out, sigma_out)]`` (the paper's code
  averages the per-augmentation log-likelihood ratios: augmentations as independent Gaussians);
- **offline**: ``mean_a log Phi((x - mu_out) / sigma_out)``, the one-sided test against the OUT
  distribution only (Carlini et al. section IV-C), averaged over augmentations the same way.

Variance is either **per-sample** (as above) or **global**: one pooled variance per victim for IN
and one for OUT, the mean of the per-(sample, augmentation) variances (Carlini et al.'s fixed
variance, for few shadow models). Scores are the logit-scaled confidence or the hinge (see
:mod:`attacks.scores`); queries are either the unaugmented one only (``noaug``) or all of the
dataset's fixed query augmentations (``aug``, 18 for CIFAR-10). Every combination is a variant;
the report's headline is the maximum over them, as in the paper.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.special import log_ndtr

from attacks.base import Attack, AttackInput
from attacks.scores import SCORE_FUNCTIONS

# Standard deviations below this are clamped (a sample whose shadows all output the same score
# would otherwise give 0/0 likelihood ratios).
MIN_STD = 1e-8


def _gauss_logpdf(x: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    return -0.5 * ((x - mu) / sd) ** 2 - np.log(sd) - 0.5 * np.log(2 * np.pi)


def loo_gaussian_stats(obs: np.ndarray, membership: np.ndarray) -> dict[str, np.ndarray]:
    """Leave-one-out means and unbiased variances of IN and OUT scores, for every victim at once.

    ``obs`` (S, C, A), ``membership`` (S, C). Returns arrays (S, C, A) where entry t uses only the
    models other than t. Computed from sums with the victim's own term removed; the data are centred
    per (sample, augmentation) first to avoid cancellation.
    """
    s = obs.shape[0]
    x = obs - obs.mean(axis=0, keepdims=True)
    out: dict[str, np.ndarray] = {}
    for tag, mask in (("in", membership), ("out", ~membership)):
        m = mask[:, :, None].astype(np.float64)
        tot = (m * x).sum(0, keepdims=True)
        tot2 = (m * x * x).sum(0, keepdims=True)
        n = m.sum(0, keepdims=True) - m  # (S, C, 1): shadow count for each victim
        sm = tot - m * x
        sm2 = tot2 - m * x * x
        if np.any(n < 2):
            raise ValueError(f"LiRA needs at least 2 {tag.upper()} shadow models per sample (have S={s})")
        mean = sm / n
        var = np.maximum(sm2 - n * mean**2, 0.0) / (n - 1)
        out[f"mu_{tag}"] = mean + obs.mean(axis=0, keepdims=True)
        out[f"var_{tag}"] = var
    return out


def lira_scores(obs: np.ndarray, membership: np.ndarray, *, online: bool, global_variance: bool) -> np.ndarray:
    """LiRA scores (S, C) for per-query scores ``obs`` (S, C, A), leave-one-out."""
    st = loo_gaussian_stats(obs, membership)
    if global_variance:
        var_in = st["var_in"].mean(axis=(1, 2), keepdims=True)
        var_out = st["var_out"].mean(axis=(1, 2), keepdims=True)
    else:
        var_in, var_out = st["var_in"], st["var_out"]
    sd_in = np.maximum(np.sqrt(var_in), MIN_STD)
    sd_out = np.maximum(np.sqrt(var_out), MIN_STD)
    if online:
        llr = _gauss_logpdf(obs, st["mu_in"], sd_in) - _gauss_logpdf(obs, st["mu_out"], sd_out)
    else:
        llr = log_ndtr((obs - st["mu_out"]) / sd_out)
    return llr.mean(axis=2)


class LiRA(Attack):
    name = "lira"
    description = "likelihood-ratio attack (Carlini et al. 2022), online/offline, leave-one-out"
    needs = frozenset({"logits"})
    signal = "logits"

    def score(self, inp: AttackInput) -> dict[str, np.ndarray]:
        logits = inp.signals[self.signal]  # (S, C, A, K)
        num_aug = logits.shape[2]
        out: dict[str, np.ndarray] = {}
        for score_name, fn in SCORE_FUNCTIONS.items():
            obs_all = fn(logits, inp.labels)  # (S, C, A)
            queries = [("noaug", obs_all[:, :, :1])] + ([(f"aug{num_aug}", obs_all)] if num_aug > 1 else [])
            for (q, obs), online, glob in itertools.product(queries, (True, False), (False, True)):
                variant = f"{'online' if online else 'offline'}-{score_name}-{q}-{'global' if glob else 'persample'}"
                out[variant] = lira_scores(obs, inp.membership, online=online, global_variance=glob)
        return out


class LiRARaw(LiRA):
    """LiRA on the outputs *before* a test-time defense (``raw_logits``): an ablation that shows
    what the training-time part of a defense alone protects. Not a black-box attack."""

    name = "lira-raw"
    description = "LiRA on pre-test-time-defense outputs (ablation; needs raw_logits)"
    needs = frozenset({"raw_logits"})
    signal = "raw_logits"
