"""The C allocator's two thresholds, set for a process that allocates and frees many large numpy
arrays (the ``harness`` command; glibc on Linux only).

glibc serves an allocation above ``M_MMAP_THRESHOLD`` with a fresh ``mmap`` and returns it to the
system when freed, and gives back heap memory above ``M_TRIM_THRESHOLD`` at the heap's top. Every
such fresh page is then faulted in again on first touch, which is slow on the virtual machines
this project runs on. The attack phase allocates temporaries of tens of MB thousands of times
(each variant's (S, C) float64 scores, the sorts' orders, the score functions' class-first
copies). With :data:`MMAP_THRESHOLD` and :data:`TRIM_THRESHOLD` the freed temporaries are reused
instead; measured with ``python benchmarks/bench_attack_phase.py --models 64 --samples 50000
--signals weak`` on the code of 2026-11-29 before the packed-key sort (docs/executors.md): 55.6
CPU-s with glibc's thresholds, 50-54 with these, peak RSS about the same (1 697 and 1 703-1 720
MiB): memory the process has freed is kept for its next arrays, never more than it held at once.

Set by the two commands that run an attack phase and nothing else, ``harness attack`` and
``harness import``. Not by ``harness evaluate``: where models are trained in the process, tensors
freed in the middle of a heap that is no longer trimmed raised the peak memory (``/usr/bin/time -f
%M harness evaluate undefended --preset cifar10-scatter --data-dir ../shared/data/cifar10-subset``
at commit 98f4d6d, which set the thresholds in every command: 1.76 GB, against 1.27 GB with
``HARNESS_MALLOC=default``; ``harness attack`` on that run: 236 MB against 234 MB). The Python API (a library
inside someone else's process) leaves the allocator alone, and ``HARNESS_MALLOC=default`` keeps
glibc's own thresholds for the two commands too.
"""

from __future__ import annotations

import ctypes
import os
import sys

#: mallopt's parameter numbers (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: allocations below this come from the heap (glibc's default: 128 KiB, raised up to 32 MiB by
#: the sizes it sees freed); the stacked signals of a level (about 1 GB at the paper's scale) stay
#: above it, mapped once
MMAP_THRESHOLD = 256 * 2**20
#: free memory at the heap's top kept rather than given back (glibc's default: twice the mmap
#: threshold, 256 KiB at first)
TRIM_THRESHOLD = 2**30


def tune_for_large_arrays() -> bool:
    """Set :data:`MMAP_THRESHOLD` and :data:`TRIM_THRESHOLD` with glibc's ``mallopt``; returns whether
    both were set (False off glibc, where ``HARNESS_MALLOC=default`` asks for glibc's own, or where
    glibc refuses a value)."""
    if os.environ.get("HARNESS_MALLOC", "").strip().lower() == "default":
        return False
    if not sys.platform.startswith("linux") or not _glibc():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def _glibc() -> bool:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError):
        return False
