"""How a kind of plugin is found by name: :class:`PluginKind`, and a user's ``file.py:NAME``.

The mechanism only; it knows no defense, attack or canary. Each plugin package declares its own
kind (``defenses.KIND``, ``attacks.KIND``, ``canaries.KIND``: its built-in names and base class),
and :mod:`harness.plugins` gathers the three for the layers above. A name resolves from three
sources, in this order:

1. a direct reference ``path/to/file.py:ClassName`` to a user's file,
2. the package's built-ins (``"name": "module:Class"`` strings, imported on first use),
3. installed Python entry points in the group ``harness.<kind>`` (a third-party package registers
   ``name = "module:Class"``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError


class PluginError(ConfigError):
    """A name or file reference that does not resolve to a usable plugin class."""


def is_file_reference(ref: str) -> bool:
    """True for ``path/to/file.py:ClassName``."""
    path, sep, _ = ref.rpartition(":")
    return bool(sep) and path.endswith(".py")


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


@dataclass(frozen=True)
class PluginKind:
    """One kind of plugin: ``kind`` (``defenses``; the entry-point group is ``harness.<kind>``),
    ``noun`` for messages (``defense``), the built-ins as ``{"name": "module:Class"}`` and the base
    class every plugin of the kind must subclass."""

    kind: str
    noun: str
    builtins: Mapping[str, str]
    base: type

    def _entry_points(self) -> dict[str, Any]:
        return {ep.name: ep for ep in entry_points(group=f"harness.{self.kind}")}

    def available(self) -> list[str]:
        """All names of the kind (built-ins and entry points)."""
        return sorted(set(self.builtins) | set(self._entry_points()))

    def resolve(self, ref: str) -> type:
        """The plugin class for a name or file reference, checked to subclass the kind's base;
        :class:`PluginError` (one line) otherwise."""
        if is_file_reference(ref):
            cls = load_file_attribute(ref)
        elif ref in self.builtins:
            cls = _load_target(self.builtins[ref])
        else:
            eps = self._entry_points()
            if ref not in eps:
                raise PluginError(f"unknown {self.noun} {ref!r}; available: {', '.join(self.available())} "
                                  "(or path/to/file.py:ClassName)")
            try:
                cls = eps[ref].load()
            except Exception as e:
                raise PluginError(f"entry point {ref!r} failed to load: {type(e).__name__}: {e}") from None
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise PluginError(f"{ref!r} is not a subclass of {self.base.__module__}.{self.base.__qualname__}")
        return cls


def source_fingerprint(ref: str) -> str:
    """For a file reference, the SHA-256 of the file (its code determines the models); else ''."""
    if not is_file_reference(ref):
        return ""
    path = Path(ref.rpartition(":")[0]).expanduser()
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
