"""Progress in logs (nohup, Slurm, a pipe): plain lines as models finish, not rich's live bars, which
print nothing until they stop (issue 36, item 7)."""

from __future__ import annotations

import re
import subprocess
import sys

from harness.api import Progress
from harness.cli.common import ProgressView

from conftest import HANG_GUARD_S, TINY_ARGS

LINE = re.compile(r"^train population: (\d+)/6 models done(?: \((\d+\.\d) with the running ones\))?, "
                  r"(\d+):(\d\d):(\d\d) elapsed$")


def test_a_piped_evaluate_prints_a_line_as_models_finish(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "evaluate", "undefended", *TINY_ARGS,
                           "--set", "run.group_size=1", "--out", str(tmp_path)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "loading data and building the audit design..." in lines and "running attacks on saved signals..." in lines
    trains = [LINE.match(line) for line in lines if line.startswith("train ")]
    assert trains and all(trains), [line for line in lines if line.startswith("train ")]
    counts = [int(m.group(1)) for m in trains]
    assert counts[0] == 0 and counts[-1] == 6 and counts == sorted(set(counts))  # one line per change, in order
    seconds = [3600 * int(m.group(3)) + 60 * int(m.group(4)) + int(m.group(5)) for m in trains]
    assert seconds == sorted(seconds)
    assert not any(ch in proc.stdout for ch in "━⠋⠙⠹")  # no bar or spinner frames in the log


def test_a_log_gets_a_heartbeat_while_a_model_trains(capsys, monkeypatch):
    view = ProgressView(live=False)
    view(Progress("train", level="population", done=0.0, total=6, finished=0))
    view(Progress("train", level="population", done=0.5, total=6, finished=0))  # within the heartbeat: quiet
    monkeypatch.setattr(ProgressView, "HEARTBEAT_S", 0.0)
    view(Progress("train", level="population", done=0.5, total=6, finished=0))  # a model trains: heartbeat
    view(Progress("train", level="population", done=1.0, total=6, finished=1))
    view(Progress("train", level="population", done=1.0, total=6, finished=1))  # nothing running, nothing new
    out = capsys.readouterr().out.splitlines()
    assert [LINE.match(line).group(1, 2) for line in out] == [("0", None), ("0", "0.5"), ("1", None)]


def test_a_long_step_prints_its_status_every_heartbeat_in_a_log(capsys, monkeypatch):
    """A step that keeps updating its status (the fixed features computed before training) prints
    its latest status once a heartbeat has passed since the first unprinted one, not only when the
    next kind of event arrives; a short step stays silent until then."""
    clock = [100.0]
    monkeypatch.setattr("harness.cli.common.time.monotonic", lambda: clock[0])
    view = ProgressView(live=False)
    view(Progress("status", message="checking the fixed-feature cache"))
    clock[0] += 10
    view(Progress("status", message="computing the fixed features: 500 of 9000 new images"))
    assert capsys.readouterr().out == ""  # within the heartbeat: nothing yet
    clock[0] += ProgressView.HEARTBEAT_S
    view(Progress("status", message="computing the fixed features: 6000 of 9000 new images"))
    assert capsys.readouterr().out.splitlines() == ["computing the fixed features: 6000 of 9000 new images..."]
    clock[0] += 10
    view(Progress("status", message="computing the fixed features: 9000 of 9000 new images"))
    view(Progress("info", message="Fixed features computed."))
    assert capsys.readouterr().out.splitlines() == ["computing the fixed features: 9000 of 9000 new images...",
                                                    "Fixed features computed."]
