"""Which attacks a run runs, checked and built: ``attack.names``, then the defense's adaptive and
ablation attacks (:func:`attack_names`); the defense's declarations checked before training
(:func:`check_declared_attacks`); each attack built with its ``attack.params`` (:func:`load_attacks`).

The runner reads this to decide which signals each model saves; the attack phase to score them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.core.config import ExperimentConfig
from harness.core.errors import ConfigError
from harness.core.overrides import declared_attacks
from harness.plugins import resolve

if TYPE_CHECKING:
    from attacks.base import Attack
    from defenses.base import Defense


def attack_names(cfg: ExperimentConfig, defense: Defense) -> list[str]:
    """The configured attacks, then the defense's adaptive and ablation attacks, without repeats."""
    return list(dict.fromkeys([*cfg.attack.names, *defense.adaptive_attacks, *defense.ablation_attacks]))


def check_declared_attacks(defense: Defense, name: str) -> None:
    """A defense's ``adaptive_attacks`` (its headline is taken over them) must be a non-empty tuple
    of attack names, and ``ablation_attacks`` a tuple of names none of which is also adaptive;
    refused before training (whether each can run on the defense's outputs is
    :func:`harness.run.signals.check_signals`' part)."""
    for attr in ("adaptive_attacks", "ablation_attacks"):
        declared_attacks(getattr(defense, attr), attr, name)
    if not defense.adaptive_attacks:
        raise ConfigError(f"defense {name!r} declares no adaptive attacks (adaptive_attacks = ()): its headline is "
                          "the best of the attacks adapted to it, so it needs at least one, e.g. (\"lira\",) for a "
                          "defense that serves scores, (\"label-only\", \"lira\") for one that serves labels")
    both = sorted(set(defense.adaptive_attacks) & set(defense.ablation_attacks))
    if both:
        raise ConfigError(f"defense {name!r} declares {', '.join(both)} both adaptive (a headline attack) and an "
                          "ablation (never a headline): keep it in one of adaptive_attacks and ablation_attacks")


def load_attacks(names: list[str], params: dict[str, dict[str, Any]] | None = None) -> list[Attack]:
    """Instantiate the attacks with their ``attack.params``; a parameter for an attack that is not
    run, an unknown parameter or a bad value is a ConfigError."""
    import inspect

    params = params or {}
    stray = sorted(set(params) - set(names))
    if stray:
        raise ConfigError(f"attack.params.{stray[0]}: this run does not run {stray[0]!r} (its attacks: "
                          f"{', '.join(names)}); add it with --set attack.names=[...]")
    out = []
    for n in names:
        cls = resolve("attacks", n)
        p = params.get(n) or {}
        if not isinstance(p, dict):
            raise ConfigError(f"attack.params.{n} must map parameter names to values, got {p!r}")
        try:
            out.append(cls(**p))
        except TypeError:
            known = [k for k in inspect.signature(cls.__init__).parameters if k not in ("self", "params")]
            raise ConfigError(f"attack.params.{n}: unknown parameter(s) {sorted(set(p) - set(known))}; "
                              f"known: {', '.join(known) or 'none'}") from None
        except ValueError as e:
            raise ConfigError(f"attack.params.{n}: {e}") from None
    return out
