"""The label-only attack (Choquette-Choo et al., ICML 2021) as adapted in the misleading-evaluations
paper against HAMP's confidence masking.

Features: for victim t and audit sample i, the binary vector ``[argmax f_t(aug_a(x_i)) == y_i]_a``
over the dataset's fixed query augmentations (18 for CIFAR-10). For each (t, i), an L2-regularized
logistic regression (inverse strength C = 1.0, intercept unpenalized) is fitted on the *other* S-1
models' vectors for sample i, labeled with their membership; the victim's score is the fitted
membership probability of its own vector. Nothing is fitted on victims' outcomes.

The regressions are solved together by batched Newton steps (identical optimum to scikit-learn's
``LogisticRegression(C=1.0)``: the objective is strictly convex). Classes are weighted to balance:
with leave-one-out, a member victim leaves S/2 - 1 IN shadows against S/2 OUT ones, so with
uninformative features an unweighted intercept would give members a systematically *lower* score;
balancing removes that artifact of the protocol (the paper's code uses no weighting).
"""

from __future__ import annotations

import numpy as np

from attacks.base import Attack, AttackInput


def fit_logistic_batched(
    x: np.ndarray, y: np.ndarray, *, c: float = 1.0, iters: int = 50, tol: float = 1e-10
) -> np.ndarray:
    """Fit many small L2-regularized logistic regressions at once.

    ``x`` (B, n, d), ``y`` (B, n) in {0, 1}. Minimizes, per problem,
    ``0.5 ||w||^2 + c * sum_i s_i * logloss(y_i, sigmoid(w.x_i + b))`` with balanced sample
    weights ``s_i = n / (2 n_{y_i})``. Returns parameters (B, d + 1), the intercept last.
    """
    b, n, d = x.shape
    xa = np.concatenate([x, np.ones((b, n, 1))], axis=2)
    yf = y.astype(np.float64)
    n_pos = yf.sum(1, keepdims=True)
    s = np.where(yf > 0, n / (2 * np.maximum(n_pos, 1)), n / (2 * np.maximum(n - n_pos, 1))) * c
    reg = np.ones(d + 1)
    reg[-1] = 0.0  # the intercept is not penalized

    theta = np.zeros((b, d + 1))
    f = _objective(xa, yf, s, theta, d)
    active = np.ones(b, dtype=bool)
    for _ in range(iters):
        if not active.any():
            break
        th, xa_a = theta[active], xa[active]
        z = np.einsum("bnd,bd->bn", xa_a, th)
        p = 1.0 / (1.0 + np.exp(-z))
        grad = reg * th + np.einsum("bn,bnd->bd", s[active] * (p - yf[active]), xa_a)
        hess = np.einsum("bn,bnd,bne->bde", s[active] * p * (1 - p), xa_a, xa_a)
        hess += np.diag(reg + 1e-9)
        step = np.linalg.solve(hess, grad[..., None])[..., 0]
        # backtracking: halve the step until the objective does not increase
        t = np.ones(len(th))
        f_old = f[active]
        new = th - step
        f_new = _objective(xa_a, yf[active], s[active], new, d)
        for _ in range(30):
            worse = f_new > f_old + 1e-12
            if not worse.any():
                break
            t[worse] *= 0.5
            new[worse] = th[worse] - t[worse, None] * step[worse]
            f_new[worse] = _objective(xa_a[worse], yf[active][worse], s[active][worse], new[worse], d)
        idx = np.flatnonzero(active)
        theta[idx] = new
        f[idx] = f_new
        done = np.abs(f_old - f_new) <= tol * np.maximum(1.0, np.abs(f_new))
        active[idx[done]] = False
    return theta


def _objective(xa: np.ndarray, y: np.ndarray, s: np.ndarray, th: np.ndarray, d: int) -> np.ndarray:
    """Weighted logistic loss plus 0.5 ||w||^2 (intercept excluded), per problem."""
    z = np.einsum("bnd,bd->bn", xa, th)
    return 0.5 * (th[:, :d] ** 2).sum(1) + (s * (np.logaddexp(0, z) - y * z)).sum(1)


def correctness_features(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Binary (S, C, A): whether the served top-1 class under each query augmentation is the label."""
    return (logits.argmax(axis=-1) == labels[None, :, None]).astype(np.float64)


class LabelOnly(Attack):
    name = "label-only"
    description = "label-only attack: per-sample logistic regression on 18 augmented correctness bits"
    needs = frozenset({"logits"})

    def __init__(self, c: float = 1.0) -> None:
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not c > 0:
            raise ValueError(f"label-only: c (inverse regularization) must be a positive number, got {c!r}")
        self.c = float(c)

    def params(self) -> dict[str, float]:
        return {"c": self.c}

    def score(self, inp: AttackInput) -> dict[str, np.ndarray]:
        feats = correctness_features(inp.signals["logits"], inp.labels)  # (S, C, A)
        s, c, a = feats.shape
        mem = inp.membership
        scores = np.empty((s, c))
        others = np.array([[j for j in range(s) if j != t] for t in range(s)])  # (S, S-1)
        for i in range(c):
            x = feats[others, i, :]  # (S, S-1, A): the shadows of each victim
            y = mem[others, i]
            theta = fit_logistic_batched(x, y, c=self.c)
            z = np.einsum("ta,ta->t", feats[:, i, :], theta[:, :a]) + theta[:, a]
            # the log-odds (monotone in the membership probability, no saturation), rounded so
            # that solver round-off cannot break ties: with leave-one-out, member and non-member
            # victims have systematically different shadow sets, so round-off would correlate
            # with membership (e.g. a sample every model classifies correctly would "leak")
            scores[:, i] = np.round(z, 6)
        return {f"logreg-c{self.c:g}": scores}
