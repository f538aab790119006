"""Build the leaderboard from per-run ``results.json`` files (one entry per file, as RobustBench does).

Each entry shows the defense, its setting, test accuracy and the headline TPR at the headline FPR of
both levels; entries are sorted by the sample-level figure (lower is more private). Output: a
self-contained ``index.html`` and a ``leaderboard.md`` in the chosen folder.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from harness.evaluation import run_privacy

COLUMNS = ("defense", "dataset", "preset", "models", "audit", "test acc", "population TPR", "sample TPR", "canary",
           "sample attack", "DP ε", "empirical ε ≥")


def _entry(results: dict[str, Any], source: Path) -> dict[str, Any]:
    k = repr(float(results.get("headline_fpr", 0.001)))

    def tpr(level: str) -> float | None:
        return results[level]["best"]["tpr_at_fpr"][k] if level in results else None

    acc_level = "sample" if "sample" in results else "population"
    return {
        "defense": results["defense"],
        "dataset": results["dataset"],
        "preset": results["preset"],
        "models": results["num_models"],
        "audit": results["audit_size"],
        "test acc": results[acc_level]["test_accuracy"]["mean"],
        "population TPR": tpr("population"),
        "sample TPR": tpr("sample"),
        "sample attack": (f"{results['sample']['best']['name']} ({results['sample']['best']['variant']})"
                          if "sample" in results else ""),
        "canary": results["sample"]["canary"] if "sample" in results else "",
        # the accountant's epsilon (delta 1e-5) of DP-trained runs, and the strongest empirical
        # 95% lower bound over the headline attacks of both levels (no ablations; docs/bounds.md)
        "DP ε": (run_privacy(results) or {}).get("epsilon"),
        "empirical ε ≥": max((a["eps_lower"]["epsilon"] for lv in ("population", "sample") if lv in results
                              for a in results[lv]["attacks"]
                              if "eps_lower" in a and a["name"] in results[lv].get("headline_attacks", [a["name"]])),
                             default=None),
        "fpr": float(k),
        "source": str(source),
    }


def collect(paths: list[Path]) -> list[dict[str, Any]]:
    """Read every results.json under the given files or folders."""
    files: list[Path] = []
    for p in paths:
        files += sorted(p.rglob("results.json")) if p.is_dir() else [p]
    entries = [_entry(json.loads(f.read_text()), f) for f in files]
    return sorted(entries, key=lambda e: (e["sample TPR"] is None, e["sample TPR"] or 0.0))


def _fmt(col: str, v: Any) -> str:
    if v is None:
        return "-"
    if col in ("test acc", "population TPR", "sample TPR"):
        return f"{100 * v:.1f}%"
    if col in ("DP ε", "empirical ε ≥"):
        return f"{v:.3g}"
    return str(v)


def to_markdown(entries: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_fmt(c, e[c]) for c in COLUMNS) + " |" for e in entries]
    return "\n".join(lines) + "\n"


def to_html(entries: list[dict[str, Any]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(c, e[c]))}</td>" for c in COLUMNS) + "</tr>" for e in entries
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>privacy-harness leaderboard</title>"
        "<style>body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
        "padding:4px 8px;text-align:right}</style></head><body><h1>privacy-harness leaderboard</h1>"
        "<p>TPR at 0.1% FPR of the strongest attack: population level (audit samples as they are) vs "
        "sample level (the defense's canaries). Lower is more private.</p>"
        f"<table><tr>{head}</tr>{rows}</table></body></html>\n"
    )


def build(paths: list[Path], out_dir: Path) -> list[dict[str, Any]]:
    entries = collect(paths)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "leaderboard.md").write_text(to_markdown(entries))
    (out_dir / "index.html").write_text(to_html(entries))
    return entries
