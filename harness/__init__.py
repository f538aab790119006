"""privacy-harness: evaluate membership-inference defenses on their most vulnerable samples.

    from harness import evaluate, attack, load_run, compare
    r = evaluate("undefended", overrides={"audit.models": 8})
    print(r.leak("sample"), r.headline("sample"))

The API (:mod:`harness.api`) is loaded on first use, so that importing a lower layer
(``harness.core``, which the defenses, attacks and canaries build on) stays light.
"""

from __future__ import annotations

from typing import Any

from harness.core.version import MODELS_VERSION, __version__

_API = ("evaluate", "attack", "load_run", "report", "compare", "audit_one_run", "audit_dp_one_run", "configure", "plan",
        "import_outputs", "tune", "Results", "Figure", "Ratio", "Progress")

__all__ = [*_API, "__version__", "MODELS_VERSION"]


def __getattr__(name: str) -> Any:
    if name in _API:
        from harness import api

        return getattr(api, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
