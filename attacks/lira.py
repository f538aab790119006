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
dataset's fixed query augmentations (``aug``, 18 for CIFAR-10). Every combination is a variant.
The paper reports the maximum over its variants; here each attack has one *primary* variant
(online: ``online-logit-augA-persample``) that stands for it in headlines, so that no headline
is a maximum over many configurations; the others are reported in the details. Offline LiRA is
its own attack, ``lira-offline``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import log_ndtr

from attacks.base import Attack, AttackInput
from attacks.loo import dropped_shadow
from attacks.scores import SCORE_FUNCTIONS, both_scores

# Standard deviations below this are clamped (a sample whose shadows all output the same score
# would otherwise give 0/0 likelihood ratios).
MIN_STD = 1e-8


def _gauss_logpdf(x: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    return -0.5 * ((x - mu) / sd) ** 2 - np.log(sd) - 0.5 * np.log(2 * np.pi)


def loo_gaussian_stats(obs: np.ndarray, membership: np.ndarray, balanced: bool = True) -> dict[str, np.ndarray]:
    """Leave-one-out means and unbiased variances of IN and OUT scores, for every victim at once.

    ``obs`` (S, C, A), ``membership`` (S, C). Returns arrays (S, C, A) where entry t uses only the
    models other than t and, when ``balanced``, not :func:`dropped_shadow`'s model either (S/2 - 1
    IN and S/2 - 1 OUT shadows for every victim; ``balanced=False`` is the paper code's use of all
    S - 1). Computed from sums with the excluded terms removed; the data are centred per (sample,
    augmentation) first to avoid cancellation.
    """
    s = obs.shape[0]
    centre = obs.mean(axis=0, keepdims=True)
    x = obs - centre
    x2 = x * x
    if balanced:
        d = dropped_shadow(membership)  # (S, C)
        cols = np.arange(membership.shape[1])[None, :]
        x_d = x[d, cols]  # (S, C, A): the dropped model's scores
    out: dict[str, np.ndarray] = {}
    # every step below writes into the arrays it reads (the same operations in the same order as
    # ``sm = tot - m x; sm2 = tot2 - m x^2; mean = sm / n; var = max(sm2 - n mean^2, 0) / (n - 1)``,
    # without a fresh (S, C, A) array per operation)
    for tag, mask in (("in", membership), ("out", ~membership)):
        m = mask[:, :, None].astype(np.float64)
        sm, sm2 = m * x, m * x2  # the group's terms (m is 0 or 1: each product is exact)
        tot = sm.sum(0, keepdims=True)
        tot2 = sm2.sum(0, keepdims=True)
        n = m.sum(0, keepdims=True) - m  # (S, C, 1): shadow count for each victim
        np.subtract(tot, sm, out=sm)
        np.subtract(tot2, sm2, out=sm2)
        if balanced:
            m_d = mask[d, cols][:, :, None].astype(np.float64)  # 1 where the dropped model is in this group
            n = n - m_d
            term = m_d * x_d
            sm -= term
            term *= x_d
            sm2 -= term
            del term
        if np.any(n < 2):
            raise ValueError(f"LiRA needs at least 2 {tag.upper()} shadow models per sample and victim (have S={s}; "
                             "S >= 6)")
        mean = np.divide(sm, n, out=sm)
        sq = np.square(mean)
        sq *= n
        var = np.subtract(sm2, sq, out=sm2)
        del sq
        np.maximum(var, 0.0, out=var)
        var /= n - 1
        out[f"var_{tag}"] = var
        out[f"mu_{tag}"] = np.add(mean, centre, out=mean)
    return out


#: audit samples per chunk of the attack phase: every statistic is per sample, so the samples are
#: scored in chunks (peak memory ~ S x chunk x A, not S x C x A); only the global variance needs a
#: first pass over every chunk
LIRA_CHUNK = 1024


def _llr(obs: np.ndarray, st: dict[str, np.ndarray], var_in: np.ndarray, var_out: np.ndarray,
         online: bool) -> np.ndarray:
    sd_in = np.maximum(np.sqrt(var_in), MIN_STD)
    sd_out = np.maximum(np.sqrt(var_out), MIN_STD)
    if online:
        llr = _gauss_logpdf(obs, st["mu_in"], sd_in) - _gauss_logpdf(obs, st["mu_out"], sd_out)
    else:
        llr = log_ndtr((obs - st["mu_out"]) / sd_out)
    return llr.mean(axis=2)


def _square_deviations(obs: np.ndarray, st: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``mean_a (x - mu_in)^2`` and ``mean_a (x - mu_out)^2`` (S, C): what online LiRA with one
    variance per victim needs of each sample, kept from the first pass so that the global variants
    need no second."""
    return ((obs - st["mu_in"]) ** 2).mean(axis=2), ((obs - st["mu_out"]) ** 2).mean(axis=2)


def _global_online_llr(sq_in: np.ndarray, sq_out: np.ndarray, var_in: np.ndarray, var_out: np.ndarray) -> np.ndarray:
    """Online LiRA's score with one variance per victim (``var_*`` (S, 1, 1)) from the square
    deviations of :func:`_square_deviations`: ``mean_a [log N(x; mu_in, s_in) - log N(x; mu_out,
    s_out)] = -sq_in / (2 s_in^2) + sq_out / (2 s_out^2) - log s_in + log s_out`` (the per-query
    log-likelihood ratio is a quadratic in x whose coefficients do not depend on a)."""
    sd_in = np.maximum(np.sqrt(var_in[:, :, 0]), MIN_STD)
    sd_out = np.maximum(np.sqrt(var_out[:, :, 0]), MIN_STD)
    return (-0.5 * sq_in / sd_in**2 + 0.5 * sq_out / sd_out**2) - (np.log(sd_in) - np.log(sd_out))


def lira_scores(obs: np.ndarray, membership: np.ndarray, *, online: bool, global_variance: bool,
                balanced: bool = True, chunk: int | None = None) -> np.ndarray:
    """LiRA scores (S, C) for per-query scores ``obs`` (S, C, A), leave-one-out, over chunks of
    ``chunk`` audit samples (the same scores as one pass: each sample's Gaussians use its own
    column only; the global variance, the mean over samples and queries of the per-sample
    variances, is summed over the chunks first)."""
    num_models, num_samples, num_queries = obs.shape
    chunk = chunk or LIRA_CHUNK
    chunks = [slice(i, i + chunk) for i in range(0, num_samples, chunk)] or [slice(0, 0)]
    if len(chunks) == 1:
        st = loo_gaussian_stats(obs, membership, balanced)
        if global_variance:
            var_in, var_out = (st["var_in"].mean(axis=(1, 2), keepdims=True),
                               st["var_out"].mean(axis=(1, 2), keepdims=True))
            if online:
                return _global_online_llr(*_square_deviations(obs, st), var_in, var_out)
            return _llr(obs, st, var_in, var_out, online)
        return _llr(obs, st, st["var_in"], st["var_out"], online)
    pooled = None
    if global_variance:  # first pass: the per-victim mean variance over all samples and queries
        sums = np.zeros((2, num_models, 1, 1))
        for sl in chunks:
            st = loo_gaussian_stats(obs[:, sl], membership[:, sl], balanced)
            sums[0] += st["var_in"].sum(axis=(1, 2), keepdims=True)
            sums[1] += st["var_out"].sum(axis=(1, 2), keepdims=True)
        pooled = sums / (num_samples * num_queries)
    out = np.empty((num_models, num_samples))
    for sl in chunks:
        st = loo_gaussian_stats(obs[:, sl], membership[:, sl], balanced)
        if pooled is None:
            out[:, sl] = _llr(obs[:, sl], st, st["var_in"], st["var_out"], online)
        elif online:
            out[:, sl] = _global_online_llr(*_square_deviations(obs[:, sl], st), pooled[0], pooled[1])
        else:
            out[:, sl] = _llr(obs[:, sl], st, pooled[0], pooled[1], online)
    return out


def chunked_scores(fn: Any, logits: np.ndarray, labels: np.ndarray, chunk: int | None = None) -> np.ndarray:
    """``fn(logits, labels)`` (S, C, A) computed over chunks of audit samples into one preallocated
    array: the score functions' float64 temporaries of shape (S, C, A, K) then never exist for all C
    at once (every score is per sample and query, so the values are those of one call)."""
    num_samples = logits.shape[1]
    chunk = chunk or LIRA_CHUNK
    if num_samples <= chunk:
        return fn(logits, labels)
    out = None
    for i in range(0, num_samples, chunk):
        part = fn(logits[:, i : i + chunk], labels[i : i + chunk])
        if out is None:
            out = np.empty((part.shape[0], num_samples, *part.shape[2:]), part.dtype)
        out[:, i : i + chunk] = part
    return out


#: audit samples scored at once inside a chunk of :data:`LIRA_CHUNK`: their score functions' float64
#: temporaries (K x S x SCORE_CHUNK x A) and their Gaussians (S x SCORE_CHUNK x A) stay a few MB
SCORE_CHUNK = 128


def lira_variants(logits: np.ndarray, labels: np.ndarray, membership: np.ndarray, *, online: bool,
                  balanced: bool = True, mode: str | None = None) -> dict[str, np.ndarray]:
    """Every LiRA variant's scores (S, C) of logits (S, C, A, K): ``{mode}-{score}-{noaug|augA}-
    {persample|global}``, in that order (score functions, then query sets, then variances).

    The same numbers as :func:`lira_scores` on :func:`chunked_scores` of each score function, bit
    for bit, streamed into preallocated outputs: every statistic is per sample, so the scores and
    Gaussians of :data:`SCORE_CHUNK` samples are computed at a time and never exist for the whole
    level; the global variances are pooled per chunk of :data:`LIRA_CHUNK` samples, as
    :func:`lira_scores` pools them (a first pass); online, the global variants' scores then follow
    from each sample's square deviations kept in the first pass (:func:`_global_online_llr`),
    offline they are computed again in a second pass (one pass where the level is one chunk)."""
    num_models, num_samples, num_queries = logits.shape[:3]
    mode = mode or ("online" if online else "offline")
    chunk, sub = LIRA_CHUNK, SCORE_CHUNK
    chunks = [(i, min(i + chunk, num_samples)) for i in range(0, num_samples, chunk)] or [(0, 0)]
    queries = [("noaug", 1)] + ([(f"aug{num_queries}", num_queries)] if num_queries > 1 else [])
    pairs = [(sn, q, nq) for sn in SCORE_FUNCTIONS for q, nq in queries]

    def name(sn: str, q: str, glob: bool) -> str:
        return f"{mode}-{sn}-{q}-{'global' if glob else 'persample'}"

    out = {name(sn, q, glob): np.empty((num_models, num_samples)) for sn, q, _ in pairs for glob in (False, True)}

    def pieces(start: int, stop: int):  # (i, j, per score-and-query-set: (scores, Gaussians)) per sub-chunk
        cuts = list(range(start, stop, sub)) + [stop]
        if len(cuts) > 2 and cuts[-1] - cuts[-2] == 1:
            # no piece one sample wide where the chunk is wider: numpy reduces an array whose other
            # axes all have length 1 in another order (pairwise), so the statistics would differ
            del cuts[-2]
        for i, j in zip(cuts[:-1], cuts[1:]):
            obs = both_scores(logits[:, i:j], labels[i:j])
            yield i, j, {(sn, q): (o := obs[sn][:, :, :nq], loo_gaussian_stats(o, membership[:, i:j], balanced))
                         for sn, q, nq in pairs}

    sums = {(sn, q): np.zeros((2, num_models, 1, 1)) for sn, q, _ in pairs}
    one_pass = len(chunks) == 1
    # online: each global variant's square deviations (IN in its output array, OUT here) are all its
    # second step needs (_global_online_llr); offline LiRA's log Phi is no function of a few sums, so
    # its global variants compute their scores again in a second pass where the level has chunks
    sq_out = {key: np.empty((num_models, num_samples)) for key in sums} if online else {}
    kept = []
    for start, stop in chunks:  # first pass: per-sample variants, and the pooled variances of the global ones
        var = {(sn, q): np.empty((2, num_models, stop - start, nq)) for sn, q, nq in pairs}
        for i, j, stats in pieces(start, stop):
            for (sn, q), (o, st) in stats.items():
                var[(sn, q)][0][:, i - start : j - start] = st["var_in"]
                var[(sn, q)][1][:, i - start : j - start] = st["var_out"]
                out[name(sn, q, False)][:, i:j] = _llr(o, st, st["var_in"], st["var_out"], online)
                if online:
                    out[name(sn, q, True)][:, i:j], sq_out[(sn, q)][:, i:j] = _square_deviations(o, st)
            if one_pass and not online:
                kept.append((i, j, stats))
        for key, v in var.items():  # summed over the whole chunk, as lira_scores sums its statistics
            sums[key][0] += v[0].sum(axis=(1, 2), keepdims=True)
            sums[key][1] += v[1].sum(axis=(1, 2), keepdims=True)
        del var
    pooled = {(sn, q): sums[(sn, q)] / (num_samples * nq) for sn, q, nq in pairs}
    if online:
        for key, sq in sq_out.items():
            g = out[name(*key, True)]
            g[:] = _global_online_llr(g, sq, pooled[key][0], pooled[key][1])
        return out
    second = iter(kept) if one_pass else (p for start, stop in chunks for p in pieces(start, stop))
    for i, j, stats in second:  # offline's global variants (their scores computed again where there are chunks)
        for (sn, q), (o, st) in stats.items():
            out[name(sn, q, True)][:, i:j] = _llr(o, st, pooled[(sn, q)][0], pooled[(sn, q)][1], online)
    return out


def _primary(variants: list[str], mode: str, variance: str, augmented: bool) -> str:
    """``{mode}-logit-aug{A}-{variance}`` for models trained with augmentation, else (or when the
    dataset has one query only) ``{mode}-logit-noaug-{variance}``."""
    if augmented:
        for v in variants:
            if v.startswith(f"{mode}-logit-aug") and v.endswith(f"-{variance}"):
                return v
    return f"{mode}-logit-noaug-{variance}"


class LiRA(Attack):
    """Online LiRA (the paper's). Variants ``online-{logit|hinge}-{noaug|augA}-{persample|global}``;
    primary ``online-logit-augA-persample``: the logit-scaled confidence, every query augmentation,
    per-sample variances (Carlini et al.'s recommended online attack, the paper's ``lira_da_logit``).
    For models trained without augmentation the primary reads the plain query only
    (``online-logit-noaug-persample``): augmented views are then inputs the model never trained on
    (Carlini et al. query the augmentations the model was trained with)."""

    name = "lira"
    description = "likelihood-ratio attack (Carlini et al. 2022), online, leave-one-out"
    needs = frozenset({"logits"})
    signal = "logits"
    online = True

    def __init__(self, shadows: str = "balanced") -> None:
        if shadows not in ("balanced", "all"):
            raise ValueError(f"{self.name}: shadows must be 'balanced' (S/2 - 1 IN and OUT shadows per victim) or "
                             f"'all' (the paper's S - 1), got {shadows!r}")
        self.shadows = shadows

    def params(self) -> dict[str, str]:
        return {"shadows": self.shadows}

    def score(self, inp: AttackInput) -> dict[str, np.ndarray]:
        logits = inp.signals[self.signal]  # (S, C, A, K)
        return lira_variants(logits, inp.labels, inp.membership, online=self.online,
                             balanced=self.shadows == "balanced")

    def primary(self, variants: list[str], inp: AttackInput) -> str:
        return _primary(variants, "online", "persample", inp.trained_with_augmentation)


class LiRAOffline(LiRA):
    """Offline LiRA (Carlini et al. section IV-C): a one-sided test against OUT shadow models only,
    for when IN models are too costly (small S). Not in the paper's code. Primary
    ``offline-logit-augA-global``: with few OUT shadows per sample a per-sample variance is noisy,
    and Carlini et al. recommend the global variance there."""

    name = "lira-offline"
    description = "offline LiRA (OUT shadow models only; global variance), leave-one-out"
    online = False

    def primary(self, variants: list[str], inp: AttackInput) -> str:
        return _primary(variants, "offline", "global", inp.trained_with_augmentation)


class LiRARaw(LiRA):
    """LiRA on the outputs *before* a test-time defense (``raw_logits``): an ablation that shows
    what the training-time part of a defense alone protects. Not a black-box attack."""

    name = "lira-raw"
    description = "LiRA on pre-test-time-defense outputs (ablation; needs raw_logits)"
    needs = frozenset({"raw_logits"})
    signal = "raw_logits"


class LiRANeighbour(LiRA):
    """The misleading-evaluations paper's near-duplicate attack on SELENA (its ``splitai_nn``,
    ``selena.py:_run_attack``): query SELENA's Split-AI ensemble at each canary's matched
    near-duplicate (``splitai_neighbour_logits``: log of the mean softmax of the L teachers that
    never trained on the neighbour, one plain query) and score it with the *canary's* label,
    ``log p_y - log(1 - p_y)``, then online LiRA with per-sample variances. Split-AI answers the
    neighbour with teachers that never saw the neighbour, but most of them (K - L of K) trained on
    a member canary, its near-twin of another label. Variants as :class:`LiRA` on one query
    (``online-{logit|hinge}-noaug-{persample|global}``); primary ``online-logit-noaug-persample``,
    the paper's ``splitai_nn_lira_logit``. Needs the ``splitai_query`` access (SELENA only), which
    the deployed student does not serve: a headline attack of SELENA (declared, as in the paper),
    left out of the leak. It applies to experiments whose canaries have neighbours only."""

    name = "lira-neighbour"
    description = ("the paper's splitai_nn: LiRA on SELENA's Split-AI answer at each canary's near-duplicate, "
                   "canary's label (near-duplicates canaries; SELENA's adaptive attack)")
    needs = frozenset({"splitai_neighbour_logits"})
    signal = "splitai_neighbour_logits"


class LiRANeighbourStudent(LiRA):
    """LiRA on the *served* outputs at each canary's matched near-duplicate (``neighbour_logits``),
    scored with the canary's label: the neighbour query against what the deployed model serves
    (SELENA's student, or any defense's model). Black-box; not the paper's attack (that one queries
    Split-AI: :class:`LiRANeighbour`). It applies to experiments whose canaries have neighbours only."""

    name = "lira-neighbour-student"
    description = ("LiRA on the served outputs at each canary's near-duplicate, canary's label "
                   "(near-duplicates canaries)")
    needs = frozenset({"neighbour_logits"})
    signal = "neighbour_logits"


class LiRAAveraged(LiRA):
    """LiRA on the mean of R answers per query view (``logits_averaged``: the mean log-probabilities
    of ``audit.repeat_queries`` answers), the standard attack on a model that serves fresh randomness
    per query: the mean answer's noise shrinks as 1/sqrt(R), and the logit-scaled confidence of the
    mean log-probabilities is that of the model behind the noise, up to it. Added to the headline
    attacks automatically where the random-serving check finds a model that answers the same image
    differently twice (docs/protocol.md, Random serving). For a deterministic model the average is
    its one answer, so the scores equal ``lira``'s. Variants and primary as :class:`LiRA`."""

    name = "lira-averaged"
    description = ("LiRA on the mean log-probabilities of audit.repeat_queries answers per query view "
                   "(randomized serving)")
    needs = frozenset({"logits_averaged"})
    signal = "logits_averaged"


def model_scales(inp: AttackInput) -> np.ndarray:
    """Each model's answer scale (S,): the standard deviation, over rows and classes, of its outputs on
    the rows every model answers, each row centred over its classes; the population rows at view 0
    (test images no model trained on) where the run saved them, else the audit rows at view 0."""
    pop = inp.signals.get("population_logits")
    rows = pop if pop is not None and pop.shape[1] else inp.signals["logits"]
    out = np.empty(rows.shape[0])
    for i in range(rows.shape[0]):  # one model at a time: no float64 copy of the whole stack
        x = np.asarray(rows[i, :, 0], np.float64)
        out[i] = (x - x.mean(-1, keepdims=True)).std()
    return np.maximum(out, 1e-12)


class LiRAScaled(LiRA):
    """LiRA on each model's outputs divided by that model's own answer scale (:func:`model_scales`):
    invariant to a per-model scale of the outputs (a temperature per model, labels served as one-hot
    or as ten times one-hot), which the fixed Gaussians of :class:`LiRA` are not: a defense or an
    outside trainer whose models answer at different scales reads private to LiRA for that reason
    alone (issue 65: logits times a per-model T, log-uniform in [0.1, 10], took LiRA from 92% to 0.3%).
    The harness adds it to every run's leak (docs/protocol.md, Attacks and their primary variants).
    Variants and primary as :class:`LiRA`."""

    name = "lira-scaled"
    description = "LiRA on each model's outputs divided by its own answer scale on the rows every model answers"
    needs = frozenset({"logits"})

    def score(self, inp: AttackInput) -> dict[str, np.ndarray]:
        scales = model_scales(inp)
        # each model's outputs times (the models' geometric mean scale / its own): an honest run's outputs
        # stay about as they are, and every model answers at one scale
        factors = np.exp(np.log(scales).mean()) / scales
        return lira_variants(_Rescaled(inp.signals[self.signal], factors), inp.labels, inp.membership,
                             online=self.online, balanced=self.shadows == "balanced")


class _Rescaled:
    """(S, C, ...) outputs read as ``x[i] * factors[i]``, slice by slice of the sample axis (what
    :func:`lira_variants` reads), without a scaled copy of the whole stack."""

    def __init__(self, x: np.ndarray, factors: np.ndarray) -> None:
        self.x, self.shape, self.dtype = x, x.shape, np.float64
        self.factors = factors.reshape(-1, *([1] * (x.ndim - 1)))

    def __getitem__(self, key: Any) -> np.ndarray:
        if not (isinstance(key, tuple) and len(key) == 2 and key[0] == slice(None) and isinstance(key[1], slice)):
            raise TypeError(f"rescaled outputs are read as [:, i:j], got {key!r}")
        return np.asarray(self.x[key], np.float64) * self.factors
