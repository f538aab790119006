"""``harness tune DEFENSE --min-accuracy A``: the most private setting at a utility target (harness.api.tune)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape

from harness.cli.app import app
from harness.cli.common import WAIT_HELP, ProgressView, console, flag_overrides, guard, table_console
from harness.cli.evaluate import preset_help
from harness.core.config import parse_set_options
from harness.core.errors import ConfigError
from harness.core.overrides import _parse_value


def parse_accuracy(text: str) -> float:
    """``0.55`` or ``55%`` as a fraction; a bare number above 1 is refused (ambiguous)."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ConfigError(f"--min-accuracy takes a fraction or a percentage (0.55 or 55%), got {text!r}") from None
    if not t.endswith("%") and value > 1:
        raise ConfigError(f"--min-accuracy {text}: write a fraction (0.55) or a percentage with its sign (55%)")
    return value


def parse_grid(items: list[str]) -> dict[str, list[Any]]:
    """``--grid KEY=V1,V2,...`` options as {key: [values]} (each value parsed as --set parses one)."""
    out: dict[str, list[Any]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--grid expects KEY=V1,V2,..., got {item!r}")
        if key.strip() in out:
            raise ConfigError(f"--grid {key.strip()} is given twice")
        out[key.strip()] = [_parse_value(v) for v in values.split(",") if v.strip()]
    return out


def parse_private(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, d = item.partition("=")
        if not sep:
            raise ConfigError(f"--private expects KEY=higher|lower, got {item!r}")
        out[key.strip()] = d.strip()
    return out


@app.command()
def tune(
    defense: str = typer.Argument(..., help="defense name (see `harness list`) or path/to/file.py:ClassName"),
    min_accuracy: Optional[str] = typer.Option(None, "--min-accuracy", help="the utility target: validation accuracy "
                                               "(0.55 or 55%); the most private setting that meets it is chosen. "
                                               "Without it: the most accurate setting"),
    preset: Optional[str] = typer.Option(None, help=preset_help()),
    data_dir: Optional[str] = typer.Option(None, "--data-dir", help="dataset folder (cifar10) or .npz file (npz)"),
    grid: list[str] = typer.Option([], "--grid", help="a knob's values, KEY=V1,V2,...: replaces a declared knob's "
                                   "grid or adds a config key (e.g. train.lr=0.001,0.005)"),
    private: list[str] = typer.Option([], "--private", help="KEY=higher|lower: the more private direction of an "
                                      "added knob"),
    models_per_point: int = typer.Option(4, "--models-per-point", help="models each setting gets per round (>= 4)"),
    max_models_per_point: int = typer.Option(12, "--max-models-per-point", help="the most models a setting gets"),
    models: Optional[int] = typer.Option(None, help="S of the evaluation the chosen setting will get (the settings' "
                                         "membership design; give the S you will evaluate with to reuse the models)"),
    seed: Optional[int] = typer.Option(None, help="seed of the whole experiment"),
    workers: Optional[int] = typer.Option(None, help="parallel training jobs (0 = one per core)"),
    device: Optional[str] = typer.Option(None, help="cpu | cuda | cuda:N | mps | auto"),
    out: Optional[Path] = typer.Option(None, help="folder of tune.json and the settings' run directories (default "
                                       "runs/tune-DEFENSE-PRESET)"),
    set_: list[str] = typer.Option([], "--set", help="override any config field: --set train.epochs=20"),
    wait: bool = typer.Option(False, "--wait", help=WAIT_HELP),
    debug: bool = typer.Option(False, "--debug", help="print full tracebacks of a defense's errors"),
) -> None:
    """Train a few models at each setting of the defense's privacy knobs, read their accuracy on the validation
    split (held out of the training pool, never the test set) and pick the most private setting that meets
    --min-accuracy; writes OUT/tune.json and prints the command that evaluates the choice."""
    with guard(debug, interrupted="every finished model is saved; run the same command again to resume."):
        from harness.api import tune as run_tune

        overrides = parse_set_options(set_)
        overrides.update(flag_overrides(models=models, seed=seed, workers=workers, device=device, data_dir=data_dir))
        target = parse_accuracy(min_accuracy) if min_accuracy is not None else None
        with ProgressView() as view:
            res = run_tune(defense, preset, overrides, min_accuracy=target, grid=parse_grid(grid),
                           private=parse_private(private), models_per_point=models_per_point,
                           max_models_per_point=max_models_per_point, out=out, wait=wait, progress=view)
        print_tune(res.data, table_console())
        console.print(f"Tune: {escape(str(res.path))}", highlight=False, soft_wrap=True)


def print_tune(data: dict[str, Any], out: Any) -> None:
    """The settings' table, the choice and why, and the evaluate command."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    target = data["min_accuracy"]
    title = (f"{data['defense']} on {data['preset']}: validation accuracy on {data['validation_images']} held-out "
             "images" + (f", target {100 * target:.1f}%" if target is not None else ", the most accurate setting"))
    table = Table(title=title, box=box.SIMPLE_HEAD)
    keys = [k["key"] for k in data["knobs"]]
    for k in keys:
        table.add_column(k.removeprefix("defense_params."), justify="right")
    table.add_column("models", justify="right")
    table.add_column("validation accuracy", justify="right")
    if target is not None:
        table.add_column("P(meets)", justify="right")
    eps_shown = any((s.get("defense_info") or {}).keys() & {"epsilon", "label_epsilon"} for s in data["settings"])
    if eps_shown:
        table.add_column("ε", justify="right")
    chosen = (data.get("choice") or {}).get("params")
    for s in data["settings"]:
        acc = s.get("validation_accuracy")
        cells = [str(s["params"][k]) for k in keys] + [str(s["models"])]
        cells.append("-" if acc is None else f"{100 * acc['mean']:.1f}% ± {100 * acc['se']:.1f}")
        if target is not None:
            c = s.get("confidence_meets_target")
            cells.append("-" if c is None else f"{c:.3f}")
        if eps_shown:
            eps = (s.get("defense_info") or {}).get("epsilon", (s.get("defense_info") or {}).get("label_epsilon"))
            cells.append("-" if eps is None else f"{eps:.3g}")
        style = "bold" if s["params"] == chosen else None
        table.add_row(*[escape(c) for c in cells], style=style)
    out.print(table)
    out.print(escape(("Chosen: " if chosen is not None else "No setting chosen: ") + data["why"]), highlight=False,
              soft_wrap=True)
    if chosen is not None:
        out.print(f"Evaluate it: {escape(data['choice']['command'])}", highlight=False, soft_wrap=True)
