"""A finished run's results, for notebooks and scripts: :class:`Results`.

It wraps ``RUN_DIR/results.json`` (docs/results-json.md; the raw dict is :attr:`Results.data`)
with views of what a reader wants first: each level's figure, the leak (ranked) and the declared
headline (:class:`Figure`), the per-attack table and the one-row-per-level summary as pandas DataFrames,
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
    """A level's figure (results.json ``figure.leak`` or ``figure.declared``; docs/protocol.md,
    Headlines): the TPR at the level's figure FPR :attr:`fpr` (at least 3 expected false positives,
    read at the plotting position), the plain maximum of its candidates (``estimator`` "max"), with
    its one-sided :attr:`lower` bound and its two-sided :attr:`ci` (Bonferroni over the
    :attr:`candidates`); the variant that gives it (attack, variant, access, experiment). :attr:`tpr` is NaN where the level resolves no figure FPR."""

    attack: str
    variant: str
    access: str
    experiment: str
    fpr: float
    tpr: float
    lower: float
    ci: tuple[float, float] | None
    confidence: float
    estimator: str
    candidates: int
    beats_headline: bool = False

    @classmethod
    def from_json(cls, rec: dict[str, Any] | None, fpr: float | None, beaten: bool = False) -> "Figure":
        nan = float("nan")
        if not rec or fpr is None:
            return cls("", "", "", "", nan if fpr is None else float(fpr), nan, nan, None, 0.95, "unresolved", 0)
        ci = rec.get("ci")
        return cls(attack=rec["name"], variant=rec["variant"], access=rec.get("access", "black-box"),
                   experiment=str(rec.get("source", "")).split("/")[0], fpr=float(fpr), tpr=float(rec["tpr"]),
                   lower=nan if rec.get("lower") is None else float(rec["lower"]),
                   ci=(float(ci[0]), float(ci[1])) if ci else None, confidence=float(rec.get("confidence", 0.95)),
                   estimator=str(rec.get("estimator", "max")), candidates=int(rec.get("candidates", 1)),
                   beats_headline=beaten)

    def __str__(self) -> str:
        """``attack:variant (access, experiment): TPR x% [lo, hi] at y% FPR`` (a best of several: ``(>= lo)``)."""
        if self.estimator == "unresolved":
            return "unresolved (no FPR with 3 expected false positives)"
        if self.ci is not None:
            iv = f" [{100 * self.ci[0]:.1f}, {100 * self.ci[1]:.1f}]"
        elif self.lower == self.lower:
            iv = f" (>= {100 * self.lower:.1f}, {100 * self.confidence:g}%)"
        else:
            iv = ""
        return (f"{self.attack}:{self.variant} ({self.access}, {self.experiment}): TPR {100 * self.tpr:.1f}%{iv} at "
                f"{100 * self.fpr:g}% FPR")


@dataclass(frozen=True)
class Ratio:
    """The sample level's leak over the population level's at :attr:`fpr` (results.json's
    ``sample_population_ratio``): :attr:`value` and its :attr:`ci` only where the population leak is
    told apart from 0 on at least 10 expected true positives (else NaN and None, with :attr:`lower`,
    a lower bound on the ratio, where finite)."""

    fpr: float
    sample: float
    population: float
    value: float
    ci: tuple[float, float] | None
    lower: float | None
    method: str

    @classmethod
    def from_json(cls, rec: dict[str, Any]) -> "Ratio":
        nan = float("nan")
        ci = rec.get("ci")
        return cls(fpr=nan if rec.get("fpr") is None else float(rec["fpr"]),
                   sample=nan if rec.get("sample") is None else float(rec["sample"]),
                   population=nan if rec.get("population") is None else float(rec["population"]),
                   value=nan if rec.get("ratio") is None else float(rec["ratio"]),
                   ci=(float(ci[0]), float(ci[1])) if ci is not None else None,
                   lower=None if rec.get("lower") is None else float(rec["lower"]), method=str(rec.get("method", "")))

    def __str__(self) -> str:
        """``22.5x [14.6, 29.3] (sample 99.2% / population 4.4% at 0.2% FPR)``."""
        at = f"at {100 * self.fpr:g}% FPR"
        both = f"sample {100 * self.sample:.1f}% / population {100 * self.population:.1f}% {at}"
        if self.value == self.value and self.ci is not None:
            return f"{self.value:.1f}x [{self.ci[0]:.1f}, {self.ci[1]:.1f}] ({both})"
        return f"no point ratio ({both}" + (f"; ratio >= {self.lower:.1f}" if self.lower is not None else "") + ")"


class Results:
    """The results of one run (``harness.evaluate``, ``harness.attack``, ``harness.load_run``).

    - :attr:`path`: the run directory; :attr:`data`: results.json as a dict;
    - :meth:`leak` (ranked) / :meth:`headline` (declared): a level's :class:`Figure` at its
      :meth:`figure_fpr`; :meth:`tpr`: the leak's TPR;
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

    def figure_fpr(self, level: str = "sample") -> float | None:
        """The FPR the level's figures are read at (at least 3 expected false positives)."""
        return (self._level(level).get("figure") or {}).get("fpr")

    def _flagged(self, level: str) -> bool:
        return bool(((self._level(level).get("figure") or {}).get("flag") or {}).get("flagged", False))

    def leak(self, level: str = "sample") -> Figure:
        """The level's leak: the plain maximum of a fixed set of primary attacks (configured built-ins,
        the harness's adaptations, served declared attacks); what the report leads with and the
        leaderboard ranks."""
        fig = self._level(level).get("figure") or {}
        return Figure.from_json(fig.get("leak"), fig.get("fpr"))

    def headline(self, level: str = "sample") -> Figure:
        """The level's declared headline: the same best over the defense's declared adaptive attacks
        (``beats_headline``: the headline test finds a variant that beats it)."""
        fig = self._level(level).get("figure") or {}
        return Figure.from_json(fig.get("declared"), fig.get("fpr"), self._flagged(level))

    def strongest(self, level: str = "sample") -> Figure:
        """The leak (:meth:`leak`), under its name before harness 0.4."""
        return self.leak(level)

    def tpr(self, level: str = "sample", fpr: float | None = None) -> float:
        """The level's leak TPR at its figure FPR (NaN where the level resolves none). ``fpr``, where
        given, must be that figure FPR: a variant's own TPR at another FPR is in :attr:`attacks`."""
        have = self.figure_fpr(level)
        if fpr is not None and (have is None or abs(float(fpr) - have) > 1e-12):
            raise ConfigError(f"the {level} level's figures are read at "
                             f"{'no FPR' if have is None else f'{100 * have:g}% FPR'}, not {100 * float(fpr):g}%; "
                             f"each variant's TPR at the reported FPRs {self.data['config']['attack']['fprs']} is in "
                             f"Results.attacks")
        return self.leak(level).tpr

    def test_accuracy(self, level: str = "sample") -> float:
        return float(self._level(level)["test_accuracy"]["mean"])

    @property
    def ratio(self) -> Ratio | None:
        """The sample level's leak over the population level's (a :class:`Ratio`; results.json's
        ``sample_population_ratio``, docs/results-json.md); None in a results.json that has none."""
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
        """The headline test (the leak's candidates against the declared headline, Bonferroni): its ``p_value``,
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
        """One row per level: the declared headline, the leak, their bounds, AUC, epsilon bounds (table.csv's columns)."""
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
        parts = []
        for lv in self.levels:
            f = self.leak(lv)
            parts.append(f"{lv} unresolved" if f.estimator == "unresolved" else
                         f"{lv} {100 * f.tpr:.1f}% at {100 * f.fpr:g}% FPR ({f.attack})")
        return f"Results({self.data['defense']}, {self.data['preset']}: leak {'; '.join(parts)}; {self.path})"
