"""The ``subsample`` wrapper (Thudi et al., "From Differential Privacy to Bounds on Membership
Inference: Less can be More", TMLR 2024).

Train the wrapped defense on a random fraction ``rate`` (P1) of the data it is given: each
training sample, audit members included, is kept independently with probability P1 (seeded by the
model's seed). The audit design is unchanged, so a member audit sample is actually trained on with
probability P1 only. Lower inclusion probability lowers every MI bound: for an eps-DP trainer, the
positive accuracy of any attack is at most ``(1 + e^{-eps} (1 - P1)/P1)^{-1}``, and the epsilon that
gives the same bound at P1 as eps0 gives at 1/2 is ``eps0 + ln((1 - P1)/P1)`` (Thudi et al., sec. 4).
The served model's ``info()`` carries the inner defense's facts plus ``subsample_rate``; when the
inner defense reports an epsilon, the attack phase adds those P1-aware bounds to the run's
``privacy`` record (``subsample_bounds``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from defenses.base import Defense, FitContext, LabeledImages, ServedModel


class SubsampledServed(ServedModel):
    def __init__(self, inner: ServedModel, rate: float, kept: int, total: int) -> None:
        self.inner, self.rate, self.kept, self.total = inner, rate, kept, total

    def query(self, x: np.ndarray) -> np.ndarray:
        return self.inner.query(x)

    def raw_query(self, x: np.ndarray) -> np.ndarray | None:
        return self.inner.raw_query(x)

    def features(self, x: np.ndarray) -> np.ndarray | None:
        return self.inner.features(x)

    def splitai_query(self, x: np.ndarray) -> np.ndarray | None:
        return self.inner.splitai_query(x)

    def model_state(self) -> dict[str, Any] | None:
        return self.inner.model_state()

    def info(self) -> dict[str, Any]:
        """The inner defense's facts and the subsampling (the attack phase derives the P1-aware
        bounds from them: harness.audit.attack_phase, ``subsample_bounds``)."""
        return {**self.inner.info(), "subsample_rate": self.rate, "subsample_kept": self.kept,
                "subsample_total": self.total}


class Subsample(Defense):
    name = "subsample"
    description = "train the inner defense on a random fraction of the data (Thudi et al.: less can be more)"
    reference = "https://openreview.net/forum?id=daXqjb6dVE"
    param_defaults = {"inner": "undefended", "rate": 0.5, "inner_params": {}}

    @classmethod
    def _inner_cls(cls, params: dict[str, Any]) -> type[Defense]:
        from defenses import resolve

        return resolve(str(params.get("inner", cls.param_defaults["inner"])))

    @classmethod
    def recipe_routing(cls, params: dict[str, Any]) -> tuple[frozenset[str] | None, dict[str, str], str]:
        """The inner defense's recipe fields; its aliases point into ``defense_params.inner_params``."""
        inner = cls._inner_cls(params)
        fields, aliases, note = inner.recipe_routing(dict(params.get("inner_params") or {}))
        return fields, {f: a.replace("defense_params.", "defense_params.inner_params.", 1) for f, a in aliases.items()}, note

    @classmethod
    def inner_default_canary(cls, params: dict[str, Any]) -> Any:
        """The sample-level canaries of the wrapped defense."""
        return cls._inner_cls(params).default_canary

    def check_config(self, cfg: Any) -> None:
        self.inner.check_config(cfg)

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        from defenses import resolve

        rate = self.params["rate"]
        if not isinstance(rate, (int, float)) or not 0 < rate <= 1:
            raise ValueError(f"rate must be in (0, 1], got {rate!r}")
        if self.params["inner"] == "subsample":
            raise ValueError("subsample cannot wrap itself")
        self.inner = resolve(str(self.params["inner"]))(**dict(self.params["inner_params"] or {}))
        # the wrapper audits and attacks as its inner defense does
        self.default_canary = self.inner.default_canary
        self.adaptive_attacks = self.inner.adaptive_attacks
        self.ablation_attacks = self.inner.ablation_attacks
        self.provides = self.inner.provides

    def fit(self, train: LabeledImages, ctx: FitContext) -> ServedModel:
        rate = float(self.params["rate"])
        rng = np.random.default_rng(np.random.SeedSequence([ctx.seed, 0x5B5]))
        keep = rng.random(len(train)) < rate
        if not keep.any():
            keep[rng.integers(len(train))] = True
        sub = LabeledImages(train.x[keep], train.y[keep], train.num_classes, train.mean, train.std, train.augment)
        inner_ctx = FitContext(seed=ctx.seed, device=ctx.device, train=ctx.train, params=self.inner.params,
                               progress=ctx.progress)
        return SubsampledServed(self.inner.fit(sub, inner_ctx), rate, int(keep.sum()), len(train))
