"""Which attacks a run runs, checked and built: ``attack.names``, then the defense's adaptive and
ablation attacks (:func:`attack_names`); the defense's declarations checked before training
(:func:`check_declared_attacks`); each attack built with its ``attack.params`` (:func:`load_attacks`),
after its ``name`` is checked to be its own (:func:`check_attack_names`: results are labelled by
``name``, so a plugin may not take a built-in's or another of the run's attacks' name). A built-in
is told by its class, never by the name a plugin chooses (:func:`is_builtin_attack`).

The runner reads this to decide which signals each model saves; the attack phase to score them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.core.config import ExperimentConfig
from harness.core.errors import ConfigError
from harness.core.overrides import declared_attacks
from harness.plugins import kind, resolve

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


def is_builtin_attack(attack: Attack | type[Attack]) -> bool:
    """Whether ``attack`` (an attack instance or class) is a built-in: its class *is* the class the
    harness registers under its ``name`` (``attacks.KIND``, e.g. ``attacks.lira:LiRA`` for "lira").
    A plugin (``path/to/file.py:ClassName``, an entry point), a subclass or a copy of a built-in is
    not, whatever ``name`` it declares: tell built-ins apart by this, never by the name alone."""
    cls = attack if isinstance(attack, type) else type(attack)
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or name not in kind("attacks").builtins:
        return False
    return resolve("attacks", name) is cls


def check_attack_names(refs: list[str], classes: list[type[Attack]]) -> None:
    """Refuse (ConfigError, one line; before training, as :func:`load_attacks` runs it) an attack
    ``classes[i]`` (resolved from the reference ``refs[i]``) that declares no ``name``; one that is
    not a built-in (:func:`is_builtin_attack`) whose ``name`` is a built-in attack's name or the
    reference of another of the run's attacks (``attack.names``, the defense's adaptive and
    ablation attacks); and two of the run's attacks that share a ``name``. An attack's results are
    labelled by its ``name``: a plugin named "lira" would be read as LiRA."""
    builtins = {normalized_name(b) for b in kind("attacks").builtins}
    fix = "give its class another name (name = \"...\")"
    seen: dict[str, str] = {}
    for ref, cls in zip(refs, classes):
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"attack {ref!r} declares no name: its results are labelled by it; {fix}")
        key = normalized_name(name)
        if not is_builtin_attack(cls):
            if key in builtins:
                raise ConfigError(f"attack {ref!r} is named {name!r}, a built-in attack's name (compared without case "
                                  f"and spaces): an attack's results are labelled by its name, so a plugin may not "
                                  f"take a built-in's or another of the run's attacks' name; {fix}")
            other = next((r for r in refs if normalized_name(r) == key and r != ref), None)
            if other is not None:
                raise ConfigError(f"attack {ref!r} is named {name!r}, the name of the run's attack {other!r} "
                                  f"(attack.names or the defense's declared attacks): results are labelled by name; "
                                  f"{fix}")
        if key in seen:
            raise ConfigError(f"attacks {seen[key]!r} and {ref!r} are both named {name!r} (compared without case and "
                              f"spaces): two attacks of one run may not share a name (results are labelled by it); "
                              f"give one class another name (name = \"...\")")
        seen[key] = ref


def normalized_name(name: str) -> str:
    """An attack's name as names are compared: case folded, spaces, underscores and hyphens dropped
    ("LiRA", "lira ", "L_i-RA" are all "lira")."""
    return "".join(ch for ch in name.casefold() if ch not in " \t_-")


def load_attacks(names: list[str], params: dict[str, dict[str, Any]] | None = None) -> list[Attack]:
    """Instantiate the attacks with their ``attack.params``; a parameter for an attack that is not
    run, an unknown parameter, a bad value or a plugin that takes a built-in's or another of the
    run's attacks' ``name`` (:func:`check_attack_names`) is a ConfigError."""
    import inspect

    params = params or {}
    stray = sorted(set(params) - set(names))
    if stray:
        raise ConfigError(f"attack.params.{stray[0]}: this run does not run {stray[0]!r} (its attacks: "
                          f"{', '.join(names)}); add it with --set attack.names=[...]")
    classes = [resolve("attacks", n) for n in names]
    check_attack_names(names, classes)
    out = []
    for n, cls in zip(names, classes):
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
