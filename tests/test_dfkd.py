"""DFKD (data-free knowledge distillation): generator, DeepInversion loss, distillation loss, the
student's data diet, and the reuse of saved undefended models as teachers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from defenses.base import FitContext, LabeledImages
from defenses.dfkd import DFKD, BNStatistics, Generator, kd_loss, shared_view
from defenses.models import BATCHNORM_KINDS, MODEL_KINDS
from harness.core.augment import shift_flip
from harness.cli import app
from harness.core.config import ConfigError
from harness.defense_config import build_config
from harness.core.data import AugmentSpec, load_digits
from harness.run.runner import prepare_run

TINY = {"rounds": 4, "warmup": 1, "synth_batch": 24, "student_batch_size": 32, "student_passes": 2}


@pytest.fixture(scope="module")
def digits_train():
    data = load_digits(497, 0)
    idx = np.random.default_rng(0).permutation(len(data.y_train))[:150]
    return LabeledImages(data.x_train[idx], data.y_train[idx], data.num_classes, data.mean, data.std, data.augment)


# --- generator ------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 8, 8), (3, 32, 32)])
def test_generator_output_shape_and_range(shape):
    torch.manual_seed(0)
    g = Generator(256, shape)
    x = g(torch.randn(5, 256) * 3).detach()
    assert x.shape == (5, *shape)
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert float(x.std()) > 0  # not a constant image
    # the layer sizes of the paper's generator (protocol notes 4.5), scaled to the image
    assert g.project.out_features == 128 * (shape[1] // 4) * (shape[2] // 4)
    convs = [m for m in g.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.bias is None) for c in convs] == [
        (128, 128, True), (128, 64, True), (64, shape[0], False)]
    with pytest.raises(ValueError, match="multiples of 4"):
        Generator(256, (1, 6, 6))


def test_shared_view_moves_the_whole_batch_alike():
    x = torch.rand(6, 1, 8, 8, requires_grad=True)
    out = shared_view(x, AugmentSpec(flip=False, shift=1), torch.Generator().manual_seed(3))
    # one (dy, dx) for the batch: out equals some fixed shift of x for every image at once
    matches = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)
               if torch.equal(out.detach(), shift_flip(x.detach(), dy, dx, False))]
    assert len(matches) == 1
    out.sum().backward()  # differentiable in x
    assert x.grad is not None


# --- losses ---------------------------------------------------------------------------------


def _bn_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 16, 6), nn.BatchNorm1d(6)).eval()


def test_deepinversion_loss_is_zero_at_the_running_statistics_and_positive_otherwise():
    net = _bn_net().requires_grad_(False)
    x = torch.randn(32, 3, 4, 4) * 2 + 1
    with torch.no_grad():  # set every BN layer's running statistics to this batch's (biased variance)
        h = net[0](x)
        net[1].running_mean.copy_(h.mean((0, 2, 3)))
        net[1].running_var.copy_(h.var((0, 2, 3), unbiased=False))
        h2 = net[4](net[3](net[2](net[1](h))))
        net[5].running_mean.copy_(h2.mean(0))
        net[5].running_var.copy_(h2.var(0, unbiased=False))
    stats = BNStatistics(net, momentum=0.9)
    net(x)
    assert len(stats.layers) == 2
    assert float(stats.loss()) == pytest.approx(0.0, abs=1e-4)
    net(x * 1.5)
    other = float(stats.loss())
    assert other > 0.1
    # the loss is the sum of L2 norms of the differences (hand computation on the second batch)
    mu, var = stats.current[0]
    expected = sum(float(torch.linalg.vector_norm(layer.running_var - v) + torch.linalg.vector_norm(layer.running_mean - m))
                   for layer, (m, v) in zip(stats.layers, stats.current))
    assert other == pytest.approx(expected, rel=1e-5)
    # after update_ema, the loss compares (1 - 0.9) * current + 0.9 * ema
    stats.update_ema()  # ema = statistics of x * 1.5
    net(x)  # current = statistics of x = the running ones
    blended = stats.blended()[0]
    assert torch.allclose(blended[0], 0.1 * net[1].running_mean + 0.9 * mu, atol=1e-5)
    assert float(stats.loss()) > 0
    stats.remove()
    net(x)
    assert stats.current[0][0] is not None and len(net[1]._forward_hooks) == 0


def test_kd_loss_matches_a_hand_computation():
    s = torch.tensor([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]])
    t = torch.tensor([[2.0, 0.0, 1.0], [1.0, 1.0, -2.0]])
    temp = 4.0
    total = 0.0
    for si, ti in zip(s.tolist(), t.tolist()):
        p = [math.exp(v / temp) for v in ti]
        p = [v / sum(p) for v in p]
        q = [math.exp(v / temp) for v in si]
        q = [v / sum(q) for v in q]
        total += sum(pi * (math.log(pi) - math.log(qi)) for pi, qi in zip(p, q))
    expected = total / 2 * temp**2
    assert float(kd_loss(s, t, temp)) == pytest.approx(expected, rel=1e-5)
    assert float(kd_loss(t, t, temp)) == pytest.approx(0.0, abs=1e-6)


# --- the fit ----------------------------------------------------------------------------------


class _Spy(nn.Module):
    """Wraps the student and records every input batch its forward receives."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.seen: list[tuple[bool, torch.Tensor]] = []  # (training mode, input)
        self.recording = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recording:
            self.seen.append((self.training, x.detach().clone()))
        return self.net(x)


class _SpiedDFKD(DFKD):
    def make_student(self, image_shape, num_classes, ctx):
        self.spy = _Spy(super().make_student(image_shape, num_classes, ctx))
        return self.spy


def _views(x_uint8: np.ndarray, spec: AugmentSpec, mean, std) -> torch.Tensor:
    """Every fixed shift/flip view of the images, normalized, flattened: (views * N, D)."""
    x = torch.from_numpy(x_uint8)
    out = [shift_flip(x, dy, dx, f) for f, dy, dx in spec.query_offsets()]
    m = torch.tensor(mean).view(1, -1, 1, 1)
    s = torch.tensor(std).view(1, -1, 1, 1)
    return torch.cat([((v.float() / 255 - m) / s).flatten(1) for v in out])


def _dist(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.cdist(a.double(), b.double(), compute_mode="donot_use_mm_for_euclid_dist")


def test_the_student_never_receives_a_real_training_image(digits_train):
    cfg = build_config("quick", {"defense": "dfkd", "train.epochs": 2, "train.width": 16})
    d = _SpiedDFKD(**TINY)
    fit = d.fit_all(digits_train, FitContext(seed=0, device="cpu", train=cfg.train))
    d.spy.recording = False
    seen = torch.cat([x for _, x in d.spy.seen]).flatten(1)  # everything, incl. the final eval on the bank
    trained_on = sum(len(x) for training, x in d.spy.seen if training)
    # 3 student rounds (rounds 1..3), 2 passes each, over banks of 48, 72, 96 images
    assert trained_on == 2 * (48 + 72 + 96) and fit.bank.shape == (4 * 24, 1, 8, 8)
    real = _views(digits_train.x, digits_train.augment, digits_train.mean, digits_train.std)
    bank = _views(fit.bank, digits_train.augment, digits_train.mean, digits_train.std)
    assert float(_dist(seen, real).min()) > 1e-2  # no input is a real image, under any shift
    assert float(_dist(seen, bank).min(dim=1).values.max()) < 1e-4  # every input is a view of a bank image
    # and a training image would have been caught: the check is not vacuous
    assert float(_dist(real[:5], real).min(dim=1).values.max()) < 1e-4


def test_fit_is_deterministic_and_records_test_free_facts(digits_train):
    cfg = build_config("quick", {"defense": "dfkd", "train.epochs": 2, "train.width": 16})
    ctx = FitContext(seed=5, device="cpu", train=cfg.train)
    a = DFKD(**TINY).fit(digits_train, ctx)
    b = DFKD(**TINY).fit(digits_train, ctx)
    np.testing.assert_array_equal(a.query(digits_train.x[:20]), b.query(digits_train.x[:20]))
    info = a.info()
    assert info["teacher"] == "trained" and info["bank_size"] == 4 * 24 and info["teacher_bn_layers"] == 2
    assert np.isfinite(info["final_synth_loss"]) and 0 <= info["student_teacher_agreement_on_bank"] <= 1
    c = DFKD(**TINY).fit(digits_train, FitContext(seed=6, device="cpu", train=cfg.train))
    assert not np.array_equal(a.query(digits_train.x[:20]), c.query(digits_train.x[:20]))


def test_student_learning_rate_is_a_cosine_over_the_student_rounds():
    d = DFKD(rounds=12, warmup=2, student_lr=0.1, student_lr_min=0.001)
    lrs = [d.student_lr(t) for t in range(10)]
    assert lrs[0] == pytest.approx(0.1) and all(a > b for a, b in zip(lrs, lrs[1:]))
    assert lrs[5] == pytest.approx(0.001 + 0.099 * 0.5)


def test_bad_parameters_and_models_without_batchnorm_are_refused():
    with pytest.raises(ValueError, match="warmup"):
        DFKD(rounds=5, warmup=5)
    with pytest.raises(ValueError, match="synth_batch"):
        DFKD(synth_batch=0)
    with pytest.raises(ValueError, match="bn_momentum"):
        DFKD(bn_momentum=1.0)
    with pytest.raises(ValueError, match="no parameter"):
        DFKD(epochs=3)
    for kind in MODEL_KINDS:
        cfg = build_config("quick", {"defense": "dfkd", "train.model": kind})
        if kind in BATCHNORM_KINDS:
            DFKD().check_config(cfg)
        else:
            with pytest.raises(ValueError, match="BatchNorm"):
                DFKD().check_config(cfg)


def test_cli_refuses_a_teacher_without_batchnorm_before_training(tmp_path):
    res = CliRunner().invoke(app, ["evaluate", "dfkd", "--set", "train.model=mlp", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "needs BatchNorm" in " ".join(res.output.split()), res.output
    assert not any(tmp_path.iterdir())


# --- teacher reuse --------------------------------------------------------------------------

RUN = {"audit.models": 6, "audit.size": 30, "train.epochs": 2, "train.width": 16, "train.model": "mlp-bn",
       "attack.bootstrap": 0, "run.workers": 1, "attack.names": ["lira"]}
DFKD_TINY = {f"defense_params.{k}": v for k, v in TINY.items()}


@pytest.fixture(scope="module")
def undefended_run(tmp_path_factory):
    """A tiny undefended run (both levels) with saved models."""
    from harness.run.executors import LocalExecutor
    from harness.run.runner import train_all

    out = tmp_path_factory.mktemp("runs")
    cfg = build_config("quick", {"defense": "undefended", **RUN, "run.out": str(out), "run.save_models": True})
    prep = prepare_run(cfg)
    train_all(prep, LocalExecutor(1))
    return out, prep.run.path


def _dfkd_cfg(out, **extra):
    return build_config("quick", {"defense": "dfkd", **RUN, **DFKD_TINY, "run.out": str(out), **extra})


@pytest.mark.slow
def test_saved_models_rebuild_the_served_model(undefended_run):
    from harness.run.runstore import RunDir

    from defenses.models import rebuild_model

    _, path = undefended_run
    run = RunDir(path)
    data = run.load_data()
    state = run.read_model("population", 2)
    assert state["arch"]["kind"] == "mlp-bn" and state["meta"]["model_index"] == 2
    net = rebuild_model(state["arch"], state["state_dict"])
    from defenses.base import TorchClassifier

    logits = TorchClassifier(net, data.mean, data.std, "cpu").query(run.load_level("population").canaries.x)
    sig = run.read_signals("population", 2)
    np.testing.assert_allclose(logits, sig.arrays["logits"][:, 0], rtol=1e-5, atol=1e-5)
    assert sig.meta["model_saved"] is True
    assert run.read_model("population", 2, level_fingerprint="0" * 64) is None  # a foreign design is not read


@pytest.mark.parametrize("extra, message", [
    ({"seed": 1}, "data; design; canaries.*seed"),
    ({"train.lr": 0.05}, r"recipe \(train.lr 0.1 vs 0.05\)"),
    ({"audit.size": 28}, "design; canaries"),
    ({"audit.canary": "uniform"}, "no sample-uniform level"),
    ({"data.test_size": 490, "audit.population_samples": 400}, "data"),
    ({"audit.models": 8}, "design.*seed"),
])
def test_teacher_run_is_refused_when_a_fingerprint_differs(undefended_run, tmp_path, extra, message):
    _, path = undefended_run
    cfg = _dfkd_cfg(tmp_path, **{"defense_params.teacher_run": str(path), **extra})
    with pytest.raises(ConfigError, match=message) as e:
        prepare_run(cfg)
    assert "\n" not in str(e.value) and "refused" in str(e.value)
    assert not any(tmp_path.iterdir())  # refused before anything is written


@pytest.mark.slow
def test_teacher_run_must_be_an_undefended_run_with_saved_models(undefended_run, tmp_path):
    from harness.run.executors import LocalExecutor
    from harness.run.runner import train_all

    # an undefended run of the same design without --save-models: refused (no saved models)
    cfg_u = build_config("quick", {"defense": "undefended", **RUN, "run.out": str(tmp_path / "u")})
    prep_u = prepare_run(cfg_u)
    train_all(prep_u, LocalExecutor(1))
    with pytest.raises(ConfigError, match="0 of 6 population models are saved"):
        prepare_run(_dfkd_cfg(tmp_path / "d", **{"defense_params.teacher_run": str(prep_u.run.path)}))
    with pytest.raises(ConfigError, match="not a run directory"):
        prepare_run(_dfkd_cfg(tmp_path / "d", **{"defense_params.teacher_run": str(tmp_path)}))


@pytest.mark.slow
def test_reused_teachers_give_the_same_models_as_trained_ones(undefended_run, tmp_path):
    """With the teachers read from the undefended run (given, or found under run.out), the DFKD
    models equal those of a run that trains its own teachers: same seed, same training set, same
    recipe. The run fingerprint does not depend on teacher_run."""
    from harness.run.executors import LocalExecutor
    from harness.run.runner import train_all

    out, path = undefended_run
    given = prepare_run(_dfkd_cfg(tmp_path / "given", **{"defense_params.teacher_run": str(path)}))
    found = prepare_run(_dfkd_cfg(out))  # the undefended run lies in run.out
    trained = prepare_run(_dfkd_cfg(tmp_path / "trained"))
    assert given.fingerprint == found.fingerprint == trained.fingerprint
    for prep, expect in ((given, "reused"), (found, "reused"), (trained, "trained")):
        sources = prep.run.load_manifest()["undefended_runs"]
        assert (set(sources) == {"population", "sample-mislabeled"}) == (expect == "reused")
        train_all(prep, LocalExecutor(1))
    for level in ("population", "sample-mislabeled"):
        for s in (0, 5):
            a, b, c = (p.run.read_signals(level, s) for p in (given, found, trained))
            assert a.meta["defense_info"]["teacher"] == "reused" and c.meta["defense_info"]["teacher"] == "trained"
            assert a.meta["defense_info"]["teacher_source"].endswith(f"{level}/models/model_{s:04d}.pt")
            np.testing.assert_array_equal(a.arrays["logits"], c.arrays["logits"])
            np.testing.assert_array_equal(b.arrays["logits"], c.arrays["logits"])


def test_save_models_is_refused_for_a_served_model_without_state(tmp_path):
    res = CliRunner().invoke(app, ["evaluate", "hamp", "--out", str(tmp_path), "--models", "6", "--audit-size", "20",
                                   "--epochs", "1", "--workers", "1", "--save-models", "--set", "train.width=8"])
    assert res.exit_code == 2 and "--save-models" in res.output and "HAMPServed" in " ".join(res.output.split())


def test_results_record_the_teacher_source(undefended_run):
    out, path = undefended_run
    res = CliRunner().invoke(app, ["evaluate", "dfkd", "--out", str(out), *sum(
        (["--set", f"{k}={json.dumps(v) if isinstance(v, list) else v}"] for k, v in {**RUN, **DFKD_TINY}.items()
         if k != "run.workers"), []), "--workers", "1"])
    assert res.exit_code == 0, res.output
    assert "6 of 6 reused from" in res.output
