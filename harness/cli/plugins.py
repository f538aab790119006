"""``harness list``: every defense, canary, attack and preset."""

from __future__ import annotations

from harness.cli.app import app
from harness.cli.common import console
from harness.core.errors import ConfigError


@app.command("list")
def list_plugins() -> None:
    """Show every defense, canary and attack with a one-line description."""
    from rich.table import Table

    from harness.core.config import load_preset_mapping, preset_names
    from harness.plugins import available, resolve

    table = Table(title="privacy-harness plugins", title_justify="left")
    for col in ("kind", "name", "description"):
        table.add_column(col)
    for kind in ("defenses", "canaries", "attacks"):
        for name in available(kind):
            try:
                cls = resolve(kind, name)
                desc = cls.description
                if kind == "defenses":
                    dc = cls.default_canary
                    canaries = dc if isinstance(dc, str) else "max of " + ", ".join(dc)
                    knobs = ", ".join(f"{k.param} ({k.more_private} is more private)"
                                      for k in getattr(cls, "privacy_knobs", ()))
                    desc += (f" [dim](canary: {canaries}; attacks: {', '.join(cls.adaptive_attacks)}"
                             + (f"; harness tune searches {knobs}" if knobs else "") + ")[/]")
            except ConfigError as e:
                desc = f"[red]failed to load: {e}[/]"
            table.add_row(kind[:-1] if kind != "canaries" else "canary", name, desc)
    console.print(table)
    console.print(f"Presets: {', '.join(preset_names())}")
    for preset in preset_names():
        section = load_preset_mapping(preset).get("not_applicable") or {}
        if section:
            console.print(f"Not in {preset}: " + "; ".join(f"{name} ({why})" for name, why in section.items()),
                          soft_wrap=True)
