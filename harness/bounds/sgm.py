"""Optimal membership-inference bounds for DP-SGD: the composed Poisson-subsampled Gaussian mechanism.

Paper: Mahloujifar, Sablayrolles, Cormode, Jha, "Optimal Membership Inference Bounds for Adaptive
Composition of Sampled Gaussian Mechanisms" (arXiv 2204.06106; called B in docs/bounds.md).
Parameters: sampling rate ``q`` (Poisson), noise multiplier ``noise`` = z = sigma/r (mu = 1/z) and
``steps`` = T. Only mu matters, so the per-step pair is P0 = N(0, 1) (without the target) and
P1 = (1 - q) N(0, 1) + q N(mu, 1) (with it), composed T times.

- Theorem 6: the advantage (2 Pr[correct] - 1 in the balanced game) of any adversary that sees
  every noisy gradient is at most TV(P0^T, P1^T), and this is attained by the likelihood-ratio
  test, so it is the optimal bound. TV = delta(eps = 0), the hockey-stick divergence at 0, which
  we compute with Google's ``dp_accounting`` privacy-loss distribution (PLD) of
  SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), T): pessimistic
  connect-the-dots discretization (Doroshenko et al. 2022), delta(eps) = max over the add and the
  remove direction. Every number is therefore an upper bound up to floating-point error.
- Closed forms: q = 1 gives 2 Phi(sqrt(T)/(2z)) - 1; T = 1 gives q (2 Phi(1/(2z)) - 1).
- Corollary 11, written as a trade-off: for every eps, an adversary's TPR at FPR alpha satisfies
  TPR <= e^eps alpha + delta(eps) and 1 - alpha <= e^eps (1 - TPR) + delta(eps), so
  TPR <= min over eps of min{e^eps alpha + delta(eps), 1 - e^-eps (1 - alpha - delta(eps))}.
  Any eps gives a valid bound; we minimise over a grid, then refine around the best point.
- Theorem 21 (prior p of membership), corrected: 2 Pr[correct] - 2 max(p, 1 - p) <=
  2 min(p, 1 - p) delta(|ln((1 - p)/p)|), i.e. 2p H_{(1-p)/p}(P1 || P0) for p <= 1/2. The paper
  prints "+ (1 - 2p)" where "- (1 - 2p)" is right.
- Pinsker (eq. 5): TV <= sqrt(KL/2), KL = T E_{x ~ P1}[ln(1 - q + q e^{mu x - mu^2/2})]
  computed by quadrature (the paper uses an RDP approximation of the same divergence).
- Algorithm 1 (Monte Carlo), corrected: TV = E_{P0}[(1 - dP1/dP0)_+] estimated by
  mean(1 - exp(min(eta, 0))), eta the summed log-likelihood ratio; the paper's max(eta, 0) and
  1 - e^eta return -TV.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event
from dp_accounting.pld import privacy_loss_distribution
from scipy import integrate
from scipy.special import ndtr

__all__ = [
    "SgmBound",
    "MonteCarloEstimate",
    "check_sgm_params",
    "dpsgd_params",
    "dpsgd_event",
    "default_discretization",
    "sgm_pld",
    "optimal_advantage",
    "epsilon_at_delta",
    "tpr_upper_bound",
    "tpr_bound_from_delta",
    "gaussian_delta",
    "advantage_full_batch",
    "advantage_single_step",
    "nonuniform_prior_advantage",
    "kl_divergence",
    "pinsker_advantage",
    "monte_carlo_advantage",
]

DEFAULT_DELTA = 1e-5
_EPS_GRID_POINTS = 2001
_TARGET_PLD_POINTS = 5e5  # upper target on the PLD size (speed, and FFT round-off grows with size)
_MIN_PLD_POINTS = 2e4  # lower target on the PLD size (accuracy)
_FINEST_DEFAULT = 1e-4  # dp_accounting's own default interval
_MIN_STEP_POINTS = 50  # grid points across one step's loss range
_MAX_PLD_POINTS = 2e6  # hard upper target on the PLD size


def check_sgm_params(q: float, noise: float, steps: int) -> None:
    """Raise ``ValueError`` unless 0 < q <= 1, noise > 0 (finite) and steps is an integer >= 1."""
    if not (0.0 < q <= 1.0):
        raise ValueError(f"sampling rate q must be in (0, 1], got {q}")
    if not (noise > 0.0) or not math.isfinite(noise):
        raise ValueError(f"noise multiplier must be > 0, got {noise}")
    if int(steps) != steps or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps}")


def dpsgd_params(batch_size: int, dataset_size: int, epochs: float, poisson_rate: str = "b_over_n") -> tuple[float, int]:
    """(q, T) of DP-SGD with Poisson sampling: T = epochs * ceil(N/B) and q = B/N (``b_over_n``, the
    expected batch size B) or q = 1/ceil(N/B) (``paper``: Opacus's DataLoader, the paper's code).

    T is rounded to the nearest integer when ``epochs`` is fractional.
    """
    if batch_size < 1 or dataset_size < 1 or batch_size > dataset_size:
        raise ValueError(f"need 1 <= batch size <= dataset size, got B={batch_size}, N={dataset_size}")
    if not (epochs > 0):
        raise ValueError(f"epochs must be > 0, got {epochs}")
    if poisson_rate not in ("b_over_n", "paper"):
        raise ValueError(f"poisson_rate must be 'b_over_n' or 'paper', got {poisson_rate!r}")
    per_epoch = math.ceil(dataset_size / batch_size)
    steps = int(round(epochs * per_epoch))
    q = batch_size / dataset_size if poisson_rate == "b_over_n" else 1.0 / per_epoch
    return q, max(steps, 1)


def dpsgd_event(q: float, noise: float, steps: int) -> dp_event.DpEvent:
    """The dp_accounting event of T Poisson-subsampled Gaussian steps."""
    check_sgm_params(q, noise, steps)
    return dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(noise)), int(steps)
    )


def _log_ratio(x: np.ndarray | float, q: float, mu: float) -> np.ndarray | float:
    """ln dP1/dP0 (x) = ln(1 - q + q e^{mu x - mu^2/2}), stable for large mu x."""
    a = mu * np.asarray(x, dtype=np.float64) - 0.5 * mu * mu
    if q >= 1.0:
        return a
    return np.logaddexp(math.log1p(-q), math.log(q) + a)


def _expect(f, mean: float, kink: float) -> float:
    """E f(X) for X ~ N(mean, 1) by adaptive quadrature, with a break point at the kink of f."""

    def g(y: float) -> float:
        return float(f(mean + y)) * math.exp(-0.5 * y * y) / math.sqrt(2.0 * math.pi)

    pts = [kink - mean] if -40.0 < kink - mean < 40.0 else None
    val, _ = integrate.quad(g, -40.0, 40.0, points=pts, limit=400, epsabs=1e-14, epsrel=1e-12)
    return val


def _kink(q: float, mu: float) -> float:
    """Where q e^{mu x - mu^2/2} = 1 - q: the log ratio bends from ~ln(1-q) to ~linear there."""
    return 0.5 * mu + (math.log((1.0 - q) / q) / mu if q < 1.0 else 0.0)


def _step_loss_std(q: float, mu: float) -> float:
    """Largest standard deviation of one step's privacy loss over the two directions."""
    k = _kink(q, mu)
    f = lambda x: _log_ratio(x, q, mu)  # noqa: E731
    f2 = lambda x: _log_ratio(x, q, mu) ** 2  # noqa: E731
    comps = [(1.0 - q, 0.0), (q, mu)]
    m1 = sum(w * _expect(f, m, k) for w, m in comps if w > 0)
    v1 = sum(w * _expect(f2, m, k) for w, m in comps if w > 0) - m1 * m1
    m0 = _expect(f, 0.0, k)
    v0 = _expect(f2, 0.0, k) - m0 * m0
    return math.sqrt(max(v1, v0, 0.0))


def default_discretization(q: float, noise: float, steps: int) -> float:
    """PLD value-discretization interval: dp_accounting's default 1e-4 unless that is too coarse or too fine.

    After T-fold composition dp_accounting keeps the range that its Chernoff bound (orders k/L1,
    k = 1..20, L1 the single-step grid length, tail mass 1e-15) cannot exclude. For a single-step
    loss of standard deviation s and range R1 (x in [-12, mu + 12]) that range is about
    W = max(R1, 2 min_k (T s^2 k / (2 R1) + ln(2e15) R1 / k)), which is ~17 s sqrt(T) when the
    best order is available and grows like T s^2 / R1 when it is not (huge T). The interval is
    max(W / 5e5, min(1e-4, W / 2e4)): at least ~2e4 points across the loss (accuracy for tiny
    losses) and at most ~5e5 (speed, memory and FFT round-off for huge ones, e.g. noise 0.003 over
    2e4 steps, where the interval becomes ~10). If one step's range R1 then spans fewer than 50
    grid points (tiny per-step losses over millions of steps), the interval shrinks to R1 / 50 but
    not below W / 2e6: the pessimistic rounding of each step otherwise adds up to a loose bound.
    Rounded to two significant digits.
    """
    check_sgm_params(q, noise, steps)
    mu = 1.0 / noise
    s = _step_loss_std(q, mu)
    r1 = float(_log_ratio(mu + 12.0, q, mu) - _log_ratio(-12.0, q, mu))
    a = steps * s * s / (2.0 * r1)
    b = math.log(2.0 / 1e-15) * r1
    width = max(r1, 2.0 * min(a * k + b / k for k in range(1, 21)))
    d = max(width / _TARGET_PLD_POINTS, min(_FINEST_DEFAULT, width / _MIN_PLD_POINTS))
    if r1 / d < _MIN_STEP_POINTS:  # a single step spans only a few grid points: rounding piles up
        d = max(width / _MAX_PLD_POINTS, min(d, r1 / _MIN_STEP_POINTS))
    return float(f"{d:.2g}")


def sgm_pld(q: float, noise: float, steps: int,
            value_discretization_interval: float | None = None) -> privacy_loss_distribution.PrivacyLossDistribution:
    """The pessimistic connect-the-dots PLD of ``dpsgd_event(q, noise, steps)`` (add/remove adjacency).

    Built exactly as ``dp_accounting.pld.PLDAccountant`` builds it for that event, but kept as a PLD
    so that delta(eps) can be evaluated on a whole grid of eps at once.
    """
    check_sgm_params(q, noise, steps)
    d = value_discretization_interval or default_discretization(q, noise, steps)
    single = privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=noise,
        sensitivity=1.0,
        pessimistic_estimate=True,
        value_discretization_interval=d,
        sampling_prob=q,
        use_connect_dots=True,
    )  # add/remove adjacency: the default in every dp_accounting >= 0.4
    return single.self_compose(int(steps))


def tpr_bound_from_delta(fpr: float | Sequence[float] | np.ndarray, epsilons: Sequence[float] | np.ndarray,
                         deltas: Sequence[float] | np.ndarray) -> np.ndarray:
    """TPR <= min over the given (eps, delta(eps)) of min{e^eps FPR + delta, 1 - e^-eps (1 - FPR - delta)}, <= 1.

    Valid for any subset of a mechanism's (eps, delta) curve (each pair alone is a valid bound;
    Kairouz et al. 2015). Returns an array shaped like ``fpr``.
    """
    a = np.asarray(fpr, dtype=np.float64)
    if np.any((a < 0) | (a > 1)) or np.isnan(a).any():
        raise ValueError("FPR values must be in [0, 1]")
    e = np.asarray(epsilons, dtype=np.float64)
    d = np.clip(np.asarray(deltas, dtype=np.float64), 0.0, 1.0)
    if e.shape != d.shape or e.ndim != 1 or e.size == 0:
        raise ValueError("epsilons and deltas must be 1-D arrays of the same non-zero length")
    out = np.empty(a.size)
    with np.errstate(over="ignore", invalid="ignore"):
        ee, em = np.exp(e), np.exp(-e)
        for i, x in enumerate(a.ravel()):
            t1 = ee * x + d
            t2 = 1.0 - em * (1.0 - x - d)
            out[i] = np.nanmin(np.minimum(t1, t2))
    return np.minimum(out, 1.0).reshape(a.shape)


@dataclass(frozen=True)
class SgmBound:
    """The PLD of T Poisson-subsampled Gaussian steps and every bound read off it.

    Build with ``SgmBound.compute(q, noise, steps)``; building costs one PLD composition, every
    method after that is cheap.
    """

    q: float
    noise: float
    steps: int
    value_discretization_interval: float
    pld: privacy_loss_distribution.PrivacyLossDistribution

    @classmethod
    def compute(cls, q: float, noise: float, steps: int,
                value_discretization_interval: float | None = None) -> "SgmBound":
        """Compose the PLD (``sgm_pld``) at the given or the default discretization interval."""
        check_sgm_params(q, noise, steps)
        if value_discretization_interval is not None and not value_discretization_interval > 0:
            raise ValueError(f"value_discretization_interval must be > 0, got {value_discretization_interval}")
        d = value_discretization_interval or default_discretization(q, noise, steps)
        return cls(float(q), float(noise), int(steps), d, sgm_pld(q, noise, steps, d))

    def delta(self, epsilon: float | Sequence[float] | np.ndarray) -> float | np.ndarray:
        """delta(eps) = max over add/remove of the hockey-stick divergence H_{e^eps}, clipped to [0, 1].

        ``epsilon`` may be a float or an ascending array (dp_accounting needs it sorted).
        """
        with np.errstate(over="ignore", invalid="ignore"):  # e^eps overflows past eps ~ 709
            if np.ndim(epsilon) == 0:
                raw = np.asarray(self.pld.get_delta_for_epsilon(float(epsilon)), dtype=np.float64)
            else:
                raw = np.asarray(self.pld.get_delta_for_epsilon(np.asarray(epsilon, float)), dtype=np.float64)
        # NaN only arises as inf * 0 at huge eps; 1 is a valid (vacuous) value there.
        val = np.clip(np.where(np.isnan(raw), 1.0, raw), 0.0, 1.0)
        return float(val) if val.ndim == 0 else val

    def advantage(self) -> float:
        """Theorem 6 of Mahloujifar et al.: the optimal MI advantage bound TV = delta(0)."""
        return float(self.delta(0.0))

    def epsilon(self, delta: float = DEFAULT_DELTA) -> float:
        """Smallest eps >= 0 with delta(eps) <= ``delta`` (inf when none)."""
        if not (0.0 < delta < 1.0):
            raise ValueError(f"delta must be in (0, 1), got {delta}")
        return float(self.pld.get_epsilon_for_delta(delta))

    def nonuniform_prior_advantage(self, p: float) -> float:
        """Corrected Theorem 21: 2 min(p, 1-p) delta(|ln((1-p)/p)|), the advantage over always guessing the majority."""
        if not (0.0 < p < 1.0):
            raise ValueError(f"prior p must be in (0, 1), got {p}")
        return 2.0 * min(p, 1.0 - p) * float(self.delta(abs(math.log((1.0 - p) / p))))

    def _epsilon_grid(self) -> np.ndarray:
        hi = math.inf
        for tiny in (1e-12, 1e-9, 1e-6):
            hi = self.epsilon(tiny)
            if math.isfinite(hi):
                break
        if not math.isfinite(hi):  # almost surely distinguishable: any finite grid gives TPR ~ 1
            hi = 100.0
        return np.linspace(0.0, max(hi, 1e-6) * 1.05 + 1e-3, _EPS_GRID_POINTS)

    def tpr_upper(self, fpr: float | Sequence[float] | np.ndarray, refine: bool = True) -> np.ndarray:
        """Upper bound on the TPR at each FPR (Corollary 11 as a trade-off; see the module docstring).

        The minimum over a 2001-point eps grid from 0 to where delta(eps) <= 1e-12; then
        (``refine``) 41 more points between the grid neighbours of each FPR's best eps (spacing / 20;
        on the Gaussian curve the grid alone is within ~5e-6 relative, refined within ~1e-7). Every
        eps tried yields a valid bound and each FPR takes the minimum over all eps tried in the
        call, so the result is a minimum of affine functions of the FPR: concave, >= FPR, and only
        tightened by refinement.
        """
        a = np.atleast_1d(np.asarray(fpr, dtype=np.float64))
        if np.any((a < 0) | (a > 1)) or np.isnan(a).any():
            raise ValueError("FPR values must be in [0, 1]")
        grid = self._epsilon_grid()
        step = grid[1] - grid[0]
        eps_all, delta_all = grid, self.delta(grid)
        for _ in range(1 if refine else 0):
            best = eps_all[self._argmin(a, eps_all, delta_all)]
            local = (best[:, None] + np.linspace(-step, step, 41)[None, :]).ravel()
            local = np.unique(local[local >= 0.0])
            eps_all, idx = np.unique(np.r_[eps_all, local], return_index=True)
            delta_all = np.r_[delta_all, self.delta(local)][idx]
        return tpr_bound_from_delta(a, eps_all, delta_all).reshape(np.shape(fpr))

    @staticmethod
    def _argmin(a: np.ndarray, eps: np.ndarray, deltas: np.ndarray) -> np.ndarray:
        """Index of the eps that gives the smallest bound, for each FPR in ``a``."""
        with np.errstate(over="ignore", invalid="ignore"):
            ee, em = np.exp(eps), np.exp(-eps)
            out = np.empty(a.size, dtype=np.int64)
            for i, x in enumerate(a):
                out[i] = int(np.nanargmin(np.minimum(ee * x + deltas, 1.0 - em * (1.0 - x - deltas))))
        return out


def optimal_advantage(q: float, noise: float, steps: int, value_discretization_interval: float | None = None) -> float:
    """Mahloujifar et al. Theorem 6: the optimal MI advantage bound of DP-SGD, TV = delta(0) from the PLD."""
    return SgmBound.compute(q, noise, steps, value_discretization_interval).advantage()


def epsilon_at_delta(q: float, noise: float, steps: int, delta: float = DEFAULT_DELTA,
                     value_discretization_interval: float | None = None) -> float:
    """The (eps, delta)-DP epsilon of DP-SGD at ``delta`` (PLD accounting, add/remove adjacency)."""
    return SgmBound.compute(q, noise, steps, value_discretization_interval).epsilon(delta)


def tpr_upper_bound(q: float, noise: float, steps: int, fpr: float | Sequence[float] | np.ndarray,
                    value_discretization_interval: float | None = None, refine: bool = True) -> np.ndarray:
    """Upper bound on any MI attack's TPR at each FPR against DP-SGD (see ``SgmBound.tpr_upper``)."""
    return SgmBound.compute(q, noise, steps, value_discretization_interval).tpr_upper(fpr, refine=refine)


def nonuniform_prior_advantage(q: float, noise: float, steps: int, p: float,
                               value_discretization_interval: float | None = None) -> float:
    """Corrected Theorem 21 of Mahloujifar et al.: 2p H_{(1-p)/p}(P1 || P0) for p <= 1/2 (see ``SgmBound``)."""
    return SgmBound.compute(q, noise, steps, value_discretization_interval).nonuniform_prior_advantage(p)


def gaussian_delta(mu: float, epsilon: float | np.ndarray) -> float | np.ndarray:
    """Exact delta(eps) of the Gaussian pair N(mu, 1) vs N(0, 1) (Balle and Wang 2018, Theorem 8):

    Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu). T full-batch steps of noise z have mu = sqrt(T)/z.
    """
    if not mu > 0:
        raise ValueError(f"mu must be > 0, got {mu}")
    e = np.asarray(epsilon, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        val = ndtr(mu / 2 - e / mu) - np.exp(e) * ndtr(-mu / 2 - e / mu)
    val = np.where(np.isfinite(val), val, 0.0)
    val = np.clip(val, 0.0, 1.0)
    return float(val) if val.ndim == 0 else val


def advantage_full_batch(noise: float, steps: int) -> float:
    """Closed form of Theorem 6 at q = 1: TV(N(0, I_T), N(mu 1, I_T)) = 2 Phi(sqrt(T)/(2z)) - 1."""
    check_sgm_params(1.0, noise, steps)
    return float(2.0 * ndtr(math.sqrt(steps) / (2.0 * noise)) - 1.0)


def advantage_single_step(q: float, noise: float) -> float:
    """Closed form of Theorem 6 at T = 1 (Lemma 7): TV((1-q)N(0,1) + qN(mu,1), N(0,1)) = q (2 Phi(1/(2z)) - 1)."""
    check_sgm_params(q, noise, 1)
    return float(q * (2.0 * ndtr(1.0 / (2.0 * noise)) - 1.0))


def kl_divergence(q: float, noise: float, steps: int, reverse: bool = False) -> float:
    """KL(P1^T || P0^T) = T E_{x ~ P1}[ln(1 - q + q e^{mu x - mu^2/2})] (``reverse``: KL(P0^T || P1^T)).

    Exact T mu^2 / 2 at q = 1; otherwise adaptive quadrature over each Gaussian component.
    """
    check_sgm_params(q, noise, steps)
    mu = 1.0 / noise
    if q >= 1.0:
        return steps * mu * mu / 2.0
    k = _kink(q, mu)
    f = lambda x: _log_ratio(x, q, mu)  # noqa: E731
    if reverse:
        per_step = -_expect(f, 0.0, k)
    else:
        per_step = (1.0 - q) * _expect(f, 0.0, k) + q * _expect(f, mu, k)
    return steps * max(per_step, 0.0)


def pinsker_advantage(q: float, noise: float, steps: int, clip: bool = True) -> float:
    """Pinsker bound (Mahloujifar et al. eq. 5): advantage <= sqrt(KL(P1^T || P0^T) / 2), clipped to 1.

    Not tight; vacuous once KL > 2. ``clip=False`` returns the raw value. (Pinsker also holds with
    the reverse KL, which is slightly smaller: ``kl_divergence(..., reverse=True)``.)
    """
    val = math.sqrt(kl_divergence(q, noise, steps) / 2.0)
    return min(1.0, val) if clip else val


@dataclass(frozen=True)
class MonteCarloEstimate:
    """A Monte Carlo estimate of TV with its standard error over ``num_samples`` draws."""

    advantage: float
    std_error: float
    num_samples: int


def monte_carlo_advantage(q: float, noise: float, steps: int, num_samples: int = 200_000,
                          seed: int | np.random.SeedSequence = 0, chunk_values: int = 2_000_000) -> MonteCarloEstimate:
    """Corrected Algorithm 1 of Mahloujifar et al.: TV ~ mean over j of 1 - exp(min(eta_j, 0)).

    eta_j = sum over T steps of ln(1 - q + q e^{mu x - mu^2/2}) with x ~ N(0, 1), the log-likelihood
    ratio ln dP1/dP0 of one draw from P0, so the mean is E_{P0}[(1 - dP1/dP0)_+] = TV. (The paper
    prints max(eta, 0) and 1 - e^eta, whose mean is -TV.) Proposition 8: |error| >= t has
    probability <= exp(-m t^2 / 3). Draws are generated ``chunk_values`` normals at a time.
    """
    check_sgm_params(q, noise, steps)
    if num_samples < 2:
        raise ValueError("num_samples must be >= 2")
    mu = 1.0 / noise
    rng = np.random.default_rng(seed)
    rows = max(1, int(chunk_values // steps))
    total = 0.0
    total_sq = 0.0
    done = 0
    while done < num_samples:
        n = min(rows, num_samples - done)
        if steps <= chunk_values:
            eta = np.sum(_log_ratio(rng.standard_normal((n, steps)), q, mu), axis=1)
        else:  # a single row does not fit in a chunk: sum it piecewise
            eta = np.zeros(n)
            left = steps
            while left > 0:
                k = min(left, int(chunk_values))
                eta += np.sum(_log_ratio(rng.standard_normal((n, k)), q, mu), axis=1)
                left -= k
        v = -np.expm1(np.minimum(eta, 0.0))
        total += float(v.sum())
        total_sq += float(np.dot(v, v))
        done += n
    mean = total / num_samples
    var = max(total_sq / num_samples - mean * mean, 0.0) * num_samples / (num_samples - 1)
    return MonteCarloEstimate(mean, math.sqrt(var / num_samples), num_samples)
