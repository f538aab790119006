"""A finished run's results, for notebooks and scripts: :class:`Results`.

It wraps ``RUN_DIR/results.json`` (docs/results-json.md; the raw dict is :attr:`Results.data`)
with views of what a reader wants first: the headline and the strongest figure of each level
(:class:`Figure`), the per-attack table and the one-row-per-level summary as pandas DataFrames,
the ROC curves as arrays, the bounds, the ratio and the warnings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.audit.headline import fpr_key
from harness.core import jsonio
from harness.core.errors import ConfigError


@dataclass(frozen=True)
class Figure:
    """One headline-type figure of a level: which attack variant, its TPR at each reported FPR (0
    included), the CI of each (selection-aware), and whether each FPR is resolvable. ``tpr`` holds
    results.json's raw values (TPR at FPR 0 where an FPR is unresolved); :meth:`value` and ``str``
    give NaN / "unresolved" there."""

    attack: str
    variant: str
    access: str
    experiment: str
    tpr: dict[float, float]
    ci: dict[float, tuple[float, float]]
    resolved: dict[float, bool]
    beats_headline: bool = False
    #: "single" (one candidate's figures) or "cross-fitted" (a best of several, chosen on one fold of
    #: the victim models and read on the others: docs/protocol.md, Headlines)
    estimator: str = "single"
    #: a cross-fitted figure's plain maximum over its candidates at each FPR (biased upward by the choice)
    optimistic_max: dict[float, float] | None = None

    @classmethod
    def from_json(cls, rec: dict[str, Any]) -> "Figure":
        return cls(attack=rec["name"], variant=rec["variant"], access=rec.get("access", "black-box"),
                   experiment=str(rec.get("source", "")).split("/")[0],
                   tpr={float(k): float(v) for k, v in rec["tpr_at_fpr"].items()},
                   ci={float(k): (float(v[0]), float(v[1])) for k, v in rec["tpr_ci"].items()},
                   resolved={float(k): bool(v) for k, v in rec["resolved"].items()},
                   beats_headline=bool(rec.get("beats_headline", False)),
                   estimator=str(rec.get("estimator", "single")),
                   optimistic_max={float(k): float(v) for k, v in rec["optimistic_max"]["tpr_at_fpr"].items()}
                   if rec.get("optimistic_max") else None)

    def value(self, fpr: float) -> float:
        """TPR at ``fpr``; NaN where the pooled guesses cannot resolve that FPR (0 < fpr < 1/negatives:
        results.json then stores TPR at FPR 0 there, which is not a figure at ``fpr``). An FPR the run
        did not compute is a ConfigError naming the ones it did."""
        fpr = float(fpr)
        if fpr not in self.tpr:
            have = ", ".join(f"{f:g}" for f in sorted(self.tpr))
            raise ConfigError(f"this run reports TPRs at FPR {have} (0 and its attack.fprs), not at {fpr:g}: ask for "
                              f"one of them, or re-run the attacks with it (harness attack RUN_DIR --set "
                              f"attack.fprs=[...,{fpr:g}])")
        return self.tpr[fpr] if self.resolved.get(fpr, True) else float("nan")

    def __str__(self) -> str:
        """``attack:variant (access, experiment): TPR x% [lo, hi] at y% FPR; ...`` (FPR 0 left out;
        an unresolved FPR reads ``unresolved at y% FPR``, never a number)."""
        def one(f: float, t: float) -> str:
            if not self.resolved.get(f, True):
                return f"unresolved at {100 * f:g}% FPR (too few negatives)"
            ci = f" [{100 * self.ci[f][0]:.1f}, {100 * self.ci[f][1]:.1f}]" if f in self.ci else ""
            return f"{100 * t:.1f}%{ci} at {100 * f:g}% FPR"

        at = "; ".join(one(f, t) for f, t in sorted(self.tpr.items()) if f > 0)
        return f"{self.attack}:{self.variant} ({self.access}, {self.experiment}): TPR {at}"


@dataclass(frozen=True)
class Ratio:
    """Sample-level over population-level headline TPR at :attr:`fpr` (results.json's
    ``sample_population_ratio``): :attr:`value` is NaN where either figure is unresolved, infinite where
    the population figure is 0; :attr:`ci` is the percentile bootstrap CI over victim models (each
    replicate re-computes both headlines as reported), None without a bootstrap; an end may be
    infinite (replicates whose population figure is 0)."""

    fpr: float
    sample: float
    population: float
    value: float
    ci: tuple[float, float] | None
    resolved: bool
    replicates_used: int
    method: str

    @classmethod
    def from_json(cls, rec: dict[str, Any]) -> "Ratio":
        resolved = bool(rec.get("resolved", True))
        pop, smp = float(rec.get("population") or 0.0), float(rec.get("sample") or 0.0)
        if rec.get("ratio") is not None:
            value = float(rec["ratio"])
        elif resolved and pop == 0:
            value = float("inf") if smp > 0 else float("nan")
        else:
            value = float("nan")
        ci = rec.get("ci")
        return cls(fpr=float(rec["fpr"]), sample=smp, population=pop, value=value,
                   ci=(float(ci[0]), float(ci[1])) if ci is not None else None, resolved=resolved,
                   replicates_used=int(rec.get("replicates_used") or 0), method=str(rec.get("method", "")))

    def __str__(self) -> str:
        """``32.6x [23.2, 38.5] (sample 98.8% / population 3.0% at 0.1% FPR)``."""
        at = f"at {100 * self.fpr:g}% FPR"
        if not self.resolved:
            return f"unresolved {at} (too few non-member guesses)"
        ci = f" [{self.ci[0]:.1f}, {self.ci[1]:.1f}]" if self.ci is not None else " (no CI)"
        return f"{self.value:.1f}x{ci} (sample {100 * self.sample:.1f}% / population {100 * self.population:.1f}% {at})"


class Results:
    """The results of one run (``harness.evaluate``, ``harness.attack``, ``harness.load_run``).

    - :attr:`path`: the run directory; :attr:`data`: results.json as a dict;
    - :meth:`headline` / :meth:`strongest`: a level's :class:`Figure`; :attr:`headline_fpr`;
    - :attr:`attacks`: every attack variant of every experiment (pandas, as attacks.csv);
      :attr:`summary`: one row per level (as table.csv);
    - :meth:`roc`: an attack variant's ROC curve as (fpr, tpr) arrays;
    - :attr:`bounds` (DP runs), :attr:`ratio` (sample / population, with its CI), :attr:`warnings`,
      :attr:`headline_test` (does any variant beat the headline?), :meth:`test_accuracy`.
    """

    def __init__(self, path: Path | str, data: dict[str, Any], curves: dict[str, dict] | None = None) -> None:
        self.path = Path(path)
        self.data = data
        self._curves = curves  # the attack phase's in-memory ROC curves, when it just ran

    @classmethod
    def load(cls, run_dir: Path | str) -> "Results":
        """Read a run directory's results.json (or that file itself); ConfigError (one line) when it is
        missing or damaged, or, beside the run's manifest.json, edited since the attack phase wrote
        it or another run's (harness.run.runstore.RunDir.check_results)."""
        run_dir = Path(run_dir)
        if run_dir.name == "results.json" and run_dir.is_file():
            run_dir = run_dir.parent
        if not run_dir.is_dir():
            raise ConfigError(f"run directory {str(run_dir)!r} does not exist" if not run_dir.exists() else
                              f"{str(run_dir)!r} is not a run directory (give the folder that holds results.json)")
        path = run_dir / "results.json"
        if not path.is_file():
            raise ConfigError(f"{path} does not exist; run `harness attack {run_dir}` on a finished run first")
        try:
            data = jsonio.loads(path.read_text())  # "Infinity" / "NaN" strings (and older bare tokens) -> floats
            if not isinstance(data, dict) or ("population" not in data and "sample" not in data):
                raise ValueError("not a results file of this harness")
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise ConfigError(f"{path} is damaged ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                              f"`harness attack {run_dir}` rewrites it from the saved signals") from None
        from harness.run.runstore import RunDir

        RunDir(run_dir).check_results(data, path)
        return cls(run_dir, data)

    # --- the figures ------------------------------------------------------------------------
    @property
    def levels(self) -> list[str]:
        return [lv for lv in ("population", "sample") if lv in self.data]

    @property
    def headline_fpr(self) -> float:
        return float(self.data["headline_fpr"])

    def _level(self, level: str) -> dict[str, Any]:
        if level not in self.data:
            raise KeyError(f"this run has no {level!r} level (it has {', '.join(self.levels)})")
        return self.data[level]

    def headline(self, level: str = "sample") -> Figure:
        """The level's headline: the best primary variant of the defense's adaptive attacks."""
        return Figure.from_json(self._level(level)["best"])

    def strongest(self, level: str = "sample") -> Figure | None:
        """The level's strongest figure: the cross-fitted best of every attack variant that ran (None
        in a results.json written before harness 0.3.0; before 0.4 the plain maximum)."""
        rec = self._level(level).get("strongest")
        return Figure.from_json(rec) if rec else None

    def tpr(self, level: str = "sample", fpr: float | None = None) -> float:
        """The headline's TPR at ``fpr`` (default: the headline FPR); NaN where that FPR is unresolved
        (fewer than 1/fpr negative guesses), as in attacks.csv."""
        return self.headline(level).value(self.headline_fpr if fpr is None else fpr)

    def test_accuracy(self, level: str = "sample") -> float:
        return float(self._level(level)["test_accuracy"]["mean"])

    @property
    def ratio(self) -> Ratio | None:
        """Sample / population headline at the headline FPR with its bootstrap CI (a :class:`Ratio`;
        results.json's ``sample_population_ratio``, docs/results-json.md); None in a results.json that
        has no ratio record."""
        rec = self.data.get("sample_population_ratio")
        return Ratio.from_json(rec) if rec else None

    @property
    def bounds(self) -> dict[str, Any] | None:
        """Provable bounds of a DP-trained run (the accountant's epsilon, TPR upper bounds), else None."""
        return self.data.get("bounds")

    @property
    def warnings(self) -> list[str]:
        return list(self.data.get("warnings", []))

    @property
    def headline_test(self) -> dict[str, Any] | None:
        """The headline test (Hansen's SPA over every variant, FPR and level): its ``p_value``,
        ``alpha`` and per-level ``levels`` (docs/results-json.md); None before harness 0.4."""
        return self.data.get("headline_test")

    # --- tables and curves --------------------------------------------------------------------
    @property
    def attacks(self) -> pd.DataFrame:
        """Every attack variant of every experiment, one row each (attacks.csv's columns)."""
        from harness.audit.report import attacks_frame

        return attacks_frame(self.data)

    @property
    def summary(self) -> pd.DataFrame:
        """One row per level: headline, strongest figure, CIs, AUC, epsilon bounds (table.csv's columns)."""
        from harness.audit.report import summary_frame

        return summary_frame(self.data)

    def roc(self, experiment: str = "sample", attack: str | None = None,
            variant: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(fpr, tpr) of an attack variant's ROC in an experiment: ``population``, ``sample-<canary>``,
        or the level ``sample`` (the experiment of the sample-level headline, as :meth:`headline`
        reads it). ``attack`` defaults to the level's headline attack and ``variant`` to the headline's
        variant (to the attack's primary variant where an attack is named). The points its ROC file
        keeps (:func:`harness.core.metrics.roc_file_curve`: the whole curve without the points that lie
        on a straight segment between their neighbours, or, for a ROC of more than 20 000 corners, every
        corner below 1% FPR and 100 points per decade above), from memory when the attack phase just
        ran, else from the CSV in the run directory; else results.json's log-spaced grid (a coarser
        curve, for a results.json without its run directory). KeyError (naming what the run
        has) for an experiment, attack or variant that did not run."""
        if experiment == "sample" and "sample" in self.data:
            experiment = str(self.data["sample"]["best"].get("source", "")).split("/")[0] or \
                f"sample-{self.data['sample'].get('canary', '')}"
        level = self.data.get(experiment) if experiment == "population" else \
            (self.data.get("sample_by_canary") or {}).get(experiment.removeprefix("sample-"))
        if level is None:
            have = ["population", "sample"] + [f"sample-{c}" for c in self.data.get("sample_by_canary") or {}]
            raise KeyError(f"no experiment {experiment!r} in this run (it has {', '.join(have)})")
        if attack is None:
            lv = "population" if experiment == "population" else "sample"
            best = self._level(lv)["best"]
            src = str(best.get("source", "")).split("/")[0]
            if lv == "population" or src == experiment:
                attack, variant = best["name"], variant or best["variant"]
            else:
                raise KeyError(f"name the attack for {experiment!r} (the sample headline is read in {src!r})")
        entries = [e for e in level["attacks"] if e["name"] == attack]
        if not entries:
            ran = sorted({e["name"] for e in level["attacks"]})
            raise KeyError(f"attack {attack!r} did not run in {experiment} (these did: {', '.join(ran)})")
        entry = next((e for e in entries if e["variant"] == variant), None) if variant else \
            next((e for e in entries if e.get("primary")), entries[0])
        if entry is None:
            raise KeyError(f"{attack} has no variant {variant!r} (it has {', '.join(e['variant'] for e in entries)})")
        m = (self._curves or {}).get(experiment, {}).get((attack, entry["variant"]))
        if m is not None:
            return m.roc.fpr, m.roc.tpr
        csv = self.path / "roc" / f"{experiment}__{attack}__{entry['variant']}.csv"
        if csv.is_file():
            df = pd.read_csv(csv)
            return df["fpr"].to_numpy(), df["tpr"].to_numpy()
        return np.asarray(entry["roc_curve"]["fpr"]), np.asarray(entry["roc_curve"]["tpr"])

    def __repr__(self) -> str:
        k = fpr_key(self.headline_fpr)
        parts = []
        for lv in self.levels:
            h = self.data[lv]["best"]
            parts.append(f"{lv} {100 * h['tpr_at_fpr'][k]:.1f}% ({h['name']})" if h["resolved"][k] else f"{lv} unresolved")
        return (f"Results({self.data['defense']}, {self.data['preset']}: TPR@{100 * self.headline_fpr:g}% FPR "
                f"{'; '.join(parts)}; {self.path})")
