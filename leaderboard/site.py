"""The static leaderboard site: an index page and one page per entry, built from results.json files.

Layout of a site folder (everything is regenerated from ``entries/`` by :func:`rebuild`):

- ``entries/<entry_id>/results.json``: an entry's results (a run's, or a verified submission's),
  as published: every absolute path of the machine that ran it cut to its last part
  (leaderboard.build.public_results);
- ``entries/<entry_id>/entry.json`` (optional): ``source`` ("run" or "submission"), ``verified``,
  ``verified_by``, ``submitted`` (see leaderboard/submit.py);
- ``index.html``: per dataset/preset, one compact ranked table (short column names with tooltips,
  a legend below, a ⚠ mark and one footnote for a headline the headline test finds beaten;
  sortable by any column, in the page itself) and the privacy-utility figure with the DP-SGD
  frontier (Aerni et al., Figure 7); per entry the utility-matched DP-SGD baseline: the DP-SGD
  ranking figure linearly interpolated at the entry's accuracy between the two DP-SGD entries of
  the same dataset and preset around it, at most 2 accuracy points apart ("outside" otherwise), and the
  verdict of the leaks' ratio with its 95% interval (:mod:`harness.audit.matched`, the matched table's rule);
- ``entries/<entry_id>/index.html``: a summary (what the index leaves out: epsilons, models,
  compute, full attack names), the warnings, the log-log ROC curves (population and every
  sample-level canary, every attack variant), the per-attack table, the config and the
  provenance, with a link to the entry's results.json;
- ``leaderboard.md``: every index column and more, as Markdown.

A defense is shown by its name (a file plugin's declared ``name``), never by a path.
Pages load nothing from the network; every string from a results file is escaped.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from html import escape
from pathlib import Path
from typing import Any

from harness.core import jsonio
from harness.run.runstore import atomic_write_bytes
from harness.core.registry import is_file_reference
from harness.core.checks import summary as check_summary
from harness.core.machine import describe as describe_machine
from leaderboard.build import (display_name, provenance, public_results, rank_order, read_json_object, read_results,
                               refusal, strip_paths, to_markdown)
from leaderboard.bracket import bracket_section
from leaderboard.paper import PAPER_SETTING, TABLE1, at_paper_setting, paper_reference
from leaderboard.plots import Point, privacy_utility_svg, roc_svg

CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:12px 0}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:right;vertical-align:top}th{background:#f3f3f3}
table.sortable th{cursor:pointer}
td.name,th.name{text-align:left;max-width:260px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.beats{color:#1a7f37}.loses{color:#b42318}.badge{background:#1a7f37;color:#fff;border-radius:3px;padding:0 4px;font-size:11px}
td.wrap{text-align:left;max-width:640px;overflow-wrap:anywhere}
pre{background:#f7f7f7;padding:8px;overflow:auto;max-height:420px}.muted{color:#666;font-size:13px}
.plots{display:flex;flex-wrap:wrap;gap:16px;overflow-x:auto;max-width:100%}.scroll{overflow-x:auto;max-width:100%}
svg.plot{flex:none}
h1.title{overflow-wrap:anywhere;display:-webkit-box;-webkit-line-clamp:3;-webkit-box-orient:vertical;overflow:hidden}
table.board{font-size:14px}.board td,.board th{padding:3px 7px;white-space:nowrap}.board th{vertical-align:bottom}
table.board th[title]{text-decoration:underline dotted #999;text-underline-offset:3px}
table.board .defense,table.board .text{text-align:left}
.dcell{display:flex;align-items:baseline;max-width:300px}.dcell a.dname{flex:0 1 auto;min-width:3em;overflow:hidden;
text-overflow:ellipsis;white-space:nowrap}.dcell .tags{flex:none;white-space:nowrap}a.ref{text-decoration:none;margin-left:3px}
table.board tbody tr:nth-child(even){background:#fafafa}table.board tr.hidden{display:none}
.ci{color:#666;font-size:11px;white-space:nowrap}table.board td.num{white-space:normal}.board .v{white-space:nowrap}.tag{color:#555;border:1px solid #bbb;border-radius:3px;padding:0 3px;font-size:11px;
margin-left:5px}a.flag{color:#b42318;text-decoration:none;margin-left:2px}
.filter{font-size:13px;margin:8px 0}.filter label{margin-right:12px;white-space:nowrap}
.legend{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;font-size:13px;max-width:1180px;margin:4px 0}
.legend dt{font-weight:600}.legend dd{margin:0}.foot{font-size:13px;max-width:1180px}
table.summary th{text-align:left;white-space:nowrap}figure{margin:16px 0}figcaption{font-size:13px;color:#444;max-width:760px}
@media (max-width:720px){body{margin:10px}h1.title{font-size:20px;-webkit-line-clamp:5}
table.board,table.board tbody,table.board tr,table.board td{display:block}table.board thead{display:none}
table.board tr{border:1px solid #ccc;margin:0 0 10px;padding:4px 8px}table.board tr.hidden{display:none}
table.board td{border:0;padding:1px 0;text-align:right;white-space:normal}
table.board td::before{content:attr(data-label);float:left;margin-right:10px;color:#555;font-weight:600}
table.board td.defense::before{content:none}.dcell{max-width:none}
.legend{grid-template-columns:1fr}.legend dd{margin:0 0 4px}
table.summary,table.summary tbody,table.summary tr,table.summary th,table.summary td{display:block;border:0}
table.summary tr{border-top:1px solid #ddd;padding:3px 0}table.summary th{background:none;padding:0}
table.summary td{text-align:left;padding:0 0 2px;max-width:none}}"""

SORT_JS = """document.querySelectorAll('table.sortable').forEach(function(t){
t.querySelectorAll('th').forEach(function(th,i){th.addEventListener('click',function(){
var body=t.tBodies[0],rows=Array.prototype.slice.call(body.rows),asc=th.dataset.dir!=='asc';th.dataset.dir=asc?'asc':'desc';
rows.sort(function(a,b){var x=a.cells[i].dataset.sort,y=b.cells[i].dataset.sort;var nx=parseFloat(x),ny=parseFloat(y);
var c=(isNaN(nx)||isNaN(ny))?String(x).localeCompare(String(y)):nx-ny;return asc?c:-c;});
rows.forEach(function(r){body.appendChild(r);});});});});
function applyFilter(){var on={};document.querySelectorAll('.filter input[data-prov]').forEach(function(c){
on[c.dataset.prov]=c.checked;});var v=document.getElementById('verified-only');
document.querySelectorAll('table.board tbody tr').forEach(function(r){
var show=on[r.dataset.prov]!==false&&(!v||!v.checked||r.dataset.verified==='1');r.classList.toggle('hidden',!show);});}
document.querySelectorAll('.filter input').forEach(function(c){c.addEventListener('change',applyFilter);});"""

#: the index's columns: (key, short header, its tooltip); one table per dataset/preset
INDEX_COLUMNS = (
    ("rank", "#", "rank by the leak: the sample level's largest TPR of a fixed set of primary attacks (lower is more "
     "private); a declaration can only add candidates"),
    ("defense", "defense", "the name the defense declares, and where its code comes from"),
    ("test acc", "acc", "test accuracy of the sample-level models (trained with the defense's canaries; mean over "
     "the victim models): the accuracy the DP-SGD comparison and the figure use; the population level's is on the "
     "entry page"),
    ("leak TPR", "leak", "sample level (the defense's canaries): TPR at the figure FPR of the best of the configured "
     "built-ins, the harness's adaptations and the served declared attacks (a plain maximum), with its one-sided "
     "95% lower bound; hover for the attack"),
    ("declared TPR", "declared", "the defense's declared headline (the best of its declared adaptive attacks) at the "
     "same FPR, with its 95% CI: its author's claim; ⚠ where the headline test finds it beaten"),
    ("population leak TPR", "pop. leak", "population level (the audit samples as they are): the leak, with its "
     "lower bound"),
    ("ratio", "ratio", "sample- over population-level leak, with its 95% CI over victim models (none where the population leak "
     "cannot be told from 0)"),
    ("canary", "canary", "the canaries of the sample level"),
    ("attack", "attack", "the attack that gives the leak; hover for its variant"),
    ("DP-SGD at same acc", "DP-SGD", "DP-SGD's ranking figure interpolated at this entry's accuracy (same setting); "
     "the ratio of the two with its 95% interval (the matched table's rule): ✓ leaks less, ✗ leaks more, "
     "≈ not told apart"),
    ("DP ε", "ε", "the DP epsilon of DP-trained models (delta 1e-5); label: a label-DP epsilon, which covers "
     "the labels only"),
    ("setup", "S×C", "S models per level × C audit samples per model (the defense's canaries at the sample level): "
     "the S × C guesses each figure pools"),
    ("date", "date", "when the run was prepared (UTC)"),
)
COLUMNS = tuple(key for key, _, _ in INDEX_COLUMNS)
#: the footnote of the ⚠ mark
FLAG_NOTE = ("the headline test (family-wise error 5%, Bonferroni over every comparison of both levels) finds a "
             "candidate of the leak that beats this defense's declared headline, so its author's claim understates the leak "
             "(hover for the comparison). The row ranks by the leak either way.")


#: what the site says of an entry whose models were trained outside the harness (harness import)
OUTSIDE = ("trained outside the harness (harness plan, the submitter's own training code, harness import): the "
           "training cannot be re-run, so a submission is checked by re-running its attacks on the submitted "
           "outputs, which must give every submitted number again")


def entry_id(results: dict[str, Any]) -> str:
    """A stable, safe folder name: defense + preset + 12 characters of the run fingerprint (any other
    character becomes '-'; an over-long name is cut and keeps a hash of the full one)."""
    name = f"{strip_paths(str(results.get('defense', '')))}-{results.get('preset', '')}".lower()
    slug = re.sub(r"[^a-z0-9_]+", "-", name).strip("-")[:60] or "entry"
    tag = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{slug}-{tag}-{str(results.get('fingerprint', ''))[:12]}"


def _finite_pair(ci: Any) -> bool:
    """Whether ``ci`` is a [low, high] of numbers (results.json writes an undefined one as "NaN")."""
    return bool(ci) and all(isinstance(v, (int, float)) and v == v for v in ci)


def _ci(rec: dict[str, Any] | None) -> tuple[float, float] | None:
    """A figure record's two-sided CI, or None (a best of several has a one-sided lower bound)."""
    ci = (rec or {}).get("ci")
    return (ci[0], ci[1]) if _finite_pair(ci) else None


def _ratio(results: dict[str, Any]) -> tuple[float, tuple[float, float]] | None:
    """(ratio, CI) of the sample- over population-level leak, only where results.json gives one (no
    point ratio where the population leak cannot be told from 0)."""
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
    """A built-in DP-SGD entry (a plugin file named dpsgd... is not one of the baselines)."""
    spec = str(results.get("defense", ""))
    return spec.startswith("dpsgd") and not is_file_reference(spec)


def upper_bound(results: dict[str, Any]) -> tuple[float, float]:
    """(FPR, TPR) to draw an entry without a figure at: (1, 1), the only upper bound a level that
    resolves no FPR with 3 expected false positives has."""
    return (1.0, 1.0)


def matched_reading(acc: float, frontier: list[tuple[float, ...]]):  # -> harness.audit.matched.FrontierReading
    """The DP-SGD leak at accuracy ``acc`` and its SE (:func:`harness.audit.matched.read_frontier`): linearly
    interpolated between the two neighbouring frontier points (accuracy, TPR[, SE]) around it when they lie at
    most :data:`harness.audit.matched.MAX_GAP` apart; ``leak`` None ("outside the frontier: ...") otherwise."""
    from harness.audit.matched import FrontierPoint, read_frontier

    return read_frontier(acc, [FrontierPoint(p[0], p[1], p[2] if len(p) > 2 else 0.0) for p in frontier])


def matched_baseline(acc: float, frontier: list[tuple[float, ...]]) -> tuple[float | None, str]:
    """(the DP-SGD TPR at accuracy ``acc``, why there is none): :func:`matched_reading`'s value."""
    reading = matched_reading(acc, frontier)
    return reading.leak, reading.why


#: the DP-SGD column's marks by the verdict of :func:`harness.audit.matched.leak_ratio` (the matched table's rule)
VERDICT_MARKS = {"leaks less": '<span class="beats">&#10003;</span>',
                 "leaks more": '<span class="loses">&#10007;</span>',
                 "not told apart": '<span class="muted">&#8776;</span>'}


def _row(results: dict[str, Any], base: dict[str, Any], meta: dict[str, Any], eid: str) -> dict[str, Any]:
    """The index row of an entry: its leaderboard.build row ``base`` plus CIs, compute and status."""
    levels, hours, devices = _compute(results)
    lv = results.get("sample") or results.get("population") or {}
    leak = (lv.get("figure") or {}).get("leak") or {}
    return {
        **base,
        "id": eid,
        "ratio": _ratio(results),
        "attack": str(leak.get("name", "")),  # the short code; "leak attack" adds the variant
        "attack variant": str(leak.get("variant", "")),
        "bound": upper_bound(results),
        "levels": levels,  # base["models"] is S, the models of each level
        "device-hours": hours,
        "devices": devices,
        "verified": bool(meta.get("verified")),
        "verified_by": meta.get("verified_by"),
        "source_kind": meta.get("source", "run"),
        "is_dpsgd": is_dpsgd(results),
        "date": str(results.get("created") or "")[:10],
        "C": results.get("audit_size"),  # base["models"] is S
        "reference": defense_reference(results),
        "paper": paper_figure(results),
    }


def defense_reference(results: dict[str, Any]) -> str | None:
    """The https URL of the defense's paper or code: what its class declared (results.json
    ``defense_reference``), else, for a built-in run by an earlier version, its class's today; None
    for none or for anything but an https URL (a page links only those)."""
    url = results.get("defense_reference")
    if url is None and provenance(results) == "built-in":
        from harness.plugins import resolve

        url = getattr(resolve("defenses", str(results.get("defense"))), "reference", "")
    url = str(url or "").strip()
    return url if re.fullmatch(r"https://[^\s\"'<>]+", url) else None


def paper_figure(results: dict[str, Any]) -> tuple[str, float, float] | None:
    """(the paper's name, sample-level accuracy, TPR) of a built-in defense in the paper's Table 1,
    for an entry at the paper's setting only (leaderboard.paper)."""
    if not at_paper_setting(f"{results.get('dataset')}/{results.get('preset')}") or provenance(results) != "built-in":
        return None
    return TABLE1.get(str(results.get("defense")))


def _pct(v: Any) -> str:
    return f"{100 * v:.1f}%" if isinstance(v, float) else escape(str(v) if v is not None else "-")


def _q(text: Any) -> str:
    return escape(str(text), quote=True)


def _flag(tip: str) -> str:
    """The ⚠ mark of a headline the headline test finds beaten, linked to its footnote."""
    return f'<a class="flag" href="#fn-flag" title="{_q(tip)}">&#9888;</a>'


def _figure(v: Any, ci: tuple[float, float] | None, lower: Any = None) -> str:
    """A TPR with its CI, or its one-sided lower bound (small, after it); "unresolved" and missing
    figures as text."""
    if not isinstance(v, float):
        return _pct(v)
    # value and its interval each unbroken; a board too wide for the window puts the interval on a second line
    if ci:
        return f'<span class="v">{_pct(v)}</span> <span class="ci">[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]</span>'
    return f'<span class="v">{_pct(v)}</span>' + (f' <span class="ci">(&ge;{100 * lower:.1f})</span>'
                                                   if isinstance(lower, float) else "")


def _tags(r: dict[str, Any]) -> str:
    """The provenance tag of a row, then its submission status (a submitted entry is trained elsewhere)."""
    where = {"plugin": "a user's defense file (plugin), shown by the name it declares",
             "built-in": "a defense built into privacy-harness",
             "package": "a defense from an installed package (entry point)",
             "trained outside": OUTSIDE}[r["provenance"]]
    tags = f'<span class="tag" title="{_q(where)}">{escape(r["provenance"])}</span>'
    if r.get("checks") == "forced":
        tags += ('<span class="tag loses" title="its outputs failed the membership-consistency check (they do not fit '
                 'the design\'s membership: swapped or shuffled?) and were imported with --force">forced</span>')
    if r["verified"]:
        tags += ' <span class="badge">verified</span>'
    elif r["source_kind"] == "submission":
        tags += ('<span class="tag" title="trained by the submitter and submitted; its numbers were re-computed '
                 'from its signals, but its models have not been re-trained by the board">submitted</span>')
    return f'<span class="tags">{tags}</span>'


#: the index's provenance filter: (row value, label); "verified" is a status, filtered on its own
PROVENANCES = (("built-in", "built-in"), ("plugin", "plugin"), ("package", "package"),
               ("trained outside", "trained outside"))


def _cell(col: str, r: dict[str, Any]) -> tuple[str, str, str]:
    """(display HTML, sort key, tooltip) of one index cell; every string escaped."""
    v = r.get(col)
    if col == "rank":
        n = r.get("rank")
        return (str(n) if n else "-"), str(n or 10**6), (f"not ranked: {r['unranked']}" if r.get("unranked") else "")
    if col == "defense":  # the name shrinks (cut with an ellipsis, whole in its tooltip); the tags never do
        name = str(r["defense"])
        ref = r.get("reference")
        link = (f'<a class="ref" href="{_q(ref)}" title="the defense\'s paper or code: {_q(ref)}" rel="noopener '
                f'noreferrer">&#8599;</a>' if ref else "")
        return (f'<span class="dcell"><a class="dname" href="entries/{_q(r["id"])}/index.html" title="{_q(name)}">'
                f'{escape(name)}</a>{link}{_tags(r)}</span>'), name, ""
    if col == "setup":
        return f"{r['models']}×{r['C']}", str(r["models"] * (r["C"] or 0)), f"S = {r['models']} models per level, C = {r['C']} audit samples"
    if col == "date":
        return f'<span class="v">{escape(r["date"] or "-")}</span>', r["date"] or "", ""
    if col in ("leak TPR", "population leak TPR"):
        lower = r.get("leak lower" if col == "leak TPR" else "population leak lower")
        fpr = r.get("figure FPR" if col == "leak TPR" else "population figure FPR")
        html = _figure(v, None, lower)
        att = r.get("leak attack" if col == "leak TPR" else "population leak attack", "")
        tip = (f"{att} at {100 * fpr:g}% FPR" if isinstance(fpr, float) else
               "unresolved: no FPR with 3 expected false positives")
        if col == "leak TPR" and r.get("paper"):
            name, acc, tpr = r["paper"]
            tip += f"; the paper (Table 1, {name}): {100 * tpr:.1f}% at {100 * acc:.1f}% accuracy"
        return html, (f"{v:.6f}" if isinstance(v, float) else "9"), tip
    if col == "declared TPR":
        html = _figure(v, tuple(r["declared CI"]) if r.get("declared CI") else None, r.get("declared lower"))
        tip = r.get("declared attack", "")
        f = r.get("flag")
        if r.get("sample beats headline") and f:
            html += _flag(f"beaten: {f['name']} ({f['variant']}) finds {_pct(f['tpr'])} at {100 * f['fpr']:g}% FPR "
                          f"where the declared headline finds {_pct(f['headline_tpr'])} (adjusted p = "
                          f"{r.get('flag p', float('nan')):.3f}; footnote ⚠)")
        return html, (f"{v:.6f}" if isinstance(v, float) else "9"), tip
    if col == "test acc":
        return _pct(v), (f"{v:.6f}" if isinstance(v, float) else "-1"), ""
    if col == "ratio":  # shown only with its CI
        if v is None:
            return "-", "-1", "no CI for the ratio in this results.json"
        value, (lo, hi) = v
        up = "∞" if hi == float("inf") else f"{hi:.1f}"
        return f'<span class="v">{value:.1f}x</span> <span class="ci">[{lo:.1f}, {up}]</span>', f"{value:.6f}", ""
    if col == "attack":
        return escape(str(v) or "-"), str(v), r.get("leak attack") or r.get("attack", "")
    if col == "DP-SGD at same acc":
        b = r.get("baseline")
        if r["is_dpsgd"]:
            return '<span class="muted">DP-SGD</span>', "-1", "a DP-SGD entry: one of the baseline's points"
        if b is None:
            return '<span class="muted">outside</span>', "-1", r.get("baseline why") or "outside the frontier"
        tip = f"DP-SGD at the same accuracy: {100 * b:.1f}%; this entry's ranking figure, {_pct(r['rank TPR'])}"
        se, b_se = r.get("leak se"), r.get("baseline se")
        if not (isinstance(r["rank TPR"], float) and isinstance(se, float) and isinstance(b_se, float)):
            why = "no SE of the leak in this results.json" if isinstance(r["rank TPR"], float) else "no leak"
            return f'{100 * b:.1f}% <span class="muted">?</span>', f"{b:.6f}", f"{tip}: not compared ({why})"
        from harness.audit.matched import leak_ratio

        ratio = leak_ratio(r["rank TPR"], se, b, b_se)
        key = next(k for k in VERDICT_MARKS if ratio.verdict.startswith(k))
        high = "∞" if math.isinf(ratio.high) else f"{ratio.high:.1f}"
        verdict = ratio.verdict if ratio.verdict.startswith("leaks") else f"is {ratio.verdict}"
        tip += f"; ratio {ratio.value:.1f}x [{ratio.low:.1f}, {high}] (95%, Bonferroni box): it {verdict}"
        return f"{100 * b:.1f}% {VERDICT_MARKS[key]}", f"{b:.6f}", tip
    if col == "DP ε" and not isinstance(v, float) and isinstance(r.get("label ε"), float):
        # label-DP (ALIBI / AGIBI): a guarantee for the labels only, never shown as an example-level epsilon
        return (f'label {r["label ε"]:.3g}', f'{r["label ε"]:.6f}',
                "label-DP (labels only): this epsilon covers the labels, not the presence of an image")
    if col == "DP ε":
        return (f"{v:.3g}" if isinstance(v, float) else "-"), (f"{v:.6f}" if isinstance(v, float) else "-1"), ""
    return escape(str(v) if v not in (None, "") else "-"), str(v or ""), ""


LEGEND = (
    ("#", "rank by the leak; lower is more private. The leak reads every attack the harness ran, not only the ones "
          "the defense declares, and is never below the declared figure nor below what LiRA and RMIA find, so no "
          "declaration lowers it. A table is one setting: dataset, preset, models per "
          "level and audit samples (fewer models weaken every attack); an entry audited with other attacks or "
          "canaries than the preset's is listed apart, unranked."),
    ("acc", "test accuracy of the sample-level models (trained with the defense's canaries), mean over the victim "
            "models: the accuracy the DP-SGD comparison and the figure use; each entry's page gives both levels'."),
    ("leak", "TPR on the defense's canaries (built to mimic the most vulnerable samples): the plain maximum of a "
             "fixed set of primary attacks (the configured built-ins, the adaptations the harness adds, the "
             "defense's served declared attacks) at the figure FPR (0.1%, or the smallest FPR with 3 expected false "
             "positives); a declaration can only raise it; (≥: its one-sided 95% lower bound, Bonferroni over the "
             "set, victim bootstrap and jackknife, conditional on the canaries)."),
    ("declared", "the same over the defense's declared adaptive attacks: its author's claim [95% CI]; ⚠: the "
                 "headline test finds a variant that beats it."),
    ("pop. leak", "the leak at the population level: the audit samples as they are."),
    ("ratio", "sample- over population-level leak, with its 95% CI over victim models (only where the population leak is told "
              "apart from 0 on at least 10 expected true positives)."),
    ("canary, attack", "the canaries of the sample level and the attack that gives its leak; hover for the variant."),
    ("DP-SGD", "the DP-SGD entries' ranking figure interpolated at the entry's accuracy (same setting): "
               "✓ the defense leaks less, ✗ more, ≈ not told apart (the ratio's 95% interval, a Bonferroni box of the "
               "two leaks' intervals, excludes 1 or not; hover for it); outside: no two DP-SGD entries at most 2 accuracy points "
               "apart bracket its accuracy (the frontier says nothing there)."),
    ("ε", "DP epsilon (delta 1e-5); label: label-DP, a guarantee for the labels only."),
    ("S×C, date", "S models per level × C audit samples per model; the date the run was prepared (UTC)."),
    ("↗", "the defense's paper or code (what its class declares)."),
    ("tags", "built-in, plugin (a user's file, shown by its declared name), package, or trained outside (models "
             "trained by the submitter's own code from a harness plan: attacks re-run, never the training); "
             "submitted: numbers re-computed from its signals; verified: re-trained by the board with an unseen seed; "
             "forced: its outputs failed the membership-consistency check and were imported with --force. Every "
             "entry passed the checks of its outputs (not degenerate, above chance accuracy; its entry page lists "
             "them)."),
)


def _cls(key: str) -> str:
    return "defense" if key == "defense" else "text" if key in ("canary", "attack") else "num"


def _board(rows: list[dict[str, Any]]) -> str:
    """One setting's ranked table (sortable by any column, in the page itself). Each row carries its
    provenance and verified status for the filter; each cell its column's short name, which a narrow
    window shows beside the value (one card per row, no table header)."""
    head = "".join(f'<th class="{_cls(key)}" data-col="{_q(key)}" title="{_q(tip)}">{escape(label)}</th>'
                   for key, label, tip in INDEX_COLUMNS)
    body = []
    for r in rows:
        cells = []
        for key, label, _ in INDEX_COLUMNS:
            html, sort, tip = _cell(key, r)
            title = f' title="{_q(tip)}"' if tip else ""
            cells.append(f'<td class="{_cls(key)}" data-col="{_q(key)}" data-label="{_q(label)}" '
                         f'data-sort="{_q(sort)}"{title}>{html}</td>')
        body.append(f'<tr data-prov="{_q(r["provenance"])}" data-verified="{int(bool(r["verified"]))}">'
                    + "".join(cells) + "</tr>")
    return f'<table class="sortable board"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _figure_of(setting: str, rows: list[dict[str, Any]], frontier: list[tuple[float, float]]) -> str:
    """One setting's privacy-utility figure: every entry with a ranking figure, an unresolved one at
    its upper bound (:func:`upper_bound`). The y axis names the entries' figure FPR, or says that it
    differs between them."""
    points = []
    for r in rows:
        if isinstance(r["rank TPR"], float):
            points.append(Point(str(r["defense"]), r["test acc"], r["rank TPR"], r["is_dpsgd"]))
        elif r["rank TPR"] == "unresolved":
            points.append(Point(str(r["defense"]), r["test acc"], r["bound"][1], r["is_dpsgd"], bound=True))
    fprs = {r.get("figure FPR") for r in rows if isinstance(r["rank TPR"], float) or r["rank TPR"] == "unresolved"}
    y_label = (f"sample-level TPR at {100 * next(iter(fprs)):g}% FPR" if len(fprs) == 1 and isinstance(next(iter(fprs)), float)
               else "sample-level TPR at each entry's figure FPR")
    return privacy_utility_svg(points, {setting: frontier} if frontier else {}, f"Privacy vs utility: {setting}",
                               bound_note="unresolved (upper bound)", reference=paper_reference(setting), y_label=y_label)


def _filter(rows: list[dict[str, Any]]) -> str:
    """The provenance filter above the boards: one checkbox per provenance on the board (with its
    count), and "verified only" where an entry is verified; the page's script hides the other rows."""
    counts = {kind: sum(r["provenance"] == kind for r in rows) for kind, _ in PROVENANCES}
    boxes = "".join(f'<label><input type="checkbox" data-prov="{_q(kind)}" checked> {escape(label)} ({counts[kind]})'
                    f'</label>' for kind, label in PROVENANCES if counts[kind])
    verified = sum(bool(r["verified"]) for r in rows)
    if verified:
        boxes += (f'<label><input type="checkbox" id="verified-only"> verified only ({verified})</label>')
    return f'<div class="filter">show: {boxes}</div>'


def index_html(rows: list[dict[str, Any]]) -> str:
    """The index: per dataset/preset (a "setting"; RobustBench keeps one board per threat model), a
    ranked table with short column names (tooltips, and a legend below the tables) and the
    privacy-utility figure. Details (ε bounds, compute, full attack names, warnings) are on each
    entry's page."""
    frontiers: dict[str, list[tuple[float, float, float]]] = {}  # (accuracy, leak, its SE) of each DP-SGD entry
    for r in rows:  # every comparison uses the ranking figure (leaderboard.build.rank_value)
        if r["is_dpsgd"] and isinstance(r["rank TPR"], float) and not r.get("unranked"):
            se = r.get("leak se")
            frontiers.setdefault(r["setting"], []).append((r["test acc"], r["rank TPR"],
                                                           se if isinstance(se, float) else float("nan")))
    for r in rows:
        reading = matched_reading(r["test acc"], frontiers.get(r["setting"], [])) if not r["is_dpsgd"] else None
        r["baseline"], r["baseline why"] = (reading.leak, reading.why) if reading else (None, "")
        r["baseline se"] = reading.se if reading and reading.se is not None and math.isfinite(reading.se) else None
    for r in rows:  # an entry audited with other attacks or canaries than the preset's: a table of its own, unranked
        r["table"] = r["setting"] + (": not ranked (attacks or canaries other than the preset's)" if r.get("unranked")
                                     else "")
    settings = sorted({r["table"] for r in rows})
    by_setting = {s: sorted((r for r in rows if r["table"] == s), key=rank_order) for s in settings}
    for group in by_setting.values():  # ranks count within a setting
        for n, r in enumerate((r for r in group if isinstance(r["rank TPR"], float) and not r.get("unranked")), 1):
            r["rank"] = n
    one = len(settings) == 1
    boards = "".join(("" if one else f'<h2 id="{_q(re.sub(r"[^a-z0-9]+", "-", s.lower()))}">{escape(s)}</h2>')
                     + _board(group) for s, group in by_setting.items())
    figures = "".join(_figure_of(s, group, [p[:2] for p in frontiers.get(s, [])]) for s, group in by_setting.items()
                      if not any(r.get("unranked") for r in group))
    legend = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in LEGEND)
    flagged = any(r.get("sample beats headline") or r.get("population beats headline") for r in rows)
    where = f" ({escape(settings[0])})" if one else ""
    paper_note = (f" At the paper's setting ({escape(PAPER_SETTING)}) the paper's own figures (Aerni et al. 2024, "
                  "Table 1: sample-level accuracy and TPR of each defense it evaluates) are drawn as hollow diamonds, "
                  "its DP-SGD ones joined by a dotted line; hover for each." if any(map(at_paper_setting, settings)) else "")
    return _page("privacy-harness leaderboard", f"""<h1>privacy-harness leaderboard</h1>
<p>How often the strongest membership-inference attack the harness ran finds each defense's most vulnerable
samples{where}: the leak, TPR at 0.1% FPR (or the smallest FPR the design resolves), lower is more private. Rows rank
by the leak, which no choice of declared attacks can lower; the defense's declared headline stays beside it as its
author's claim. Column definitions are below the table; each defense links to its details (ROC curves, every attack,
ε bounds, compute, provenance).</p>
{_filter(rows)}
{boards}
<dl class="legend">{legend}</dl>
<p class="foot" id="fn-flag">&#9888; {escape(FLAG_NOTE)}{'' if flagged else ' (no entry is flagged.)'}
Click a column header to sort.</p>
<figure><div class="plots">{figures}</div><figcaption>Test accuracy against the leak (sample level; lower is more
private), the DP-SGD entries joined as the frontier (the paper's Figure 7). An entry without a figure (no FPR with 3
expected false positives) is drawn as &#9661; at TPR 1, an upper bound.{paper_note}</figcaption></figure>
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
            c = f' <span class="muted">[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]</span>' if _finite_pair(ci) else ""
            tds.append(f"<td>{100 * v:.1f}%{c}</td>")
        rows.append(f'<tr><td class="name">{escape(level_name)}</td>'
                    f'<td class="name" title="{escape(a["name"], quote=True)}">'
                    f'{escape(a["name"])}{"*" if a.get("primary") else ""}{" (headline)" if best else ""}</td>'
                    f'<td class="name" title="{escape(a["variant"], quote=True)}">{escape(a["variant"])}</td>'
                    f'<td>{escape(a.get("access", ""))}</td>'
                    + "".join(tds) + f'<td>{a["auc"]:.3f}</td></tr>')
    return (f'<div class="scroll"><table><tr><th class="name">experiment</th><th class="name">attack</th>'
            f'<th class="name">variant</th><th>access</th>{head}<th>AUC</th></tr>{"".join(rows)}</table></div>')


def _figures_table(results: dict[str, Any], targets: list[str]) -> str:
    """Per level, the leak and the declared headline at the level's figure FPR, each with its
    interval, the variant that gives it and how many it was chosen among, the headline test's flag,
    and the sample/population ratio with its CI."""
    rows = []
    for lv in ("population", "sample"):
        if lv not in results:
            continue
        fig = results[lv].get("figure") or {}
        fpr = fig.get("fpr")
        flag = fig.get("flag") or {}
        for which, label in (("leak", "leak (ranked)"), ("declared", "declared headline")):
            rec = fig.get(which)
            if not rec:
                rows.append(f'<tr><td class="name">{escape(lv)}</td><td class="name">{label}</td>'
                            '<td colspan="6">unresolved: no FPR with 3 expected false positives</td></tr>')
                continue
            mark = ""
            if which == "declared" and flag.get("flagged") and flag.get("top"):
                t = flag["top"]
                mark = (f' <span class="loses">&#9888; {escape(t["name"])} ({escape(t["variant"])}) finds '
                        f'{100 * t["tpr"]:.1f}% at {100 * t["fpr"]:g}% FPR vs {100 * t["headline_tpr"]:.1f}%, '
                        f'adjusted p = {flag["p_value"]:.3f}</span>')
            elif which == "declared" and flag:
                mark = f' <span class="muted">headline test p = {flag["p_value"]:.3f}</span>'
            rows.append(f'<tr><td class="name">{escape(lv)}</td><td class="name">{label}{mark}</td>'
                        f'<td class="name" title="{escape(rec["source"], quote=True)}">{escape(rec["name"])}</td>'
                        f'<td class="name">{escape(rec["variant"])}</td><td>{escape(rec.get("access", ""))}</td>'
                        f'<td>{rec.get("candidates", 1)}</td>'
                        f'<td>{100 * fpr:g}%</td><td>{_figure(float(rec["tpr"]), _ci(rec), rec.get("lower"))}</td></tr>')
    ratio = _ratio(results)
    note = ""
    if ratio is not None:
        value, (lo, hi) = ratio
        note = (f'<p>Sample- over population-level leak: <b>{value:.1f}x</b> '
                f'<span class="muted">[{lo:.1f}, {hi:.1f}], 95% CI over victim models (bootstrap and jackknife)</span></p>')
    return (f'<div class="scroll"><table><tr><th class="name">level</th><th class="name">figure</th><th class="name">attack</th>'
            f'<th class="name">variant</th><th>access</th><th>best of</th><th>FPR</th><th>TPR</th></tr>'
            f'{"".join(rows)}</table></div>{note}')


def _summary_table(results: dict[str, Any], meta: dict[str, Any]) -> str:
    """What the index leaves out: the defense as it was run, its privacy bounds, the full headline
    attacks, compute and status."""
    from leaderboard.build import _entry

    row = _entry(results, Path("results.json"))
    levels, hours, devices = _compute(results)
    eps = (f"{row['DP ε']:.3g}" if isinstance(row["DP ε"], float) else
           f"label {row['label ε']:.3g} (a label-DP guarantee: the labels only)" if isinstance(row["label ε"], float)
           else "-")

    def num(v: Any) -> str:
        return f"{v:.3g}" if isinstance(v, float) else "-"

    def fig(level: str, which: str) -> str | None:
        if level not in results:
            return None
        f = results[level].get("figure") or {}
        rec = f.get(which)
        if not rec:
            return "unresolved (no FPR with 3 expected false positives)"
        beaten = "; beaten (headline test)" if which == "declared" and (f.get("flag") or {}).get("flagged") else ""
        return (f"{_pct(float(rec['tpr']))} at {100 * f['fpr']:g}% FPR: {rec['name']} ({rec['variant']}), "
                f"{rec.get('access', 'black-box')}; canary: {results[level].get('canary', 'none')}{beaten}")

    items = {
        "defense": f"{display_name(results)} ({provenance(results)}; run as {strip_paths(str(results['defense']))})",
        "setting": f"{results['dataset']}/{results['preset']}",
        "test accuracy, sample level": (f"{_pct(results['sample']['test_accuracy']['mean'])} (the models trained with "
                                        "the canaries; the board's acc)" if "sample" in results else None),
        "test accuracy, population level": (f"{_pct(results['population']['test_accuracy']['mean'])} (the models "
                                            "trained on the audit samples as they are)" if "population" in results
                                            else None),
        "leak, sample level (ranked)": fig("sample", "leak"),
        "leak, population level": fig("population", "leak"),
        "declared headline, sample level": fig("sample", "declared"),
        "declared headline, population level": fig("population", "declared"),
        "DP ε (δ = 1e-5)": eps,
        "empirical ε ≥ (one-run, 95%)": num(row["empirical ε ≥"]),
        "models": f"{results['num_models']} per level" + (f" × {levels} levels" if levels > 1 else ""),
        "device-hours": (f"{hours:.3f} ({', '.join(devices)})" if hours is not None else None),
        "checks": (check_summary(results["checks"]) if isinstance(results.get("checks"), dict) else
                   "not recorded (results.json from before the checks of harness.core.checks)"),
        "ranked": (f"no: {row['unranked']}" if row.get("unranked") else f"yes, in {row['setting']}"),
        "entry": (("verified: " + str(meta.get("verified_by"))) if meta.get("verified") else
                  ("submitted, not verified" if meta.get("source") == "submission" else "a run added by the board"))
                 + (f"; checked: {meta['checked']}" if meta.get("checked") else ""),
    }
    return '<table class="summary">' + "".join(f'<tr><th>{escape(k)}</th><td class="wrap">{escape(v)}</td></tr>'
                                              for k, v in items.items() if v is not None) + "</table>"


def _resolvable(levels: list[dict[str, Any]]) -> float | None:
    """The smallest FPR every one of ``levels`` resolves: 1 / its fewest non-member guesses (the
    primary variants' ``num_neg``); None where no attack records them."""
    negs = [int(a["num_neg"]) for lv in levels for a in lv.get("attacks", []) if a.get("num_neg")]
    return 1.0 / min(negs) if negs else None


def _experiments(results: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = [("population", results["population"])] if "population" in results else []
    by = results.get("sample_by_canary") or ({results["sample"]["canary"]: results["sample"]} if "sample" in results else {})
    return out + [(f"sample-{c}", r) for c, r in by.items()]


def entry_html(results: dict[str, Any], meta: dict[str, Any], results_href: str = "results.json",
               index_href: str | None = "../../index.html") -> str:
    """One entry's page: a summary of its figures, ROC figures, per-attack table, config and
    provenance; every absolute path of the machine that ran it is cut to its last part
    (leaderboard.build.public_results)."""
    results = public_results(results)
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
            figures.append(roc_svg(curves, f"{name} (canary: {level['canary']}), every variant", minor=minor,
                                   resolvable=_resolvable([level])))
        tables.append(_attack_table(name, level, targets))
    headline = [(name, lv) for name, lv in _experiments(results)]
    hl_curves = [(f"{name}: {lv['best']['name']}:{lv['best']['variant']}", a["roc_curve"]["fpr"], a["roc_curve"]["tpr"])
                 for name, lv in headline for a in lv["attacks"]
                 if (a["name"], a["variant"]) == (lv["best"]["name"], lv["best"]["variant"]) and "roc_curve" in a]
    if hl_curves:
        figures.insert(0, roc_svg(hl_curves, "Headline attack: population vs each canary",
                                  resolvable=_resolvable([lv for _, lv in headline])))
    if not figures:
        figures.append('<p class="muted">This results.json predates ROC curves in results.json (harness 0.2.0 '
                       'before roc_curve): re-run `harness attack RUN_DIR` to add them.</p>')
    levels, hours, devices = _compute(results)
    outside = results.get("provenance") == "external"
    models_version = results.get("trained_with_version")
    prov = {
        "harness version (these figures)": results.get("harness_version"),
        # the models version is the training code's, kept by releases that train the same models: not
        # the release that trained them (0.3.0 trains as 0.2.1 did), and for imported models not a trainer's
        ("models version (of the importing harness)" if outside else "models version (training code)"): (
            f"{models_version}: " + ("these models were trained outside the harness; the version is that of the "
                                     "harness that imported their outputs" if outside else
                                     "the version of the harness's training code, part of the run fingerprint; a "
                                     "release that trains the same models keeps it, so a newer harness may have "
                                     "trained them")) if models_version else None,
        "run fingerprint": results.get("fingerprint"),
        "data fingerprint": results.get("data_fingerprint"),
        "seed": results.get("seed"),
        "created": results.get("created"),
        "devices": ", ".join(devices),
        "machines": "; ".join(f"{m.get('models')} models on {describe_machine(m)}"
                              for m in (results.get("machine") or {}).get("models") or []) or None,
        "models": f"{results['num_models']} per level, {results['num_models'] * levels} trained",
        "device-hours": f"{hours:.3f}" if hours is not None else None,
        "source": meta.get("source", "run"),
        "verified": ("yes, " + str(meta.get("verified_by"))) if meta.get("verified") else "no",
    }
    if outside:
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
    title = f"{display_name(results)} ({results['dataset']}/{results['preset']})"
    return _page(f"privacy-harness: {title}", f"""{back}<h1 class="title" title="{escape(title, quote=True)}">{escape(title)}</h1>
<p><a href="{escape(results_href, quote=True)}" download>download results.json</a></p>
{f'<ul>{notes}</ul>' if notes else ''}
<h2>Summary</h2>{_summary_table(results, meta)}
<h2>Leak and declared headline</h2><p class="muted">leak (ranked): the largest TPR of a fixed set of primary attacks
(the configured built-ins, the adaptations the harness adds, the served declared attacks), a plain maximum that a
declaration can only raise; declared headline: the largest of the defense's served declared attacks; both at the
level's figure FPR (at least 3 expected false positives), with a 95% CI and a one-sided 95% lower bound (&ge;),
Bonferroni over the candidates; victim bootstrap and jackknife, conditional on the audit samples. &#9888;: the
headline test finds a candidate that beats the declared headline.</p>{_figures_table(results, targets)}
<div class="plots">{''.join(figures)}</div>
<p class="muted">Shaded in the ROC figures: the FPRs below 1 / (the experiment's non-member guesses), which its
design does not resolve.</p>{bracket_section(results.get("bracket"))}
<h2>Attacks</h2><p class="muted">* primary variant; (headline): the experiment's declared headline variant; each
variant's own TPR as the paper reads it (FPR &le; x%; not the figure) with the figures' one-variant interval
(victim bootstrap and jackknife: docs/protocol.md, Metrics); "unresolved": fewer than 3 expected false
positives.</p>{''.join(tables)}
<h2>Provenance</h2><div class="scroll"><table>{prov_rows}</table></div>
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
    """What the site publishes of a results.json: ``data`` (its bytes) if it is valid JSON without an
    absolute path of the machine that ran it; else ``results`` re-written as valid JSON (a file of
    an earlier version holds bare ``Infinity`` / ``NaN`` tokens: harness.core.jsonio) with every
    such path cut to its last part (leaderboard.build.public_results: the plugin file, run.out,
    data.path). Verification compares the same public form (leaderboard/submit.py)."""
    public = public_results(results)
    try:
        jsonio.strict_loads(data)
        if public == results:
            return data
    except ValueError:
        pass
    return (jsonio.dumps(public, indent=2) + "\n").encode()


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
            results, _ = read_results(f)
        except ValueError as e:
            if skipped is not None:
                skipped.append((f, str(e)))
            continue
        if (why := refusal(results)) is not None:  # degenerate outputs, chance accuracy, an unforced membership failure
            if skipped is not None:
                skipped.append((f, why))
            continue
        add_results(out, f)
    return rebuild(out, skipped)
