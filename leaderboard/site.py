"""The static leaderboard site: an index page and one page per entry, built from results.json files.

Layout of a site folder (everything is regenerated from ``entries/`` by :func:`rebuild`):

- ``entries/<entry_id>/results.json``: an entry's results (a run's, or a verified submission's);
- ``entries/<entry_id>/entry.json`` (optional): ``source`` ("run" or "submission"), ``verified``,
  ``verified_by``, ``submitted`` (see leaderboard/submit.py);
- ``index.html``: one row per entry (sortable by any column, in the page itself), the
  privacy-utility figure with the DP-SGD frontier (Aerni et al., Figure 7), and per entry the
  utility-matched DP-SGD baseline: the DP-SGD sample-level TPR linearly interpolated at the entry's
  accuracy between the two DP-SGD entries of the same dataset and preset that bracket it;
- ``entries/<entry_id>/index.html``: the log-log ROC curves (population and every sample-level
  canary, every attack variant), the per-attack table, the config and the provenance,
  with a link to the entry's results.json;
- ``leaderboard.md``: the index table as Markdown.

Pages load nothing from the network; every string from a results file is escaped.
"""

from __future__ import annotations

import hashlib
import json
import re
from html import escape
from pathlib import Path
from typing import Any

from harness.audit.report import defense_label
from harness.core import jsonio
from harness.run.runstore import atomic_write_bytes
from leaderboard.build import FLAGGED, rank_order, read_json_object, read_results, to_markdown
from leaderboard.plots import privacy_utility_svg, roc_svg

CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:12px 0}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:right;vertical-align:top}th{background:#f3f3f3;cursor:pointer}
td.name,th.name{text-align:left;max-width:260px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.beats{color:#1a7f37}.loses{color:#b42318}.badge{background:#1a7f37;color:#fff;border-radius:3px;padding:0 4px;font-size:11px}
td.wrap{text-align:left;max-width:640px;word-break:break-all}
pre{background:#f7f7f7;padding:8px;overflow:auto;max-height:420px}.muted{color:#666;font-size:13px}
.plots{display:flex;flex-wrap:wrap;gap:16px}"""

SORT_JS = """document.querySelectorAll('table.sortable').forEach(function(t){
t.querySelectorAll('th').forEach(function(th,i){th.addEventListener('click',function(){
var body=t.tBodies[0],rows=Array.prototype.slice.call(body.rows),asc=th.dataset.dir!=='asc';th.dataset.dir=asc?'asc':'desc';
rows.sort(function(a,b){var x=a.cells[i].dataset.sort,y=b.cells[i].dataset.sort;var nx=parseFloat(x),ny=parseFloat(y);
var c=(isNaN(nx)||isNaN(ny))?String(x).localeCompare(String(y)):nx-ny;return asc?c:-c;});
rows.forEach(function(r){body.appendChild(r);});});});});"""

COLUMNS = ("defense", "setting", "test acc", "population TPR", "strongest population TPR", "sample TPR",
           "strongest sample TPR", "ratio", "canary", "attack", "DP-SGD at same acc", "DP ε", "empirical ε ≥", "models",
           "device-hours", "verified")
#: the TPR columns of the index: column -> (the row key of its CI, the row key of its attack or None);
#: a strongest figure's "beats the headline" flag is the row key leaderboard.build.FLAGGED names
TPR_COLUMNS = {
    "population TPR": ("population CI", None),
    "strongest population TPR": ("strongest population CI", "strongest population attack"),
    "sample TPR": ("sample CI", None),
    "strongest sample TPR": ("strongest sample CI", "strongest sample attack"),
}


#: what the site says of an entry whose models were trained outside the harness (harness import)
OUTSIDE = ("trained outside the harness (harness plan, the submitter's own training code, harness import): the "
           "training cannot be re-run, so a submission is checked by re-running its attacks on the submitted "
           "outputs, which must give every submitted number again")


def entry_id(results: dict[str, Any]) -> str:
    """A stable, safe folder name: defense + preset + 12 characters of the run fingerprint (any other
    character becomes '-'; an over-long name is cut and keeps a hash of the full one)."""
    name = f"{results.get('defense', '')}-{results.get('preset', '')}".lower()
    slug = re.sub(r"[^a-z0-9_]+", "-", name).strip("-")[:60] or "entry"
    tag = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{slug}-{tag}-{str(results.get('fingerprint', ''))[:12]}"


def _ci(level: dict[str, Any], k: str, which: str = "best") -> tuple[float, float] | None:
    ci = (level.get(which) or {}).get("tpr_ci", {}).get(k)
    return (ci[0], ci[1]) if ci and all(isinstance(v, (int, float)) and v == v for v in ci) else None


def _ratio(results: dict[str, Any]) -> tuple[float, tuple[float, float]] | None:
    """(ratio, CI) of the sample- over population-level headline, only where results.json has a CI
    for it (a ratio without one is not shown)."""
    r = results.get("sample_population_ratio") or {}
    if r.get("ratio") is None or not r.get("ci"):
        return None
    return float(r["ratio"]), (float(r["ci"][0]), float(r["ci"][1]))


def _compute(results: dict[str, Any]) -> tuple[int, float | None, list[str]]:
    """(number of levels, device-hours summed over every model of every level, devices) of an entry."""
    levels = [lv for lv in ("population", "sample") if lv in results]
    secs, devices = 0.0, set()
    for lv in levels:
        c = results[lv].get("compute") or {}
        secs += float(c.get("train_seconds_total") or 0.0) + float(c.get("query_seconds_total") or 0.0)
        devices.update(c.get("devices") or [])
    return len(levels), (secs / 3600 if secs else None), sorted(devices)


def is_dpsgd(results: dict[str, Any]) -> bool:
    return str(results.get("defense", "")).startswith("dpsgd")


def matched_baseline(acc: float, frontier: list[tuple[float, float]]) -> float | None:
    """The DP-SGD TPR at accuracy ``acc``, linearly interpolated between the two frontier points
    (accuracy, TPR) whose accuracies bracket it; None when no pair brackets it."""
    pts = sorted(frontier)
    for (a0, t0), (a1, t1) in zip(pts, pts[1:]):
        if a0 <= acc <= a1:
            return t0 if a1 == a0 else t0 + (t1 - t0) * (acc - a0) / (a1 - a0)
    if len(pts) == 1 and pts[0][0] == acc:
        return pts[0][1]
    return None


def _row(results: dict[str, Any], base: dict[str, Any], meta: dict[str, Any], eid: str) -> dict[str, Any]:
    """The index row of an entry: its leaderboard.build row ``base`` plus CIs, compute and status."""
    k = repr(float(results.get("headline_fpr", 0.001)))
    levels, hours, devices = _compute(results)
    return {
        **base,
        "id": eid,
        "setting": f"{results['dataset']}/{results['preset']}",
        "population CI": _ci(results["population"], k) if "population" in results else None,
        "strongest population CI": _ci(results["population"], k, "strongest") if "population" in results else None,
        "sample CI": _ci(results["sample"], k) if "sample" in results else None,
        "strongest sample CI": _ci(results["sample"], k, "strongest") if "sample" in results else None,
        "ratio": _ratio(results),
        "attack": base["sample attack"],
        "levels": levels,  # base["models"] is S, the models of each level
        "device-hours": hours,
        "devices": devices,
        "verified": bool(meta.get("verified")),
        "source_kind": meta.get("source", "run"),
        "is_dpsgd": is_dpsgd(results),
    }


def _pct(v: Any) -> str:
    return f"{100 * v:.1f}%" if isinstance(v, float) else escape(str(v) if v is not None else "-")


def _cell(col: str, r: dict[str, Any]) -> tuple[str, str]:
    """(display HTML, sort key) of one index cell; every string escaped."""
    v = r.get(col)
    if col == "defense":
        name = str(r["defense"])
        return (f'<a href="entries/{escape(r["id"], quote=True)}/index.html" title="{escape(name, quote=True)}">'
                f'{escape(name)}</a>', name)
    if col in TPR_COLUMNS:
        ci_key, attack_key = TPR_COLUMNS[col]
        flag_key = FLAGGED.get(col)
        ci = r[ci_key]
        txt = _pct(v) + (f' <span class="muted">[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]</span>' if ci and isinstance(v, float) else "")
        if attack_key is not None and isinstance(v, float):
            txt += f' <span class="muted">{escape(r[attack_key])}</span>'
            if flag_key is not None and r.get(flag_key):
                txt += (' <span class="loses" title="the headline test (Hansen\'s SPA, family-wise over every variant, '
                        'FPR and level) finds a variant that beats the headline: the headline understates the leak">'
                        '&#9888; above the headline</span>')
        return txt, f"{v:.6f}" if isinstance(v, float) else "9"
    if col == "test acc":
        return _pct(v), f"{v:.6f}" if isinstance(v, float) else "-1"
    if col == "ratio":  # shown only with its bootstrap CI
        if v is None:
            return "-", "-1"
        value, (lo, hi) = v
        up = "∞" if hi == float("inf") else f"{hi:.1f}"
        return f'{value:.1f}x <span class="muted">[{lo:.1f}, {up}]</span>', f"{value:.6f}"
    if col == "DP-SGD at same acc":
        b = r.get("baseline")
        if r["is_dpsgd"]:
            return "(DP-SGD)", "-1"
        if b is None:
            return "no baseline", "-1"
        beats = isinstance(r["rank TPR"], float) and r["rank TPR"] < b
        cls, word = ("beats", "beats it") if beats else ("loses", "does not beat it")
        return f'{100 * b:.1f}% <span class="{cls}">{word}</span>', f"{b:.6f}"
    if col == "DP ε" and not isinstance(v, float) and isinstance(r.get("label ε"), float):
        # label-DP (ALIBI / AGIBI): a guarantee for the labels only, never shown as an example-level epsilon
        return (f'label {r["label ε"]:.3g} <span class="muted">(labels only)</span>', f'{r["label ε"]:.6f}')
    if col in ("DP ε", "empirical ε ≥"):
        return (f"{v:.3g}" if isinstance(v, float) else "-"), f"{v:.6f}" if isinstance(v, float) else "-1"
    if col == "device-hours":
        dev = ", ".join(r["devices"])
        return (f'{v:.3f} <span class="muted">{escape(dev)}</span>' if v is not None else "-"), f"{v or 0:.6f}"
    if col == "models":  # S per level; the device-hours cover all S x levels models
        n = int(r["levels"])
        times = f' <span class="muted">&#215; {n} levels</span>' if n > 1 else ""
        return f"{int(v)}{times}", str(int(v))
    if col == "verified":
        if r.get("trained outside") and not v:  # nothing to re-train: its attacks are what a board re-runs
            what = "attacks re-run" if r["source_kind"] == "submission" else escape(r["source_kind"])
            return (f'{what} <span class="muted" title="{escape(OUTSIDE, quote=True)}">(trained outside the '
                    'harness)</span>'), "0"
        return ('<span class="badge">verified</span>' if v else escape(r["source_kind"])), "1" if v else "0"
    return escape(str(v) if v not in (None, "") else "-"), str(v or "")


def index_html(rows: list[dict[str, Any]]) -> str:
    frontiers: dict[str, list[tuple[float, float]]] = {}
    for r in rows:  # every comparison uses the ranking figure (leaderboard.build.rank_value)
        if r["is_dpsgd"] and isinstance(r["rank TPR"], float):
            frontiers.setdefault(r["setting"], []).append((r["test acc"], r["rank TPR"]))
    for r in rows:
        r["baseline"] = (matched_baseline(r["test acc"], frontiers.get(r["setting"], []))
                         if not r["is_dpsgd"] else None)
    settings = sorted({r["setting"] for r in rows})
    one = len(settings) == 1  # then the title names the setting and the labels only the defenses
    points = [(str(r["defense"]) if one else f"{r['defense']} ({r['setting']})", r["test acc"], r["rank TPR"],
               r["is_dpsgd"]) for r in rows if isinstance(r["rank TPR"], float)]
    figure = privacy_utility_svg(points, frontiers, f"Privacy vs utility{', ' + settings[0] if one else ''} "
                                 "(sample-level TPR at 0.1% FPR: the headline, or the strongest attack where the "
                                 "headline test finds the headline beaten; lower is more private)")
    head = "".join(f'<th class="{"name" if c == "defense" else ""}">{escape(c)}</th>' for c in COLUMNS)
    body = []
    for r in rows:
        cells = []
        for c in COLUMNS:
            html, key = _cell(c, r)
            cells.append(f'<td class="{"name" if c == "defense" else ""}" data-sort="{escape(key, quote=True)}">{html}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return _page("privacy-harness leaderboard", f"""<h1>privacy-harness leaderboard</h1>
<p>TPR at 0.1% FPR of each entry's headline attack (the best primary variant of the defense's adaptive attacks,
declared before any result) at the population level (audit samples as they are) and the sample level (the defense's
canaries, built to mimic the most vulnerable samples), with 95% bootstrap CIs over victim models. <b>Strongest</b>
(at each level): the best of every attack and variant that ran, cross-fitted over victim models (chosen on one half
of them, measured on the other) so that the choice among many variants does not inflate it; &#9888; where the headline
test (Hansen's SPA, family-wise error 5% over every variant, FPR and level) finds a variant that beats that level's
headline. Rows rank by the sample-level headline, or by the larger of headline and strongest where the test finds the
headline beaten; lower is more private. <b>Models</b>: S, the victim models of each level (the device-hours cover all of them).
<b>Ratio</b>: sample- over population-level headline, with its bootstrap CI. <b>DP-SGD at same acc</b>: the DP-SGD
baselines' sample-level ranking figure interpolated at the entry's accuracy (same dataset and
preset); a defense is only interesting if it beats it. Empirical ε ≥: one-run lower bound of the headline variant.
Click a column header to sort.</p>
<table class="sortable" id="board"><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>
<div class="plots">{figure}</div>
<p class="muted">{len(rows)} entries. Built by privacy-harness from results.json files; every number links to its
entry's page and results.json.</p>""", script=True)


def _attack_table(level_name: str, level: dict[str, Any], targets: list[str]) -> str:
    head = "".join(f"<th>TPR@{100 * float(k):g}% FPR</th>" for k in targets)
    rows = []
    for a in level["attacks"]:
        best = (a["name"], a["variant"]) == (level["best"]["name"], level["best"]["variant"])
        tds = []
        for k in targets:
            v, ci = a["tpr_at_fpr"][k], a["tpr_ci"].get(k)
            if not a["resolved"].get(k, True):
                tds.append("<td>unresolved</td>")
                continue
            c = f' <span class="muted">[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]</span>' if ci and ci[0] == ci[0] else ""
            tds.append(f"<td>{100 * v:.1f}%{c}</td>")
        rows.append(f'<tr><td class="name">{escape(level_name)}</td>'
                    f'<td class="name" title="{escape(a["name"], quote=True)}">'
                    f'{escape(a["name"])}{"*" if a.get("primary") else ""}{" (headline)" if best else ""}</td>'
                    f'<td class="name" title="{escape(a["variant"], quote=True)}">{escape(a["variant"])}</td>'
                    f'<td>{escape(a.get("access", ""))}</td>'
                    + "".join(tds) + f'<td>{a["auc"]:.3f}</td></tr>')
    return f'<table><tr><th class="name">experiment</th><th class="name">attack</th><th class="name">variant</th><th>access</th>{head}<th>AUC</th></tr>{"".join(rows)}</table>'


def _figures_table(results: dict[str, Any], targets: list[str]) -> str:
    """Per level, the headline and the strongest figure (every attack and variant that ran), each
    with its CI at every FPR, the optimistic maximum beside a cross-fitted figure, and the
    sample/population ratio with its CI."""
    head = "".join(f"<th>TPR@{100 * float(k):g}% FPR</th>" for k in targets)
    rows = []
    for lv in ("population", "sample"):
        if lv not in results:
            continue
        figures = []
        for which, label in (("best", "headline"), ("strongest", "strongest")):
            fig = results[lv].get(which)
            if fig is None:
                continue
            figures.append((fig, label))
            if "optimistic_max" in fig:  # the plain maximum, beside the cross-fitted figure
                figures.append(({**fig, **fig["optimistic_max"], "beats_headline": False}, f"{label}: optimistic max"))
        for fig, label in figures:
            tds = []
            for k in targets:
                if not fig["resolved"].get(k, True):
                    tds.append("<td>unresolved</td>")
                    continue
                ci = fig["tpr_ci"].get(k)
                c = f' <span class="muted">[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]</span>' if ci and ci[0] == ci[0] else ""
                tds.append(f"<td>{100 * fig['tpr_at_fpr'][k]:.1f}%{c}</td>")
            test = (results.get("headline_test") or {}).get("levels", {}).get(lv) if label == "strongest" else None
            flag = (' <span class="loses">&#9888; above the headline</span>' if fig.get("beats_headline") else "") + (
                f' <span class="muted">test p = {test["p_value"]:.3f}</span>' if test else "")
            rows.append(f'<tr><td class="name">{escape(lv)}</td><td class="name">{label}{flag}</td>'
                        f'<td class="name" title="{escape(fig["source"], quote=True)}">{escape(fig["name"])}</td>'
                        f'<td class="name">{escape(fig["variant"])}</td><td>{escape(fig.get("access", ""))}</td>'
                        f'<td>{len(fig.get("candidates", []))}</td>' + "".join(tds) + "</tr>")
    ratio = _ratio(results)
    note = ""
    if ratio is not None:
        value, (lo, hi) = ratio
        up = "∞" if hi == float("inf") else f"{hi:.1f}"
        note = (f'<p>Sample- over population-level headline at the headline FPR: <b>{value:.1f}x</b> '
                f'<span class="muted">[{lo:.1f}, {up}], 95% bootstrap CI over victim models</span></p>')
    return (f'<table><tr><th class="name">level</th><th class="name">figure</th><th class="name">attack</th>'
            f'<th class="name">variant</th><th>access</th><th>chosen among</th>{head}</tr>{"".join(rows)}</table>{note}')


def _experiments(results: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = [("population", results["population"])] if "population" in results else []
    by = results.get("sample_by_canary") or ({results["sample"]["canary"]: results["sample"]} if "sample" in results else {})
    return out + [(f"sample-{c}", r) for c, r in by.items()]


def entry_html(results: dict[str, Any], meta: dict[str, Any], results_href: str = "results.json",
               index_href: str | None = "../../index.html") -> str:
    """One entry's page: ROC figures, per-attack table, config and provenance."""
    targets = [k for k in next(iter(_experiments(results)))[1]["attacks"][0]["tpr_at_fpr"]]
    figures, tables = [], []
    for name, level in _experiments(results):
        primary = [a for a in level["attacks"] if a.get("primary") and "roc_curve" in a]
        curves = [(f"{a['name']}:{a['variant']}", a["roc_curve"]["fpr"], a["roc_curve"]["tpr"]) for a in primary]
        # every other variant, thin, in the colour of its attack's primary variant
        colour = {a["name"]: i for i, a in enumerate(primary)}
        minor = [(f"{a['name']}:{a['variant']}", a["roc_curve"]["fpr"], a["roc_curve"]["tpr"], colour.get(a["name"], 7))
                 for a in level["attacks"] if not a.get("primary") and "roc_curve" in a]
        if curves or minor:
            figures.append(roc_svg(curves, f"{name} (canary: {level['canary']}), every variant", minor=minor))
        tables.append(_attack_table(name, level, targets))
    headline = [(name, lv) for name, lv in _experiments(results)]
    hl_curves = [(f"{name}: {lv['best']['name']}:{lv['best']['variant']}", a["roc_curve"]["fpr"], a["roc_curve"]["tpr"])
                 for name, lv in headline for a in lv["attacks"]
                 if (a["name"], a["variant"]) == (lv["best"]["name"], lv["best"]["variant"]) and "roc_curve" in a]
    if hl_curves:
        figures.insert(0, roc_svg(hl_curves, "Headline attack: population vs each canary"))
    if not figures:
        figures.append('<p class="muted">This results.json predates ROC curves in results.json (harness 0.2.0 '
                       'before roc_curve): re-run `harness attack RUN_DIR` to add them.</p>')
    levels, hours, devices = _compute(results)
    prov = {
        "harness version": results.get("harness_version"),
        "trained with version": results.get("trained_with_version"),
        "run fingerprint": results.get("fingerprint"),
        "data fingerprint": results.get("data_fingerprint"),
        "seed": results.get("seed"),
        "created": results.get("created"),
        "devices": ", ".join(devices),
        "models": f"{results['num_models']} per level, {results['num_models'] * levels} trained",
        "device-hours": f"{hours:.3f}" if hours is not None else None,
        "source": meta.get("source", "run"),
        "verified": ("yes, " + str(meta.get("verified_by"))) if meta.get("verified") else "no",
    }
    if results.get("provenance") == "external":
        ext = results.get("external") or {}
        prov["trained"] = OUTSIDE
        prov["plan fingerprint"] = ext.get("plan_fingerprint")
        prov["outputs (SHA-256)"] = ext.get("outputs_sha256")
        prov["models"] = (f"{results['num_models']} per level, {results['num_models'] * levels} trained outside the "
                          "harness" + (f" ({ext['models_planned']} planned)" if ext.get("models_planned") not in
                                       (None, results["num_models"]) else ""))
    prov_rows = "".join(f'<tr><th class="name">{escape(k)}</th><td class="wrap">'
                        f'{escape(str(v) if v is not None else "-")}</td></tr>' for k, v in prov.items())
    notes = "".join(f"<li>{escape(str(n))}</li>" for n in results.get("notes", []))
    notes += "".join(f'<li class="loses"><b>warning:</b> {escape(str(w))}</li>' for w in results.get("warnings", []))
    back = f'<p><a href="{escape(index_href, quote=True)}">← leaderboard</a></p>' if index_href else ""
    title = f"{defense_label(results)} ({results['dataset']}/{results['preset']})"
    return _page(f"privacy-harness: {title}", f"""{back}<h1 class="name" title="{escape(title, quote=True)}"
style="max-width:100%;overflow:hidden;text-overflow:ellipsis;white-space:nowrap">{escape(title)}</h1>
<p><a href="{escape(results_href, quote=True)}" download>download results.json</a></p>
{f'<ul>{notes}</ul>' if notes else ''}
<h2>Headline and strongest attack</h2><p class="muted">headline: the best primary variant of the defense's
adaptive attacks (declared before any result); strongest: the best of every attack and variant that ran on the
served outputs; a best of several is cross-fitted over victim models (chosen on one half, measured on the other;
"optimistic max": the plain maximum, biased upward by the choice); each CI resamples the whole procedure.
&#9888;: the headline test (Hansen's SPA) finds a variant that beats the headline.</p>{_figures_table(results, targets)}
<div class="plots">{''.join(figures)}</div>
<h2>Attacks</h2><p class="muted">* primary variant; (headline): the experiment's headline; 95% CIs from a bootstrap
over victim models; "unresolved": the FPR is below 1 / (number of negative guesses).</p>{''.join(tables)}
<h2>Provenance</h2><table>{prov_rows}</table>
<h2>Config</h2><pre>{escape(jsonio.dumps(results.get("config", {}), indent=2, sort_keys=True))}</pre>""")


def _page(title: str, body: str, script: bool = False) -> str:
    js = f"<script>{SORT_JS}</script>" if script else ""
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
            f"script-src 'unsafe-inline'; img-src data:\">"
            f"<style>{CSS}</style></head><body>{body}{js}</body></html>\n")


def _meta(d: Path) -> dict[str, Any]:
    """An entry's entry.json (ValueError if it is unreadable or not an object); a plain run without one."""
    f = d / "entry.json"
    if not f.is_file():
        return {"source": "run", "verified": False}
    try:
        return read_json_object(f)
    except ValueError as e:
        raise ValueError(f"entry.json: {e}") from None


def _entries(site: Path) -> list[tuple[str, Path]]:
    """(entry id, its results.json) of every entry folder under ``site/entries``."""
    return [(d.name, d / "results.json") for d in sorted((site / "entries").glob("*/"))
            if (d / "results.json").is_file()]


def _valid_json(data: bytes, results: dict[str, Any]) -> bytes:
    """``data`` (a results.json's bytes) if it is valid JSON; else ``results`` re-written as valid JSON
    (a file of an earlier version holds bare ``Infinity`` / ``NaN`` tokens: harness.core.jsonio)."""
    try:
        jsonio.strict_loads(data)
        return data
    except ValueError:
        return (jsonio.dumps(results, indent=2) + "\n").encode()


def rebuild(site: Path, skipped: list[tuple[Path, str]] | None = None) -> list[dict[str, Any]]:
    """Regenerate index.html, leaderboard.md and every entry page from ``site/entries/*`` (an entry's
    results.json of an earlier version is re-written as valid JSON: :func:`_valid_json`).

    Each file is replaced atomically (runstore.atomic_write_bytes): an OSError (a full disk) stops
    the build with every file either as before or wholly new, and no temp file left."""
    rows = []
    for eid, f in _entries(site):
        try:
            meta = _meta(f.parent)
            results, base = read_results(f)
            rows.append(_row(results, base, meta, eid))
            page = entry_html(results, meta)
        except (ValueError, KeyError, TypeError, IndexError, StopIteration) as e:
            if skipped is not None:
                skipped.append((f, str(e) or type(e).__name__))
            continue
        atomic_write_bytes(f.parent / "index.html", page.encode())  # an OSError (a full disk) stops the build
        data = f.read_bytes()
        if (valid := _valid_json(data, results)) is not data:
            atomic_write_bytes(f, valid)
    rows.sort(key=rank_order)
    site.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(site / "index.html", index_html(rows).encode())
    atomic_write_bytes(site / "leaderboard.md", to_markdown(rows).encode())
    return rows


def add_results(site: Path, results_file: Path, meta: dict[str, Any] | None = None) -> str:
    """Copy one results.json into ``site/entries/<entry_id>/`` (replacing an older copy, byte for
    byte; a file of an earlier version with bare ``Infinity`` / ``NaN`` tokens is re-written as valid
    JSON, harness.core.jsonio, so that the site serves only files a strict parser reads); its id.
    ``meta`` (entry.json) is written first, so a failure between the two never leaves new results
    under an older entry's ``verified`` mark; each file is replaced atomically."""
    data = results_file.read_bytes()
    results = jsonio.loads(data)
    data = _valid_json(data, results)
    eid = entry_id(results)
    d = site / "entries" / eid
    d.mkdir(parents=True, exist_ok=True)
    if meta is not None:
        atomic_write_bytes(d / "entry.json", json.dumps(meta, indent=2).encode())
    atomic_write_bytes(d / "results.json", data)
    return eid


def build_site(paths: list[Path], out: Path, skipped: list[tuple[Path, str]] | None = None) -> list[dict[str, Any]]:
    """Add every readable results.json under ``paths`` to the site at ``out`` and rebuild it."""
    files: list[Path] = []
    for p in paths:
        files += sorted(p.rglob("results.json")) if p.is_dir() else [p]
    own = (out / "entries").resolve()
    for f in files:
        if own in f.resolve().parents:  # the site's own copies
            continue
        try:
            read_results(f)
        except ValueError as e:
            if skipped is not None:
                skipped.append((f, str(e)))
            continue
        add_results(out, f)
    return rebuild(out, skipped)
