"""``harness leaderboard``: the static leaderboard site (leaderboard/site.py) and its submissions.

    leaderboard build RUNS... [--out site]        add the runs' results.json files to the site and rebuild it
    leaderboard add ENTRY.tar.gz [--site site]    verify a submitted bundle (harness submit) and add it
                                                  (--trust-plugin: a file-plugin defense, its source read)
    leaderboard verify ENTRY_ID --rerun RUN_DIR   mark an entry verified by a re-run with an unseen seed

User mistakes print one ``error:`` line and exit with code 2.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from harness.cli.common import console, err_console, fail, guard

leaderboard_app = typer.Typer(add_completion=False, no_args_is_help=True,
                              help="The static leaderboard site: build it, add verified submissions.")


def _site_folder(path: Path, flag: str) -> None:
    if path.exists() and not path.is_dir():
        fail(f"{flag} {path} is a file; it must be the site folder")


def _skipped(skipped: list[tuple[Path, str]]) -> None:
    for path, reason in skipped:
        err_console.print(f"[yellow]skipped:[/] {escape(str(path))}: {escape(reason)}", highlight=False, soft_wrap=True)


@leaderboard_app.command()
def build(
    paths: list[Path] = typer.Argument(..., help="results.json files or folders holding run directories"),
    out: Path = typer.Option(Path("site"), help="the site folder (created; entries already in it are kept)"),
) -> None:
    """Add the runs' results to the static site and rebuild its pages (index, one page per entry)."""
    from leaderboard.site import build_site

    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        fail(f"not found: {', '.join(missing)}")
    _site_folder(out, "--out")
    skipped: list[tuple[Path, str]] = []
    with guard():  # an OS failure (a read-only site folder, a full disk): one error line
        rows = build_site(paths, out, skipped)
    _skipped(skipped)
    if not rows:
        fail("no usable results.json found under the given paths")
    console.print(f"{len(rows)} entries -> {out / 'index.html'} (one page per entry under {out / 'entries'}), "
                  f"{out / 'leaderboard.md'}", highlight=False)


@leaderboard_app.command()
def add(
    bundle: Path = typer.Argument(..., help="a bundle written by `harness submit RUN_DIR -o entry.tar.gz`"),
    site: Path = typer.Option(Path("site"), help="the site folder"),
    trust_plugin: bool = typer.Option(False, "--trust-plugin", help="allow a file-plugin defense: re-running its "
                                      "attacks imports the bundle's defense_source/*.py (read it first)"),
) -> None:
    """Verify a submitted bundle (hashes, fingerprints, and the attacks re-run on its signals) and add it."""
    from leaderboard.submit import SubmissionError, add_bundle

    _site_folder(site, "--site")
    try:
        with guard():  # an OS failure (a read-only site folder, a full disk): one error line
            eid, added = add_bundle(bundle, site, trust_plugin=trust_plugin)
    except SubmissionError as e:
        fail(f"refused: {e}")
    import json

    from leaderboard.build import check_status, unranked_reason

    meta = json.loads((site / "entries" / eid / "entry.json").read_text())
    if not added:
        console.print(f"already there: {eid} ({site / 'entries' / eid}) holds this bundle, submitted "
                      f"{meta.get('submitted')}; nothing changed", highlight=False)
        return
    results = json.loads((site / "entries" / eid / "results.json").read_text())
    why = ("its attacks re-run on the submitted outputs; trained outside the harness, so there is no training to "
           "re-run" if meta.get("trained_outside") else "unverified until `harness leaderboard verify`")
    status, _ = check_status(results)
    if status == "forced":
        why += "; its membership-consistency check failed and was forced at import (the site marks it forced)"
    if (unranked := unranked_reason(results)) is not None:
        why += f"; shown but not ranked: {unranked}"
    console.print(f"accepted: {eid} -> {site / 'entries' / eid} ({why})", highlight=False)


@leaderboard_app.command()
def verify(
    entry: str = typer.Argument(..., help="the entry's id (its folder under SITE/entries)"),
    rerun: Path = typer.Option(..., "--rerun", help="the maintainer's run of the same defense and config with a "
                               "seed the submitter never saw (`harness evaluate DEFENSE --seed SECRET`)"),
    site: Path = typer.Option(Path("site"), help="the site folder"),
) -> None:
    """Mark an entry verified when a re-run with an unseen seed agrees with it (overlapping 95% CIs)."""
    from leaderboard.submit import SubmissionError, verify_entry

    try:
        with guard():  # an OS failure (a read-only site folder, a full disk): one error line
            by = verify_entry(site, entry, rerun)
    except SubmissionError as e:
        fail(f"not verified: {e}")
    console.print(f"verified: {entry}: {by}", highlight=False)
