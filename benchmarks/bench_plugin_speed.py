"""The README's plugin (label smoothing through ``train_classifier``) against the built-in undefended
run: training wall time, side by side in one call.

    python benchmarks/bench_plugin_speed.py [--models 16] [--runs 2] [--epochs E] [--set KEY=VALUE ...]
                                            [--plugin-set KEY=VALUE ...] [--vs REV]

Each run times ``harness evaluate undefended`` and ``harness evaluate <the README's plugin>`` (written
to a temporary file, exactly the README's example) with the same settings (the quick preset; by
default 16 models per level instead of 32, to keep a call short on a shared machine), each into a
fresh folder, in a child process; which of the two goes first alternates run by run, so that a drift
in the machine's speed hits both. The figure is the training phase's wall time each run records in
its results.json (``timings.train_wall_seconds``: every model of both levels, the local pool's
workers included); the ratio plugin / built-in is taken per run and over the medians. ``--plugin-set``
gives the plugin's command extra settings (e.g. ``run.group_size=4``, the built-in's group). ``--vs REV``
also times the plugin under commit REV's code (a temporary git worktree), e.g. the code before
plugins were co-trained, in the same runs. Prints one line per run, the medians and a JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_speed import time_quick  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

#: the README's example, verbatim
README_PLUGIN = textwrap.dedent(
    '''
    import torch.nn.functional as F
    from defenses.base import Defense, TorchClassifier
    from defenses.training import init_network, train_classifier

    class LabelSmoothing(Defense):
        name, description = "label-smoothing", "cross-entropy with smoothed targets"
        param_defaults = {"smoothing": 0.1}

        def fit(self, train, ctx):
            def loss(logits, targets, epoch):
                return F.cross_entropy(logits, targets, label_smoothing=self.params["smoothing"])
            net = train_classifier(init_network(train, ctx), train, ctx, loss_fn=loss)
            return TorchClassifier(net, train.mean, train.std, ctx.device)
    '''
)


def train_wall(cwd: Path, defense: str, sets: list[str]) -> tuple[float, float, float]:
    """(training wall s, each model's own training s (median over levels' means), command wall s) of
    ``harness evaluate DEFENSE`` with ``sets``, run from the code at ``cwd``."""
    phases: list[dict] = []
    wall = time_quick(cwd, sets, phases, args=(defense,))
    p = phases[0]
    return float(p["train_wall_seconds"]), float(p.get("train_seconds_per_model") or float("nan")), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=16, help="models per level (the quick preset has 32)")
    ap.add_argument("--epochs", type=int, default=None, help="epochs (default: the preset's, 40)")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], help="extra --set KEY=VALUE for every command")
    ap.add_argument("--plugin-set", action="append", default=[], help="extra --set KEY=VALUE for the plugin only")
    ap.add_argument("--vs", default=None, help="also time the plugin under this commit's code (a git worktree)")
    args = ap.parse_args()
    sets = [f"audit.models={args.models}", *([f"train.epochs={args.epochs}"] if args.epochs else []), *args.set]
    tmp = Path(tempfile.mkdtemp(prefix="bench-plugin-"))
    plugin_file = tmp / "my_defense.py"
    plugin_file.write_text(README_PLUGIN)
    plugin = f"{plugin_file}:LabelSmoothing"
    other = None
    if args.vs:
        other = tmp / "wt"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(other), args.vs],
                       check=True, capture_output=True)
    print(f"settings: quick preset, {' '.join(sets)}" + (f"; the plugin also {' '.join(args.plugin_set)}"
                                                          if args.plugin_set else ""), flush=True)
    rows: list[dict] = []
    try:
        for i in range(args.runs):
            order = [("builtin", "undefended"), ("plugin", plugin)]
            if i % 2:
                order.reverse()
            row: dict = {}
            for name, defense in order:
                row[name] = train_wall(REPO, defense, sets + (args.plugin_set if name == "plugin" else []))
            if other is not None:
                row["plugin_vs"] = train_wall(other, plugin, sets + args.plugin_set)
            rows.append(row)
            line = (f"run {i + 1}: training wall built-in {row['builtin'][0]:.1f} s, plugin {row['plugin'][0]:.1f} s, "
                    f"ratio {row['plugin'][0] / row['builtin'][0]:.2f}")
            if other is not None:
                line += f"; plugin at {args.vs} {row['plugin_vs'][0]:.1f} s ({row['plugin_vs'][0] / row['builtin'][0]:.2f})"
            print(line, flush=True)
    finally:
        if other is not None:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(other)], capture_output=True)

    def med(name: str, k: int = 0) -> float:
        return statistics.median(r[name][k] for r in rows)

    out = {"settings": sets, "plugin_settings": args.plugin_set, "runs": args.runs,
           "builtin_train_wall": [r["builtin"][0] for r in rows], "plugin_train_wall": [r["plugin"][0] for r in rows],
           "ratio_per_run": [r["plugin"][0] / r["builtin"][0] for r in rows],
           "ratio_of_medians": med("plugin") / med("builtin"),
           "builtin_seconds_per_model": med("builtin", 1), "plugin_seconds_per_model": med("plugin", 1)}
    print(f"median training wall: built-in {med('builtin'):.1f} s, plugin {med('plugin'):.1f} s: "
          f"ratio {out['ratio_of_medians']:.2f} (each model's own training {med('builtin', 1):.2f} s and "
          f"{med('plugin', 1):.2f} s)")
    if other is not None:
        out.update({"vs": args.vs, "plugin_vs_train_wall": [r["plugin_vs"][0] for r in rows],
                    "ratio_vs_of_medians": med("plugin_vs") / med("builtin")})
        print(f"plugin at {args.vs}: {med('plugin_vs'):.1f} s, ratio {out['ratio_vs_of_medians']:.2f}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
