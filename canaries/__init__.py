"""Canary generators: rewrite the audit samples into the most vulnerable samples a defense must protect.

:data:`KIND` names the built-ins (``harness list``); :func:`resolve` finds one by name, entry point
or ``path/to/file.py:ClassName`` (:class:`harness.core.registry.PluginKind`).
"""

from canaries.base import Canaries, CanaryGenerator
from harness.core.registry import PluginKind

KIND = PluginKind("canaries", "canary", {
    "none": "canaries.none:NoCanaries",
    "mislabeled": "canaries.mislabeled:Mislabeled",
    "uniform": "canaries.uniform:UniformNoise",
    "blank": "canaries.blank:Blank",
    "ood": "canaries.ood:OutOfDistribution",
    "duplicates": "canaries.duplicates:MislabeledDuplicates",
    "near-duplicates": "canaries.near_duplicates:NearDuplicates",
}, CanaryGenerator)
resolve = KIND.resolve

__all__ = ["KIND", "Canaries", "CanaryGenerator", "resolve"]
