"""A run's configuration from a preset, a defense and the user's overrides: :func:`build_config`.

It sits above the plugins because the defense's class decides part of the configuration: which
recipe overrides it takes as its own parameters, its default canaries and its attacks. The core
below (:mod:`harness.core.config`: the types, presets and validation; :mod:`harness.core.overrides`)
takes that class as an argument and knows no plugin.
"""

from __future__ import annotations

from typing import Any

import defenses
from harness.core.config import ConfigError, ExperimentConfig, apply_defense_preset, load_preset_mapping, validate_config
from harness.core.overrides import (apply_overrides, route_overrides, run_attack_names, settle_attack_params,
                                    settle_canary_params)
from harness.plugins import portable_reference

__all__ = ["build_config"]


def build_config(preset: str = "quick", overrides: dict[str, Any] | None = None) -> ExperimentConfig:
    """Load a preset, fold in its section for the chosen defense, check and apply overrides, validate.

    Every override must take effect: :func:`harness.core.overrides.route_overrides` rewrites recipe
    overrides a defense takes as its own parameters and refuses the ones nothing would read.
    Paths that locate inputs and outputs (``data.path``, ``run.out``, the defense's plumbing
    parameters) are made absolute against the current folder
    (:meth:`~harness.core.config.ExperimentConfig.with_absolute_paths`: the run fingerprint is unchanged),
    and so is a file plugin's path in ``defense`` (:func:`harness.plugins.portable_reference`), so that the
    run's config.json finds the plugin from any folder.
    Raises :class:`ConfigError` on any mistake.
    """
    overrides = overrides or {}
    raw = load_preset_mapping(preset)
    defense = str(overrides.get("defense", raw.get("defense", "undefended")))
    if defense == "subsample":  # scale the wrapped defense as the preset scales it
        inner = overrides.get("defense_params.inner", (raw.get("defense_params") or {}).get("inner", "undefended"))
        raw = apply_defense_preset(raw, str(inner), ("inner_params",))
    else:
        raw = apply_defense_preset(raw, defense)
    defense_cls = defenses.resolve(defense)
    for new, old in getattr(defense_cls, "replaces_params", {}).items():
        if overrides.get(f"defense_params.{new}") is not None and f"defense_params.{old}" in overrides:
            raise ConfigError(f"defense_params.{new} replaces defense_params.{old} (it is solved from it): set one "
                              "of them, not both")
    routed = route_overrides(raw, overrides, defense_cls)
    merged = settle_canary_params(apply_overrides(raw, routed), routed, defense_cls)
    merged = settle_attack_params(merged, routed, run_attack_names(merged, defense_cls))
    cfg = validate_config(merged)
    cfg = cfg.model_copy(update={"defense": portable_reference(cfg.defense)})  # a plugin file found from any folder
    return cfg.with_absolute_paths(defense_cls.plumbing_params)


def with_absolute_paths(cfg: ExperimentConfig) -> ExperimentConfig:
    """``cfg`` (read back from a run directory) with its location fields absolute against the current
    folder, the defense's plumbing parameters included (as :func:`build_config` makes them)."""
    return cfg.with_absolute_paths(defenses.resolve(cfg.defense).plumbing_params)
