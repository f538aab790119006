"""Modules imported on first use.

``torch = LazyModule("torch")`` at the top of a module that uses torch only inside its functions
keeps that module importable without torch: naming a defense (the attack phase reads a defense's
declared attacks and recipe fields, never its networks) then costs neither torch's import time nor
its resident memory (about 0.5 GB). The first attribute access imports the real module; later ones
read it from ``sys.modules``. Nothing is put into ``sys.modules`` before that, so
``"torch" in sys.modules`` still says whether torch was imported.
"""

from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    """A stand-in for the module ``name`` that imports it on its first attribute access."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"
