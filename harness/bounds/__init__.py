"""Provable membership-inference bounds and empirical epsilon (pure functions; docs/bounds.md).

- ``thudi``: accuracy bounds from (eps, delta)-DP with a non-uniform prior (Thudi et al.), the
  epsilon a target needs, "less can be more", positive advantage, group MI, deletion capacity.
- ``prior``: the earlier advantage / accuracy bounds (Yeom, Erlingsson, Humphries, Sablayrolles,
  Mahloujifar's sigmoid).
- ``sgm``: the optimal bound for DP-SGD (Mahloujifar et al.): advantage = TV from a PLD, the
  TPR-at-FPR curve, epsilon at delta, non-uniform prior, Pinsker, Monte Carlo, closed forms.
- ``empirical``: epsilon lower bounds from attack counts or a ROC (Clopper-Pearson) and the
  label-flip memorization game.

Importing this package imports ``dp_accounting`` (a hard dependency, no fallback).
"""

from harness.bounds import empirical, prior, sgm, thudi

__all__ = ["empirical", "prior", "sgm", "thudi"]
