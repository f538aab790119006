"""Shared fixtures. Tests that read ../shared skip with a reason when it is absent (a user's clone)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# every results.json the tests make (in this process or a subprocess) is checked against
# docs/results.schema.json before it is written (harness.audit.report.check_schema)
os.environ["HARNESS_CHECK_RESULTS_SCHEMA"] = "1"

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
CIFAR_SUBSET = SHARED / "data" / "cifar10-subset"


@pytest.fixture
def cifar_subset() -> Path:
    if not (CIFAR_SUBSET / "cifar-10-batches-py" / "data_batch_1").is_file():
        pytest.skip(f"CIFAR-10 subset not found at {CIFAR_SUBSET} (only CI and developers have ../shared)")
    return CIFAR_SUBSET


@pytest.fixture
def scatter_cache(tmp_path, monkeypatch):
    """A fresh feature-cache folder for the scattering networks (defenses/scatter_models.py), and no
    cache left in the process from another test."""
    from defenses import scatter_models

    monkeypatch.setenv(scatter_models.CACHE_ENV, str(tmp_path / "features"))
    scatter_models._SHARED.clear()
    yield tmp_path / "features"
    scatter_models._SHARED.clear()


#: `harness evaluate` options of a few-second population-level run (6 models, 20 audit samples, 2 epochs)
TINY_ARGS = ["--models", "6", "--audit-size", "20", "--epochs", "2", "--set", "train.width=32", "--set",
             "attack.bootstrap=20", "--workers", "1", "--level", "population"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A finished undefended run of TINY_ARGS, one per test module (tests copy it: ``run_copy``)."""
    from typer.testing import CliRunner

    from harness.cli import app

    out = tmp_path_factory.mktemp("runs")
    res = CliRunner().invoke(app, ["evaluate", "undefended", "--out", str(out), *TINY_ARGS])
    assert res.exit_code == 0, res.output
    (run_dir,) = out.iterdir()
    return run_dir


@pytest.fixture()
def run_copy(finished_run, tmp_path) -> Path:
    """A copy of ``finished_run`` that a test may damage, lock or re-attack."""
    import shutil

    dst = tmp_path / "run"
    shutil.copytree(finished_run, dst)
    return dst


def tiny_overrides(**extra) -> dict:
    """A few-second digits experiment: 6 models, 60 audit samples, 4 epochs, few bootstrap draws."""
    base = {
        "audit.models": 6,
        "audit.size": 60,
        "train.epochs": 4,
        "train.width": 64,
        "attack.bootstrap": 50,
        "run.workers": 1,
    }
    base.update(extra)
    return base


#: a file plugin of a few seconds (tests write it to a .py file): members are answered with their own
#: training label, any other image with its nearest training image's, so its models leak every member
#: and stay above chance on the test set (a leaderboard takes no model at chance)
NEAREST_LABEL_PLUGIN = """
import numpy as np
from defenses.base import Defense, ServedModel


class NearestLabel(ServedModel):
    def __init__(self, x, y, k):
        self.x, self.y, self.k = x.reshape(len(x), -1).astype(np.float32), y, k

    def query(self, x):
        q = x.reshape(len(x), -1).astype(np.float32)
        d = (q ** 2).sum(1)[:, None] - 2 * q @ self.x.T + (self.x ** 2).sum(1)[None]
        out = np.zeros((len(x), self.k), np.float32)
        out[np.arange(len(x)), self.y[d.argmin(1)]] = 10.0
        return out


class Memorize(Defense):
    name, description = "memorize", "the label of the nearest training image: members are their own nearest"

    def fit(self, train, ctx):
        return NearestLabel(train.x, train.y, train.num_classes)
"""


# --- handshakes between a test and the processes it starts ---------------------------------------
# A test that needs another process to be at some point (holding a lock, training, waiting) waits
# until that process says so (a line, a file) instead of sleeping a number of seconds, which a loaded
# machine can always overrun. HANG_GUARD_S only ends a wait that would otherwise never end.

#: seconds after which a handshake that never comes fails the test (a hang guard, not a timing)
HANG_GUARD_S = 600.0


def wait_for(condition, what: str, timeout: float = HANG_GUARD_S) -> None:
    """Poll ``condition()`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


#: a defense plugin for tests: the undefended recipe (stacked groups included), whose training jobs
#: wait at a gate when ``TEST_GATE`` names a folder. Each job (a ``fit`` or ``fit_group`` call) takes
#: the next ticket ``ticket-<i>``; the first ``TEST_GATE_PASS`` (default 0) go on, every later one
#: writes ``blocked-<i>`` and waits until the folder holds ``open`` (or HANG_GUARD_S passed).
GATED_DEFENSE = f'''
import os
import time
from pathlib import Path

from defenses.undefended import Undefended


def _gate():
    folder = os.environ.get("TEST_GATE")
    if not folder:
        return
    i = 0
    while True:
        try:
            os.close(os.open(Path(folder, f"ticket-{{i}}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            break
        except FileExistsError:
            i += 1
    if i < int(os.environ.get("TEST_GATE_PASS", "0")):
        return
    Path(folder, f"blocked-{{i}}").touch()
    deadline = time.monotonic() + {HANG_GUARD_S}
    while not Path(folder, "open").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


class Gated(Undefended):
    name = "gated"

    def fit(self, train, ctx):
        _gate()
        return super().fit(train, ctx)

    def fit_group(self, trains, ctxs):
        _gate()
        return super().fit_group(trains, ctxs)
'''


def gated_defense(folder: Path) -> tuple[str, Path]:
    """Write :data:`GATED_DEFENSE` into ``folder``: (``harness evaluate``'s DEFENSE argument, the
    gate folder to name in ``TEST_GATE``)."""
    plugin = folder / "gated.py"
    plugin.write_text(GATED_DEFENSE)
    gate = folder / "gate"
    gate.mkdir()
    return f"{plugin}:Gated", gate


@pytest.fixture
def tmpfs(tmp_path):
    """``mount(size, readonly=False) -> Path``: a tmpfs of ``size`` (e.g. "4m") mounted under
    tmp_path, unmounted afterwards; skips with the reason where this process cannot mount one
    (not root, or a container without the capability)."""
    import os
    import subprocess

    mounted: list[Path] = []

    def mount(size: str, readonly: bool = False) -> Path:
        target = tmp_path / f"tmpfs{len(mounted)}"
        target.mkdir()
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root (CI runs as root; this user is not)")
        opts = f"size={size}" + (",ro" if readonly else "")
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(target)], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip() or proc.returncode}")
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


BROWSER_TEST = "test_site_renders_in_headless_chromium_without_errors"
_browser_outcome: list[str] = []


def pytest_runtest_logreport(report):  # noqa: D103 - the headless-browser test's outcome, for the summary
    if report.nodeid.endswith(BROWSER_TEST) and (report.when == "call" or report.skipped):
        reason = f" ({report.longrepr[2]})" if report.skipped and isinstance(report.longrepr, tuple) else ""
        _browser_outcome.append(report.outcome + reason)


def pytest_terminal_summary(terminalreporter):  # noqa: D103 - one line CI output can be read for
    if _browser_outcome:
        terminalreporter.write_line(f"headless-browser leaderboard test: {_browser_outcome[-1]}")


#: tests measured to take more than about 3 s (setup + call + teardown) on 2 CPU cores, one per line as
#: ``file::function`` (every parametrization): ``benchmarks/slow_tests.py`` writes it from a full run's
#: JUnit XML. They get the ``slow`` marker here, beside those marked in their files, so that
#: ``pytest -m "not slow"`` is a fast first check (README); CI runs everything.
SLOW_LIST = Path(__file__).with_name("slow_tests.txt")


def pytest_collection_modifyitems(config, items):  # noqa: D103 - the measured slow tests get the marker
    if not SLOW_LIST.is_file():
        return
    slow = {ln.strip() for ln in SLOW_LIST.read_text().splitlines() if ln.strip() and not ln.startswith("#")}
    for item in items:
        if item.nodeid.split("[", 1)[0] in slow:
            item.add_marker(pytest.mark.slow)
