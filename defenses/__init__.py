"""Defenses: each trains on a dataset and returns a model that answers the threat model's queries.

:data:`KIND` names the built-ins (``harness list``); :func:`resolve` finds one by name, entry point
or ``path/to/file.py:ClassName`` (:class:`harness.core.registry.PluginKind`).
"""

from defenses.base import Defense, FitContext, LabeledImages, ServedModel, TorchClassifier
from harness.core.registry import PluginKind

KIND = PluginKind("defenses", "defense", {
    "undefended": "defenses.undefended:Undefended",
    "hamp": "defenses.hamp:HAMP",
    "relaxloss": "defenses.relaxloss:RelaxLoss",
    "selena": "defenses.selena:SELENA",
    "dpsgd": "defenses.dpsgd:DPSGD",
    "dpsgd-medium": "defenses.dpsgd:DPSGDMedium",
    "dpsgd-high": "defenses.dpsgd:DPSGDHigh",
    "dpsgd-veryhigh": "defenses.dpsgd:DPSGDVeryHigh",
    "dpsgd-eps3": "defenses.dpsgd:DPSGDEpsilon3",
    "subsample": "defenses.subsample:Subsample",
    "ssl-simclr": "defenses.ssl:SimCLR",
    "ssl-moco": "defenses.ssl:MoCo",
    "dfkd": "defenses.dfkd:DFKD",
    "alibi": "defenses.labeldp:ALIBI",
    "alibi-high": "defenses.labeldp:ALIBIHigh",
    "alibi-medium": "defenses.labeldp:ALIBIMedium",
    "alibi-low": "defenses.labeldp:ALIBILow",
    "agibi": "defenses.labeldp:AGIBI",
    "agibi-high": "defenses.labeldp:AGIBIHigh",
    "agibi-medium": "defenses.labeldp:AGIBIMedium",
    "agibi-low": "defenses.labeldp:AGIBILow",
    "external": "defenses.external:External",
    "pate-fm": "defenses.pate:PATEFM",
    "pate-fm-high": "defenses.pate:PATEFMHigh",
    "pate-fm-medium": "defenses.pate:PATEFMMedium",
    "pate-fm-low": "defenses.pate:PATEFMLow",
}, Defense)
resolve = KIND.resolve

__all__ = ["KIND", "Defense", "FitContext", "LabeledImages", "ServedModel", "TorchClassifier", "resolve"]
