"""The three kinds of plugin by name, for the layers above them: ``resolve("defenses", "hamp")``.

Each plugin package declares its own :class:`~harness.core.registry.PluginKind` (its built-ins
and base class); this module only gathers them, so that the core below knows no plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attacks
import canaries
import defenses
from harness.core.config import absolute_path
from harness.core.errors import ConfigError
from harness.core.registry import PluginKind, is_file_reference

if TYPE_CHECKING:
    from defenses.base import Defense
    from harness.core.config import ExperimentConfig

KINDS: dict[str, PluginKind] = {"defenses": defenses.KIND, "attacks": attacks.KIND, "canaries": canaries.KIND}


def kind(name: str) -> PluginKind:
    if name not in KINDS:
        raise ValueError(f"unknown plugin kind {name!r}")
    return KINDS[name]


def resolve(kind_name: str, ref: str) -> type:
    """The plugin class of ``kind_name`` (defenses, attacks, canaries) for a name, an entry point or
    ``path/to/file.py:ClassName``; PluginError (one line) otherwise."""
    return kind(kind_name).resolve(ref)


def portable_reference(ref: str) -> str:
    """``ref`` as a run stores it (config.json's ``defense``): a file plugin's ``path/to/file.py:ClassName``
    with its path made absolute against the current folder (:func:`harness.core.config.absolute_path`:
    ``~`` expanded, ``..`` removed), so that ``harness attack``, ``harness report`` and a resume find
    the file from any folder; a built-in's or an entry point's name as it is."""
    if not is_file_reference(ref):
        return ref
    path, _, name = ref.rpartition(":")
    return f"{absolute_path(path)}:{name}"


def available(kind_name: str) -> list[str]:
    """All names of a kind (built-ins and entry points)."""
    return kind(kind_name).available()


def make_defense(cfg: ExperimentConfig) -> Defense:
    """The run's defense built with its ``defense_params`` (a bad one is a ConfigError). Building a
    built-in defense imports no torch: the attack phase reads its declarations only."""
    cls = resolve("defenses", cfg.defense)
    try:
        return cls(**cfg.defense_params)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"defense_params: {e}") from None
