"""Write tests/slow_tests.txt (the tests that get the ``slow`` marker: tests/conftest.py) from the JUnit
XML of a full test run, and print how long the suite and its fast part took in that run.

    python benchmarks/slow_tests.py --run --readme         # run the suite as CI does, then write both
    python -m pytest -q --junitxml=/tmp/junit.xml        # or: the whole suite, as CI runs it ...
    python benchmarks/slow_tests.py /tmp/junit.xml [--threshold 3] [--readme]   # ... then read its XML

``--readme`` writes the README's sentence on the suite (between its ``suite`` markers): the number of
tests, how long they took, the fast part's number and time, and the machine, from that run.

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


README_START, README_END = "<!-- suite:start -->", "<!-- suite:end -->"


def run_suite() -> tuple[Path, float]:
    """``python -m pytest -q --junitxml=FILE`` (the README's test command, with the XML); (FILE, wall s)."""
    import subprocess
    import sys
    import tempfile
    import time

    xml = Path(tempfile.mkdtemp(prefix="suite-")) / "junit.xml"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", f"--junitxml={xml}"], cwd=REPO)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"the suite failed (exit {proc.returncode}): no numbers written")
    return xml, wall


def readme_sentence(cases: list[ET.Element], n_fast: int, fast: float, wall: float | None) -> str:
    import datetime as dt
    import os
    import platform

    def n(x: int) -> str:  # 1 063, as the docs write numbers
        return f"{x:,}".replace(",", " ")

    counted = [c for c in cases if c.find("skipped") is None]
    took = f"{wall / 60:.0f} min" if wall is not None else f"{sum(float(c.get('time', 0)) for c in cases) / 60:.0f} min"
    return (f"The suite ({n(len(counted))} tests run, {len(cases) - len(counted)} skipped) took {took} on "
            f"{os.cpu_count()} CPU cores ({platform.machine()}, {dt.date.today().isoformat()}; "
            "`python benchmarks/slow_tests.py --run --readme` measures and writes this sentence). A first check, "
            "`python -m pytest -q -m \"not slow\"`, skips the tests measured over 3 s (`tests/slow_tests.txt`): "
            f"{n(n_fast)} tests, {fast / 60:.1f} min of that run.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit", type=Path, nargs="?")
    ap.add_argument("--threshold", type=float, default=3.0)
    ap.add_argument("--run", action="store_true", help="run the suite first (its JUnit XML in a temp folder)")
    ap.add_argument("--readme", action="store_true", help="write the README's sentence on the suite")
    args = ap.parse_args()
    wall = None
    if args.run:
        args.junit, wall = run_suite()
    if args.junit is None:
        ap.error("give the JUnit XML of a run, or --run")
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
    if args.readme:
        import re

        readme = (REPO / "README.md").read_text()
        if README_START not in readme or README_END not in readme:
            raise SystemExit(f"README.md has no {README_START} ... {README_END} markers")
        block = f"{README_START}{readme_sentence(cases, n_fast, fast, wall)}{README_END}"
        (REPO / "README.md").write_text(re.sub(re.escape(README_START) + ".*?" + re.escape(README_END),
                                               lambda _: block, readme, flags=re.S))
        print("wrote the README's sentence on the suite")


if __name__ == "__main__":
    main()
