"""The ``harness`` command line.

    harness evaluate DEFENSE [--preset quick|cifar10|paper|FILE.yaml] [overrides]   train + attack + report
    harness attack RUN_DIR                                                            re-run attacks, no training
    harness report RUN_DIR                                                            re-print / re-export
    harness list                                                                      defenses, canaries, attacks

User mistakes (bad config, missing data, unknown plugin, foreign run directory) print one
``error:`` line and exit with code 2; Ctrl-C keeps every finished model and exits with 130.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from harness.core.config import ConfigError, build_config, parse_set_options
from harness.core.install_check import check_torch_builds

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Evaluate membership-inference defenses honestly.")
console = Console()
err_console = Console(stderr=True)


def _fail(msg: str, code: int = 2) -> None:
    err_console.print(f"[bold red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _refuse_set_keys(overrides: dict[str, Any]) -> None:
    """``--set`` keys that have their own argument are refused, so nothing is set twice."""
    for key, use in (("defense", "the DEFENSE argument"), ("preset", "--preset")):
        if key in overrides:
            raise ConfigError(f"--set {key}=... is not a config override; use {use}")


def _overrides(**flags: Any) -> dict[str, Any]:
    mapping = {
        "models": "audit.models",
        "audit_size": "audit.size",
        "canary": "audit.canary",
        "epochs": "train.epochs",
        "seed": "seed",
        "device": "run.device",
        "workers": "run.workers",
        "executor": "run.executor",
        "out": "run.out",
        "level": "run.level",
        "data_dir": "data.path",
    }
    return {mapping[k]: v for k, v in flags.items() if v is not None}


class _Every:
    """Call ``fn`` every ``seconds`` in a daemon thread while the ``with`` block runs."""

    def __init__(self, seconds: float, fn: Any) -> None:
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(seconds, fn), daemon=True)

    def _loop(self, seconds: float, fn: Any) -> None:
        while not self._stop.wait(seconds):
            try:
                fn()
            except Exception:  # a progress display must never kill the run
                pass

    def __enter__(self) -> "_Every":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def _attack_and_report(run_path: Path, details: bool = False, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The attack phase on a run's saved signals: results, CSVs, ROC files and config.json are
    replaced as one change at the end (harness.audit.report.write_outputs). Call with the run's lock held."""
    from harness.audit.attack_phase import evaluate_run
    from harness.audit.report import print_report, write_outputs
    from harness.run.runstore import RunDir

    with console.status("running attacks on saved signals..."):
        results, curves = evaluate_run(RunDir(run_path), attack_overrides=overrides)
    write_outputs(run_path, results, curves)
    print_report(results, console, details=details)
    console.print(f"Results: {run_path / 'results.json'}")
    return results


def _plugin_failure(e: Any, debug: bool) -> None:
    """Print a defense's failure: one error line, its own frames (or the full traceback), exit 2."""
    err_console.print(f"[bold red]error:[/] {escape(e.message)}", highlight=False, soft_wrap=True)
    if debug and e.full:
        err_console.print(e.full.rstrip("\n"), highlight=False, markup=False)
    else:
        if e.frames:
            err_console.print("the defense's own frames (innermost last):", highlight=False)
            err_console.print(e.frames, highlight=False, markup=False)
        if e.full:
            err_console.print("(--debug prints the full traceback)", highlight=False, style="dim")
    raise typer.Exit(2)


@contextmanager
def _guard(debug: bool = False, interrupted: str | None = None) -> Iterator[None]:
    """Turn the user's and the environment's failures into one ``error:`` line and exit 2: config
    mistakes (ConfigError, incl. a locked or damaged run directory), a defense's failure (its own
    frames), OS failures (a read-only folder, a full disk: harness.core.errors). Ctrl-C prints
    ``interrupted`` and exits 130 (without it, the interrupt propagates)."""
    from harness.core.errors import os_error_message
    from harness.run.plugin_errors import PluginError

    try:
        yield
    except ConfigError as e:
        _fail(str(e))
    except PluginError as e:
        _plugin_failure(e, debug)
    except OSError as e:
        _fail(os_error_message(e))
    except KeyboardInterrupt:
        if interrupted is None:
            raise
        err_console.print(f"[yellow]interrupted:[/] {interrupted}", highlight=False)
        raise typer.Exit(130)


def _run_lock(path: Path, wait: bool, shared: bool = False) -> Any:
    """The run directory's lock (harness.run.runlock), saying so while it waits and when it takes over
    the lock of a process that died holding it."""
    from harness.run.runlock import RunLock

    def waiting(holder: Any) -> None:
        who = holder.describe() if holder is not None else "another process"
        console.print(f"waiting for {who} to finish with {path} (--wait)...", highlight=False)

    class _Lock:
        def __enter__(self) -> Any:
            self.lock = RunLock(path, shared=shared, wait=wait, on_wait=waiting).acquire()
            if self.lock.took_over is not None:
                console.print(f"[yellow]note:[/] took over the lock of {self.lock.took_over.describe()}, which ended "
                              "without releasing it", highlight=False)
            return self.lock

        def __exit__(self, *exc: Any) -> None:
            self.lock.release()

    return _Lock()


def _existing_run(run_dir: Path) -> Any:
    """A run directory that must already exist (attack, report, submit): refused before any lock
    (which would create the folder)."""
    from harness.run.runstore import RunDir

    run = RunDir(run_dir)
    run.require()
    return run


_RESUME_FLAGS = {"run.workers", "run.device", "run.save_models", "run.executor", "run.group_size"}


def _resume_config(run_dir: Path, overrides: dict[str, Any]) -> Any:
    """``harness evaluate --run-dir RUN`` without DEFENSE: the run's saved config, with only the
    settings that never change the models (workers, device, --save-models) overridable."""
    from harness.core.config import apply_overrides, validate_config
    from harness.run.runstore import RunDir

    changing = sorted(k for k in overrides if k not in _RESUME_FLAGS and not k.startswith(("run.slurm.", "run.ray.")))
    if changing:
        raise ConfigError(f"`harness evaluate --run-dir {run_dir}` without DEFENSE resumes the run as it was saved; "
                          f"{', '.join(changing)} would change it: give DEFENSE and the run's options to change it "
                          "(a run with other settings goes in another directory)")
    cfg = RunDir(run_dir).load_config()
    if not overrides:
        return cfg
    return validate_config(apply_overrides(cfg.model_dump(mode="json"), overrides))


WAIT_HELP = "if another harness process is using the run directory, wait for it instead of stopping"


@app.command()
def evaluate(
    defense: Optional[str] = typer.Argument(
        None, help="defense name (see `harness list`) or path/to/file.py:ClassName; leave out with --run-dir to "
                   "resume that run as saved (a damaged model file is moved aside and retrained)"),
    preset: Optional[str] = typer.Option(None, help="quick (default) | cifar10 | paper, or a YAML file"),
    data_dir: Optional[str] = typer.Option(None, "--data-dir", help="dataset folder (cifar10) or .npz file (npz)"),
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
    from harness.run.runner import open_run, plan_run

    with _guard(debug, interrupted="every finished model is saved and the run's results are as before; run the "
                                   "same command again to resume."):
        check_torch_builds()
        overrides = parse_set_options(set_)
        _refuse_set_keys(overrides)
        if canary is not None and not all(c.strip() for c in canary.split(",")):
            raise ConfigError(f"--canary needs canary names (comma-separated), got {canary!r}")
        if run_dir is not None and out is not None:
            raise ConfigError("--out is the parent folder of new run directories; --run-dir names the directory "
                              "itself: give one of them")
        if (inner is not None or rate is not None) and defense != "subsample":
            raise ConfigError("--inner and --rate apply to the subsample defense only "
                              "(harness evaluate subsample --inner DEFENSE --rate P1)")
        canaries = [c.strip() for c in canary.split(",")] if canary else None
        overrides.update(
            _overrides(models=models, audit_size=audit_size,
                       canary=canaries if canaries is None or len(canaries) > 1 else canaries[0], epochs=epochs, seed=seed, device=device,
                       workers=workers, executor=executor, out=out, level=level, data_dir=data_dir)
        )
        if inner is not None:
            overrides["defense_params.inner"] = inner
        if rate is not None:
            overrides["defense_params.rate"] = rate
        if save_models:
            overrides["run.save_models"] = True
        if overrides.get("run.executor", "local") == "local" and overrides.get("run.workers") != 1 and \
                (os.cpu_count() or 1) > 1:  # a local pool is likely: its workers' server imports torch meanwhile
            from harness.run.executors import start_worker_server

            start_worker_server()
        if defense is None:
            if run_dir is None:
                raise ConfigError("name a DEFENSE (see `harness list`), or give --run-dir RUN to resume that run")
            if preset is not None:
                raise ConfigError(f"--preset {preset}: without DEFENSE, --run-dir resumes the run with its own preset")
            cfg = _resume_config(run_dir, overrides)
        else:
            overrides["defense"] = defense
            cfg = build_config(preset or "quick", overrides)
        from harness.run.executors import check_engine

        check_engine(cfg.run.executor, cfg.run)  # installed and answering, before anything is written
        t0 = time.perf_counter()
        with console.status("loading data and building the audit design..."):
            plan = plan_run(cfg, run_dir)  # every check; nothing written yet
        with _run_lock(plan.path, wait):
            with console.status("loading data and building the audit design..."):
                prep = open_run(plan)
            t_prep = time.perf_counter() - t0
            _train_and_attack(prep, cfg, t_prep, details)


def _train_and_attack(prep: Any, cfg: Any, t_prep: float, details: bool) -> None:
    """Train the run's pending models, record the timings, then run the attack phase (the run's
    lock held by the caller)."""
    from harness.run.executors import make_executor
    from harness.run.runner import heal_signals, pending_jobs, resolve_device, train_all

    run = prep.run
    console.print(f"Run directory: [bold]{run.path}[/] (fingerprint {prep.fingerprint[:12]})")
    for note in [*run.healed, *heal_signals(prep)]:
        console.print(f"[yellow]repaired:[/] {note}", highlight=False)
    if prep.defense.reuses_undefended:
        sources = run.load_manifest().get("undefended_runs", {})
        for lv in prep.levels:
            src = sources.get(lv)
            console.print(f"Undefended models for {lv}: " + (
                f"{src['saved_models']} of {cfg.audit.models} reused from {src['run']}" if src else
                "trained here (no matching undefended run with --save-models found)"), highlight=False)
    executor = make_executor(cfg.run.executor, cfg.run.workers, resolve_device(cfg.run.device), cfg.run, run.path)
    jobs = pending_jobs(prep)
    total = cfg.audit.models * len(prep.levels)
    if len(jobs) < total:
        console.print(f"Resuming: {total - len(jobs)} of {total} models already trained.")
        if cfg.run.save_models:
            unsaved = total - len(jobs) - sum(len(run.saved_models(lv, cfg.audit.models)) for lv in prep.levels)
            if unsaved > 0:
                console.print(f"[yellow]note:[/] {unsaved} finished models were trained without --save-models "
                              "and stay unsaved (delete the run directory to retrain them with it).")
    t1 = time.perf_counter()
    if jobs:
        from harness.run.runner import group_size, make_defense

        defense_obj = make_defense(cfg)
        g = group_size(cfg, defense_obj)
        stacked = " (stacked: one batched loop per group)" if defense_obj.can_group(cfg.train) else ""
        grouping = f" in groups of {g}{stacked}" if g > 1 else ""
        console.print(f"Training {len(jobs)} models{grouping} with {executor.description}.")
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TimeRemainingColumn(), console=console,
        ) as progress:
            tasks = {
                lv: progress.add_task(f"train {lv}",
                                      total=cfg.audit.models,
                                      completed=cfg.audit.models - sum(j.level == lv for j in jobs))
                for lv in prep.levels
            }
            done = {lv: cfg.audit.models - sum(j.level == lv for j in jobs) for lv in prep.levels}

            def on_done(job: Any, meta: Any) -> None:
                done[job.level] += 1

            def refresh() -> None:  # finished models + the fraction reported by running ones
                for lv in prep.levels:
                    progress.update(tasks[lv], completed=done[lv] + sum(run.read_progress(lv).values()))

            with _Every(1.0, refresh):
                train_all(prep, executor, on_done=on_done)
            refresh()
    if jobs:  # accumulate over resumed invocations
        manifest = run.load_manifest()
        tm = manifest.get("timings", {})
        manifest["timings"] = {
            "prepare_seconds": tm.get("prepare_seconds", 0.0) + t_prep,
            "train_wall_seconds": tm.get("train_wall_seconds", 0.0) + time.perf_counter() - t1,
            "invocations": tm.get("invocations", 0) + 1,
            "executor": executor.description,
        }
        run.save_manifest(manifest)
    _attack_and_report(run.path, details)


@app.command()
def attack(
    run_dir: Path = typer.Argument(..., help="a run directory made by `harness evaluate`"),
    details: bool = typer.Option(False, help="list every attack variant"),
    set_: list[str] = typer.Option([], "--set", help="change the run's saved attack settings: --set attack.names=\\[lira] "
                                   "(saved in RUN_DIR/config.json with the new results when the attacks finish)"),
    wait: bool = typer.Option(False, "--wait", help=WAIT_HELP),
) -> None:
    """Re-run the attacks on a run's saved signals (no retraining) and rewrite its reports."""
    with _guard(interrupted="nothing was changed: results.json and the run's saved attack settings (config.json) "
                            "are as before"):
        overrides = parse_set_options(set_)
        run = _existing_run(run_dir)
        with _run_lock(run_dir, wait):
            if run.recover():
                console.print("[yellow]repaired:[/] finished writing the results of an interrupted attack phase",
                              highlight=False)
            if overrides:
                listed = ", ".join(f"{k}={v}" for k, v in overrides.items())
                console.print(f"Changing the run's saved attack settings: {listed}; they are saved in "
                              f"{run_dir / 'config.json'} together with the new results when the attacks finish "
                              "(an interrupted run changes neither).", highlight=False)
            _attack_and_report(run_dir, details, overrides)
            if overrides:
                console.print(f"Saved the new attack settings in {run_dir / 'config.json'}.", highlight=False)


@app.command()
def report(
    run_dir: Path = typer.Argument(..., help="a run directory with results.json"),
    details: bool = typer.Option(False, help="list every attack variant"),
    html: bool = typer.Option(False, "--html", help="also write RUN_DIR/report.html: the run's leaderboard page "
                              "(ROC figures, attack table, config, provenance), self-contained"),
    wait: bool = typer.Option(False, "--wait", help=WAIT_HELP),
) -> None:
    """Re-print the tables of a finished run and re-export table.csv / attacks.csv."""
    from harness.audit.report import csv_files, load_results, print_report
    from harness.run.runstore import RunDir, commit_files

    path = run_dir / "results.json"
    with _guard():
        if not path.is_file():
            _fail(f"{path} does not exist; run `harness attack {run_dir}` on a finished run first")
        with _run_lock(run_dir, wait):
            RunDir(run_dir).recover()
            try:
                results = load_results(run_dir)
                if not isinstance(results, dict) or "population" not in results and "sample" not in results:
                    raise ValueError("not a results file of this harness")
            except (OSError, UnicodeDecodeError, ValueError) as e:
                _fail(f"{path} is damaged ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                      f"`harness attack {run_dir}` rewrites it from the saved signals")
            files = csv_files(results)
            print_report(results, console, details=details)
            if html:
                from leaderboard.site import entry_html

                try:
                    page = entry_html(results, {"source": "run"}, results_href="results.json", index_href=None)
                except (KeyError, TypeError, IndexError, StopIteration) as e:
                    _fail(f"{path} lacks what the page needs ({type(e).__name__}: {e}); `harness attack {run_dir}` "
                          "rewrites it")
                files["report.html"] = page.encode()
            commit_files(run_dir, files)
            if html:
                console.print(f"page: {run_dir / 'report.html'}", highlight=False)


@app.command()
def submit(
    run_dir: Path = typer.Argument(..., help="a finished run directory"),
    out: Path = typer.Option(Path("entry.tar.gz"), "-o", "--out", help="the bundle to write"),
    wait: bool = typer.Option(False, "--wait", help=WAIT_HELP),
) -> None:
    """Bundle a finished run for the leaderboard: results, design, signals and their hashes."""
    from leaderboard.submit import SubmissionError, make_bundle

    with _guard():
        if out.is_dir():
            raise ConfigError(f"-o {out} is a folder; name the bundle file to write (e.g. {out / 'entry.tar.gz'})")
        run = _existing_run(run_dir)
        with _run_lock(run_dir, wait, shared=True):  # no writer may change the run while it is read
            run.recover()
            try:
                hashes = make_bundle(run_dir, out)
            except SubmissionError as e:
                _fail(str(e))
    console.print(f"{out}: {len(hashes)} files with their SHA-256; add it with "
                  f"`harness leaderboard add {out} --site SITE`", highlight=False)


@app.command("list")
def list_plugins() -> None:
    """Show every defense, canary and attack with a one-line description."""
    from rich.table import Table

    from harness.core.config import preset_names
    from harness.core.registry import available, resolve

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
                    desc += f" [dim](canary: {canaries}; attacks: {', '.join(cls.adaptive_attacks)})[/]"
            except ConfigError as e:
                desc = f"[red]failed to load: {e}[/]"
            table.add_row(kind[:-1] if kind != "canaries" else "canary", name, desc)
    console.print(table)
    console.print(f"Presets: {', '.join(preset_names())}")


ONE_RUN_KEYS = ("seed", "data", "train", "defense_params", "run.device", "run.out", "run.deterministic")


def _refuse_for_one_run(overrides: dict[str, Any]) -> None:
    """audit-one-run trains one model with its own canaries: the audit design, the attacks and the
    executor settings do not apply."""
    for key in overrides:
        if not any(key == k or key.startswith(k + ".") for k in ONE_RUN_KEYS):
            raise ConfigError(f"--set {key} does not apply to audit-one-run (one model, its own label-flip "
                              f"canaries: use --canaries); it reads {', '.join(k + '*' if '.' not in k and k != 'seed' else k for k in ONE_RUN_KEYS)}")


@app.command("audit-one-run")
def audit_one_run_cmd(
    defense: str = typer.Argument(..., help="defense name or path/to/file.py:ClassName"),
    preset: str = typer.Option("quick", help="quick | cifar10 | paper, or a YAML file"),
    data_dir: Optional[str] = typer.Option(None, "--data-dir", help="dataset folder (cifar10) or .npz file"),
    canaries: int = typer.Option(100, help="number of label-flip canaries in the one trained model"),
    tau: list[float] = typer.Option([], help="abstention thresholds in [0.5, 0.99] (default: 0.50, 0.51, ... 0.99 "
                                    "for the weighted game, 0.5, 0.6, ... 0.99 for clopper-pearson)"),
    game: str = typer.Option("weighted", help="the headline game: weighted (the paper's: all C-2 alternatives, "
                             "weighted ACGR) or clopper-pearson (one alternative, exact binomial); both are saved"),
    epochs: Optional[int] = typer.Option(None, help="training epochs"),
    seed: Optional[int] = typer.Option(None),
    device: Optional[str] = typer.Option(None),
    out: Optional[str] = typer.Option(None, help="folder for the JSON result (default: the preset's run.out)"),
    set_: list[str] = typer.Option([], "--set", help="override any config field"),
    as_json: bool = typer.Option(False, "--json", help="print the result as one JSON object"),
    debug: bool = typer.Option(False, "--debug", help="print full tracebacks of a defense's errors"),
) -> None:
    """Label-flip memorization game on ONE trained model (Malek et al. 2021, Game 3): an epsilon lower bound."""
    import json as _json

    from rich.table import Table

    from harness.audit.label_flip import GAMES, audit_one_run
    from harness.run.runstore import atomic_write_json

    with _guard(debug, interrupted="nothing was saved"):
        check_torch_builds()
        overrides = parse_set_options(set_)
        _refuse_set_keys(overrides)
        _refuse_for_one_run(overrides)
        overrides.update(_overrides(epochs=epochs, seed=seed, device=device, out=out, data_dir=data_dir))
        overrides["defense"] = defense
        cfg = build_config(preset, overrides)
        if any(not 0.5 <= t <= 0.99 for t in tau):
            raise ConfigError(f"--tau values must lie in [0.5, 0.99], got {tau}")
        if game not in GAMES:
            raise ConfigError(f"--game must be one of {', '.join(GAMES)}, got {game!r}")
        out_dir = Path(cfg.run.out)
        if out_dir.exists() and not out_dir.is_dir():
            raise ConfigError(f"--out {out_dir} is a file; it must be the folder for the JSON result")
        with console.status(f"training one {defense} model with {canaries} label-flip canaries..."):
            res = audit_one_run(cfg, canaries, tau or None, game)
        name = Path(cfg.defense.rpartition(":")[2] or cfg.defense).name
        path = out_dir / f"audit-one-run-{name}-{cfg.preset}-seed{cfg.seed}-n{canaries}.json"
        atomic_write_json(path, res)
    if as_json:
        print(_json.dumps(res))
        return
    g = res[game]
    rows = g["rows"]
    best = max(range(len(rows)), key=lambda i: rows[i]["epsilon_lo"])
    shown = [i for i, r in enumerate(rows) if i == best or len(rows) <= 10 or round(r["tau"], 2) in SHOWN_TAUS]
    rate = "ACGR" if game == "weighted" else "CGR"
    table = Table(title=f"label-flip game ({game}): {defense} ({cfg.preset}), {canaries} canaries, one model",
                  title_justify="left")
    for col in ("tau", "guesses", f"{rate} [95% CI]", "ε (point)", "ε ≥ (95%)"):
        table.add_column(col, justify="right")
    for i in shown:
        r = rows[i]
        ci = f"{r[rate.lower()]:.3f} [{r[rate.lower() + '_lo']:.3f}, {r[rate.lower() + '_hi']:.3f}]" if r["num_guesses"] else "-"
        if r.get("interval") == "exact-canaries":
            ci += " ‡"
        table.add_row(f"{r['tau']:.2f}" + (" (best)" if i == best else ""), str(r["num_guesses"]), ci,
                      f"{r['epsilon']:.2f}", f"{r['epsilon_lo']:.2f}")
    console.print(table)
    if any(rows[i].get("interval") == "exact-canaries" for i in shown):
        console.print("‡ every active canary at the same rate: the normal interval would have zero width (at a rate of 1, "
                      "ε ≥ inf); the interval is exact over the canaries instead (docs/bounds.md).", highlight=False)
    other = "clopper-pearson" if game == "weighted" else "weighted"
    console.print(f"Empirical label-ε ≥ {g['best_epsilon_lo']:.2f} at the best of {len(rows)} taus (the paper's figure: "
                  f"tau chosen after the fact); {g['best_epsilon_lo_bonferroni']:.2f} with the Bonferroni correction "
                  f"(valid). Valid: {g['validity']}.", highlight=False)
    console.print(f"The {other} game on the same model: ε ≥ {res[other]['best_epsilon_lo']:.2f} "
                  f"(corrected {res[other]['best_epsilon_lo_bonferroni']:.2f}).", highlight=False)
    claim = f" Claimed label ε: {res['label_epsilon']:.3g}." if res.get("label_epsilon") is not None else ""
    console.print(f"Test accuracy {100 * res['test_accuracy']:.1f}%.{claim} Saved: {path}", highlight=False)


SHOWN_TAUS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)


def _register_subapps() -> None:
    from harness.cli.bound import bound_app
    from harness.cli.leaderboard import leaderboard_app

    app.add_typer(bound_app, name="bound", help="Provable MI bounds from DP parameters (no training).")
    app.add_typer(leaderboard_app, name="leaderboard", help="The static leaderboard site: build, add, verify.")


_register_subapps()


def main() -> None:
    """The ``harness`` command. Once a command has finished, its output flushed and the atexit
    handlers run (the worker pool and its fork server gone, multiprocessing's temporary files
    removed), the process ends with ``os._exit``: the interpreter's own teardown of torch and the
    other modules writes nothing and took about 1 s of every run (measured on the quick preset)."""
    import atexit

    try:
        app()
        code = 0
    except SystemExit as e:  # typer ends every command with one
        if e.code is not None and not isinstance(e.code, int):
            raise
        code = e.code or 0
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
