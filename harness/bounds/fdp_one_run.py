"""Auditing f-DP in one run (Mahloujifar, Melis and Chaudhuri, "Auditing f-Differential Privacy in One
Run", ICML 2025, arXiv 2410.22235), for the Gaussian-DP family, beside Steinke, Nasr and Jagielski's
epsilon (:mod:`harness.bounds.one_run`) for the same guesses.

**Setting** (the game of Steinke et al., which the paper generalizes): m canaries, each included in the training
set independently with probability 1/2; one model is trained; the auditor makes r guesses
("member" / "non-member") and abstains on the other m - r; W of the r guesses are correct.

**The bound** (the paper's main theorem for guesses with abstention, and the recursion of its numerical
procedure; section numbers are not cited here: only the paper's first page and the authors' code
could be read where this was written, docs/bounds.md). For a mechanism
that is f-DP with respect to each canary, write B(x) = 1 - f(x) (the "blow-up function": the largest
probability of an event under one neighbour when it has probability x under the other; for mu-GDP
B(x) = Phi(Phi^-1(x) + mu), :func:`harness.bounds.gdp.blow_up`). For canary i and any event E that
depends on the output and the other canaries only, the correct-guess probability and the
wrong-guess probability satisfy Pr[correct_i and E] <= B(Pr[wrong_i and E]) (f-DP, the uniform
prior and the concavity of B). Taking E = {W_-i >= j - 1} and summing over the m canaries with
Jensen's inequality gives, for every j >= 1, with p_l = Pr[W = l],

    R_j <= B(H_{j-1}),   R_j = (1/m) sum_{l >= j} l p_l,   H_j = (1/m) sum_{l >= j} (r - l) p_l.

Whether Pr[W >= v] >= tau is possible under these constraints is decided by the smallest
distribution that satisfies them with mass tau at W = v: start from R_v = tau v / m and
H_v = tau (r - v) / m and go down, for i = v - 1, ..., 0,

    H_i = max(H_{i+1}, B^-1(R_{i+1})),    R_i = R_{i+1} + i / (r - i) (H_i - H_{i+1})

(each p_i = m (H_i - H_{i+1}) / (r - i) as small as the constraint allows). Its total probability is
(R_0 + H_0) m / r; if it exceeds 1, no f-DP mechanism gives v or more correct guesses with probability
tau, so observing W >= v rejects "the trainer is f-DP" at level tau (:func:`fdp_rejects`). For the
Gaussian family the rejected mu form an interval [0, mu*) (B^-1 decreases in mu), and mu* is a
1 - tau lower bound on the trainer's GDP mu (:func:`gdp_mu_lower`), reported with the epsilon of
mu*-GDP at the run's delta (:func:`harness.bounds.gdp.gdp_epsilon`; a statement within the Gaussian
family, see that module). This is the recursion of the authors' released code
(facebookresearch/PrivacyGuard, ``FDPAnalysisNode``, with k = 2 for membership), re-derived above;
the search over mu here is a grid refined three times (a rejected grid value is reported, so the
bound is conservative to the grid's resolution) where that code steps the noise 1/mu by 0.01.

**Guesses** (:class:`GuessSet`): for a victim's scores, "member" on the k highest (``top``) or "member"
on the k highest and "non-member" on the k lowest (``both``, as Steinke et al. guess), for a fixed
grid of k; ties broken by audit position. Both bounds see exactly the same (r, v) pairs and the same
multiple-comparison correction: each (victim, guess set) is a test at level alpha / (victims x sets),
and the maximum is a valid 1 - alpha lower bound under any dependence (union bound), as
:mod:`harness.bounds.one_run` combines victims.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from harness.bounds.gdp import blow_up_inverse, gdp_epsilon

__all__ = [
    "GuessSet",
    "OneRunBounds",
    "TOP_FRACTIONS",
    "BOTH_FRACTIONS",
    "count_guesses",
    "fdp_rejects",
    "gdp_mu_lower",
    "guess_sets",
    "one_run_bounds",
    "per_victim_bounds",
]

#: fractions of the m canaries guessed "member" (top-k guesses)
TOP_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
#: fractions of the m canaries guessed on each side (k members on top, k non-members at the bottom)
BOTH_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
#: the mu search: the first interval, its largest end (mu above this is reported as this), grid points
#: per round and rounds
MU_START, MU_CAP, MU_GRID, MU_ROUNDS = 8.0, 64.0, 33, 3


@dataclass(frozen=True)
class GuessSet:
    """``side`` "top": "member" on the ``k`` highest scores (r = k); "both": also "non-member" on the
    ``k`` lowest (r = 2k)."""

    side: str
    k: int

    @property
    def guesses(self) -> int:
        return self.k if self.side == "top" else 2 * self.k

    def label(self) -> str:
        return f"top {self.k}" if self.side == "top" else f"top {self.k} + bottom {self.k}"


def guess_sets(num_canaries: int, sides: Sequence[str] = ("top", "both"),
               top: Sequence[float] = TOP_FRACTIONS, both: Sequence[float] = BOTH_FRACTIONS) -> tuple[GuessSet, ...]:
    """The fixed grid of guess sets: k = ceil(f m) for each fraction, without repeats (``both``: k <= m/2)."""
    out: list[GuessSet] = []
    for side in sides:
        if side not in ("top", "both"):
            raise ValueError(f"guess side must be 'top' or 'both', got {side!r}")
        fracs = top if side == "top" else both
        cap = num_canaries if side == "top" else num_canaries // 2
        ks = sorted({min(cap, max(1, math.ceil(f * num_canaries))) for f in fracs})
        out += [GuessSet(side, k) for k in ks if k >= 1]
    return tuple(out)


def count_guesses(scores: np.ndarray, member: np.ndarray, sets: Sequence[GuessSet]) -> list[tuple[int, int]]:
    """(r, v) of each guess set on one victim's scores (C,) and membership (C,): guesses and correct ones."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    mem = np.asarray(member, dtype=bool)[order]
    hits_top = np.r_[0, np.cumsum(mem)]
    hits_bottom = np.r_[0, np.cumsum(~mem[::-1])]
    out = []
    for g in sets:
        v = int(hits_top[g.k]) + (int(hits_bottom[g.k]) if g.side == "both" else 0)
        out.append((g.guesses, v))
    return out


def fdp_rejects(m: int, r: np.ndarray | int, v: np.ndarray | int, mu: np.ndarray | float, alpha: float) -> np.ndarray:
    """Whether v or more correct of r guesses on m canaries rejects "the trainer is mu-GDP" at level
    ``alpha`` (module docstring): the recursion from (R_v, H_v) = alpha (v, r - v) / m down to i = 0,
    rejected where R_0 + H_0 > r / m. Vectorised: ``r``, ``v`` (P,) pairs against ``mu`` (G,) values
    shared by every pair, or (P, G) values per pair, gives (P, G) booleans."""
    r_a = np.atleast_1d(np.asarray(r, dtype=np.int64))
    v_a = np.atleast_1d(np.asarray(v, dtype=np.int64))
    if r_a.ndim != 1 or r_a.shape != v_a.shape or np.any(v_a < 0) or np.any(v_a > r_a) or np.any(r_a > m) or m < 1:
        raise ValueError("need 0 <= v <= r <= m for every pair, m >= 1")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    mu_a = np.asarray(mu, dtype=np.float64)
    mu_a = np.broadcast_to(np.atleast_1d(mu_a)[None, :] if mu_a.ndim <= 1 else mu_a,
                           (len(r_a), np.atleast_1d(mu_a).shape[-1]))
    rr = np.broadcast_to((alpha * v_a / m)[:, None], mu_a.shape).copy()
    hh = np.broadcast_to((alpha * (r_a - v_a) / m)[:, None], mu_a.shape).copy()
    rc, vc = r_a[:, None].astype(np.float64), v_a[:, None]
    limit = (r_a / m)[:, None] * (1 + 1e-12)  # a margin: never reject on a rounding error
    for i in range(int(v_a.max(initial=0)) - 1, -1, -1):
        act = vc > i  # pairs whose recursion has reached step i
        h_new = np.maximum(hh, blow_up_inverse(np.minimum(rr, 1.0), mu_a))
        r_new = rr + (i / np.maximum(rc - i, 1.0)) * (h_new - hh)
        hh = np.where(act, h_new, hh)
        rr = np.where(act, r_new, rr)
        if i % 16 == 0 and np.all(rr + hh > limit):  # R and H only grow: every entry is rejected already
            break
    return rr + hh > limit


def gdp_mu_lower(m: int, r: Sequence[int] | np.ndarray, v: Sequence[int] | np.ndarray, alpha: float) -> np.ndarray:
    """The 1 - alpha lower bound on mu of each (r, v) pair: the largest mu :func:`fdp_rejects` rejects,
    searched on a grid over [0, 8] (the top doubled up to ``MU_CAP`` while it is rejected) refined
    ``MU_ROUNDS`` times between the last rejected grid value and the next (resolution 8 / 32^3 ~ 2.4e-4;
    the rejected value is reported, so the search never overstates the bound); 0 where mu = 0 is not
    rejected, ``MU_CAP`` where even that is. The rejected values form an interval [0, mu*) because
    B^-1 decreases in mu (checked by a test)."""
    r_a = np.asarray(r, dtype=np.int64).ravel()
    v_a = np.asarray(v, dtype=np.int64).ravel()
    out = np.zeros(len(r_a))
    todo = np.flatnonzero(2 * v_a > r_a)  # no better than chance: mu = 0 is never rejected
    if not len(todo):
        return out
    r_t, v_t = r_a[todo], v_a[todo]
    top = np.full(len(todo), MU_START)
    while True:  # widen where even the top of the interval is rejected
        capped = fdp_rejects(m, r_t, v_t, top[:, None], alpha)[:, 0]
        grow = capped & (top < MU_CAP)
        if not grow.any():
            break
        top = np.where(grow, np.minimum(2 * top, MU_CAP), top)
    lo, hi = np.zeros(len(todo)), top
    steps = np.linspace(0.0, 1.0, MU_GRID)
    rows = np.arange(len(todo))
    for _ in range(MU_ROUNDS):
        grid = lo[:, None] + (hi - lo)[:, None] * steps[None, :]
        rej = fdp_rejects(m, r_t, v_t, grid, alpha)
        last = np.where(rej.any(axis=1), MU_GRID - 1 - np.argmax(rej[:, ::-1], axis=1), -1)
        none = last < 0
        lo, hi = (np.where(none, lo, grid[rows, np.maximum(last, 0)]),
                  np.where(none, lo, grid[rows, np.minimum(last + 1, MU_GRID - 1)]))
    out[todo] = np.where(capped, MU_CAP, lo)
    return out


@dataclass(frozen=True)
class OneRunBounds:
    """Both one-run lower bounds on the same guesses (module docstring), each the maximum over
    victims and guess sets at level alpha / ``tests``.

    ``mu``: the f-DP (Gaussian) bound on mu, ``epsilon_fdp`` its mu-GDP epsilon at ``delta``, attained
    with ``fdp_at`` = {victim, guesses, correct, set}; ``epsilon_steinke``: Steinke et al.'s (eps,
    delta) bound, attained with ``steinke_at``. ``num_canaries`` is m; ``sets`` the guess sets."""

    mu: float
    epsilon_fdp: float
    fdp_at: dict[str, Any] | None
    epsilon_steinke: float
    steinke_at: dict[str, Any] | None
    num_canaries: int
    num_victims: int
    sets: tuple[GuessSet, ...]
    tests: int
    alpha: float
    delta: float

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["sets"] = [g.label() for g in self.sets]
        d["confidence"] = 1 - self.alpha
        d["method"] = (f"the same guesses for both: {len(self.sets)} guess sets per victim x {self.num_victims} "
                       f"victim(s), Bonferroni over the {self.tests} tests; f-DP: Mahloujifar, Melis, Chaudhuri 2025 "
                       "(Gaussian family); Steinke, Nasr, Jagielski 2023 with delta")
        return d


def _pair_bounds(sc: np.ndarray, mem: np.ndarray, sets: tuple[GuessSet, ...], beta: float, delta: float,
                 m: int) -> tuple[list[tuple[int, GuessSet, tuple[int, int]]], np.ndarray, np.ndarray]:
    """Every (victim, guess set) pair with its (r, v), its f-DP mu bound and its Steinke et al. epsilon,
    each at level ``beta``."""
    from harness.bounds.one_run import epsilon_lower

    pairs = [(t, g, rv) for t in range(sc.shape[0]) for g, rv in zip(sets, count_guesses(sc[t], mem[t], sets))]
    r = np.array([p[2][0] for p in pairs])
    v = np.array([p[2][1] for p in pairs])
    mus = gdp_mu_lower(m, r, v, beta)
    eps = np.array([epsilon_lower(m, int(rj), int(vj), beta, delta) if 2 * vj > rj else 0.0 for rj, vj in zip(r, v)])
    return pairs, mus, eps


def _check(scores: np.ndarray, membership: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sc = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    mem = np.atleast_2d(np.asarray(membership, dtype=bool))
    if sc.shape != mem.shape or sc.ndim != 2:
        raise ValueError("scores and membership must have the same shape (victims, canaries)")
    return sc, mem


def one_run_bounds(scores: np.ndarray, membership: np.ndarray, *, delta: float, alpha: float = 0.05,
                   num_canaries: int | None = None, sides: Sequence[str] = ("top", "both")) -> OneRunBounds:
    """The f-DP (Gaussian) and Steinke et al. one-run lower bounds of scores (S, C) against membership
    (S, C): each victim's guess sets (:func:`guess_sets` of C), each (victim, set) at level
    alpha / (S x sets), the maximum of each bound. ``num_canaries``: m (default C)."""
    sc, mem = _check(scores, membership)
    s, c = sc.shape
    m = int(num_canaries or c)
    sets = guess_sets(c, sides)
    tests = s * len(sets)
    pairs, mus, eps_s = _pair_bounds(sc, mem, sets, alpha / tests, delta, m)

    def at(j: int) -> dict[str, Any]:
        t, g, (rj, vj) = pairs[j]
        return {"victim": t, "guesses": int(rj), "correct": int(vj), "set": g.label()}

    j_mu, j_s = int(np.argmax(mus)), int(np.argmax(eps_s))
    mu = float(mus[j_mu])
    return OneRunBounds(mu=mu, epsilon_fdp=gdp_epsilon(mu, delta) if mu > 0 else 0.0,
                        fdp_at=at(j_mu) if mu > 0 else None, epsilon_steinke=float(eps_s[j_s]),
                        steinke_at=at(j_s) if eps_s[j_s] > 0 else None, num_canaries=m, num_victims=s,
                        sets=sets, tests=tests, alpha=float(alpha), delta=float(delta))


def per_victim_bounds(scores: np.ndarray, membership: np.ndarray, *, delta: float, alpha: float = 0.05,
                      num_canaries: int | None = None, sides: Sequence[str] = ("top", "both")
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Each victim's own 1 - alpha bounds (its guess sets at alpha / sets): (mu (S,), Steinke eps (S,)).
    Each row is a separate statement about its own training run (the known-truth simulations treat
    every simulated run as one victim); :func:`one_run_bounds` is the joint statement."""
    sc, mem = _check(scores, membership)
    sets = guess_sets(sc.shape[1], sides)
    _, mus, eps_s = _pair_bounds(sc, mem, sets, alpha / len(sets), delta, int(num_canaries or sc.shape[1]))
    k = len(sets)
    return mus.reshape(-1, k).max(axis=1), eps_s.reshape(-1, k).max(axis=1)
