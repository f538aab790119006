"""``harness plan PLAN`` and ``harness import PLAN --outputs DIR``: audit models trained outside the
harness (harness.api.plan, harness.api.import_outputs; docs/external-models.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from harness.cli.app import app
from harness.cli.common import WAIT_HELP, ProgressView, console, flag_overrides, guard, table_console
from harness.cli.evaluate import preset_help
from harness.core.config import parse_set_options
from harness.core.errors import ConfigError


@app.command()
def plan(
    folder: Path = typer.Argument(..., help="the plan folder to write (must not exist, or be empty)"),
    preset: Optional[str] = typer.Option(None, help=preset_help()),
    data_dir: Optional[str] = typer.Option(None, "--data-dir", help="dataset folder (cifar10) or .npz file (npz)"),
    models: Optional[int] = typer.Option(None, help="S, models per experiment (even)"),
    audit_size: Optional[int] = typer.Option(None, "--audit-size", help="C, number of audit samples"),
    canary: Optional[str] = typer.Option(None, help="sample-level canary, or several: mislabeled,ood,uniform"),
    epochs: Optional[int] = typer.Option(None, help="the recipe's epochs (plan.json, recipe)"),
    seed: Optional[int] = typer.Option(None, help="seed of the whole experiment (design, canaries, model seeds)"),
    level: Optional[str] = typer.Option(None, help="population | sample | both"),
    set_: list[str] = typer.Option([], "--set", help="override any config field: --set audit.population_samples=200"),
) -> None:
    """Write an audit plan for models trained outside the harness: the dataset with the canaries, each
    model's training set, the query views, the recipe, the seeds and the shapes expected back."""
    with guard(interrupted="nothing was written"):
        from harness.api import plan as make_plan

        overrides = parse_set_options(set_)
        if canary is not None and not all(c.strip() for c in canary.split(",")):
            raise ConfigError(f"--canary needs canary names (comma-separated), got {canary!r}")
        canaries = [c.strip() for c in canary.split(",")] if canary else None
        overrides.update(flag_overrides(models=models, audit_size=audit_size, epochs=epochs, seed=seed, level=level,
                                        data_dir=data_dir,
                                        canary=canaries if canaries is None or len(canaries) > 1 else canaries[0]))
        with ProgressView() as view:
            p = make_plan(folder, preset, overrides, progress=view)
        m = p.meta
        console.print(f"Plan: {p.path} (fingerprint {p.fingerprint[:12]}): {m['dataset']} ({m['preset']}), "
                      f"{m['num_models']} models per experiment, {m['audit_size']} audit samples, seed {m['seed']}",
                      highlight=False, soft_wrap=True)
        for name, e in m["experiments"].items():
            q, a, k = e["logits_shape"]
            console.print(f"  {name} (canary {e['canary']}): train on {p.path / e['files']['train']}; query "
                          f"{p.path / e['files']['query']} ({q} images x {a} views) -> OUTPUTS/{name}/model_0000.npz "
                          "... "
                          f"with logits ({q}, {a}, {k}), test_logits ({', '.join(map(str, e['test_logits_shape']))}) "
                          f"and experiment {name!r}", highlight=False, soft_wrap=True)
        console.print(f"Then: harness import {p.path} --outputs OUTPUTS (docs/external-models.md; "
                      "examples/external_torch.py, examples/external_sklearn.py)", highlight=False, soft_wrap=True)


@app.command("import")
def import_(
    plan_dir: Path = typer.Argument(..., metavar="PLAN", help="the plan folder the models were trained from"),
    outputs: Path = typer.Option(..., "--outputs", help="the outputs folder: OUTPUTS/<experiment>/model_0007.npz"),
    partial: bool = typer.Option(False, "--partial", help="audit the models present when some are missing (only "
                                 "while every audit sample keeps >= 3 members and >= 3 non-members)"),
    name: Optional[str] = typer.Option(None, "--name", help="a label for the models (e.g. my-resnet), recorded "
                                       "with the run and shown on the leaderboard"),
    out: Optional[str] = typer.Option(None, help="parent folder of run directories (default runs)"),
    run_dir: Optional[Path] = typer.Option(None, "--run-dir", help="use exactly this run directory"),
    set_: list[str] = typer.Option([], "--set", help="attack settings: --set attack.bootstrap=2000"),
    force: bool = typer.Option(False, "--force", help="import although the membership-consistency check fails "
                               "(outputs that do not fit the plan's membership: swapped or shuffled?); the run is "
                               "marked forced in its report, results.json and on the leaderboard"),
    probabilities: bool = typer.Option(False, "--probabilities", help="the outputs are probabilities (rows in [0, 1] "
                                       "summing to 1): import their log (refused without this option)"),
    details: bool = typer.Option(False, help="list every attack variant"),
    wait: bool = typer.Option(False, "--wait", help=WAIT_HELP),
) -> None:
    """Audit models trained outside the harness from their outputs: check every file (and the models
    together: degenerate outputs, chance accuracy, membership consistency), build a run directory,
    run the attacks and print the report."""
    with guard(interrupted="nothing was written: the run directory appears only once complete"):
        from harness.run.external import precheck_import

        overrides = parse_set_options(set_)
        if run_dir is not None and out is not None:
            raise ConfigError("--out is the parent folder of new run directories; --run-dir names the directory "
                              "itself: give one of them")
        overrides.update(flag_overrides(out=out))
        # the checks that read no model's outputs, across every file, before the API (scipy, torch) is loaded:
        # a wrong name, shape, fingerprint or run_id anywhere is told in about a second
        precheck_import(plan_dir, outputs, partial=partial, name=name, overrides=overrides)
        from harness.api import import_outputs
        from harness.audit.report import print_report
        from harness.core.allocator import tune_for_large_arrays

        tune_for_large_arrays()  # an attack phase only: freed large arrays reused (harness/core/allocator.py)

        with ProgressView() as view:
            results = import_outputs(plan_dir, outputs, run_dir=run_dir, partial=partial, name=name,
                                     overrides=overrides, wait=wait, force=force, probabilities=probabilities,
                                     progress=view)
        print_report(results.data, table_console(), details=details)
        console.print(f"Results: {escape(str(results.path / 'results.json'))}", highlight=False, soft_wrap=True)
