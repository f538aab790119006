"""docs/results.schema.json: valid, strict, and checked on every results.json the tests make."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import jsonschema
import pytest

from harness.audit.report import SCHEMA_CHECK_ENV, SCHEMA_PATH, check_schema

SCHEMA = json.loads(SCHEMA_PATH.read_text())


def test_the_schema_is_a_valid_draft_2020_12_schema_and_the_suite_checks_against_it():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert os.environ.get(SCHEMA_CHECK_ENV) == "1"  # tests/conftest.py: every write_outputs validates


def test_a_real_results_json_passes_and_violations_are_caught(finished_run):
    results = json.loads((finished_run / "results.json").read_text())
    check_schema(results)
    for mutate in (
        lambda r: r.pop("fingerprint"),  # a required key missing
        lambda r: r.__setitem__("undocumented", 1),  # a key docs/results-json.md does not list
        lambda r: r["population"]["best"].__setitem__("access", "grey-box"),
        lambda r: r["population"]["attacks"][0]["tpr_at_fpr"].__setitem__("0.001", "high"),
        lambda r: r["population"]["figure"].pop("leak"),
        lambda r: r["population"]["figure"]["leak"].__setitem__("estimator", "cross-fitted"),
        lambda r: r["population"]["attacks"][0].__setitem__("auc", 1.5),
    ):
        bad = copy.deepcopy(results)
        mutate(bad)
        with pytest.raises(jsonschema.ValidationError):
            check_schema(bad)


def test_every_documented_top_level_key_is_in_the_schema():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "results-json.md").read_text()
    top = doc[doc.index("## Top level"): doc.index("## Per level")]
    keys = {k for line in top.splitlines() if line.startswith("| `") for k in
            [part.strip("` ") for part in line.split("|")[1].split(",")]}
    assert keys <= set(SCHEMA["properties"]), sorted(keys - set(SCHEMA["properties"]))


def test_tprs_and_their_ci_limits_are_bounded_to_0_1_and_a_nan_ci_passes(finished_run):
    """A TPR (like the AUC) is a rate: 1.5 and -1 are refused wherever one is stored; a CI limit may be
    NaN (attack.bootstrap=0 writes [NaN, NaN]), which is what real files hold besides numbers."""
    results = json.loads((finished_run / "results.json").read_text())
    k = "0.001"
    for bad_value in (1.5, -1.0):
        for mutate in (
            lambda r, v: r["population"]["attacks"][0]["tpr_at_fpr"].__setitem__(k, v),
            lambda r, v: r["population"]["best"]["tpr_at_fpr"].__setitem__(k, v),
            lambda r, v: r["population"]["figure"]["leak"].__setitem__("tpr", v),
            lambda r, v: r["population"]["figure"]["declared"].__setitem__("lower", v),
            lambda r, v: r["population"]["attacks"][0]["tpr_ci"].__setitem__(k, [0.1, v] if v > 1 else [v, 0.1]),
            lambda r, v: r["population"]["best"]["tpr_ci"].__setitem__(k, [0.1, v] if v > 1 else [v, 0.1]),
            lambda r, v: r["population"]["figure"]["declared"].__setitem__("ci", [0.1, v] if v > 1 else [v, 0.1]),
            lambda r, v: r["population"]["attacks"][0]["roc_curve"]["tpr"].__setitem__(-1, v),
            lambda r, v: r.__setitem__("bounds", {"mechanism": "poisson-subsampled gaussian", "sample_rate": 0.01,
                                                  "noise_multiplier": 1.0, "steps": 100, "epsilon": 1.0,
                                                  "delta": 1e-5, "advantage": 0.1, "tpr_at_fpr": {k: v}}),
        ):
            bad = copy.deepcopy(results)
            mutate(bad, bad_value)
            with pytest.raises(jsonschema.ValidationError):
                check_schema(bad)
    nan = copy.deepcopy(results)  # what a run without a bootstrap writes
    for rec in (*nan["population"]["attacks"], nan["population"]["best"]):
        rec["tpr_ci"] = {f: [float("nan"), float("nan")] for f in rec["tpr_ci"]}
    check_schema(json.loads(json.dumps(nan)))
