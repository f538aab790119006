"""The settings ``harness tune`` searches: each knob's values and its more private direction.

A knob is a dotted config key with a list of values. The defense declares its privacy knobs
(``Defense.privacy_knobs``: ``defense_params.<param>``, values, direction, in priority order); the
user may replace a declared knob's values or add knobs of their own (``--grid KEY=v1,v2,...``, any
config field, e.g. ``train.lr``) and say which direction of an added knob is more private
(``--private KEY=higher|lower``). The grid is the product of the knobs' values.

Privacy order: a setting is *more private* than another if it is at least as private in every knob
that has a direction and more private in one (a partial order); to pick one setting among several
that are each best in some knob, the knobs' priority decides (lexicographic: the first knob, then
the next).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from harness.core.errors import ConfigError

#: the directions a knob may have
DIRECTIONS = ("higher", "lower")


@dataclass(frozen=True)
class Knob:
    """One searched config key: its ``values`` and which direction is more private (None: none, the
    knob is a recipe choice, searched only for the most accurate setting)."""

    key: str
    values: tuple[Any, ...]
    more_private: str | None = None

    def rank(self, value: Any) -> float:
        """A key growing with privacy (0 for a knob without a direction)."""
        if self.more_private is None:
            return 0.0
        return float(value) if self.more_private == "higher" else -float(value)


def declared_knobs(defense_cls: type) -> list[Knob]:
    """The defense's ``privacy_knobs`` as config keys (``defense_params.<param>``)."""
    return [Knob(f"defense_params.{k.param}", tuple(k.values), k.more_private)
            for k in getattr(defense_cls, "privacy_knobs", ())]


def _canonical(key: str, declared: list[Knob]) -> str:
    """A declared knob may be named by its parameter alone (``noise_multiplier``)."""
    for k in declared:
        if key == k.key or key == k.key.removeprefix("defense_params."):
            return k.key
    return key


def resolve_knobs(defense_name: str, defense_cls: type, grid: dict[str, list[Any]], private: dict[str, str],
                  need_direction: bool) -> list[Knob]:
    """The knobs to search: the declared ones, with ``grid``'s values where it names them, then the
    ``grid``'s other keys in the order given, with ``private``'s directions. ``need_direction``: every
    knob must have one (a target accuracy asks for the most private setting). ConfigError (one line)
    for a grid with no knob, an empty or repeated value list, a direction that is neither higher nor
    lower or names no knob, or a knob without a direction where one is needed."""
    declared = declared_knobs(defense_cls)
    grid = {_canonical(k, declared): list(v) for k, v in grid.items()}
    private = {_canonical(k, declared): v for k, v in private.items()}
    for key, values in grid.items():
        if not values:
            raise ConfigError(f"--grid {key}: give at least one value (--grid {key}=V1,V2,...)")
        if len({repr(v) for v in values}) != len(values):
            raise ConfigError(f"--grid {key}: the values repeat ({', '.join(map(str, values))})")
    for key, d in private.items():
        if d not in DIRECTIONS:
            raise ConfigError(f"--private {key}={d}: say higher or lower (which direction is more private)")
    knobs = [Knob(k.key, tuple(grid.get(k.key, k.values)), private.get(k.key, k.more_private)) for k in declared]
    known = {k.key for k in knobs}
    knobs += [Knob(key, tuple(values), private.get(key)) for key, values in grid.items() if key not in known]
    stray = sorted(set(private) - {k.key for k in knobs})
    if stray:
        raise ConfigError(f"--private {stray[0]}: no knob of that name is searched (add it with --grid {stray[0]}=...)")
    if not knobs:
        raise ConfigError(f"{defense_name} declares no privacy knob: give the settings to search with --grid "
                          "KEY=V1,V2,... (e.g. --grid train.lr=0.001,0.005)")
    if need_direction:
        lacking = [k.key for k in knobs if k.more_private is None]
        if lacking:
            raise ConfigError(f"--min-accuracy picks the most private setting, but {lacking[0]} has no more private "
                              f"direction: say it with --private {lacking[0]}=higher|lower, or leave --min-accuracy out "
                              "to pick the most accurate setting")
    for k in knobs:
        if k.more_private is not None and not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                  for v in k.values):
            raise ConfigError(f"--grid {k.key}: a knob with a more private direction takes numbers, got "
                              f"{', '.join(map(repr, k.values))}")
    return knobs


def grid_points(knobs: list[Knob]) -> list[dict[str, Any]]:
    """Every setting of the grid (the product of the knobs' values), as {key: value}."""
    return [dict(zip((k.key for k in knobs), combo)) for combo in itertools.product(*(k.values for k in knobs))]


def privacy_key(point: dict[str, Any], knobs: list[Knob]) -> tuple[float, ...]:
    """The lexicographic privacy key of a setting (knob priority first)."""
    return tuple(k.rank(point[k.key]) for k in knobs)


def more_private(a: dict[str, Any], b: dict[str, Any], knobs: list[Knob]) -> bool:
    """Whether ``a`` is more private than ``b`` in the partial order: at least as private in every
    knob, more in one."""
    ra, rb = privacy_key(a, knobs), privacy_key(b, knobs)
    return all(x >= y for x, y in zip(ra, rb)) and ra != rb
