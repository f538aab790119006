"""Leaderboard rows from per-run ``results.json`` files (one entry per file, as RobustBench does).

Each row holds the defense, its setting, test accuracy and the headline TPR at the headline FPR of
both levels; rows are sorted by the sample-level figure (lower is more private). :func:`build`
writes the plain one-table page and ``leaderboard.md``; the full site (per-entry pages, plots, the
DP-SGD frontier) is :mod:`leaderboard.site`, which reads its rows from here.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from harness.audit.attack_phase import run_label_privacy, run_privacy
from harness.audit.report import trained_outside
from harness.core import jsonio
from harness.core.labels import without_bidi_controls
from harness.core.registry import is_file_reference
from harness.run.runstore import RunDir, atomic_write_bytes

COLUMNS = ("defense", "provenance", "dataset", "preset", "models", "audit", "test acc", "population TPR",
           "strongest population TPR", "sample TPR", "strongest sample TPR", "canary", "sample attack",
           "strongest population attack", "strongest sample attack", "DP ε", "label ε", "empirical ε ≥",
           "nominal ε ≥")
#: the strongest-figure columns and the row key of their level's "beats the headline" flag (⚠)
FLAGGED = {"strongest population TPR": "population beats headline", "strongest sample TPR": "sample beats headline"}

#: the folders of an absolute path (POSIX, home-relative or Windows) that starts a string or follows a
#: space, quote or bracket: ``/home/me/defs/mine.py:Mine`` keeps ``mine.py:Mine``
_ABS_DIRS = re.compile(r"(?<![\w.:/\\~-])(?:~|[A-Za-z]:)?[/\\](?:[^\s/\\:'\"<>|]+[/\\])+")


def strip_paths(text: str) -> str:
    """``text`` with the folders of every absolute path cut off (each path keeps its last part): a
    results.json names the plugin file, output folder and data folder of the machine that ran it,
    which a public page must not show."""
    return _ABS_DIRS.sub("", text)


def public_results(obj: Any) -> Any:
    """A copy of a results.json object (any JSON value) with :func:`strip_paths` applied to every string."""
    if isinstance(obj, dict):
        return {k: public_results(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [public_results(v) for v in obj]
    return strip_paths(obj) if isinstance(obj, str) else obj


def display_name(results: dict[str, Any]) -> str:
    """The defense's name as the board shows it, never a path and without bidirectional control
    characters (they would reorder the page's text after the name; ``harness import --name`` refuses
    them, a file from elsewhere may hold them): a file plugin's declared ``name`` (``defense_name``;
    its class name in a results.json from before that key), else the name it was run by (a
    built-in's or an installed package's)."""
    return without_bidi_controls(_display_name(results))


def _display_name(results: dict[str, Any]) -> str:
    spec = str(results.get("defense", ""))
    if trained_outside(results):  # harness import: the label it was imported under (--name)
        return strip_paths(str((results.get("external") or {}).get("name") or "external models"))
    if not is_file_reference(spec):
        return strip_paths(spec)
    declared = results.get("defense_name")
    if isinstance(declared, str) and declared.strip():
        return strip_paths(" ".join(declared.split()))
    return spec.rpartition(":")[2]


def provenance(results: dict[str, Any]) -> str:
    """Where the defense's code comes from: ``plugin`` (a user's file, ``path/file.py:Class``),
    ``built-in`` (this harness's own), ``package`` (an installed package's entry point) or ``trained
    outside`` (models trained outside the harness, ``harness import``: their attacks are re-run, never
    their training)."""
    from harness.plugins import kind

    if trained_outside(results):
        return "trained outside"
    spec = str(results.get("defense", ""))
    if is_file_reference(spec):
        return "plugin"
    return "built-in" if spec in kind("defenses").builtins else "package"


def rank_value(headline: Any, strongest: Any, flagged: bool) -> Any:
    """The figure a row ranks by: the headline, unless the run's headline test found a variant that
    beats it (``flagged``, family-wise error at most alpha: docs/protocol.md, Headlines), then the
    larger of the headline and the cross-fitted strongest figure. Taking the larger of the two on
    every row would add a selection of its own; behind the test, a headline that nothing
    significantly beats keeps its pre-declared figure. Non-float values ("unresolved", None) are
    passed over; with no float, the headline's value."""
    vals = [v for v in (headline, strongest if flagged else None) if isinstance(v, float)]
    return max(vals) if vals else headline


def _best_entry(level: dict[str, Any]) -> dict[str, Any] | None:
    b = level["best"]
    return next((a for a in level["attacks"] if a["name"] == b["name"] and a["variant"] == b["variant"]), None)


def _entry(results: dict[str, Any], source: Path) -> dict[str, Any]:
    k = repr(float(results.get("headline_fpr", 0.001)))
    levels = [lv for lv in ("population", "sample") if lv in results]

    def tpr(level: str, which: str = "best") -> float | str | None:
        if level not in results or which not in results[level]:  # no strongest before harness 0.2.1's
            return None
        fig = results[level][which]
        return float(fig["tpr_at_fpr"][k]) if fig.get("resolved", {}).get(k, True) else "unresolved"

    def attack(level: str, which: str) -> str:
        fig = results.get(level, {}).get(which)
        return strip_paths(f"{fig['name']} ({fig['variant']})") if fig else ""

    def beats(level: str) -> bool:
        """Whether the run's headline test found a variant that beats the level's headline."""
        return bool((results.get(level, {}).get("strongest") or {}).get("beats_headline"))

    def eps(key: str) -> float | None:
        # the headline variant's empirical epsilon lower bound, the larger over both levels
        vals = [(e.get(key) or {}).get("epsilon") for lv in levels for e in [_best_entry(results[lv])] if e]
        vals = [v for v in vals if v is not None]
        return max(vals, default=None)

    acc_level = "sample" if "sample" in results else "population"
    return {
        "defense": display_name(results),  # never a path of the machine that ran it
        "provenance": provenance(results),
        "spec": strip_paths(str(results["defense"])),  # what it was run as: a name or file.py:Class
        "trained outside": trained_outside(results),
        "dataset": results["dataset"],
        "preset": results["preset"],
        "models": results["num_models"],  # S: the models of each level (a run trains S per level)
        "audit": results["audit_size"],
        "test acc": results[acc_level]["test_accuracy"]["mean"],
        "population TPR": tpr("population"),
        "sample TPR": tpr("sample"),
        # the best of every attack and variant that ran (cross-fitted), beside the pre-declared headline;
        # a row whose headline the headline test finds beaten ranks by the larger of the two, so no
        # defense climbs the board by declaring weak attacks
        "strongest population TPR": tpr("population", "strongest"),
        "strongest sample TPR": tpr("sample", "strongest"),
        "rank TPR": rank_value(tpr("sample"), tpr("sample", "strongest"), beats("sample")),
        "population beats headline": beats("population"),
        "sample beats headline": beats("sample"),
        "sample attack": attack("sample", "best"),
        "strongest population attack": attack("population", "strongest"),
        "strongest sample attack": attack("sample", "strongest"),
        "canary": results["sample"]["canary"] if "sample" in results else "",
        # the accountant's epsilon (delta 1e-5) of DP-trained runs; the headline variant's one-run
        # lower bound (valid under the guesses' dependence) and its nominal pooled bound (docs/bounds.md)
        "DP ε": (run_privacy(results) or {}).get("epsilon"),
        # ALIBI / AGIBI: the label epsilon (labels only), not an example-level guarantee
        "label ε": (run_label_privacy(results) or {}).get("label_epsilon"),
        "empirical ε ≥": eps("eps_lower_one_run"),
        "nominal ε ≥": eps("eps_lower"),
        "fpr": float(k),
        "source": str(source),
    }


def read_json_object(f: Path) -> dict[str, Any]:
    """A JSON file holding an object (non-finite numbers read as floats from their strings or an
    older file's bare tokens: harness.core.jsonio); ValueError (one line: what is wrong) otherwise."""
    try:
        obj = jsonio.loads(f.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


def read_results(f: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(results, leaderboard row) of one results.json; ValueError (with the reason) if it cannot be one,
    e.g. a run's results.json edited since its attack phase wrote it (checked against the run's
    manifest.json where there is one beside it: harness.run.runstore.RunDir.check_results)."""
    results = read_json_object(f)
    RunDir(f.parent).check_results(results, f)  # a RunDirError is a ValueError
    try:
        return results, _entry(results, f)
    except (KeyError, TypeError, IndexError, AttributeError, ValueError) as e:
        raise ValueError(f"not a results.json of this harness ({type(e).__name__}: {e})") from None


def _read_entry(f: Path) -> dict[str, Any]:
    """One results.json as a leaderboard row; ValueError (with the reason) if it cannot be one."""
    return read_results(f)[1]


def collect(paths: list[Path], skipped: list[tuple[Path, str]] | None = None) -> list[dict[str, Any]]:
    """Read every results.json under the given files or folders. A file that cannot be read or is
    not a results file is left out and appended to ``skipped`` as (path, reason)."""
    files: list[Path] = []
    for p in paths:
        files += sorted(p.rglob("results.json")) if p.is_dir() else [p]
    entries = []
    for f in files:
        try:
            entries.append(_read_entry(f))
        except ValueError as e:
            if skipped is not None:
                skipped.append((f, str(e)))
    return sorted(entries, key=rank_order)


def rank_order(e: dict[str, Any]) -> tuple[int, float]:
    """Rows in leaderboard order: by ``rank TPR`` (the larger of the sample-level headline and
    strongest figure; lower is more private), rows without a figure last."""
    v = e["rank TPR"]
    return (0, v) if isinstance(v, float) else (1, 0.0)


def _fmt(col: str, v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if col in ("test acc", "population TPR", "strongest population TPR", "sample TPR", "strongest sample TPR"):
        return f"{100 * v:.1f}%"
    if col in ("DP ε", "label ε", "empirical ε ≥", "nominal ε ≥"):
        return f"{v:.3g}"
    return str(v)


def _md(text: str) -> str:
    """A Markdown table cell: HTML escaped (renderers pass raw HTML through), pipes and newlines neutralised."""
    return html.escape(" ".join(text.split()), quote=True).replace("|", "&#124;")


def _text(col: str, e: dict[str, Any]) -> str:
    """One cell as plain text: a strongest figure whose CI lies above its level's headline gets ⚠."""
    flag = FLAGGED.get(col)
    return _fmt(col, e[col]) + (" ⚠" if flag and e.get(flag) and isinstance(e[col], float) else "")


def to_markdown(entries: list[dict[str, Any]]) -> str:
    """The leaderboard table as Markdown (one row per entry, in the given order)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_md(_text(c, e)) for c in COLUMNS) + " |" for e in entries]
    return "\n".join(lines) + "\n"


def to_html(entries: list[dict[str, Any]]) -> str:
    """The plain one-table page (no plots; :mod:`leaderboard.site` builds the full site)."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_text(c, e))}</td>" for c in COLUMNS) + "</tr>" for e in entries
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>privacy-harness leaderboard</title>"
        "<style>body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
        "padding:4px 8px;text-align:right}</style></head><body><h1>privacy-harness leaderboard</h1>"
        "<p>TPR at 0.1% FPR of the headline attack (the best primary variant of the defense's adaptive "
        "attacks): population level (audit samples as they are) vs sample level (the defense's canaries); "
        "strongest: the best of every attack and variant that ran at that level, cross-fitted over victim "
        "models (⚠: the headline test finds a variant that beats the headline). Rows rank by the sample-level "
        "headline, or the larger of headline and strongest where the test finds it beaten; models: S, the "
        "models of each level. "
        "Lower is more private. Empirical ε ≥: one-run lower bound (Steinke et al. 2023, per victim model, "
        "Bonferroni over victims); nominal: pooled Clopper-Pearson, which treats the S x C guesses as "
        "independent.</p>"
        f"<table><tr>{head}</tr>{rows}</table></body></html>\n"
    )


def build(paths: list[Path], out_dir: Path, skipped: list[tuple[Path, str]] | None = None) -> list[dict[str, Any]]:
    """Write index.html and leaderboard.md from the results.json files under ``paths``; broken
    files are left out and listed in ``skipped``. Each file is replaced atomically (an OSError leaves
    it as before, with no temp file)."""
    entries = collect(paths, skipped)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out_dir / "leaderboard.md", to_markdown(entries).encode())
    atomic_write_bytes(out_dir / "index.html", to_html(entries).encode())
    return entries
