"""Write tests/slow_tests.txt (the tests that get the ``slow`` marker: tests/conftest.py) from the JUnit
XML of a full test run, and print how long the suite and its fast part took in that run.

    python -m pytest -q --junitxml=/tmp/junit.xml        # the whole suite, as CI runs it
    python benchmarks/slow_tests.py /tmp/junit.xml [--threshold 3]

A test (``file::function``, all its parametrizations together) is slow when any of its cases took
more than ``--threshold`` seconds (setup, call and teardown, as JUnit's ``time`` counts them); those
marked in their files are deselected by ``-m "not slow"`` too. The fast part's time is the sum of the
other cases' times in that run (the session's start-up excluded; a case marked in its file but
faster than the threshold is counted in it, so the figure errs long).
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "slow_tests.txt"


def test_id(case: ET.Element) -> str:
    """``tests/test_x.py::test_name`` (a class's tests: ``tests/test_x.py::Class::test_name``) of a JUnit case."""
    parts = case.get("classname", "").split(".")
    name = case.get("name", "").split("[", 1)[0]
    i = next(k for k, p in enumerate(parts) if p.startswith("test_"))
    path = "/".join(["tests", *parts[: i + 1]]) + ".py" if parts[0] != "tests" else "/".join(parts[: i + 1]) + ".py"
    return "::".join([path, *parts[i + 1:], name])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit", type=Path)
    ap.add_argument("--threshold", type=float, default=3.0)
    args = ap.parse_args()
    cases = list(ET.parse(args.junit).getroot().iter("testcase"))
    longest: dict[str, float] = defaultdict(float)
    total: dict[str, float] = defaultdict(float)
    for c in cases:
        t = float(c.get("time", 0.0))
        tid = test_id(c)
        longest[tid] = max(longest[tid], t)
        total[tid] += t
    slow = sorted(t for t, s in longest.items() if s > args.threshold)
    OUT.write_text("# written by benchmarks/slow_tests.py from a full run's JUnit XML (tests/conftest.py reads it)\n"
                   + "".join(f"{t}\n" for t in slow))
    fast = sum(v for t, v in total.items() if t not in slow)
    whole = sum(total.values())
    n_fast = sum(1 for c in cases if test_id(c) not in slow)
    print(f"{len(cases)} cases, {whole / 60:.1f} min; slow: {len(slow)} tests ({len(cases) - n_fast} cases, "
          f"{(whole - fast) / 60:.1f} min); the rest: {n_fast} cases, {fast / 60:.1f} min. Wrote {OUT}")


if __name__ == "__main__":
    main()
