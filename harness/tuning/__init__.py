"""Tuning to a utility target (the paper's third principle): ``harness tune`` (docs/tuning.md).

:mod:`harness.tuning.grid` (the knobs and their privacy order), :mod:`harness.tuning.rule` (the
stopping rule and the choice), :mod:`harness.tuning.search` (the rounds of training).
"""
