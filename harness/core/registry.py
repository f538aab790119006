"""Find defenses, attacks and canary generators by name.

Three sources, in this order:
1. built-ins shipped in this repository (``defenses/``, ``attacks/``, ``canaries/``),
2. installed Python entry points in the groups ``harness.defenses``, ``harness.attacks`` and
   ``harness.canaries`` (a third-party package registers ``name = "module:Class"``),
3. a direct reference ``path/to/file.py:ClassName`` to a user's file.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError

BUILTINS: dict[str, dict[str, str]] = {
    "defenses": {
        "undefended": "defenses.undefended:Undefended",
        "hamp": "defenses.hamp:HAMP",
        "relaxloss": "defenses.relaxloss:RelaxLoss",
        "selena": "defenses.selena:SELENA",
        "dpsgd-medium": "defenses.dpsgd:DPSGDMedium",
        "dpsgd-high": "defenses.dpsgd:DPSGDHigh",
        "dpsgd-veryhigh": "defenses.dpsgd:DPSGDVeryHigh",
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
    },
    "attacks": {
        "lira": "attacks.lira:LiRA",
        "lira-offline": "attacks.lira:LiRAOffline",
        "lira-raw": "attacks.lira:LiRARaw",
        "rmia": "attacks.rmia:RMIA",
        "label-only": "attacks.label_only:LabelOnly",
        "threshold": "attacks.threshold:GlobalThreshold",
        "contrastive": "attacks.contrastive:Contrastive",
        "contrastive-blackbox": "attacks.contrastive:ContrastiveBlackBox",
        "lira-sslview": "attacks.ssl_view_lira:SSLViewLiRA",
        "lira-neighbour": "attacks.lira:LiRANeighbour",
    },
    "canaries": {
        "none": "canaries.none:NoCanaries",
        "mislabeled": "canaries.mislabeled:Mislabeled",
        "uniform": "canaries.uniform:UniformNoise",
        "blank": "canaries.blank:Blank",
        "ood": "canaries.ood:OutOfDistribution",
        "duplicates": "canaries.duplicates:MislabeledDuplicates",
        "near-duplicates": "canaries.near_duplicates:NearDuplicates",
    },
}

_BASES = {"defenses": ("defenses.base", "Defense"), "attacks": ("attacks.base", "Attack"),
          "canaries": ("canaries.base", "CanaryGenerator")}


class PluginError(ConfigError):
    """A name or file reference that does not resolve to a usable plugin class."""


def is_file_reference(ref: str) -> bool:
    """True for ``path/to/file.py:ClassName``."""
    path, sep, _ = ref.rpartition(":")
    return bool(sep) and path.endswith(".py")


def _load_file_class(ref: str) -> type:
    return load_file_attribute(ref)


def load_file_attribute(ref: str) -> Any:
    """The attribute ``NAME`` of the Python file in ``path/to/file.py:NAME`` (a plugin class, an
    embedder function), the file imported once per process; PluginError (one line) otherwise."""
    path_s, _, cls_name = ref.rpartition(":")
    path = Path(path_s).expanduser().resolve()
    if not path.is_file():
        raise PluginError(f"plugin file {path_s!r} does not exist")
    mod_name = "harness_plugin_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    if mod_name in sys.modules:
        module = sys.modules[mod_name]
    else:
        spec = importlib.util.spec_from_file_location(mod_name, path)
        if spec is None or spec.loader is None:
            raise PluginError(f"cannot import {path_s!r} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            del sys.modules[mod_name]
            raise PluginError(f"importing {path_s!r} failed: {type(e).__name__}: {e}") from None
    try:
        return getattr(module, cls_name)
    except AttributeError:
        raise PluginError(f"{path_s!r} defines no {cls_name!r}") from None


def _load_target(target: str) -> type:
    mod, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError) as e:
        raise PluginError(f"{target} failed to load: {type(e).__name__}: {e}") from None


def _entry_points(kind: str) -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=f"harness.{kind}")}


def available(kind: str) -> list[str]:
    """All names of a kind (built-ins and entry points)."""
    return sorted(set(BUILTINS[kind]) | set(_entry_points(kind)))


def resolve(kind: str, ref: str) -> type:
    """Return the plugin class for a name or file reference; check it subclasses the right base."""
    if kind not in BUILTINS:
        raise ValueError(f"unknown plugin kind {kind!r}")
    if is_file_reference(ref):
        cls = _load_file_class(ref)
    elif ref in BUILTINS[kind]:
        cls = _load_target(BUILTINS[kind][ref])
    else:
        eps = _entry_points(kind)
        if ref not in eps:
            singular = kind.rstrip("s").replace("canarie", "canary")
            raise PluginError(
                f"unknown {singular} {ref!r}; available: {', '.join(available(kind))} "
                "(or path/to/file.py:ClassName)"
            )
        try:
            cls = eps[ref].load()
        except Exception as e:
            raise PluginError(f"entry point {ref!r} failed to load: {type(e).__name__}: {e}") from None
    base_mod, base_name = _BASES[kind]
    base = getattr(importlib.import_module(base_mod), base_name)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise PluginError(f"{ref!r} is not a subclass of {base_mod}.{base_name}")
    return cls


def source_fingerprint(ref: str) -> str:
    """For a file reference, the SHA-256 of the file (its code determines the models); else ''."""
    if not is_file_reference(ref):
        return ""
    path = Path(ref.rpartition(":")[0]).expanduser()
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
