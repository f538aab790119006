"""The ``harness`` command's allocator thresholds (harness/core/allocator.py): freed large arrays are
reused, not faulted in afresh."""

import os
import subprocess
import sys

import pytest

from harness.core.allocator import _glibc

PROBE = """
import resource, sys
import numpy as np
from harness.core.allocator import tune_for_large_arrays
tuned = tune_for_large_arrays()
faults = []
for _ in range(4):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = np.ones(8 * 2**20)  # 64 MiB, every page touched
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    del a
print(tuned, *faults)
"""


def _probe(env: dict[str, str]) -> tuple[bool, list[int]]:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **env}, check=True).stdout.split()
    return out[0] == "True", [int(v) for v in out[1:]]


@pytest.mark.skipif(not (sys.platform.startswith("linux") and _glibc()), reason="the thresholds are glibc's")
def test_freed_large_arrays_are_reused_where_the_thresholds_are_set():
    # page faults of each of four 64 MiB arrays in turn (numpy asks for huge pages: a fault may
    # bring in 2 MiB, so the counts are compared with the first array's, not with 64 MiB of pages)
    tuned, faults = _probe({"HARNESS_MALLOC": ""})
    assert tuned
    assert faults[0] >= 20  # the first array's pages are new
    assert max(faults[1:]) <= faults[0] // 10, faults  # the later ones reuse them
    tuned, faults = _probe({"HARNESS_MALLOC": "default"})
    assert not tuned
    assert min(faults[1:]) >= faults[0] // 2, faults  # glibc's own thresholds map and unmap each one
