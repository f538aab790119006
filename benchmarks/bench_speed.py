"""End-to-end time of the quick preset (``harness evaluate undefended``, install excluded), its ratio to
a fixed reference workload, and optionally the speed-up over an earlier commit.

    python benchmarks/bench_speed.py [--runs 3] [--vs e62e2d2] [--set KEY=VALUE ...] [--vs-set KEY=VALUE ...]

Each run trains into a fresh temporary folder (nothing is resumed) and is timed from the command's
start to its exit (its output goes to a file: with a pipe, the wait would also cover the local
pool's fork server, which outlives the command by its own interpreter teardown). The reference workload (one MLP of the quick preset's shape trained for 600 SGD
steps on one thread, the same every release) says how fast this machine is: the ratio quick / reference
compares machines; the speed-up compares commits on the same machine. ``--vs REV`` checks REV out in a
temporary git worktree and times its ``harness evaluate undefended`` the same way, the two commands
alternating run by run so that a drift in the machine's speed hits both. ``--vs-set KEY=VALUE`` gives
the baseline command extra settings (after ``--set``): without ``--vs`` it times this checkout against
itself with those settings, e.g. ``--set run.group_size=4 --vs-set run.group_size=8``. Prints medians,
min and max, and the medians of the phases this checkout's runs record in their results.json
(prepare, training wall, attacks; the rest of the wall time is interpreter start-up and the report).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def reference_seconds(repeats: int = 3) -> float:
    """Median time of the reference workload: 600 SGD steps of a 64-256-256-10 MLP, batch 32, one thread."""
    import torch

    torch.set_num_threads(1)
    times = []
    for _ in range(repeats):
        gen = torch.Generator().manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                  torch.nn.ReLU(), torch.nn.Linear(256, 10))
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        x, y = torch.randn(600, 32, 64, generator=gen), torch.randint(0, 10, (600, 32), generator=gen)
        t0 = time.perf_counter()
        for i in range(600):
            loss = torch.nn.functional.cross_entropy(net(x[i]), y[i])
            opt.zero_grad()
            loss.backward()
            opt.step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_quick(cwd: Path, sets: list[str], phases: list[dict] | None = None,
               args: tuple[str, ...] = ("undefended",)) -> float:
    """Wall seconds of ``harness evaluate ARGS`` (default: ``undefended``, the quick preset) run from the
    code at ``cwd``, into a fresh folder; the run's own phase timings (results.json ``timings``) are
    appended to ``phases`` when given."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-c", "import sys; from harness.cli import main; sys.exit(main())",
               "evaluate", *args, "--set", f"run.out={out}"]
        for s in sets:
            cmd += ["--set", s]
        env = {**os.environ, "PYTHONPATH": str(cwd)}
        log = Path(out) / "output.txt"
        with log.open("w") as f:  # a file, not a pipe: the wait ends when the command exits
            t0 = time.perf_counter()
            res = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT)
            dt = time.perf_counter() - t0
        if res.returncode != 0:
            raise SystemExit(f"{cwd}: harness evaluate failed ({res.returncode}):\n{log.read_text()[-4000:]}")
        if phases is not None:
            found = list(Path(out).glob("*/results.json"))
            res = json.loads(found[0].read_text()) if len(found) == 1 else {}
            timings = res.get("timings", {})
            phases.append({k: timings.get(k) for k in PHASES})
            levels = [res[lv]["compute"] for lv in ("population", "sample") if "compute" in res.get(lv, {})]
            if levels:  # each model's own training time (the run's num_models per level)
                phases[-1]["train_seconds_per_model"] = (sum(c["train_seconds_total"] for c in levels)
                                                         / (len(levels) * res["num_models"]))
        return dt


#: the phases a run records in its results.json (prepare, training wall, attacks)
PHASES = ("prepare_seconds", "train_wall_seconds", "attack_seconds")


def summary(name: str, xs: list[float]) -> str:
    return f"{name}: median {statistics.median(xs):.1f} s (min {min(xs):.1f}, max {max(xs):.1f}, {len(xs)} runs)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--vs", default=None, help="an earlier commit to compare with (checked out in a git worktree)")
    ap.add_argument("--set", action="append", default=[], help="extra --set KEY=VALUE for both commands")
    ap.add_argument("--vs-set", action="append", default=[], help="extra --set KEY=VALUE for the baseline only")
    args = ap.parse_args()
    baseline = args.vs or ("this checkout with " + " ".join(args.vs_set) if args.vs_set else None)
    ref = reference_seconds()
    print(f"reference workload: {ref:.2f} s", flush=True)
    other = None
    if args.vs:
        other = Path(tempfile.mkdtemp(prefix="bench-speed-")) / "wt"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(other), args.vs],
                       check=True, capture_output=True)
    now, then, phases = [], [], []
    try:
        for i in range(args.runs):
            now.append(time_quick(REPO, args.set, phases))
            print(f"run {i + 1}: this checkout {now[-1]:.1f} s", end="", flush=True)
            if baseline is not None:
                then.append(time_quick(other or REPO, args.set + args.vs_set))
                print(f", {baseline} {then[-1]:.1f} s", end="")
            print(flush=True)
    finally:
        if other is not None:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(other)], capture_output=True)
    med = statistics.median(now)
    print(summary("quick preset, this checkout", now))
    print(f"ratio to the reference workload: {med / ref:.1f}")
    recorded = {k: [p[k] for p in phases if p.get(k) is not None] for k in PHASES}
    per_model = [p["train_seconds_per_model"] for p in phases if p.get("train_seconds_per_model")]
    print("this checkout's runs, as recorded in results.json: " + ", ".join(
        f"{k.removesuffix('_seconds')} {statistics.median(v):.1f} s" for k, v in recorded.items() if v) + " (medians)"
        + (f"; each model's own training {statistics.median(per_model):.2f} s" if per_model else ""))
    out = {"reference_seconds": ref, "quick_seconds": now, "quick_median": med, "ratio_to_reference": med / ref,
           "cpu_count": os.cpu_count(), "phases": phases}
    if then:
        print(summary(f"quick preset, {baseline}", then))
        print(f"speed-up over {baseline}: {statistics.median(then) / med:.2f}x")
        out.update({"baseline": baseline, "baseline_seconds": then, "speedup": statistics.median(then) / med})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
