"""Self-contained inline SVG plots for the leaderboard site (no plotting library at view time).

- :func:`roc_svg`: log-log ROC curves (the paper's Figure 3 style), TPR vs FPR from 1e-5 to 1, the
  chance diagonal dashed, the FPRs below the design's smallest resolvable one (1 / its non-member
  guesses) shaded, each legend label whole (wrapped over up to three lines, never cut where two
  variants differ).
- :func:`privacy_utility_svg`: test accuracy vs sample-level TPR@0.1% FPR on a log axis (the
  paper's Figure 7), one labelled point per entry (labels placed so that none overlaps another, a
  point or the legend: :func:`place_labels`), the DP-SGD baselines joined as a frontier, and an
  entry whose figure is unresolved drawn at its upper bound with its own marker; its legend lists only
  the kinds of marks the figure draws, and at the paper's setting the paper's figures (Table 1) are
  drawn as a reference.

Every label is escaped (``html.escape(quote=True)``): the plots embed submitted text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from html import escape
from typing import NamedTuple, Sequence

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
LOG_MIN = 1e-5


def _log_pos(v: float, lo: float, hi: float, px0: float, px1: float) -> float:
    v = min(max(v, lo), hi)
    return px0 + (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * (px1 - px0)


def _lin_pos(v: float, lo: float, hi: float, px0: float, px1: float) -> float:
    return px0 + (v - lo) / (hi - lo) * (px1 - px0) if hi > lo else (px0 + px1) / 2


def _label(text: str, limit: int = 48) -> str:
    """Escaped text, shortened to ``limit`` characters (the full text goes in a <title>)."""
    return escape(text if len(text) <= limit else text[: limit - 1] + "…", quote=True)


def _points(fpr: Sequence[float], tpr: Sequence[float], left: float, right: float, top: float, bottom: float) -> str:
    return " ".join(f"{_log_pos(f, LOG_MIN, 1.0, left, right):.1f},{_log_pos(t, LOG_MIN, 1.0, bottom, top):.1f}"
                    for f, t in zip(fpr, tpr))


_BREAKS = re.compile(r"[^:\-\s,/]+[:\-\s,/]*|[:\-\s,/]+")


def wrap_label(text: str, room: float, size: float, max_lines: int = 3) -> list[str]:
    """``text`` in lines of at most ``room`` px at ``size`` (:func:`text_width`), broken after ``:``,
    ``-``, ``,``, ``/`` or a space (a longer run of characters is split anywhere). Past ``max_lines``
    the last line keeps the text's *end* after an ellipsis: two legend labels that differ only at
    their ends (``...-persample`` and ``...-global``) stay told apart."""
    lines: list[str] = []
    for token in _BREAKS.findall(text):
        while token:
            if lines and text_width(lines[-1] + token, size) <= room:
                lines[-1] += token
                break
            if text_width(token, size) <= room:
                lines.append(token)
                break
            n = max([k for k in range(1, len(token)) if text_width(token[:k], size) <= room] or [1])
            lines.append(token[:n])  # a run wider than a line: as much as fits, the rest after it
            token = token[n:]
    lines = [ln.rstrip() for ln in lines] or [""]
    if len(lines) > max_lines:
        tail = text
        while tail and text_width("…" + tail, size) > room:
            tail = tail[1:]
        lines = lines[: max_lines - 1] + ["…" + tail]
    return lines


def roc_axes(left: float, right: float, top: float, bottom: float, height: float,
             resolvable: float | None = None) -> list[str]:
    """The log-log frame of a TPR-vs-FPR plot from 1e-5 to 1: a grid line and a label per decade on
    both axes, the FPRs below ``resolvable`` shaded (where given), the box, the chance diagonal
    (dashed) and the axis titles."""
    parts = []
    for k in range(-5, 1):  # decades
        x = _log_pos(10.0**k, LOG_MIN, 1.0, left, right)
        y = _log_pos(10.0**k, LOG_MIN, 1.0, bottom, top)
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="#e5e5e5"/>')
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{x:.1f}" y="{bottom + 15}" text-anchor="middle" font-size="10">1e{k}</text>')
        parts.append(f'<text x="{left - 5}" y="{y + 3:.1f}" text-anchor="end" font-size="10">1e{k}</text>')
    if resolvable is not None and resolvable > LOG_MIN:
        edge = _log_pos(resolvable, LOG_MIN, 1.0, left, right)
        why = (f"FPR below {resolvable:.2g} = 1 / the design's non-member guesses: not resolved (a TPR there "
               "reads one false positive or none)")
        parts.append(f'<rect class="unresolved" x="{left}" y="{top}" width="{edge - left:.1f}" height="{bottom - top}" '
                     f'fill="#000" fill-opacity="0.07"><title>{escape(why, quote=True)}</title></rect>')
        if edge - left >= text_width("unresolved", 9) + 6:
            parts.append(f'<text x="{left + 3}" y="{top + 11}" font-size="9" fill="#666">unresolved</text>')
    parts.append(f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="none" stroke="#444"/>')
    parts.append(f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{top}" stroke="#999" stroke-dasharray="4 3"/>')
    parts.append(f'<text x="{(left + right) / 2}" y="{height - 8}" text-anchor="middle" font-size="11">'
                 'false positive rate</text>')
    parts.append(f'<text x="14" y="{(top + bottom) / 2}" text-anchor="middle" font-size="11" '
                 f'transform="rotate(-90 14 {(top + bottom) / 2})">true positive rate</text>')
    return parts


def roc_svg(curves: Sequence[tuple[str, Sequence[float], Sequence[float]]], title: str,
            width: int = 520, height: int = 420,
            minor: Sequence[tuple[str, Sequence[float], Sequence[float], int]] = (),
            resolvable: float | None = None) -> str:
    """Log-log ROC curves: ``curves`` are (label, fpr, tpr) with FPR/TPR in [0, 1], one legend entry
    each (the whole label, :func:`wrap_label`); points at 0 are drawn on the 1e-5 edge. ``minor``
    curves (label, fpr, tpr, index of the curve whose colour they share) are drawn thin and faint,
    named in their tooltip only. ``resolvable``: the smallest FPR the design resolves (1 / its
    non-member guesses); the FPRs below it, where a TPR reads one guess or none, are shaded."""
    left, right, top, bottom = 60, width - 190, 30, height - 45
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot roc" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_label(title, 200)}">',
             f'<title>{escape(title, quote=True)}</title>',
             f'<text x="{(left + right) / 2}" y="18" text-anchor="middle" font-size="13">{_label(title, 70)}</text>']
    parts += roc_axes(left, right, top, bottom, height, resolvable)
    for label, fpr, tpr, i in minor:
        parts.append(f'<polyline class="curve minor" fill="none" stroke="{PALETTE[i % len(PALETTE)]}" '
                     f'stroke-width="0.8" stroke-opacity="0.4" points="{_points(fpr, tpr, left, right, top, bottom)}">'
                     f'<title>{escape(label, quote=True)}</title></polyline>')
    ly = top + 12
    for i, (label, fpr, tpr) in enumerate(curves):
        color = PALETTE[i % len(PALETTE)]
        pts = _points(fpr, tpr, left, right, top, bottom)
        parts.append(f'<polyline class="curve" fill="none" stroke="{color}" stroke-width="1.6" points="{pts}">'
                     f'<title>{escape(label, quote=True)}</title></polyline>')
        parts.append(f'<line x1="{right + 10}" y1="{ly - 4}" x2="{right + 28}" y2="{ly - 4}" stroke="{color}" '
                     'stroke-width="2"/>')
        lines = wrap_label(label, width - right - 36, 10)
        spans = "".join(f'<tspan x="{right + 32}" dy="{0 if k == 0 else 12}">{escape(line, quote=True)}</tspan>'
                        for k, line in enumerate(lines))
        parts.append(f'<text class="legend-label" x="{right + 32}" y="{ly}" font-size="10">'
                     f'<title>{escape(label, quote=True)}</title>{spans}</text>')
        ly += 12 * len(lines) + 4
    if minor:
        parts.append(f'<text x="{right + 10}" y="{ly}" font-size="10" fill="#666">thin: {len(minor)} other '
                     'variants</text>')
    parts.append("</svg>")
    return "".join(parts)


#: advance widths of DejaVu Sans (Chromium's sans-serif on Debian, one of the widest) in ems, rounded
#: up: a label's box is estimated from them, so that the real text fits inside it with a narrower font
_NARROW, _SEMI, _WIDE = set("ijl.,:;'|!` "), set("frt()[]{}-/\\\"*"), set("mwMW%@")


def text_width(text: str, size: float) -> float:
    """An upper estimate of the width of ``text`` set in a sans-serif font of ``size`` px."""
    em = 0.0
    for c in text:
        em += (0.33 if c in _NARROW else 0.45 if c in _SEMI else 1.0 if c in _WIDE else
               0.8 if c.isupper() else 0.65)
    return em * size


Box = tuple[float, float, float, float]  # x0, y0, x1, y1


def _hits(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@dataclass(frozen=True)
class Label:
    """A placed label: its text, anchor point (x, baseline y), box, and whether a leader line joins it
    to its point."""

    text: str
    x: float
    y: float
    box: Box
    lead: bool


LABEL_SIZE = 10.0
_ASCENT, _DESCENT = 0.95 * LABEL_SIZE, 0.3 * LABEL_SIZE  # DejaVu Sans: 0.93 and 0.24 em, rounded up


def _box(x: float, baseline: float, width: float) -> Box:
    return (x, baseline - _ASCENT, x + width, baseline + _DESCENT)


Segment = tuple[float, float, float, float]  # x0, y0, x1, y1


def _crosses(seg: Segment, b: Box) -> bool:
    """Whether a line segment passes through a box (Liang-Barsky clipping)."""
    x0, y0, x1, y1 = seg
    dx, dy = x1 - x0, y1 - y0
    lo, hi = 0.0, 1.0
    for p, q in ((-dx, x0 - b[0]), (dx, b[2] - x0), (-dy, y0 - b[1]), (dy, b[3] - y0)):
        if p == 0:
            if q < 0:
                return False
            continue
        t = q / p
        if p < 0:
            lo = max(lo, t)
        else:
            hi = min(hi, t)
        if lo > hi:
            return False
    return True


def place_labels(texts: Sequence[str], xy: Sequence[tuple[float, float]], area: Box,
                 obstacles: Sequence[Box] = (), marker: float = 6.0,
                 lines: Sequence[Segment] = ()) -> list[Label | None]:
    """Where each point's label goes, so that no two labels overlap and no label covers a point, an
    obstacle (the legend) or a line (the frontier's segments) or leaves ``area``; None for a label
    that does not fit anywhere (the caller names that point in a key instead).

    Points are taken from the top of the figure down; each label tries, in order, the spots right
    and left of its point, then above and below, then further up and down on either side (joined to
    the point by a leader line), and takes the first that is free."""
    points = [(x - marker, y - marker, x + marker, y + marker) for x, y in xy]
    placed: list[Box] = []
    out: list[Label | None] = [None] * len(texts)
    line = _ASCENT + _DESCENT + 1
    for i in sorted(range(len(texts)), key=lambda j: (xy[j][1], xy[j][0])):
        x, y = xy[i]
        w = text_width(texts[i], LABEL_SIZE)
        mid = y + (_ASCENT - _DESCENT) / 2  # the baseline that centres the text on the point
        spots = [(x + marker + 2, mid), (x - marker - 2 - w, mid),
                 (x + 2, y - marker - 2 - _DESCENT), (x + 2, y + marker + 2 + _ASCENT),
                 (x - 2 - w, y - marker - 2 - _DESCENT), (x - 2 - w, y + marker + 2 + _ASCENT)]
        for k in range(1, 12):
            for side in (x + marker + 2, x - marker - 2 - w):
                spots += [(side, mid - k * line), (side, mid + k * line)]
        for n, (tx, ty) in enumerate(spots):
            b = _box(tx, ty, w)
            if b[0] < area[0] or b[1] < area[1] or b[2] > area[2] or b[3] > area[3]:
                continue
            pad = (b[0] - 1, b[1] - 1, b[2] + 1, b[3] + 1)
            if any(_hits(pad, o) for o in (*placed, *points, *obstacles)) or any(_crosses(g, pad) for g in lines):
                continue
            placed.append(b)
            out[i] = Label(texts[i], tx, ty, b, lead=n >= 6)
            break
    return out


class Point(NamedTuple):
    """One entry on the privacy-utility figure: ``tpr`` is its ranking figure, or, with ``bound``, an
    upper bound on it (the TPR at the lowest FPR its design resolves) for an entry whose figure at
    the headline FPR is unresolved."""

    label: str
    acc: float
    tpr: float
    is_dp: bool
    bound: bool = False


class Reference(NamedTuple):
    """Published figures drawn beside the board's: ``points`` (label, accuracy, TPR) as hollow
    diamonds, ``frontier`` (accuracy, TPR) joined as a dotted line, named ``source`` in the legend."""

    source: str
    points: Sequence[tuple[str, float, float]]
    frontier: Sequence[tuple[float, float]] = ()


def privacy_utility_svg(points: Sequence[Point], frontiers: dict[str, Sequence[tuple[float, float]]], title: str,
                        width: int = 760, height: int = 440, bound_note: str = "unresolved: at most",
                        reference: Reference | None = None, y_label: str = "sample-level TPR at 0.1% FPR") -> str:
    """Test accuracy (x) vs sample-level TPR at the figure FPR (y, log; ``y_label`` names it): one marker per :class:`Point` with its
    label placed by :func:`place_labels` (points at the same spot share one label, their names
    joined; a label that fits nowhere becomes a number, named in a key below the figure);
    ``frontiers`` maps a setting (dataset/preset) to its DP-SGD (accuracy, TPR) points, joined in
    order of accuracy. TPRs below 1e-3 are drawn on the 1e-3 edge. ``reference``: published figures
    at this setting (the paper's), drawn unlabelled (named in their tooltips). The legend lists only
    the kinds of marks drawn. ``title`` is one short line (it is cut to the figure's width); the
    explanation belongs in the page around the figure."""
    left, right, top, bottom = 56, width - 160, 30, height - 42
    ylo = 1e-3
    ref_points = list(reference.points) if reference else []
    ref_line = sorted(reference.frontier) if reference else []
    accs = [p.acc for p in points] + [a for _, a, _ in ref_points] + [a for a, _ in ref_line] or [0.0, 1.0]
    xlo = max(0.0, math.floor(min(accs) * 20) / 20 - 0.02)
    xhi = min(1.0, math.ceil(max(accs) * 20) / 20 + 0.01)
    if xhi <= xlo:
        xlo, xhi = max(0.0, xlo - 0.05), min(1.0, xhi + 0.05)
    title_text = _fit(title, width - 16, 13)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot privacy-utility" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{_label(title, 200)}">',
             f'<title>{escape(title, quote=True)}</title>',
             f'<text class="title" x="{width / 2}" y="18" text-anchor="middle" font-size="13">'
             f'{escape(title_text, quote=True)}</text>']
    for k in range(-3, 1):
        y = _log_pos(10.0**k, ylo, 1.0, bottom, top)
        tick = "≤0.1%" if k == -3 else f"{100 * 10.0**k:g}%"
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{left - 5}" y="{y + 3:.1f}" text-anchor="end" font-size="10">{tick}</text>')
    step = 0.05 if xhi - xlo > 0.2 else 0.02 if xhi - xlo > 0.06 else 0.01
    v = math.ceil(xlo / step - 1e-9) * step
    while v <= xhi + 1e-9:
        x = _lin_pos(v, xlo, xhi, left, right)
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{x:.1f}" y="{bottom + 15}" text-anchor="middle" font-size="10">{100 * v:.0f}%</text>')
        v += step
    parts.append(f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="none" stroke="#444"/>')
    parts.append(f'<text x="{(left + right) / 2}" y="{height - 8}" text-anchor="middle" font-size="11">'
                 'test accuracy</text>')
    parts.append(f'<text x="14" y="{(top + bottom) / 2}" text-anchor="middle" font-size="11" '
                 f'transform="rotate(-90 14 {(top + bottom) / 2})">{escape(y_label)}</text>')
    for setting, pts in sorted(frontiers.items()):
        xy_line = " ".join(f"{_lin_pos(a, xlo, xhi, left, right):.1f},{_log_pos(t, ylo, 1.0, bottom, top):.1f}"
                           for a, t in sorted(pts))
        parts.append(f'<polyline class="frontier" fill="none" stroke="#555" stroke-width="1.5" '
                     f'stroke-dasharray="6 3" points="{xy_line}"><title>DP-SGD frontier: {escape(setting, quote=True)}'
                     '</title></polyline>')
    if ref_line:
        xy_ref = " ".join(f"{_lin_pos(a, xlo, xhi, left, right):.1f},{_log_pos(t, ylo, 1.0, bottom, top):.1f}"
                          for a, t in ref_line)
        parts.append(f'<polyline class="reference-frontier" fill="none" stroke="#888" stroke-width="1.2" '
                     f'stroke-dasharray="1 3" points="{xy_ref}"><title>DP-SGD, {escape(reference.source, quote=True)}'
                     '</title></polyline>')
    ref_xy = [(_lin_pos(a, xlo, xhi, left, right), _log_pos(t, ylo, 1.0, bottom, top)) for _, a, t in ref_points]
    for (label, a, t), (x, y) in zip(ref_points, ref_xy):
        parts.append(f'<g>{_marker("reference", x, y)}<title>{escape(reference.source, quote=True)}: '
                     f'{escape(label, quote=True)}, accuracy {100 * a:.1f}%, TPR {100 * t:.1f}%</title></g>')
    # the legend, in the right margin at the bottom, listing only what the figure draws; the labels keep clear of it
    legend = []
    if any(p.is_dp and not p.bound for p in points):
        legend.append(("dp", "DP-SGD"))
    if any(len(pts) >= 2 for pts in frontiers.values()):
        legend.append(("frontier", "DP-SGD frontier"))
    if any(not p.is_dp and not p.bound for p in points):
        legend.append(("point", "other defenses"))
    if any(p.bound for p in points):
        legend.append(("bound", bound_note))
    if ref_points or ref_line:
        legend.append(("reference", reference.source))
    # each label whole (wrap_label), an entry 15 px high plus 12 px a further line, the last ending at the axis
    lx = right + 10
    wrapped = [wrap_label(text, width - lx - 18, 10) for _, text in legend]
    ly0 = bottom - sum(15 + 12 * (len(lines) - 1) for lines in wrapped) + 4
    legend_box = (lx - 2, ly0 - 10, width - 2, bottom + 4)
    parts.append('<g class="legend">')
    ly = ly0
    for (kind, text), lines in zip(legend, wrapped):
        spans = "".join(f'<tspan x="{lx + 16}" dy="{0 if k == 0 else 12}">{escape(line, quote=True)}</tspan>'
                        for k, line in enumerate(lines))
        parts.append(_marker(kind, lx + 6, ly - 4, legend=True)
                     + f'<text x="{lx + 16}" y="{ly}" font-size="10"><title>{escape(text, quote=True)}</title>'
                     f'{spans}</text>')
        ly += 15 + 12 * (len(lines) - 1)
    parts.append("</g>")
    # one label per spot: points drawn at the same place share it
    xy = [(_lin_pos(p.acc, xlo, xhi, left, right), _log_pos(p.tpr, ylo, 1.0, bottom, top)) for p in points]
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (x, y) in enumerate(xy):
        groups.setdefault((round(x), round(y)), []).append(i)
    spots = list(groups.values())
    texts = [_fit(", ".join(dict.fromkeys(points[i].label for i in g)), 200, LABEL_SIZE) for g in spots]
    area = (left + 2, top + 2, width - 4, bottom - 2)
    segments = []
    for pts in [*frontiers.values(), ref_line]:
        line = [(_lin_pos(a, xlo, xhi, left, right), _log_pos(t, ylo, 1.0, bottom, top)) for a, t in sorted(pts)]
        segments += [(*a, *b) for a, b in zip(line, line[1:])]
    ref_boxes = [(x - 6, y - 6, x + 6, y + 6) for x, y in ref_xy]
    placed = place_labels(texts, [xy[g[0]] for g in spots], area, [legend_box, *ref_boxes], lines=segments)
    missing = [n for n, lab in enumerate(placed) if lab is None]
    if missing:  # numbers instead of names where a name fits nowhere, the names in a key
        numbers = place_labels([str(k + 1) for k in range(len(missing))], [xy[spots[n][0]] for n in missing], area,
                               [legend_box, *ref_boxes, *(lab.box for lab in placed if lab is not None)],
                               lines=segments)
        for k, n in enumerate(missing):
            placed[n] = numbers[k]
    for i, p in enumerate(points):
        x, y = xy[i]
        kind = "bound" if p.bound else "dp" if p.is_dp else "point"
        what = f"at most {100 * p.tpr:.1f}% (unresolved at 0.1% FPR)" if p.bound else f"{100 * p.tpr:.1f}%"
        parts.append(f'<g>{_marker(kind, x, y, dp=p.is_dp)}<title>{escape(p.label, quote=True)}: accuracy '
                     f'{100 * p.acc:.1f}%, TPR {escape(what)}</title></g>')
    for g, lab in zip(spots, placed):
        if lab is None:
            continue
        x, y = xy[g[0]]
        if lab.lead:  # from the point to the nearest end of the label
            ex = lab.box[0] if lab.box[0] > x else lab.box[2]
            parts.append(f'<line class="lead" x1="{x:.1f}" y1="{y:.1f}" x2="{ex:.1f}" '
                         f'y2="{(lab.box[1] + lab.box[3]) / 2:.1f}" stroke="#bbb"/>')
        parts.append(f'<text class="label" x="{lab.x:.1f}" y="{lab.y:.1f}" font-size="{LABEL_SIZE:g}">'
                     f'{escape(lab.text, quote=True)}</text>')
    # the key of the names that did not fit beside their point, in rows below the figure
    key = []
    for n in missing:
        p = points[spots[n][0]]
        key.append(f"{placed[n].text}: {texts[n]}" if placed[n] is not None else
                   f"{texts[n]}: {100 * p.acc:.1f}%, {'at most ' if p.bound else ''}{100 * p.tpr:.1f}%")
    cols = 3
    cell = (width - 2 * 8) / cols
    for k, line in enumerate(key):
        kx, ky = 8 + cell * (k % cols), height + 4 + 14 * (k // cols)
        parts.append(f'<text class="key" x="{kx:.1f}" y="{ky}" font-size="10">'
                     f'{escape(_fit(line, cell - 8, 10), quote=True)}<title>{escape(line, quote=True)}</title></text>')
    parts.append("</svg>")
    total = height + (14 * math.ceil(len(key) / cols) + 4 if key else 0)
    parts[0] = parts[0].replace(f'height="{height}" viewBox="0 0 {width} {height}"',
                                f'height="{total}" viewBox="0 0 {width} {total}"')
    return "".join(parts)


def _fit(text: str, room: float, size: float) -> str:
    """``text``, cut with an ellipsis to fit ``room`` px at ``size`` (by :func:`text_width`)."""
    if text_width(text, size) <= room:
        return text
    while text and text_width(text + "…", size) > room:
        text = text[:-1]
    return text + "…"


def _marker(kind: str, x: float, y: float, dp: bool = False, legend: bool = False) -> str:
    """The marker of a point kind: DP-SGD a grey square, other defenses a red circle, an unresolved
    entry's upper bound a hollow triangle pointing down (grey for DP-SGD), the frontier a dash."""
    r = 4 if legend else 5
    cls = "mark" if legend else "point"  # the legend's markers stand for no entry
    if kind == "reference":  # a published figure: a hollow grey diamond
        return (f'<path class="{"mark" if legend else "ref"}" d="M{x:.1f},{y - r - 1:.1f} L{x + r + 1:.1f},{y:.1f} '
                f'L{x:.1f},{y + r + 1:.1f} L{x - r - 1:.1f},{y:.1f} Z" fill="#fff" stroke="#777" stroke-width="1.4"/>')
    if kind == "frontier":
        return f'<line x1="{x - 6:.1f}" y1="{y:.1f}" x2="{x + 6:.1f}" y2="{y:.1f}" stroke="#555" stroke-dasharray="4 2"/>'
    if kind == "dp":
        return f'<rect class="{cls} dp" x="{x - r:.1f}" y="{y - r:.1f}" width="{2 * r}" height="{2 * r}" fill="#555"/>'
    if kind == "bound":
        c = "#555" if dp else "#d62728"
        return (f'<path class="{cls} bound" d="M{x - r - 1:.1f},{y - r:.1f} L{x + r + 1:.1f},{y - r:.1f} '
                f'L{x:.1f},{y + r + 1:.1f} Z" fill="#fff" stroke="{c}" stroke-width="1.6"/>')
    return f'<circle class="{cls}" cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="#d62728"/>'
