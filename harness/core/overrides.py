"""No silently ignored input: every override (CLI flag or ``--set`` key) takes effect or is refused.

The CLI turns its flags into dotted overrides (``--epochs 5`` is ``train.epochs=5``). Before the
configuration is validated, :func:`route_overrides` checks each one against what the run will
actually read:

- ``train.*``: a defense declares which recipe fields its ``fit`` reads (``Defense.train_fields``,
  None = all) and which of them one of its own parameters replaces (``Defense.train_aliases``:
  DP-SGD's epochs, batch size and learning rate are its parameters, so ``--epochs`` becomes
  ``defense_params.epochs``). Any other field is refused with the defense's own settings named.
  ``train.width`` is refused for the fixed-width WRN16-4, ``train.milestones`` and ``train.gamma``
  unless the schedule is ``step``.
- ``data.*``: ``path`` is read by ``cifar10`` and ``npz`` only, ``download`` by ``cifar10`` only,
  ``test_size`` by ``digits`` only, ``scale`` by ``npz`` only.
- ``audit.canary`` and ``audit.canary_params``: refused when no sample level runs; a
  ``canary_params`` key for a canary the run does not audit is refused. A *preset's*
  ``canary_params`` for a canary the run does not audit are defaults, and are dropped.
- ``attack.params``: a key for an attack the run does not run is refused.

Presets themselves are not second-guessed (a preset's base recipe may carry fields a defense
does not read); ``results.json`` records the fields each run's defense reads (``recipe_fields``).
"""

from __future__ import annotations

import copy
import re
from typing import Any

import yaml

from harness.core.errors import ConfigError


class _Loader(yaml.SafeLoader):
    """YAML 1.1's safe loader, plus YAML 1.2's floats without a dot (``1e-9``, ``5E3``), which 1.1
    reads as strings."""


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+$"),
                              list("-+0123456789"))


def _parse_value(text: str) -> Any:
    """Parse an override's value as YAML so that ``16``, ``0.5``, ``1e-9``, ``true`` and ``[1, 2]``
    get their types."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError:
        return text


def apply_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set dotted paths (``audit.models``) in a copy of ``raw``; values are kept as given."""
    out = copy.deepcopy(raw)
    for dotted, value in overrides.items():
        keys = dotted.split(".")
        node = out
        for k in keys[:-1]:
            nxt = node.setdefault(k, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"cannot set {dotted!r}: {k!r} is not a section")
            node = nxt
        node[keys[-1]] = value
    return out
def parse_set_options(items: list[str]) -> dict[str, Any]:
    """Turn ``--set key.path=value`` strings into an override mapping (values parsed as YAML)."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = _parse_value(v)
    return out


TRAIN_FIELDS = ("model", "width", "epochs", "batch_size", "lr", "momentum", "weight_decay", "schedule",
                "milestones", "gamma", "warmup_epochs", "augment")
FIXED_WIDTH_MODELS = ("wrn16-4", "wrn16-4-gn")


def _get(raw: dict[str, Any], dotted: str, default: Any = None) -> Any:
    node: Any = raw
    for k in dotted.split("."):
        if not isinstance(node, dict) or k not in node:
            return default
        node = node[k]
    return node


def _from_override(overrides: dict[str, Any], dotted: str) -> bool:
    """True when the user's overrides set ``dotted`` or one of its parents or children."""
    return any(k == dotted or k.startswith(dotted + ".") or dotted.startswith(k + ".") for k in overrides)


def recipe_routing(defense_cls: type, raw: dict[str, Any]) -> tuple[frozenset[str] | None, dict[str, str], str]:
    """(train fields the defense reads or None for all, {train field: dotted override it becomes},
    the defense's note on its recipe) for the defense class and the raw config."""
    routing = getattr(defense_cls, "recipe_routing", None)
    if routing is None:  # not a harness Defense subclass (the registry refuses those later)
        return None, {}, ""
    return routing(raw.get("defense_params") or {})


def route_overrides(raw: dict[str, Any], overrides: dict[str, Any], defense_cls: type) -> dict[str, Any]:
    """Check every override against what the run reads; return the overrides with ``train.*``
    aliases rewritten (e.g. ``train.epochs`` -> ``defense_params.epochs`` for DP-SGD).

    ``raw`` is the preset mapping after the defense's preset section, before the overrides.
    Raises :class:`ConfigError` naming what to use instead.
    """
    name = getattr(defense_cls, "name", str(raw.get("defense")))
    # the defense's own parameters as overridden (e.g. subsample's inner defense decides the routing)
    fields, aliases, note = recipe_routing(defense_cls, apply_overrides(raw, {k: v for k, v in overrides.items()
                                                                     if k.split(".")[0] == "defense_params"}))
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        if key == "train" and isinstance(value, dict):
            items = {f"train.{k}": v for k, v in value.items()}
        else:
            items = {key: value}
        for k, v in items.items():
            head, _, field = k.partition(".")
            if head == "train" and field:
                top = field.split(".")[0]
                if top in aliases:
                    out[aliases[top]] = v
                    continue
                if fields is not None and top not in fields:
                    used = sorted(set(fields) | set(aliases))
                    raise ConfigError(
                        f"{name} does not read train.{top}{': ' + note if note else ''} "
                        f"(it reads train.{', train.'.join(used) if used else ' nothing'})"
                    )
            out[k] = v
    merged = apply_overrides(raw, out)
    _check_recipe(merged, out)
    _check_data(merged, out)
    return out


def _check_recipe(merged: dict[str, Any], overrides: dict[str, Any]) -> None:
    model = _get(merged, "train.model", "mlp")
    if "train.width" in overrides and model in FIXED_WIDTH_MODELS:
        raise ConfigError(f"train.width does not apply to {model} (a fixed width, widen factor 4); it sets the "
                          "width of mlp and the channels of cnn / cnn-gn")
    schedule = _get(merged, "train.schedule", "cosine")
    for f in ("milestones", "gamma"):
        if f"train.{f}" in overrides and schedule != "step":
            raise ConfigError(f"train.{f} applies to the step schedule only; this run's schedule is {schedule!r} "
                              "(add --set train.schedule=step)")


def _check_data(merged: dict[str, Any], overrides: dict[str, Any]) -> None:
    name = _get(merged, "data.name", "digits")
    if ("data.path" in overrides or "data" in overrides and _get(overrides, "data", {}).get("path")) and name == "digits":
        raise ConfigError(
            "--data-dir / data.path is not read by the digits dataset (scikit-learn's bundled copy): use "
            "--preset cifar10 (or paper) for CIFAR-10, or --set data.name=npz for your own .npz file"
        )
    if "data.download" in overrides and name != "cifar10":
        raise ConfigError(f"data.download applies to cifar10 only (this run's dataset is {name})")
    if "data.scale" in overrides and name != "npz":
        raise ConfigError(f"data.scale applies to npz datasets only (this run's dataset is {name}, read as uint8 "
                          "pixels)")
    if "data.test_size" in overrides and name != "digits":
        raise ConfigError(f"data.test_size applies to digits only ({name} has its own test set)")


def sample_canaries_of(merged: dict[str, Any], defense_cls: type) -> list[str]:
    """The sample-level canaries a config will audit (empty when only the population level runs)."""
    if _get(merged, "run.level", "both") == "population":
        return []
    chosen = _get(merged, "audit.canary")
    if chosen is None:
        chosen = getattr(defense_cls, "default_canary", "mislabeled")
        inner = getattr(defense_cls, "inner_default_canary", None)
        if inner is not None:
            chosen = inner(merged.get("defense_params") or {})
    return [chosen] if isinstance(chosen, str) else list(chosen)


def settle_canary_params(merged: dict[str, Any], overrides: dict[str, Any], defense_cls: type) -> dict[str, Any]:
    """Refuse user ``audit.canary*`` overrides that would be ignored; drop preset-provided
    ``canary_params`` of canaries the run does not audit. Returns the (possibly pruned) mapping."""
    canaries = sample_canaries_of(merged, defense_cls)
    if not canaries and (_from_override(overrides, "audit.canary") or _from_override(overrides, "audit.canary_params")):
        raise ConfigError("audit.canary (--canary) / audit.canary_params set the sample-level canaries, but run.level "
                          "(--level) population runs none (use sample or both)")
    params = _get(merged, "audit.canary_params") or {}
    if not isinstance(params, dict):
        return merged
    keep = {}
    for canary, p in params.items():
        if canary in canaries or not isinstance(p, dict):  # a flat mapping: validation explains the keying
            keep[canary] = p
        elif _from_override(overrides, f"audit.canary_params.{canary}"):
            listed = ", ".join(canaries)
            raise ConfigError(f"audit.canary_params.{canary}: this run does not audit {canary!r} canaries "
                              f"(its sample-level canaries: {listed}; add it with --canary)")
    if keep != params:
        merged = {**merged, "audit": {**merged["audit"], "canary_params": keep}}
    return merged


def settle_attack_params(merged: dict[str, Any], overrides: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """Refuse user ``attack.params.<name>`` for an attack the run does not run; drop such params
    when a preset (or the stored config of a run) set them. ``names`` are the attacks that run."""
    params = _get(merged, "attack.params") or {}
    if not isinstance(params, dict):
        return merged
    keep = {}
    for name, p in params.items():
        if name in names:
            keep[name] = p
        elif _from_override(overrides, f"attack.params.{name}"):
            raise ConfigError(f"attack.params.{name}: this run does not run {name!r} (its attacks: "
                              f"{', '.join(names)}); add it with --set attack.names=[...]")
    if keep != params:
        merged = {**merged, "attack": {**merged["attack"], "params": keep}}
    return merged


def run_attack_names(merged: dict[str, Any], defense_cls: type) -> list[str]:
    """The attacks a config runs: ``attack.names``, then the defense's adaptive and ablation attacks."""
    names = _get(merged, "attack.names")
    if names is None:
        names = ["lira", "rmia"]
    label = str(getattr(defense_cls, "name", getattr(defense_cls, "__name__", defense_cls)))
    declared = [n for attr in ("adaptive_attacks", "ablation_attacks")
                for n in declared_attacks(getattr(defense_cls, attr, ()), attr, label)]
    return list(dict.fromkeys([*names, *declared]))


def declared_attacks(value: Any, attr: str, defense: str) -> tuple[str, ...]:
    """A defense's ``adaptive_attacks`` / ``ablation_attacks`` checked to be a tuple (or list) of
    non-empty attack names; ConfigError (one line) otherwise."""
    if isinstance(value, str) or not isinstance(value, (tuple, list)) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"defense {defense!r}: {attr} must be a tuple of attack names, e.g. (\"lira\",), got {value!r}")
    return tuple(value)
