"""Defenses load by name, from entry points and from ``path/to/file.py:ClassName``."""

import json
import textwrap

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.core.config import ConfigError
from harness.plugins import available, resolve

PLUGIN = textwrap.dedent(
    '''
    import numpy as np
    from defenses.base import Defense, ServedModel


    class LabelOracle(ServedModel):
        """Serves a memorized lookup: members are answered with their training label."""

        def __init__(self, table, k):
            self.table, self.k = table, k

        def query(self, x):
            out = np.zeros((len(x), self.k), np.float32)
            for i, img in enumerate(x):
                label = self.table.get(img.tobytes())
                if label is not None:
                    out[i, label] = 10.0
            return out


    class MemorizeDefense(Defense):
        name = "memorize"
        description = "a lookup table: the most vulnerable model there is"

        def fit(self, train, ctx):
            return LabelOracle({img.tobytes(): int(y) for img, y in zip(train.x, train.y)}, train.num_classes)


    class NotADefense:
        pass
    '''
)


def test_builtins_are_listed():
    assert "undefended" in available("defenses")
    assert {"none", "mislabeled"} <= set(available("canaries"))
    assert "lira" in available("attacks")


def test_file_plugin_resolves_and_bad_references_are_clear(tmp_path):
    f = tmp_path / "my_defense.py"
    f.write_text(PLUGIN)
    cls = resolve("defenses", f"{f}:MemorizeDefense")
    assert cls.name == "memorize"
    with pytest.raises(ConfigError, match="not a subclass"):
        resolve("defenses", f"{f}:NotADefense")
    with pytest.raises(ConfigError, match="defines no"):
        resolve("defenses", f"{f}:Missing")
    with pytest.raises(ConfigError, match="does not exist"):
        resolve("defenses", f"{tmp_path}/absent.py:X")


def test_evaluate_runs_a_defense_from_a_file(tmp_path):
    f = tmp_path / "my_defense.py"
    f.write_text(PLUGIN)
    res = CliRunner().invoke(
        app,
        ["evaluate", f"{f}:MemorizeDefense", "--models", "6", "--audit-size", "40", "--workers", "1",
         "--out", str(tmp_path / "runs"), "--set", "attack.bootstrap=20"],
    )
    assert res.exit_code == 0, res.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    results = json.loads((run_dir / "results.json").read_text())
    # a lookup table answers members perfectly and non-members never: LiRA finds all of them
    assert results["sample"]["best"]["tpr_at_fpr"]["0.0"] == 1.0
    assert results["defense"].endswith(":MemorizeDefense")


def test_a_run_of_a_plugin_named_by_a_relative_path_is_attacked_from_another_folder(tmp_path, monkeypatch):
    """`harness evaluate my_defense.py:Class` run in one folder stores the plugin's absolute path, so
    `harness attack` and `harness report` on the run work from any other folder."""
    made, elsewhere = tmp_path / "made", tmp_path / "elsewhere"
    made.mkdir()
    elsewhere.mkdir()
    (made / "my_defense.py").write_text(PLUGIN)
    monkeypatch.chdir(made)
    res = CliRunner().invoke(app, ["evaluate", "my_defense.py:MemorizeDefense", "--models", "6", "--audit-size", "40",
                                   "--workers", "1", "--level", "population", "--out", "runs",
                                   "--set", "attack.bootstrap=20"])
    assert res.exit_code == 0, res.output
    (run_dir,) = (made / "runs").iterdir()
    stored = json.loads((run_dir / "config.json").read_text())["defense"]
    assert stored == f"{made / 'my_defense.py'}:MemorizeDefense"
    monkeypatch.chdir(elsewhere)
    relative = f"../made/runs/{run_dir.name}"
    for command in (["attack", relative, "--set", "attack.bootstrap=20"], ["report", relative]):
        res = CliRunner().invoke(app, command)
        assert res.exit_code == 0, (command, res.output)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["defense"] == stored
    # the same command in the folder it was made in finds the same run (the same fingerprint): nothing retrains
    monkeypatch.chdir(made)
    res = CliRunner().invoke(app, ["evaluate", "my_defense.py:MemorizeDefense", "--models", "6", "--audit-size", "40",
                                   "--workers", "1", "--level", "population", "--out", "runs",
                                   "--set", "attack.bootstrap=20"])
    assert res.exit_code == 0, res.output
    assert [p.name for p in (made / "runs").iterdir()] == [run_dir.name]


def test_a_file_plugins_fingerprint_hashes_how_plugins_train_and_a_builtins_does_not(tmp_path, monkeypatch):
    """Co-trained plugin models round differently from one-at-a-time ones: a plugin run from before
    starts afresh (PLUGIN_TRAINING is in its fingerprint) instead of resuming with mixed models; a
    built-in's fingerprint does not move."""
    from harness.core import version
    from harness.defense_config import build_config
    from harness.run import fingerprint

    plugin = tmp_path / "memo.py"
    plugin.write_text(PLUGIN)
    cfg_plugin = build_config("quick", {"defense": f"{plugin}:MemorizeDefense"})
    cfg_builtin = build_config("quick", {"defense": "undefended"})
    before = fingerprint.fingerprint_of(cfg_plugin, "d"), fingerprint.fingerprint_of(cfg_builtin, "d")
    monkeypatch.setattr(fingerprint, "PLUGIN_TRAINING", version.PLUGIN_TRAINING + "-next")
    after = fingerprint.fingerprint_of(cfg_plugin, "d"), fingerprint.fingerprint_of(cfg_builtin, "d")
    assert before[0] != after[0] and before[1] == after[1]
