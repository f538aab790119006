"""A plugin's own ``fit`` co-trained (defenses/cotrain.py): its train_classifier calls train stacked, each
model as alone (its loss, targets, epoch hook, global RNGs), and a run of it gives the built-in's numbers."""

from __future__ import annotations

import copy
import json
import textwrap
import threading
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import defenses.cotrain as cotrain
from defenses.base import Defense, FitContext, LabeledImages, Normalizer, TorchClassifier
from defenses.training import init_network, train_classifier
from harness.core.config import TrainConfig, validate_config
from harness.core.data import DataConfig, load_dataset
from harness.run.runner import (AUTO_COTRAIN_GROUP_SIZE, group_size, make_defense, seed_global_rngs,
                               trains_in_groups)


@pytest.fixture(scope="module")
def digits():
    return load_dataset(DataConfig(name="digits", test_size=497), seed=0)


def _subset(data, start: int, n: int) -> LabeledImages:
    return LabeledImages(x=data.x_train[start : start + n], y=data.y_train[start : start + n],
                         num_classes=data.num_classes, mean=data.mean, std=data.std, augment=data.augment)


#: 40, 70 and 65 samples at batch 32: 2, 3 and 3 steps per epoch (model 0 sits out every third step)
SIZES = [40, 70, 65]
MLP = TrainConfig(model="mlp", width=64, epochs=3, batch_size=32, lr=0.05, momentum=0.9, weight_decay=5e-4,
                  schedule="step", milestones=[0.5], gamma=0.1, augment=False)


def _setup(data, cfg: TrainConfig, seeds=(100, 101, 102)):
    trains = [_subset(data, 37 * g, n) for g, n in enumerate(SIZES)]
    ctxs = [FitContext(seed=s, device="cpu", train=cfg) for s in seeds]
    return trains, ctxs


class OwnEverything(Defense):
    """Label smoothing, dropout on the logits (torch's global RNG), a penalty on the head's weights
    (read from the network itself), soft targets refreshed by an epoch hook from epoch 1, and draws
    from every global RNG before and after training."""

    name, description = "own-everything", "test"

    def fit(self, train, ctx):
        before = [float(torch.rand(())), float(np.random.rand()), __import__("random").random()]
        net = init_network(train, ctx)
        onehot = np.eye(train.num_classes, dtype=np.float32)[train.y]

        def hook(epoch, net):
            if epoch < 1:
                return None
            own = torch.softmax(torch.from_numpy(TorchClassifier(net, train.mean, train.std, ctx.device).query(train.x)), 1)
            return (0.7 * onehot + 0.3 * own.numpy()).astype(np.float32)

        def loss(logits, targets, epoch):
            z = F.dropout(logits, 0.2, training=True)
            ce = -(targets * F.log_softmax(z, dim=1)).sum(1).mean()
            return ce + 1e-2 * net.head.weight.square().sum()

        net = train_classifier(net, train, ctx, targets=onehot, loss_fn=loss, epoch_hook=hook)
        after = [float(torch.rand(())), float(np.random.rand())]
        return TorchClassifier(net, train.mean, train.std, ctx.device, record={"draws": before + after})


def _alone(defense, trains, ctxs):
    out = []
    for t, c in zip(trains, ctxs):
        seed_global_rngs(c.seed)
        out.append(defense.fit(t, c))
    return out


def _together(defense, trains, ctxs):
    return cotrain.fit_together(defense, trains, ctxs, lambda i: seed_global_rngs(ctxs[i].seed))


def _gap(a: TorchClassifier, b: TorchClassifier, x: np.ndarray) -> float:
    za, zb = a.query(x), b.query(x)
    return float(np.abs(za - zb).max()) / max(float(np.abs(zb).max()), 1e-3)


@pytest.fixture
def stacked_calls(monkeypatch):
    """The sizes of the groups train_calls trained (the co-trained calls that did train stacked)."""
    seen: list[int] = []
    real = cotrain.train_calls

    def spy(calls, code=None):
        seen.append(len(calls))
        return real(calls, code)

    monkeypatch.setattr(cotrain, "train_calls", spy)
    return seen


def test_an_own_loss_hook_and_weight_penalty_train_stacked_as_alone(digits, stacked_calls):
    """Three MLPs of ragged sizes, co-trained through the plugin's own fit (one stacked loop), each
    equal to its fit alone to float rounding (logits within 1e-4 of their scale), with the same
    global-RNG draws before and after training; a swap of two models' seeds breaks the match."""
    d = OwnEverything()
    trains, ctxs = _setup(digits, MLP)
    x = digits.x_test
    fresh = [TorchClassifier(init_network(t, c).eval(), t.mean, t.std, "cpu") for t, c in zip(trains, ctxs)]
    together = _together(d, trains, ctxs)
    assert stacked_calls == [3]
    alone = _alone(d, trains, ctxs)
    for s, a, f in zip(together, alone, fresh):
        assert _gap(a, f, x) > 0.3  # training moved the model (else the comparison proves nothing)
        assert _gap(s, a, x) < 1e-4
        assert s.info()["draws"] == a.info()["draws"]  # every global RNG is the model's own, as alone
    assert len({tuple(s.info()["draws"]) for s in together}) == 3
    swapped = _together(d, trains, [ctxs[1], ctxs[0], ctxs[2]])
    assert _gap(swapped[0], alone[0], x) > 1e-2


class LabelSmoothing(Defense):
    """The README's example."""

    name, description = "label-smoothing", "cross-entropy with smoothed targets"
    param_defaults = {"smoothing": 0.1}

    def fit(self, train, ctx):
        def loss(logits, targets, epoch):
            return F.cross_entropy(logits, targets, label_smoothing=self.params["smoothing"])
        net = train_classifier(init_network(train, ctx), train, ctx, loss_fn=loss)
        return TorchClassifier(net, train.mean, train.std, ctx.device)


class OwnNet(LabelSmoothing):
    """Keeps its network on the defense object and reads it back in its loss (a penalty on it)."""

    def fit(self, train, ctx):
        self.net = init_network(train, ctx)

        def loss(logits, targets, epoch):
            return F.cross_entropy(logits, targets) + 0.5 * self.net.head.weight.square().sum()
        train_classifier(self.net, train, ctx, loss_fn=loss)
        return TorchClassifier(self.net, train.mean, train.std, ctx.device)


@pytest.fixture
def batched_steps(monkeypatch):
    """How many steps computed every model's loss in one vmapped call, and how many tried."""
    import defenses.stacked as stacked

    seen = {"batched": 0, "tried": 0}
    real = stacked._ModelLosses._together

    def spy(self, *args):
        out = real(self, *args)
        seen["tried"] += 1
        seen["batched"] += out is not None
        return out

    monkeypatch.setattr(stacked._ModelLosses, "_together", spy)
    return seen


def test_the_readme_plugin_computes_its_losses_in_one_call_as_alone(digits, batched_steps):
    """The README's loss reads only the defense's parameters: on every step where each model has a
    full batch the three losses are one vmapped call (on ragged steps, one call each), and each model
    is what it is alone."""
    trains, ctxs = _setup(digits, MLP)
    x = digits.x_test
    together, alone = _together(LabelSmoothing(), trains, ctxs), _alone(LabelSmoothing(), trains, ctxs)
    assert batched_steps["batched"] == batched_steps["tried"] > 0
    for s, a in zip(together, alone):
        assert _gap(s, a, x) < 1e-4
    other = _together(LabelSmoothing(smoothing=0.3), trains, ctxs)  # the parameter reaches the batched loss
    assert _gap(other[0], alone[0], x) > 1e-2


def test_a_fit_that_keeps_its_network_on_self_gets_its_own(digits, batched_steps):
    """Each model's fit runs on a copy of the defense object of its own: `self.net = ...` in one fit
    is not the next one's, and its loss (which reads it) is called per model, never batched."""
    trains, ctxs = _setup(digits, MLP)
    x = digits.x_test
    together, alone = _together(OwnNet(), trains, ctxs), _alone(OwnNet(), trains, ctxs)
    assert batched_steps["batched"] == 0
    for s, a in zip(together, alone):
        assert _gap(s, a, x) < 1e-4


def test_without_dropout_the_penalty_gradient_is_what_matters(digits):
    """The penalty on the head's weights (a loss that reads the network, not only its logits) reaches
    the stacked step: without it the models differ from the ones trained with it alone."""

    class NoPenalty(OwnEverything):
        def fit(self, train, ctx):
            net = init_network(train, ctx)
            return TorchClassifier(train_classifier(net, train, ctx, loss_fn=lambda z, y, e: F.cross_entropy(z, y)),
                                   train.mean, train.std, ctx.device)

    class Penalty(OwnEverything):
        def fit(self, train, ctx):
            net = init_network(train, ctx)

            def loss(z, y, e):
                return F.cross_entropy(z, y) + 0.5 * net.head.weight.square().sum()

            return TorchClassifier(train_classifier(net, train, ctx, loss_fn=loss), train.mean, train.std, ctx.device)

    trains, ctxs = _setup(digits, MLP)
    x = digits.x_test
    with_penalty = _together(Penalty(), trains, ctxs)
    for s, a, n in zip(with_penalty, _alone(Penalty(), trains, ctxs), _alone(NoPenalty(), trains, ctxs)):
        assert _gap(s, a, x) < 1e-4
        assert _gap(s, n, x) > 1e-2


def test_calls_that_cannot_stack_train_alone_bit_for_bit(digits, stacked_calls):
    """A network of the plugin's own (not the preset's) and a call under autocast train alone, in
    their model's thread, exactly as without co-training; the other two models still stack."""

    class Mixed(Defense):
        name, description = "mixed", "test"

        def fit(self, train, ctx):
            if ctx.seed == 101:
                net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, train.num_classes))
                net = train_classifier(net, train, ctx)
            else:
                net = train_classifier(init_network(train, ctx), train, ctx,
                                       loss_fn=lambda z, y, e: F.cross_entropy(z, y, label_smoothing=0.1))
            return TorchClassifier(net, train.mean, train.std, ctx.device)

    trains, ctxs = _setup(digits, MLP)
    x = digits.x_test
    together, alone = _together(Mixed(), trains, ctxs), _alone(Mixed(), trains, ctxs)
    assert stacked_calls == [2]
    assert np.array_equal(together[1].query(x), alone[1].query(x))
    assert _gap(together[0], alone[0], x) < 1e-4


def test_the_first_failing_model_is_named_and_the_others_end(digits):
    """An error in model 1's loss at epoch 1 (inside the stacked loop) is model 1's, with its own
    frame in the traceback; every model's thread ends."""

    class Fails(Defense):
        name, description = "fails", "test"

        def fit(self, train, ctx):
            def loss(z, y, epoch):
                if epoch == 1 and ctx.seed == 101:
                    raise ValueError("bad loss")
                return F.cross_entropy(z, y)

            return TorchClassifier(train_classifier(init_network(train, ctx), train, ctx, loss_fn=loss),
                                   train.mean, train.std, ctx.device)

    trains, ctxs = _setup(digits, MLP)
    before = set(threading.enumerate())
    with pytest.raises(cotrain.FitFailed) as info:
        _together(Fails(), trains, ctxs)
    assert info.value.index == 1 and isinstance(info.value.error, ValueError)
    import traceback

    assert any(fs.name == "loss" for fs in traceback.extract_tb(info.value.error.__traceback__))
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and [t for t in threading.enumerate() if t not in before]:
        time.sleep(0.05)
    assert not [t for t in threading.enumerate() if t not in before]


def test_grouped_cnns_with_an_own_loss_and_hook_train_as_alone(stacked_calls):
    """The grouped engine (the cnn network) with the plugin's loss and epoch hook: each model's
    logits, BatchNorm running statistics and step counts as alone (random images, ragged sizes,
    augmentation, warm-up and a step schedule)."""
    rng = np.random.default_rng(0)
    from harness.core.data import AugmentSpec

    cfg = TrainConfig(model="cnn", width=4, epochs=2, batch_size=16, lr=0.05, momentum=0.9, weight_decay=5e-4,
                      schedule="step", milestones=[0.5], gamma=0.1, warmup_epochs=1, augment=True)
    sizes = [40, 56, 47]
    mean, std, aug = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25), AugmentSpec(flip=True, shift=2)
    trains = [LabeledImages(x=rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8), y=rng.integers(0, 10, n),
                            num_classes=10, mean=mean, std=std, augment=aug) for n in sizes]
    ctxs = [FitContext(seed=100 + g, device="cpu", train=cfg) for g in range(3)]

    class Smooth(Defense):
        name, description = "smooth", "test"

        def fit(self, train, ctx):
            calls = []

            def hook(epoch, net):
                calls.append(epoch)
                return None

            net = train_classifier(init_network(train, ctx), train, ctx, epoch_hook=hook,
                                   loss_fn=lambda z, y, e: F.cross_entropy(z, y, label_smoothing=0.2))
            return TorchClassifier(net, train.mean, train.std, ctx.device, record={"hooked": calls})

    together, alone = _together(Smooth(), trains, ctxs), _alone(Smooth(), trains, ctxs)
    assert stacked_calls == [3]
    x = rng.integers(0, 256, (64, 3, 32, 32), dtype=np.uint8)
    for s, a in zip(together, alone):
        assert s.info()["hooked"] == a.info()["hooked"] == [0, 1]
        assert _gap(s, a, x) < 1e-4
        sa, sb = s.net.state_dict(), a.net.state_dict()
        for k in sb:
            if k.endswith("num_batches_tracked"):
                assert int(sa[k]) == int(sb[k]), k
            else:
                assert float((sa[k] - sb[k]).abs().max()) < 1e-4 * max(1.0, float(sb[k].abs().max())), k


PLAIN = textwrap.dedent(
    '''
    from defenses.base import Defense, TorchClassifier
    from defenses.training import init_network, train_classifier


    class PlainCE(Defense):
        name, description = "plain-ce", "the undefended recipe, written as a plugin"

        def fit(self, train, ctx):
            net = train_classifier(init_network(train, ctx), train, ctx)
            return TorchClassifier(net, train.mean, train.std, ctx.device)
    '''
)


def test_a_plugin_of_the_undefended_recipe_gives_the_builtin_signals_bit_for_bit(tmp_path):
    """`harness evaluate plugin.py:PlainCE` trains in groups of 4 and saves exactly the signals of
    `harness evaluate undefended` (the same stacked engine, the same groups)."""
    from typer.testing import CliRunner

    from harness.cli import app

    f = tmp_path / "plain.py"
    f.write_text(PLAIN)
    dirs = {}
    for name, ref in (("plugin", f"{f}:PlainCE"), ("builtin", "undefended")):
        out = tmp_path / name
        res = CliRunner().invoke(app, ["evaluate", ref, "--models", "6", "--audit-size", "40", "--epochs", "2",
                                       "--workers", "1", "--level", "population", "--out", str(out),
                                       "--set", "attack.bootstrap=20"])
        assert res.exit_code == 0, res.output
        (dirs[name],) = out.iterdir()
    assert "groups of 4" in res.output
    files = sorted(p.name for p in (dirs["builtin"] / "population" / "signals").iterdir())
    assert len(files) == 6
    for name in files:
        with np.load(dirs["plugin"] / "population" / "signals" / name) as a, \
                np.load(dirs["builtin"] / "population" / "signals" / name) as b:
            assert sorted(a.files) == sorted(b.files)
            for k in b.files:
                if k == "meta":  # run fingerprints and timings differ; the model's facts may not
                    ma, mb = json.loads(str(a[k])), json.loads(str(b[k]))
                    assert (ma["seed"], ma["test_accuracy"]) == (mb["seed"], mb["test_accuracy"])
                else:
                    assert np.array_equal(a[k], b[k]), (name, k)


def test_plugins_train_in_groups_builtins_as_before():
    def cfg(defense, **train):
        return validate_config({"preset": "quick", "defense": defense, "data": {"name": "digits"},
                                "train": {"model": "mlp", **train}})

    class Plugin(Defense):
        name, description = "p", "test"

        def fit(self, train, ctx):
            raise AssertionError

    class Alone(Plugin):
        cotrain = False

    c = cfg("undefended")
    assert Plugin().cotrains(c.train) and trains_in_groups(Plugin(), c.train)
    assert not Alone().cotrains(c.train)
    assert group_size(c, Plugin()) == AUTO_COTRAIN_GROUP_SIZE and group_size(c, Alone()) == 1
    assert not trains_in_groups(Plugin(), c.train.model_copy(update={"model": "wrn16-4"}))  # not stackable
    for name in ("selena", "undefended", "hamp"):  # built-ins: their own fit_group or one at a time
        assert not make_defense(cfg(name)).cotrains(c.train)
    assert group_size(cfg("selena"), make_defense(cfg("selena"))) == 1


README = textwrap.dedent(
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


def test_a_resumed_plugin_run_retrains_its_block_for_identical_models(tmp_path):
    """The README's plugin co-trained in one block of 6: a model retrained after an interruption
    trains beside its block's finished models again, so its signals equal the uninterrupted run's
    bit for bit, and the finished models are not saved again."""
    from harness.defense_config import build_config
    from harness.run.executors import LocalExecutor
    from harness.run.runner import prepare_run, train_all
    from tests.conftest import tiny_overrides

    f = tmp_path / "my_defense.py"
    f.write_text(README)
    cfg = build_config("quick", tiny_overrides(**{"defense": f"{f}:LabelSmoothing", "run.out": str(tmp_path / "runs"),
                                                  "run.level": "population"}))
    prep = prepare_run(cfg)
    assert [m["model_index"] for m in sorted(train_all(prep, LocalExecutor(1)), key=lambda m: m["model_index"])] \
        == list(range(6))
    run = prep.run
    before = run.read_signals("population", 1)
    files = {i: run.signals_path("population", i).read_bytes() for i in range(6)}
    run.signals_path("population", 1).unlink()
    metas = train_all(prep, LocalExecutor(1))
    assert [m["model_index"] for m in metas] == [1]
    after = run.read_signals("population", 1)
    for name, arr in before.arrays.items():
        assert np.array_equal(arr, after.arrays[name]), name
    for i in (0, 2, 3, 4, 5):
        assert run.signals_path("population", i).read_bytes() == files[i]
