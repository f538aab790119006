"""Do two source trees compute the same results? Runs a fixed set of evaluations with each tree and
lists every results.json number that differs (timings, creation times and output paths aside).

    python benchmarks/same_numbers.py --before /tmp/tree-at-commit-A --after . --out /tmp/same

A tree is a checkout of this repository (``git worktree add /tmp/tree-A COMMIT``); each run imports
the harness from that tree (PYTHONPATH). The set: the quick preset's `harness evaluate undefended`
as the README runs it, and every built-in defense at a small size (6 models, 40 audit samples, 2
epochs, 50 bootstrap draws), the subsample wrapper around DP-SGD included. Runs resume, so a
second call with the same --out only compares. Exit status 1 when any number differs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

from harness.core import jsonio

SMALL = ["--models", "6", "--audit-size", "40", "--epochs", "2", "--set", "attack.bootstrap=50"]
RUNS: list[tuple[str, list[str]]] = [("undefended-quick", ["undefended"])] + [
    (f"{d}-small", [d, *SMALL]) for d in ("undefended", "hamp", "relaxloss", "selena", "dpsgd-medium", "ssl-simclr",
                                          "ssl-moco", "dfkd", "alibi", "agibi")
] + [("subsample-small", ["subsample", "--inner", "dpsgd-medium", "--rate", "0.5", *SMALL])]
UNCOMPARED = {"timings", "created", "train_seconds_total", "query_seconds_total"}


def evaluate_with(tree: Path, out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    for name, args in RUNS:
        proc = subprocess.run([sys.executable, "-c", "from harness.cli import main; main()", "evaluate", *args,
                               "--out", str(out / name)], capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            sys.exit(f"{tree}: harness evaluate {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
        print(f"{tree}: {name} done", flush=True)


def comparable(x: Any, path: str = "") -> Any:
    if isinstance(x, dict):
        return {k: comparable(v, f"{path}.{k}") for k, v in x.items()
                if k not in UNCOMPARED and not (k == "out" and path.endswith(".run"))}
    if isinstance(x, list):
        return [comparable(v, path) for v in x]
    return x


def differences(a: Any, b: Any, path: str = "") -> Iterator[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                yield f"{path}.{k} only in {'after' if k in b else 'before'}"
            else:
                yield from differences(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (u, v) in enumerate(zip(a, b)):
            yield from differences(u, v, f"{path}[{i}]")
    elif a != b and not (a != a and b != b):  # NaN equals NaN here
        yield f"{path}: {a!r} -> {b!r}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path("runs/same-numbers"))
    args = ap.parse_args()
    evaluate_with(args.before, args.out / "before")
    evaluate_with(args.after, args.out / "after")
    total = 0
    for name, _ in RUNS:
        (fa,) = (args.out / "before" / name).glob("*/results.json")
        (fb,) = (args.out / "after" / name).glob("*/results.json")
        # results.json of either form: non-finite numbers as strings or (older trees) bare tokens
        diff = list(differences(comparable(jsonio.loads(fa.read_text())), comparable(jsonio.loads(fb.read_text()))))
        same_dir = fa.parent.name == fb.parent.name
        total += len(diff) + (not same_dir)
        print(f"{name}: " + ("identical" if not diff and same_dir else f"{len(diff)} differences"
                              + ("" if same_dir else f"; run fingerprints differ ({fa.parent.name} vs {fb.parent.name})")))
        for line in diff[:8]:
            print(f"  {line}")
    print(f"{total} differences in {len(RUNS)} runs")
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
