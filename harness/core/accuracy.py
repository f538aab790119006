"""A recipe's accuracy and its standard error, from S models' right/wrong answers on T images.

The estimand is the accuracy a model trained by the recipe has on the data distribution: expected
over the training randomness (seed, membership) and over images of the distribution. Each model
answers the same T images (the test set, or the validation split held out of the training pool),
so the S x T table of right answers ``c[s, t]`` is crossed: a model's seed moves its whole row, an
image's difficulty its whole column. The estimate is the grand mean, and

    SE^2 = var_s(mean_t c[s, t]) / S + var_t(mean_s c[s, t]) / T        (sample variances, ddof 1)

For any table whose rows and columns are each exchangeable, the grand mean's variance is
``sigma_model^2 / S + sigma_image^2 / T + sigma_rest^2 / (S T)``; the two sample variances above
estimate ``sigma_model^2 + sigma_rest^2 / T`` and ``sigma_image^2 + sigma_rest^2 / S``, so SE^2 is
unbiased but for one extra ``sigma_rest^2 / (S T)`` (at most 1 / (4 S T): conservative by a hair).
With many models the image term dominates: more models cannot make an accuracy on 500 images
surer than the 500 images allow. With few models the model term's variance has few degrees of
freedom: intervals and one-sided confidences use Student's t with the Welch-Satterthwaite degrees of
freedom ``SE^4 / ((var_s/S)^2 / (S-1) + (var_t/T)^2 / (T-1))``. Coverage of the 95% interval is
measured by simulation in tests/test_accuracy.py (a logistic model with heavy-tailed image
difficulty and model spreads up to 2 logits): 93-96% from S = 4 models; with S = 2 and a large
model spread it falls to 85%, so ``harness tune`` trains at least 4 models a setting.

A model's right answers travel in its signals metadata as :func:`pack_correct` strings (one bit an
image, base64) so that the attack phase and ``harness tune`` can read the table back.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np


def pack_correct(correct: np.ndarray) -> str:
    """One model's right answers (bool, T) as base64 of their bits (numpy's ``packbits`` order)."""
    return base64.b64encode(np.packbits(np.asarray(correct, dtype=bool)).tobytes()).decode("ascii")


def unpack_correct(packed: str, images: int) -> np.ndarray:
    """The bool (T,) of :func:`pack_correct`; ValueError where ``packed`` does not hold ``images`` bits."""
    raw = np.frombuffer(base64.b64decode(packed.encode("ascii"), validate=True), dtype=np.uint8)
    if len(raw) != (images + 7) // 8:
        raise ValueError(f"a packed answer table of {len(raw)} bytes holds no {images} answers")
    return np.unpackbits(raw)[:images].astype(bool)


@dataclass(frozen=True)
class AccuracyEstimate:
    """The grand mean of an S x T table of right answers and its standard error (module docstring)."""

    mean: float
    se: float
    models: int
    images: int
    se_models: float  # the model term's part: sqrt(var_s / S)
    se_images: float  # the image term's part: sqrt(var_t / T)

    @property
    def df(self) -> float:
        """Welch-Satterthwaite degrees of freedom of the SE (inf where it is 0 or a term has one unit)."""
        return satterthwaite(self.se_models ** 2, self.models, self.se_images ** 2, self.images)

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """The two-sided ``level`` interval ``mean +- t_df SE``, clipped to [0, 1]."""
        from scipy import stats

        half = float(stats.t.ppf(0.5 + level / 2, self.df)) * self.se if self.se > 0 else 0.0
        return max(0.0, self.mean - half), min(1.0, self.mean + half)

    def confidence_at_least(self, target: float) -> float:
        """The one-sided confidence that the recipe's accuracy is at least ``target``: the t
        distribution's CDF at ``(mean - target) / SE`` (1 or 0 where SE is 0, 0.5 at equality)."""
        return confidence(self.mean - target, self.se, self.df)

    def json(self) -> dict[str, Any]:
        lo, hi = self.interval()
        return {"mean": self.mean, "se": self.se, "df": self.df, "ci95": [lo, hi], "models": self.models,
                "images": self.images, "se_models": self.se_models, "se_images": self.se_images}


def satterthwaite(var_a: float, n_a: int, var_b: float, n_b: int) -> float:
    """Degrees of freedom of ``sqrt(var_a + var_b)``, two variance terms read from ``n_a`` and ``n_b``
    units (a term from one unit contributes none and nothing)."""
    den = (var_a ** 2 / (n_a - 1) if n_a > 1 else 0.0) + (var_b ** 2 / (n_b - 1) if n_b > 1 else 0.0)
    return (var_a + var_b) ** 2 / den if den > 0 else math.inf


def confidence(diff: float, se: float, df: float) -> float:
    """``P(T_df <= diff / se)``: the one-sided confidence that a quantity estimated at ``diff`` with
    standard error ``se`` is at least 0."""
    if se <= 0:
        return 0.5 if diff == 0 else float(diff > 0)
    from scipy import stats

    return float(stats.t.cdf(diff / se, df))


def estimate(correct: np.ndarray) -> AccuracyEstimate:
    """The estimate of a (S, T) bool table (S >= 1, T >= 1); a term with one row or column adds 0
    (no variance can be read from it: with one model the SE covers the images only)."""
    c = np.asarray(correct, dtype=np.float64)
    if c.ndim != 2 or c.shape[0] < 1 or c.shape[1] < 1:
        raise ValueError(f"an accuracy table is (models, images) with both >= 1, got shape {c.shape}")
    s, t = c.shape
    rows, cols = c.mean(axis=1), c.mean(axis=0)
    var_models = float(rows.var(ddof=1)) / s if s > 1 else 0.0
    var_images = float(cols.var(ddof=1)) / t if t > 1 else 0.0
    return AccuracyEstimate(mean=float(c.mean()), se=math.sqrt(var_models + var_images), models=s, images=t,
                            se_models=math.sqrt(var_models), se_images=math.sqrt(var_images))


def difference(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(mean of ``a`` - mean of ``b``, its SE, its degrees of freedom) for two recipes' tables on the
    same T images, paired by image (an image's difficulty cancels): ``SE^2 = var_s(a rows)/S_a +
    var_s(b rows)/S_b + var_t(a cols - b cols)/T``, the same construction as :func:`estimate`; the
    degrees of freedom are the Welch-Satterthwaite ones of the three terms."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"paired tables need the same images, got {a.shape[1]} and {b.shape[1]}")
    t = a.shape[1]
    terms = [(float(x.mean(axis=1).var(ddof=1)) / len(x), len(x)) for x in (a, b) if len(x) > 1]
    if t > 1:
        terms.append((float((a.mean(axis=0) - b.mean(axis=0)).var(ddof=1)) / t, t))
    var = sum(v for v, _ in terms)
    den = sum(v ** 2 / (n - 1) for v, n in terms)
    return float(a.mean() - b.mean()), math.sqrt(var), var ** 2 / den if den > 0 else math.inf


def table_of(metas: Sequence[dict[str, Any]], key: str, images: int) -> np.ndarray | None:
    """The (S, T) table of right answers stored under ``key`` (``test_correct`` or
    ``validation_correct``) in model metadata, or None where any model lacks it (a run from before
    the field, or an imported model)."""
    packed = [m.get(key) for m in metas]
    if not packed or any(not isinstance(p, str) for p in packed):
        return None
    return np.stack([unpack_correct(p, images) for p in packed])
