"""Self-contained inline SVG plots for the leaderboard site (no plotting library at view time).

- :func:`roc_svg`: log-log ROC curves (the paper's Figure 3 style), TPR vs FPR from 1e-5 to 1, the
  chance diagonal dashed.
- :func:`privacy_utility_svg`: test accuracy vs sample-level TPR@0.1% FPR on a log axis (the
  paper's Figure 7), one labelled point per entry, the DP-SGD baselines joined as a frontier.

Every label is escaped (``html.escape(quote=True)``): the plots embed submitted text.
"""

from __future__ import annotations

import math
from html import escape
from typing import Sequence

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


def roc_svg(curves: Sequence[tuple[str, Sequence[float], Sequence[float]]], title: str,
            width: int = 520, height: int = 420,
            minor: Sequence[tuple[str, Sequence[float], Sequence[float], int]] = ()) -> str:
    """Log-log ROC curves: ``curves`` are (label, fpr, tpr) with FPR/TPR in [0, 1], one legend line
    each; points at 0 are drawn on the 1e-5 edge. ``minor`` curves (label, fpr, tpr, index of the
    curve whose colour they share) are drawn thin and faint, named in their tooltip only."""
    left, right, top, bottom = 60, width - 190, 30, height - 45
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot roc" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_label(title, 200)}">',
             f'<title>{escape(title, quote=True)}</title>',
             f'<text x="{(left + right) / 2}" y="18" text-anchor="middle" font-size="13">{_label(title, 70)}</text>']
    for k in range(-5, 1):  # decades
        x = _log_pos(10.0**k, LOG_MIN, 1.0, left, right)
        y = _log_pos(10.0**k, LOG_MIN, 1.0, bottom, top)
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="#e5e5e5"/>')
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{x:.1f}" y="{bottom + 15}" text-anchor="middle" font-size="10">1e{k}</text>')
        parts.append(f'<text x="{left - 5}" y="{y + 3:.1f}" text-anchor="end" font-size="10">1e{k}</text>')
    parts.append(f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="none" stroke="#444"/>')
    parts.append(f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{top}" stroke="#999" stroke-dasharray="4 3"/>')
    parts.append(f'<text x="{(left + right) / 2}" y="{height - 8}" text-anchor="middle" font-size="11">'
                 'false positive rate</text>')
    parts.append(f'<text x="14" y="{(top + bottom) / 2}" text-anchor="middle" font-size="11" '
                 f'transform="rotate(-90 14 {(top + bottom) / 2})">true positive rate</text>')
    for label, fpr, tpr, i in minor:
        parts.append(f'<polyline class="curve minor" fill="none" stroke="{PALETTE[i % len(PALETTE)]}" '
                     f'stroke-width="0.8" stroke-opacity="0.4" points="{_points(fpr, tpr, left, right, top, bottom)}">'
                     f'<title>{escape(label, quote=True)}</title></polyline>')
    for i, (label, fpr, tpr) in enumerate(curves):
        color = PALETTE[i % len(PALETTE)]
        pts = _points(fpr, tpr, left, right, top, bottom)
        parts.append(f'<polyline class="curve" fill="none" stroke="{color}" stroke-width="1.6" points="{pts}">'
                     f'<title>{escape(label, quote=True)}</title></polyline>')
        ly = top + 12 + 15 * i
        parts.append(f'<line x1="{right + 10}" y1="{ly - 4}" x2="{right + 28}" y2="{ly - 4}" stroke="{color}" '
                     'stroke-width="2"/>')
        parts.append(f'<text x="{right + 32}" y="{ly}" font-size="10"><title>{escape(label, quote=True)}</title>'
                     f'{_label(label, 28)}</text>')
    if minor:
        ly = top + 12 + 15 * len(curves)
        parts.append(f'<text x="{right + 10}" y="{ly}" font-size="10" fill="#666">thin: {len(minor)} other '
                     'variants</text>')
    parts.append("</svg>")
    return "".join(parts)


def _place_labels(points: Sequence[tuple[str, float, float, bool]], xy: Sequence[tuple[float, float]],
                  line: float = 11.0, char: float = 5.6) -> list[tuple[float, float, str] | None]:
    """Where each point's label goes: (x, baseline y, text), or None for a point whose label another
    point at the same spot carries (their names joined with ", "). Labels start just above and right
    of their point and move down a line at a time until they overlap no label placed before them
    (placed from the top of the figure down), so every name stays legible."""
    same: dict[tuple[int, int], list[int]] = {}
    for i, (x, y) in enumerate(xy):
        same.setdefault((round(x), round(y)), []).append(i)
    out: list[tuple[float, float, str] | None] = [None] * len(points)
    boxes: list[tuple[float, float, float]] = []  # (x0, x1, baseline y) of placed labels
    for group in sorted(same.values(), key=lambda g: xy[g[0]][1]):
        x, y = xy[group[0]]
        words = ", ".join(dict.fromkeys(points[i][0] for i in group))
        x0, x1, ty = x + 7, x + 7 + char * min(len(words), 32), y - 6
        while any(x0 < b1 and b0 < x1 and abs(ty - by) < line for b0, b1, by in boxes):
            ty += line
        boxes.append((x0, x1, ty))
        out[group[0]] = (x0, ty, words)
    return out


def privacy_utility_svg(points: Sequence[tuple[str, float, float, bool]],
                        frontiers: dict[str, Sequence[tuple[float, float]]], title: str,
                        width: int = 760, height: int = 440) -> str:
    """Test accuracy (x) vs sample-level TPR@0.1% FPR (y, log): ``points`` are (label, accuracy, TPR,
    is_dp); ``frontiers`` maps a setting (dataset/preset) to its DP-SGD (accuracy, TPR) points, joined
    in order of accuracy. TPRs below 1e-3 are drawn on the 1e-3 edge."""
    left, right, top, bottom = 60, width - 150, 36, height - 45  # labels may run into the right margin
    ylo = 1e-3
    accs = [p[1] for p in points] or [0.0, 1.0]
    xlo = max(0.0, math.floor(min(accs) * 20) / 20 - 0.05)
    xhi = min(1.0, math.ceil(max(accs) * 20) / 20 + 0.02)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot privacy-utility" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{_label(title, 200)}">',
             f'<title>{escape(title, quote=True)}</title>',
             f'<text x="{(left + right) / 2}" y="18" text-anchor="middle" font-size="13">{_label(title, 90)}</text>']
    for k in range(-3, 1):
        y = _log_pos(10.0**k, ylo, 1.0, bottom, top)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{left - 5}" y="{y + 3:.1f}" text-anchor="end" font-size="10">{100 * 10.0**k:g}%</text>')
    steps = max(1, round((xhi - xlo) / 0.05))
    for i in range(steps + 1):
        v = xlo + (xhi - xlo) * i / steps
        x = _lin_pos(v, xlo, xhi, left, right)
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{x:.1f}" y="{bottom + 15}" text-anchor="middle" font-size="10">{100 * v:.0f}%</text>')
    parts.append(f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="none" stroke="#444"/>')
    parts.append(f'<text x="{(left + right) / 2}" y="{height - 8}" text-anchor="middle" font-size="11">'
                 'test accuracy</text>')
    parts.append(f'<text x="14" y="{(top + bottom) / 2}" text-anchor="middle" font-size="11" '
                 f'transform="rotate(-90 14 {(top + bottom) / 2})">sample-level TPR at 0.1% FPR</text>')
    for i, (setting, pts) in enumerate(sorted(frontiers.items())):
        xy = " ".join(f"{_lin_pos(a, xlo, xhi, left, right):.1f},{_log_pos(t, ylo, 1.0, bottom, top):.1f}"
                      for a, t in sorted(pts))
        parts.append(f'<polyline class="frontier" fill="none" stroke="#555" stroke-width="1.5" '
                     f'stroke-dasharray="6 3" points="{xy}"><title>DP-SGD frontier: {escape(setting, quote=True)}'
                     '</title></polyline>')
    xy = [(_lin_pos(acc, xlo, xhi, left, right), _log_pos(tpr, ylo, 1.0, bottom, top)) for _, acc, tpr, _ in points]
    texts = _place_labels(points, xy)
    for (label, acc, tpr, is_dp), (x, y), text in zip(points, xy, texts):
        shape = (f'<rect class="point dp" x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8" fill="#555"/>' if is_dp
                 else f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="5" fill="#d62728"/>')
        if text is not None:
            tx, ty, words = text
            lead = (f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{tx - 1:.1f}" y2="{ty - 3:.1f}" stroke="#bbb"/>'
                    if abs(ty - (y - 6)) > 8 else "")
            shape += f'{lead}<text x="{tx:.1f}" y="{ty:.1f}" font-size="10">{_label(words, 32)}</text>'
        parts.append(f'<g>{shape}<title>{escape(label, quote=True)}: accuracy {100 * acc:.1f}%, '
                     f'TPR {100 * tpr:.1f}%</title></g>')
    ly = bottom - 50  # the legend, in the right margin below the labels of the most vulnerable entries
    parts.append(f'<rect x="{right + 12}" y="{ly - 8}" width="8" height="8" fill="#555"/>'
                 f'<text x="{right + 26}" y="{ly}" font-size="10">DP-SGD</text>'
                 f'<line x1="{right + 10}" y1="{ly + 11}" x2="{right + 22}" y2="{ly + 11}" stroke="#555" '
                 f'stroke-dasharray="4 2"/><text x="{right + 26}" y="{ly + 15}" font-size="10">DP-SGD frontier</text>'
                 f'<circle cx="{right + 16}" cy="{ly + 26}" r="4" fill="#d62728"/>'
                 f'<text x="{right + 26}" y="{ly + 30}" font-size="10">other defenses</text>')
    parts.append("</svg>")
    return "".join(parts)
