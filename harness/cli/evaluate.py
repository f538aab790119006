"""``harness evaluate DEFENSE [options]``: train, attack and report (harness.api.evaluate)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from harness.cli.app import app
from harness.cli.common import WAIT_HELP, ProgressView, console, flag_overrides, guard, table_console
from harness.core.config import parse_set_options, preset_names
from harness.core.errors import ConfigError


def preset_help(default: str = "quick") -> str:
    """``--preset``'s help: every shipped preset (:func:`harness.core.config.preset_names`), the default first."""
    names = sorted(preset_names(), key=lambda n: n != default)
    return " | ".join(f"{n} (default)" if n == default else n for n in names) + ", or a YAML file"


@app.command()
def evaluate(
    defense: Optional[str] = typer.Argument(
        None, help="defense name (see `harness list`) or path/to/file.py:ClassName; leave out with --run-dir to "
                   "resume that run as saved (a damaged model file is moved aside and retrained)"),
    preset: Optional[str] = typer.Option(None, help=preset_help()),
    data_dir: Optional[str] = typer.Option(None, "--data-dir", help="dataset folder (cifar10) or .npz file (npz), "
                                           "stored absolute; with --run-dir alone: where the run's dataset moved"),
    models: Optional[int] = typer.Option(None, help="S, number of models (even)"),
    audit_size: Optional[int] = typer.Option(None, "--audit-size", help="C, number of audit samples"),
    canary: Optional[str] = typer.Option(None, help="sample-level canary, or several: mislabeled,ood,uniform"),
    epochs: Optional[int] = typer.Option(None, help="training epochs"),
    seed: Optional[int] = typer.Option(None, help="seed of the whole experiment"),
    device: Optional[str] = typer.Option(None, help="cpu | cuda | cuda:N | mps | auto"),
    workers: Optional[int] = typer.Option(None, help="parallel training jobs (0 = one per core)"),
    executor: Optional[str] = typer.Option(None, help="local (default) | slurm | ray: where the models train "
                                                      "(--set run.slurm.* / run.ray.*)"),
    out: Optional[str] = typer.Option(None, help="parent folder of run directories"),
    run_dir: Optional[Path] = typer.Option(None, "--run-dir", help="use exactly this run directory"),
    level: Optional[str] = typer.Option(None, help="population | sample | both"),
    set_: list[str] = typer.Option([], "--set", help="override any config field: --set train.lr=0.05"),
    from_tune: Optional[Path] = typer.Option(None, "--from-tune", help="evaluate the setting a `harness tune` chose: "
                                             "its tune.json gives the defense, preset, overrides and folder (further "
                                             "flags apply on top)"),
    inner: Optional[str] = typer.Option(None, help="subsample only: the wrapped defense"),
    rate: Optional[float] = typer.Option(None, help="subsample only: fraction of the data each model trains on"),
    details: bool = typer.Option(False, help="list every attack variant"),
    save_models: bool = typer.Option(False, "--save-models",
                                     help="also save each served model's torch state (e.g. DFKD's teachers reuse "
                                          "undefended models)"),
    wait: bool = typer.Option(False, "--wait", help=WAIT_HELP),
    debug: bool = typer.Option(False, "--debug", help="print full tracebacks of a defense's errors"),
) -> None:
    """Train S models per level (resuming finished ones), run the attacks and print the report."""
    # the imports (torch: seconds) inside the guard: Ctrl-C while they load prints its line too
    with guard(debug, interrupted="every finished model is saved and the run's results are as before; run the "
                                  "same command again to resume."):
        from harness.api import evaluate as run_evaluation
        from harness.audit.report import print_report

        overrides = parse_set_options(set_)
        if from_tune is not None:
            from harness.api import tuned_overrides

            if run_dir is not None:
                raise ConfigError("--from-tune evaluates the tuned setting's run in the tune's folder: leave out --run-dir")
            tuned_defense, tuned_preset, tuned = tuned_overrides(from_tune)
            if defense is not None and defense != tuned_defense:
                raise ConfigError(f"--from-tune {from_tune} tuned {tuned_defense}, not {defense}: leave DEFENSE out")
            if preset is not None and preset != tuned_preset:
                raise ConfigError(f"--from-tune {from_tune} tuned on the {tuned_preset} preset, not {preset}: leave "
                                  "--preset out")
            defense, preset = tuned_defense, tuned_preset
            overrides = {**tuned, **overrides}
        if canary is not None and not all(c.strip() for c in canary.split(",")):
            raise ConfigError(f"--canary needs canary names (comma-separated), got {canary!r}")
        if run_dir is not None and out is not None:
            raise ConfigError("--out is the parent folder of new run directories; --run-dir names the directory "
                              "itself: give one of them")
        if (inner is not None or rate is not None) and defense != "subsample":
            raise ConfigError("--inner and --rate apply to the subsample defense only "
                              "(harness evaluate subsample --inner DEFENSE --rate P1)")
        canaries = [c.strip() for c in canary.split(",")] if canary else None
        overrides.update(flag_overrides(
            models=models, audit_size=audit_size, canary=canaries if canaries is None or len(canaries) > 1 else canaries[0],
            epochs=epochs, seed=seed, device=device, workers=workers, executor=executor, out=out, level=level,
            data_dir=data_dir, inner=inner, rate=rate, save_models=save_models or None))
        with ProgressView() as view:
            results = run_evaluation(defense, preset, overrides, run_dir=run_dir, wait=wait, progress=view)
        print_report(results.data, table_console(), details=details)
        console.print(f"Results: {escape(str(results.path / 'results.json'))}", highlight=False, soft_wrap=True)
