"""Provable membership-inference bounds and empirical epsilon (pure functions; docs/bounds.md).

- ``thudi``: accuracy bounds from (eps, delta)-DP with a non-uniform prior (Thudi et al.), the
  epsilon a target needs, "less can be more", positive advantage, group MI, deletion capacity.
- ``prior``: the earlier advantage / accuracy bounds (Yeom, Erlingsson, Humphries, Sablayrolles,
  Mahloujifar's sigmoid).
- ``sgm``: the optimal bound for DP-SGD (Mahloujifar et al.): advantage = TV from a PLD, the
  TPR-at-FPR curve, epsilon at delta, non-uniform prior, Pinsker, Monte Carlo, closed forms.
- ``empirical``: epsilon lower bounds from attack counts or a ROC (Clopper-Pearson) and the
  label-flip memorization game.

The submodules load on first use (``harness.bounds.sgm`` imports ``dp_accounting``, a hard
dependency with no fallback, which takes over a second to import: a run without DP never pays it).
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["empirical", "prior", "sgm", "thudi"]


def __getattr__(name: str) -> ModuleType:
    if name in __all__:
        return importlib.import_module(f"harness.bounds.{name}")
    raise AttributeError(f"module 'harness.bounds' has no attribute {name!r}")
