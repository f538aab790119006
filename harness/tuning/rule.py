"""How ``harness tune`` decides: each setting's validation accuracy, when it has enough models, and
which setting it picks.

Each setting's accuracy is the grand mean of its models' right answers on the validation split,
with the SE over models and images (:mod:`harness.core.accuracy`: Student t, Welch-Satterthwaite
degrees of freedom). Against a target accuracy A, a setting's *confidence* is the one-sided
``P(accuracy >= A)`` from that estimate.

**Stopping rule** (per setting, after each round of models): a setting is *settled* when its
confidence is at least ``SURE`` or at most ``1 - SURE`` (it meets, or misses, A beyond doubt), when
its model term is at most ``MODEL_SHARE`` of its image term (more models cannot settle it: the
validation split is what limits), or when it has ``max_models``; otherwise the next round gives it
another ``step`` models. Without a target (the most accurate setting), a setting is settled when the
paired comparison with the best (:func:`harness.core.accuracy.difference`) is sure either way, or by
the same two limits.

**Choice**: with a target, the settings whose estimate is at least A *meet* it; among them the
maximal ones in the privacy order (:mod:`harness.tuning.grid`: none more private than another
meets A) form the Pareto set, and the first in the knobs' priority order is chosen. Its confidence
says how sure it is; so does the confidence of the settings more private than it (how likely one of
them also meets A). Where no setting meets A, none is chosen and the closest is named. Without a
target, the setting with the highest estimate is chosen, with the paired confidence that it beats
the runner-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.core.accuracy import AccuracyEstimate, confidence, difference, estimate
from harness.tuning.grid import Knob, more_private, privacy_key

#: a one-sided confidence at which a setting's side of the target is taken as settled
SURE = 0.95
#: a setting whose model term (SE) is at most this share of its image term is settled: more models barely move it
MODEL_SHARE = 0.5


@dataclass
class Setting:
    """One grid point and what its models measured: ``table`` (models x validation images, bool)."""

    params: dict[str, Any]
    table: np.ndarray | None = None
    run_dir: str | None = None
    stop: str | None = None  # why no more models are wanted (None: wants more)
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. the DP epsilon its models report

    @property
    def models(self) -> int:
        return 0 if self.table is None else len(self.table)

    @property
    def accuracy(self) -> AccuracyEstimate:
        assert self.table is not None
        return estimate(self.table)


def meets_confidence(s: Setting, target: float) -> float:
    """``P(accuracy >= target)`` for setting ``s``."""
    return s.accuracy.confidence_at_least(target)


def stop_reason(s: Setting, target: float | None, best: Setting | None, max_models: int) -> str | None:
    """Why ``s`` needs no more models (the module docstring's stopping rule), or None. ``best``: the
    most accurate setting so far (the comparison without a target)."""
    acc = s.accuracy
    if target is not None:
        c = acc.confidence_at_least(target)
        if c >= SURE:
            return f"meets the target (confidence {c:.3f})"
        if c <= 1 - SURE:
            return f"misses the target (confidence it meets {c:.3f})"
    elif best is not None and best is not s:
        d, se, df = difference(best.table, s.table)
        c = confidence(d, se, df)
        if c >= SURE:
            return f"below the best (confidence {c:.3f})"
    if acc.se_models <= MODEL_SHARE * acc.se_images:
        return (f"limited by the validation split (model term {100 * acc.se_models:.2f} <= {MODEL_SHARE:g} x image "
                f"term {100 * acc.se_images:.2f} points)")
    if s.models >= max_models:
        return f"{s.models} models (the most a setting gets)"
    return None


@dataclass(frozen=True)
class Choice:
    """The tuner's answer: the chosen setting (None where no setting meets the target), the Pareto
    set among the settings that meet it, and one line on why."""

    chosen: Setting | None
    pareto: list[Setting]
    why: str
    closest: Setting | None = None  # where none meets the target: the most accurate one


def _fmt(params: dict[str, Any]) -> str:
    return ", ".join(f"{k.removeprefix('defense_params.')}={v}" for k, v in params.items())


def choose(settings: list[Setting], target: float | None, knobs: list[Knob]) -> Choice:
    """The choice of the module docstring, over the settings that have models."""
    measured = [s for s in settings if s.models]
    if not measured:
        raise ValueError("no setting has a model")
    if target is None:
        ranked = sorted(measured, key=lambda s: -s.accuracy.mean)
        best = ranked[0]
        why = f"the most accurate setting on the validation split: {100 * best.accuracy.mean:.1f}%"
        if len(ranked) > 1:
            d, se, df = difference(best.table, ranked[1].table)
            why += (f", {100 * d:.1f} ± {100 * se:.1f} points above the runner-up ({_fmt(ranked[1].params)}; "
                    f"paired over the same images, confidence it is higher {confidence(d, se, df):.3f})")
        return Choice(best, [best], why)
    meeting = [s for s in measured if s.accuracy.mean >= target]
    if not meeting:
        closest = max(measured, key=lambda s: s.accuracy.mean)
        return Choice(None, [], f"no setting reaches {100 * target:.1f}% on the validation split: the closest is "
                                f"{_fmt(closest.params)} at {100 * closest.accuracy.mean:.1f}% ± "
                                f"{100 * closest.accuracy.se:.1f}", closest)
    pareto = [s for s in meeting if not any(more_private(o.params, s.params, knobs) for o in meeting)]
    pareto.sort(key=lambda s: privacy_key(s.params, knobs), reverse=True)
    chosen = pareto[0]
    c = meets_confidence(chosen, target)
    more = [s for s in measured if more_private(s.params, chosen.params, knobs)]
    why = (f"the most private setting whose validation accuracy meets {100 * target:.1f}%: "
           f"{100 * chosen.accuracy.mean:.1f}% ± {100 * chosen.accuracy.se:.1f} (confidence it meets the target "
           f"{c:.3f}, {chosen.models} models)")
    if more:
        top = max(more, key=lambda s: meets_confidence(s, target))
        why += (f"; of the {len(more)} more private settings, the likeliest to meet it ({_fmt(top.params)}) "
                f"reads {100 * top.accuracy.mean:.1f}% (confidence {meets_confidence(top, target):.3f})")
    if len(pareto) > 1:
        why += (f"; {len(pareto)} settings meet it with none more private in every knob: the first in the knobs' "
                "priority order is chosen (tune.json lists them all)")
    return Choice(chosen, pareto, why)
