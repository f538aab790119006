"""Which machine made a run's numbers: the CPU, its vector extensions, the thread count and the
torch and numpy builds (results.json ``machine``, the report's last line, ``harness compare``).

Float training is deterministic on one machine (the same command gives bit-identical numbers) but
not across instruction sets: a CPU with AVX-512 and one with AVX2 round the same sums differently,
the models differ in their last bits, and the audit's figures move within their confidence
intervals (the README's "Set up" gives two machines' figures of the main command). Each model's
signals file records the machine that trained it (:func:`machine_record`), so a results.json
says which machines its models came from and ``harness compare`` can tell "same code and config,
another machine" from a real difference.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from functools import lru_cache
from typing import Any

#: the CPU flags (Linux /proc/cpuinfo names) that decide which float kernels run, in this order
VECTOR_EXTENSIONS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                     "avx512_fp16", "amx_tile", "amx_bf16", "asimd", "sve", "sve2")


def _cpuinfo(text: str) -> tuple[str | None, list[str]]:
    """(model name, vector extensions) from the text of Linux's /proc/cpuinfo (first processor)."""
    model = re.search(r"^(?:model name|Model|cpu model|Hardware)\s*:\s*(.+)$", text, re.M)
    flags = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", text, re.M)
    have = set(flags.group(1).split()) if flags else set()
    return (model.group(1).strip() if model else None), [f for f in VECTOR_EXTENSIONS if f in have]


@lru_cache(maxsize=1)
def cpu() -> tuple[str, tuple[str, ...]]:
    """(the CPU's model name, its vector extensions among :data:`VECTOR_EXTENSIONS`); on systems
    without /proc/cpuinfo the model from sysctl (macOS) or ``platform.processor()``, extensions
    unknown (empty)."""
    try:
        with open("/proc/cpuinfo") as f:
            model, ext = _cpuinfo(f.read())
        if model:
            return model, tuple(ext)
    except OSError:
        pass
    if sys.platform == "darwin":
        import subprocess

        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                 timeout=5).stdout.strip()
            if out:
                return out, ()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown", ()


@lru_cache(maxsize=2)
def _builds(with_torch: bool) -> dict[str, Any]:
    """The torch and numpy builds: versions, torch's CPU kernel level and BLAS, numpy's BLAS.
    Without ``with_torch`` torch is not imported (the attack phase never imports it): its version
    is read from the installed package's metadata, its kernel level and BLAS are left out."""
    import numpy as np

    out: dict[str, Any] = {"numpy": np.__version__, "numpy_blas": None}
    try:
        blas = (np.show_config(mode="dicts") or {}).get("Build Dependencies", {}).get("blas", {})  # type: ignore[func-returns-value]
        if blas.get("name"):
            out["numpy_blas"] = f"{blas['name']} {blas.get('version', '')}".strip()
    except (TypeError, ValueError, AttributeError):  # numpy before 1.25 has no mode="dicts"
        pass
    if not with_torch:
        from importlib import metadata

        try:
            version: str | None = metadata.version("torch")
        except metadata.PackageNotFoundError:
            version = None
        return {**out, "torch": version, "torch_cpu_capability": None, "torch_blas": None}
    try:
        import torch
    except ImportError:  # an environment without torch
        return {**out, "torch": None, "torch_cpu_capability": None, "torch_blas": None}
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # torch before 2.1
        capability = None
    m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    return {**out, "torch": torch.__version__, "torch_cpu_capability": capability,
            "torch_blas": m.group(1) if m else None}


def machine_record(threads: int | None = None, with_torch: bool = False) -> dict[str, Any]:
    """This machine as results.json records it: ``cpu``, ``vector_extensions``, ``cpu_count`` (the
    CPUs this process may use), ``threads`` (torch's intra-op threads, or ``threads``), the torch
    build (``torch``, ``torch_cpu_capability``: the kernels torch dispatches to, ``torch_blas``), the
    numpy build (``numpy``, ``numpy_blas``), ``python`` and ``os``. ``with_torch``: import torch
    for its kernel level, BLAS and threads (a training job, which has torch); without it (the attack
    phase, which never imports torch) only torch's installed version is read, and the record is the
    same whatever the process imported."""
    model, ext = cpu()
    builds = _builds(with_torch)
    if threads is None and with_torch and builds["torch"] is not None:
        import torch

        threads = torch.get_num_threads()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 0
    return {"cpu": model, "vector_extensions": list(ext), "cpu_count": usable, "threads": threads, **builds,
            "python": platform.python_version(), "os": f"{platform.system()} {platform.release()}"}


def describe(rec: dict[str, Any]) -> str:
    """One line: ``AMD EPYC (avx, avx2, fma), 1 thread; torch 2.5.1+cpu (AVX2, mkl); numpy 2.1.3 (openblas)``."""
    ext = ", ".join(e for e in rec.get("vector_extensions") or [] if e != "sse4_2")
    threads = rec.get("threads")
    line = f"{rec.get('cpu', 'unknown CPU')}" + (f" ({ext})" if ext else "")
    if threads:
        line += f", {threads} thread{'s' if threads != 1 else ''}"
    if rec.get("torch"):
        extra = ", ".join(str(x) for x in (rec.get("torch_cpu_capability"), rec.get("torch_blas")) if x)
        line += f"; torch {rec['torch']}" + (f" ({extra})" if extra else "")
    line += f"; numpy {rec.get('numpy')}" + (f" ({rec['numpy_blas']})" if rec.get("numpy_blas") else "")
    return line


#: the keys of a machine record that can change a run's float results (not the Python or OS version)
NUMERIC_KEYS = ("cpu", "vector_extensions", "threads", "torch", "torch_cpu_capability", "torch_blas", "numpy",
                "numpy_blas")


def numeric_identity(rec: dict[str, Any]) -> tuple[Any, ...]:
    """What of a machine record decides its float results: two machines with equal identities train
    bit-identical models from the same command."""
    return tuple(tuple(v) if isinstance(v, list) else v for v in (rec.get(k) for k in NUMERIC_KEYS))


def models_machines(metas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The distinct machines that trained a level's (or run's) models, each with its number of
    ``models``, from the models' signals metadata (``machine``); models trained before the record
    existed, or outside the harness, are not counted."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for m in metas:
        rec = m.get("machine")
        if not isinstance(rec, dict):
            continue
        key = numeric_identity(rec)
        if key in groups:
            groups[key]["models"] += 1
        else:
            groups[key] = {**rec, "models": 1}
    return list(groups.values())
