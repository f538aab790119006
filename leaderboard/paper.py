"""The paper's own figures (Aerni, Zhang, Tramer, CCS 2024, Table 1), drawn on a board whose setting
is the paper's: CIFAR-10 at the ``paper`` preset (WRN16-4, 64 models, 500 audit samples, TPR at 0.1%
FPR pooled over 64 x 500 guesses). Copied from the paper's Table 1 (``../shared/reference/
misleading_evals_table1.csv`` in this project's workspace): the sample level's test accuracy and
its TPR with the defense's canaries and adaptive attack, keyed by the built-in defense that runs it.
"""

from __future__ import annotations

from leaderboard.plots import Reference

#: the board setting (dataset/preset) the paper's figures are for
PAPER_SETTING = "cifar10/paper"
SOURCE = "paper (Aerni et al. 2024, Table 1)"

#: built-in defense -> (the paper's name, sample-level test accuracy, sample-level TPR@0.1% FPR)
TABLE1 = {
    "hamp": ("HAMP", 0.8800, 0.285),
    "relaxloss": ("RelaxLoss", 0.8860, 0.741),
    "selena": ("SELENA", 0.9288, 0.527),
    "ssl-simclr": ("SSL (SimCLR)", 0.8811, 0.406),
    "ssl-moco": ("SSL (MoCo)", 0.8841, 0.650),
    "dfkd": ("DFKD", 0.9184, 0.722),
    "dpsgd-medium": ("DP-SGD (medium utility)", 0.8829, 0.027),
    "dpsgd-high": ("DP-SGD (high utility)", 0.9112, 0.095),
    "dpsgd-veryhigh": ("DP-SGD (very high utility)", 0.9179, 0.632),
    "undefended": ("Undefended", 0.9410, 1.000),
}


def at_paper_setting(setting: str) -> bool:
    """Whether a board's setting (``dataset/preset`` or ``dataset/preset: S models, C audit samples``,
    leaderboard.build.setting) is the paper's dataset and preset."""
    return setting.split(":")[0] == PAPER_SETTING


def paper_reference(setting: str) -> Reference | None:
    """The paper's figures for a board of ``setting`` (every defense of Table 1, the DP-SGD ones also
    joined as the paper's frontier); None for any other setting: they are comparable only there."""
    if not at_paper_setting(setting):
        return None
    points = [(name, acc, tpr) for name, acc, tpr in TABLE1.values()]
    frontier = [(acc, tpr) for key, (_, acc, tpr) in TABLE1.items() if key.startswith("dpsgd")]
    return Reference(SOURCE, points, frontier)
