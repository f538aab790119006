"""Leaderboard rows from per-run ``results.json`` files (one entry per file, as RobustBench does).

Each row holds the defense, its setting, test accuracy and both levels' figures at their figure FPR:
the **leak** (the plain maximum of a fixed set of primary attacks the harness ran on what the deployed
model serves) and the defense's **declared headline**; rows rank by the sample-level leak (lower is
more private), which no choice of declared attacks can lower (docs/protocol.md, Headlines). :func:`build`
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

COLUMNS = ("defense", "provenance", "dataset", "preset", "models", "audit", "test acc", "figure FPR", "leak TPR",
           "leak lower", "declared TPR", "population leak TPR", "canary", "leak attack", "declared attack", "DP ε",
           "label ε", "empirical ε ≥", "checks", "ranked")
#: the declared-headline column and the row key of its "beaten" flag (⚠)
FLAGGED = {"declared TPR": "sample beats headline"}

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


def rank_value(leak: Any) -> Any:
    """The figure a row ranks by: the sample level's leak (the plain maximum of a fixed set of primary
    attacks: configured built-ins, the harness's adaptations, served declared attacks;
    harness.core.figure.best_of). A declaration only adds candidates, so declaring a weak attack cannot
    lower it; the declared headline stays on the row as its author's claim. Non-float values ("unresolved", None) pass through."""
    return leak


#: the results.json checks an entry must pass (harness.core.checks), in the order they are reported
CHECKS = ("membership", "outputs", "utility")


def check_status(results: dict[str, Any]) -> tuple[str, list[str]]:
    """(status, findings) of a results.json's ``checks`` (docs/protocol.md, Checks): ``passed``;
    ``forced`` (every failed check is one ``harness import --force`` accepted: the membership
    check); ``failed``, with the findings of the checks that failed and were not forced; ``not
    recorded`` for a results.json from before the checks."""
    checks = results.get("checks")
    if not isinstance(checks, dict):
        return "not recorded", []
    failed = [c for c in CHECKS if not (checks.get(c) or {}).get("passed", True)]
    forced = set(checks.get("forced") or [])
    if not failed:
        return "passed", []
    if set(failed) <= forced:
        return "forced", [f"{c}: {line}" for c in failed for line in checks[c].get("findings", [])]
    return "failed", [f"{c} check: {line}" for c in failed if c not in forced for line in checks[c].get("findings", [])]


def refusal(results: dict[str, Any]) -> str | None:
    """Why a results.json may not join a leaderboard, or None: a run whose checks failed (its
    outputs degenerate, a model at chance accuracy, or outputs that do not fit the design's
    membership without ``harness import --force``)."""
    status, findings = check_status(results)
    if status != "failed":
        return None
    more = f" ({len(findings) - 1} more: results.json, checks)" if len(findings) > 1 else ""
    return f"its run failed the checks of its outputs: {findings[0]}{more}"


def setting(results: dict[str, Any]) -> str:
    """The leaderboard setting an entry is ranked in: dataset, preset, S (models per level) and C
    (audit samples). Fewer models weaken every attack, and the canaries' count changes what the
    sample level can show, so entries audited otherwise are ranked in their own table."""
    return (f"{results['dataset']}/{results['preset']}: {results['num_models']} models, "
            f"{results['audit_size']} audit samples")


def unranked_reason(results: dict[str, Any]) -> str | None:
    """Why an entry is shown but not ranked in its setting, or None: its attack set (``attack.names``,
    ``attack.params``) or its canaries (``audit.canary``) are not what the harness's preset chooses for
    its defense, so that a rank never depends on which attacks or canaries an author chose (the
    harness's own additions, the defense's declared attacks and label-only or lira-averaged where
    the outputs call for them, are the same for everyone); or its preset is not one of this harness's."""
    from harness.core.config import AttackConfig, ConfigError, apply_defense_preset, load_preset_mapping

    cfg = results.get("config") or {}
    preset = str(results.get("preset"))
    try:
        from harness.core.config import preset_names

        if preset not in preset_names():
            return f"its preset {preset!r} is not one of this harness's presets: its default attacks are unknown"
        raw = load_preset_mapping(preset)
        defense = str(results.get("defense", ""))
        if defense == "subsample":  # the wrapper takes its inner defense's section (harness.defense_config)
            inner = (cfg.get("defense_params") or {}).get("inner", "undefended")
            raw = apply_defense_preset(raw, str(inner), ("inner_params",))
        else:
            raw = apply_defense_preset(raw, defense)
        want = AttackConfig.model_validate(raw.get("attack") or {})
    except (ConfigError, ValueError):
        return f"its preset {preset!r} cannot be read by this harness: its default attacks are unknown"
    attack = cfg.get("attack") or {}
    if sorted(attack.get("names") or []) != sorted(want.names):
        return (f"its attacks (attack.names {', '.join(attack.get('names') or [])}) are not the preset's "
                f"({', '.join(want.names)})")
    if (attack.get("params") or {}) != want.params:
        return "its attack parameters (attack.params) are not the preset's"
    canary = (cfg.get("audit") or {}).get("canary")
    default = (raw.get("audit") or {}).get("canary")
    if canary is not None and canary != default:
        return (f"its canaries ({canary if isinstance(canary, str) else ', '.join(canary)}) are not the ones the "
                f"preset chooses for its defense ({default or 'the defense default'})")
    return None



def _best_entry(level: dict[str, Any]) -> dict[str, Any] | None:
    b = level["best"]
    return next((a for a in level["attacks"] if a["name"] == b["name"] and a["variant"] == b["variant"]), None)


def _entry(results: dict[str, Any], source: Path) -> dict[str, Any]:
    def fig(level: str) -> dict[str, Any]:
        return (results.get(level) or {}).get("figure") or {}

    def tpr(level: str, which: str, key: str = "tpr") -> float | str | None:
        if level not in results:
            return None
        rec = fig(level).get(which)
        if not rec:
            return "unresolved"
        v = rec.get(key)
        return None if v is None else float(v)

    def attack(level: str, which: str) -> str:
        rec = fig(level).get(which)
        return strip_paths(f"{rec['name']} ({rec['variant']})") if rec else ""

    def beats(level: str) -> bool:
        """Whether the run's headline test found a variant that beats the level's declared headline."""
        return bool((fig(level).get("flag") or {}).get("flagged"))

    acc_level = "sample" if "sample" in results else "population"
    flag = (fig("sample").get("flag") or {}).get("top") if beats("sample") else None
    status, _ = check_status(results)
    unranked = unranked_reason(results)
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
        "figure FPR": fig(acc_level).get("fpr"),
        "population figure FPR": fig("population").get("fpr"),
        # the sample level's leak ranks: every attack variant that ran, whatever the defense declared
        "leak TPR": tpr("sample", "leak"),
        "leak lower": tpr("sample", "leak", "lower"),
        "leak se": tpr("sample", "leak", "se"),
        "leak attack": attack("sample", "leak"),
        "population leak TPR": tpr("population", "leak"),
        "population leak lower": tpr("population", "leak", "lower"),
        "population leak attack": attack("population", "leak"),
        "declared TPR": tpr("sample", "declared"),
        "declared CI": (fig("sample").get("declared") or {}).get("ci"),
        "declared lower": tpr("sample", "declared", "lower"),
        "declared attack": attack("sample", "declared"),
        "population declared TPR": tpr("population", "declared"),
        "rank TPR": rank_value(tpr("sample", "leak")),
        "population beats headline": beats("population"),
        "sample beats headline": beats("sample"),
        "flag": flag,  # the comparison the sample level's flag comes from: variant, FPR, both TPRs
        "flag p": (fig("sample").get("flag") or {}).get("p_value"),
        "canary": results["sample"]["canary"] if "sample" in results else "",
        # the accountant's epsilon (delta 1e-5) of DP-trained runs; the run's one-run lower bound, 95%
        # over every primary variant of both levels (Bonferroni: docs/bounds.md)
        "DP ε": (run_privacy(results) or {}).get("epsilon"),
        # ALIBI / AGIBI: the label epsilon (labels only), not an example-level guarantee
        "label ε": (run_label_privacy(results) or {}).get("label_epsilon"),
        "empirical ε ≥": (results.get("one_run_epsilon") or {}).get("epsilon"),
                "checks": status,  # passed, forced, failed or not recorded (results.json checks)
        "ranked": "no" if unranked else "yes",
        "unranked": unranked,  # why the entry is shown but not ranked in its setting
        "setting": setting(results),
        "fpr": fig(acc_level).get("fpr"),
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
    """Rows in leaderboard order: by ``rank TPR`` (the sample-level leak; lower is more private),
    rows without a figure last."""
    v = e["rank TPR"]
    return (0, v) if isinstance(v, float) else (1, 0.0)


def _fmt(col: str, v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if col in ("test acc", "leak TPR", "leak lower", "declared TPR", "population leak TPR", "figure FPR"):
        return f"{100 * v:.3g}%" if col == "figure FPR" else f"{100 * v:.1f}%"
    if col in ("DP ε", "label ε", "empirical ε ≥"):
        return f"{v:.3g}"
    return str(v)


def _md(text: str) -> str:
    """A Markdown table cell: HTML escaped (renderers pass raw HTML through), pipes and newlines neutralised."""
    return html.escape(" ".join(text.split()), quote=True).replace("|", "&#124;")


def _text(col: str, e: dict[str, Any]) -> str:
    """One cell as plain text: a declared headline the headline test finds beaten gets ⚠."""
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
        "<p>Rows rank by the <b>leak</b>: the TPR, on the defense's canaries (sample level), of the best of "
        "a fixed set of primary attacks (configured built-ins, the harness's adaptations, served declared attacks), a "
        "plain maximum, at the figure FPR (0.1%, or the smallest FPR with 3 expected false positives); leak lower: its "
        "one-sided 95% lower bound. A declaration only adds candidates: it cannot lower it. Declared: the same over the "
        "defense's declared adaptive attacks, its author's claim (⚠: the headline test finds a variant that "
        "beats it). Population leak: the audit samples as they are. Models: S, the models of each level. "
        "Lower is more private. Empirical ε ≥: one-run lower bound (Steinke et al. 2023), 95% over every "
        "primary variant of both levels.</p>"
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
