"""Membership-inference attacks that score saved signals (no retraining).

:data:`KIND` names the built-ins (``harness list``); :func:`resolve` finds one by name, entry point
or ``path/to/file.py:ClassName`` (:class:`harness.core.registry.PluginKind`).
"""

from attacks.base import Attack, AttackInput
from harness.core.registry import PluginKind

KIND = PluginKind("attacks", "attack", {
    "lira": "attacks.lira:LiRA",
    "lira-offline": "attacks.lira:LiRAOffline",
    "lira-raw": "attacks.lira:LiRARaw",
    "lira-averaged": "attacks.lira:LiRAAveraged",
    "lira-scaled": "attacks.lira:LiRAScaled",
    "rmia": "attacks.rmia:RMIA",
    "label-only": "attacks.label_only:LabelOnly",
    "threshold": "attacks.threshold:GlobalThreshold",
    "contrastive": "attacks.contrastive:Contrastive",
    "contrastive-blackbox": "attacks.contrastive:ContrastiveBlackBox",
    "lira-sslview": "attacks.ssl_view_lira:SSLViewLiRA",
    "lira-neighbour": "attacks.lira:LiRANeighbour",
    "lira-neighbour-student": "attacks.lira:LiRANeighbourStudent",
}, Attack)
resolve = KIND.resolve

__all__ = ["KIND", "Attack", "AttackInput", "resolve"]
