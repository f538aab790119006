"""SELENA (defenses/selena.py): the Split-AI partition, the soft labels, the non-member query sets
and the served student, checked on tiny MLPs trained on real digits.

The partition tests observe what the teachers were actually trained on (a spy around
``train_classifier``), instead of trusting the masks the defense reports about itself.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

import defenses.selena as selena_mod
from defenses.base import FitContext, LabeledImages, TorchClassifier
from defenses.selena import (
    SELENA,
    SELENAFit,
    derived_hash_key,
    draw_query_sets,
    hashed_query_set,
    teacher_masks,
)
from harness.core.config import TrainConfig
from harness.defense_config import build_config
from harness.core.data import load_digits
from harness.plugins import resolve
from harness.run.runner import TrainJob, prepare_run, train_one

from conftest import tiny_overrides

K, L = 5, 2
TINY = TrainConfig(model="mlp", width=32, epochs=6, batch_size=32, lr=0.1, weight_decay=1e-4,
                   schedule="cosine", augment=False)


def _digits(n: int = 240) -> tuple[LabeledImages, np.ndarray, np.ndarray]:
    """``n`` training digits with pairwise distinct images (so bytes identify a sample), and test images."""
    d = load_digits(497, 0)
    _, first = np.unique(d.x_train.reshape(len(d.x_train), -1), axis=0, return_index=True)
    keep = np.sort(first)[:n]
    train = LabeledImages(x=d.x_train[keep], y=d.y_train[keep], num_classes=10, mean=d.mean, std=d.std,
                          augment=d.augment)
    return train, d.x_test, d.y_test


class Spy:
    """Records every ``train_classifier`` call SELENA makes, then runs the real one."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self._real = selena_mod.train_classifier

    def __call__(self, net: torch.nn.Module, train: LabeledImages, ctx: FitContext, **kw: Any) -> torch.nn.Module:
        self.calls.append({
            "net": net, "x": train.x.copy(), "y": train.y.copy(), "seed": ctx.seed, "epochs": ctx.train.epochs,
            "augment": ctx.train.augment, "targets": None if kw.get("targets") is None else kw["targets"].copy(),
            "init": [p.detach().clone() for p in net.parameters()],
        })
        return self._real(net, train, ctx, **kw)


def _fit(monkeypatch: pytest.MonkeyPatch, train: LabeledImages, seed: int = 7, **params: Any) -> tuple[SELENAFit, Spy]:
    spy = Spy()
    monkeypatch.setattr(selena_mod, "train_classifier", spy)
    defense = SELENA(**{"num_teachers": K, "num_query": L, **params})
    fit = defense.fit_all(train, FitContext(seed=seed, device="cpu", train=TINY))
    return fit, spy


def _seen_matrix(spy: Spy, train: LabeledImages) -> np.ndarray:
    """(K, n) bool from the recorded calls: did teacher k's training data contain sample i?"""
    index = {x.tobytes(): i for i, x in enumerate(train.x)}
    teachers = [c for c in spy.calls if c["targets"] is None]
    seen = np.zeros((len(teachers), len(train)), dtype=bool)
    for k, call in enumerate(teachers):
        rows = [index[x.tobytes()] for x in call["x"]]
        assert len(set(rows)) == len(rows), "a teacher got a training sample twice"
        np.testing.assert_array_equal(call["y"], train.y[rows])  # teachers see the true training labels
        seen[k, rows] = True
    return seen


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64) - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny MLPs run fastest on one thread (and do not fight other processes for the cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def digits() -> tuple[LabeledImages, np.ndarray, np.ndarray]:
    return _digits()


def test_query_teachers_are_exactly_the_teachers_that_never_saw_the_sample(monkeypatch, digits):
    train, _, _ = digits
    fit, spy = _fit(monkeypatch, train)
    assert len(spy.calls) == K + 1 and sum(c["targets"] is None for c in spy.calls) == K
    seen = _seen_matrix(spy, train)
    # each sample is left out of exactly L teachers and trained on by the other K - L
    np.testing.assert_array_equal((~seen).sum(axis=0), np.full(len(train), L))
    sets = fit.split_ai.member_query_sets
    assert sets.shape == (len(train), L)
    for i in range(len(train)):
        assert set(sets[i].tolist()) == set(np.flatnonzero(~seen[:, i]).tolist()), i
    # Split-AI answers a training sample with that same query set
    np.testing.assert_array_equal(fit.split_ai.query_sets(train.x), sets)
    # the partition is not degenerate: query sets vary across samples
    assert len({tuple(s) for s in sets.tolist()}) > 5


def test_soft_label_is_the_mean_softmax_of_the_left_out_teachers(monkeypatch, digits):
    train, _, _ = digits
    fit, spy = _fit(monkeypatch, train)
    seen = _seen_matrix(spy, train)
    teacher_nets = [c["net"] for c in spy.calls if c["targets"] is None]
    probs = np.stack([_softmax(TorchClassifier(net, train.mean, train.std, "cpu").query(train.x))
                      for net in teacher_nets])  # (K, n, classes)
    expected = np.stack([probs[~seen[:, i], i].mean(axis=0) for i in range(len(train))])
    (student_call,) = [c for c in spy.calls if c["targets"] is not None]
    targets = student_call["targets"]
    assert targets.dtype == np.float32 and targets.shape == (len(train), 10)
    np.testing.assert_allclose(targets, expected, atol=1e-6)
    np.testing.assert_array_equal(fit.soft_labels, targets)
    np.testing.assert_allclose(targets.sum(axis=1), 1.0, atol=1e-5)
    # the student is distilled on all training samples, in order
    np.testing.assert_array_equal(student_call["x"], train.x)
    # ... and the soft labels are not the full ensemble's output (which includes teachers that saw i)
    assert np.abs(targets - probs.mean(axis=0)).max() > 1e-3
    # Split-AI's own answer on a training sample is the same soft label
    np.testing.assert_allclose(np.exp(fit.split_ai.query(train.x[:50])), targets[:50], atol=1e-5)


def test_non_member_query_set_is_deterministic_given_the_input_and_of_size_l(monkeypatch, digits):
    train, x_test, _ = digits
    members = {x.tobytes() for x in train.x}
    x = np.stack([xi for xi in x_test if xi.tobytes() not in members][:60])
    fit, _ = _fit(monkeypatch, train)
    split = fit.split_ai
    assert (split.member_index(x) == -1).all()
    sets = split.query_sets(x)
    assert sets.shape == (len(x), L)
    assert all(len(set(row)) == L and 0 <= min(row) and max(row) < K for row in sets.tolist())
    np.testing.assert_array_equal(split.query_sets(x), sets)  # same input, same set
    np.testing.assert_array_equal(split.query_sets(x[::-1].copy())[::-1], sets)  # independent of the batch
    np.testing.assert_array_equal(np.stack([split.query_sets(x[i : i + 1])[0] for i in range(len(x))]), sets)
    key = derived_hash_key(7)
    np.testing.assert_array_equal(np.stack([hashed_query_set(xi, K, L, key) for xi in x]), sets)
    assert len({tuple(r) for r in sets.tolist()}) > 3  # the choice depends on the input
    # one changed pixel is another input: for some of them another set
    x2 = x.copy()
    x2[:, 0, 0, 0] ^= 1
    assert (split.query_sets(x2) != sets).any()
    # a fresh fit with the same seed chooses the same sets; another seed keys another hash
    fit_again, _ = _fit(monkeypatch, train)
    np.testing.assert_array_equal(fit_again.split_ai.query_sets(x), sets)
    np.testing.assert_array_equal(fit_again.split_ai.member_query_sets, split.member_query_sets)
    other = np.stack([hashed_query_set(xi, K, L, derived_hash_key(8)) for xi in x])
    assert (other != sets).any()
    # the answer on a non-member averages the softmax of exactly those L teachers
    probs = split.teacher_probs(x)
    want = np.take_along_axis(probs, sets[:, :, None], axis=1).mean(axis=1)
    np.testing.assert_allclose(np.exp(split.query(x)), want, atol=1e-5)


def test_served_model_is_the_student_and_answers_n_by_k_logits(monkeypatch, digits):
    train, x_test, y_test = digits
    spy = Spy()
    monkeypatch.setattr(selena_mod, "train_classifier", spy)
    defense = SELENA(num_teachers=K, num_query=L)
    recipe = TINY.model_copy(update={"epochs": 15, "width": 64})
    served = defense.fit(train, FitContext(seed=3, device="cpu", train=recipe))
    assert isinstance(served, TorchClassifier)
    (student_call,) = [c for c in spy.calls if c["targets"] is not None]
    assert served.net is student_call["net"]
    out = served.query(x_test)
    assert out.shape == (len(x_test), 10) and out.dtype == np.float32
    with torch.no_grad():
        direct = served.net(served.normalize(torch.from_numpy(x_test))).numpy()
    np.testing.assert_allclose(out, direct, rtol=1e-5, atol=1e-5)
    assert (out.argmax(axis=1) == y_test).mean() > 0.5  # it learned digits from the soft labels
    assert served.raw_query(x_test[:2]) is None
    # the extra access: Split-AI, not the student
    np.testing.assert_array_equal(served.splitai_query(x_test[:5]), served.split_ai.query(x_test[:5]))
    assert np.abs(np.exp(served.splitai_query(x_test[:5])) - _softmax(out[:5])).max() > 1e-3
    info = served.info()
    assert (info["num_teachers"], info["num_query"], info["teacher_epochs"]) == (K, L, recipe.epochs)


def test_seeds_recipe_and_teacher_epochs(monkeypatch, digits):
    train, x_test, _ = digits
    a, spy = _fit(monkeypatch, train, seed=11, teacher_epochs=2)
    teachers = [c for c in spy.calls if c["targets"] is None]
    student = spy.calls[-1]
    assert [c["epochs"] for c in teachers] == [2] * K and student["epochs"] == TINY.epochs
    # distinct teacher seeds and initializations (the paper's code shares one initialization)
    assert len({c["seed"] for c in teachers + [student]}) == K + 1
    first = [c["init"][0] for c in teachers]
    assert all(not torch.equal(first[0], w) for w in first[1:])
    # deterministic from the seed, different for another seed
    b, _ = _fit(monkeypatch, train, seed=11, teacher_epochs=2)
    c, _ = _fit(monkeypatch, train, seed=12, teacher_epochs=2)
    np.testing.assert_array_equal(a.student.query(x_test), b.student.query(x_test))
    np.testing.assert_array_equal(a.soft_labels, b.soft_labels)
    assert not np.array_equal(a.split_ai.member_query_sets, c.split_ai.member_query_sets)
    assert not np.array_equal(a.student.query(x_test), c.student.query(x_test))


def test_progress_is_reported_across_teachers_and_student(digits):
    train, _, _ = digits
    seen: list[tuple[str, float]] = []
    ctx = FitContext(seed=1, device="cpu", train=TINY, progress=lambda what, f: seen.append((what, f)))
    SELENA(num_teachers=3, num_query=1).fit(train, ctx)
    fractions = [f for _, f in seen]
    assert {w for w, _ in seen} == {"train"}
    assert len(fractions) == 4 * TINY.epochs
    assert fractions == sorted(fractions) and fractions[-1] == pytest.approx(1.0)
    assert 0.5 < fractions[3 * TINY.epochs - 1] < 0.9  # the teachers' share: 3 x 2/3 of the data vs the student's 1


def test_query_set_draws_and_masks():
    rng = np.random.default_rng(0)
    sets = draw_query_sets(2000, 25, 10, rng)
    assert sets.shape == (2000, 10)
    assert (np.diff(sets, axis=1) > 0).all() and sets.min() >= 0 and sets.max() < 25
    counts = np.bincount(sets.ravel(), minlength=25)  # uniform: each teacher left out of ~40% of samples
    assert np.abs(counts / 2000 - 0.4).max() < 0.05
    masks = teacher_masks(sets, 25)
    assert masks.shape == (25, 2000)
    np.testing.assert_array_equal((~masks).sum(axis=0), 10)
    for i in (0, 17, 1999):
        assert set(np.flatnonzero(~masks[:, i])) == set(sets[i])


def test_parameters_are_validated():
    with pytest.raises(ValueError, match="num_query"):
        SELENA(num_teachers=5, num_query=5)
    with pytest.raises(ValueError, match="num_query"):
        SELENA(num_query=0)
    with pytest.raises(ValueError, match="num_teachers"):
        SELENA(num_teachers=1, num_query=1)
    with pytest.raises(ValueError, match="teacher_epochs"):
        SELENA(teacher_epochs=0)
    with pytest.raises(ValueError, match="no parameter"):
        SELENA(num_teacher=5)
    assert SELENA().params == {"num_teachers": 25, "num_query": 10, "teacher_epochs": None}


def test_registry_and_presets():
    cls = resolve("defenses", "selena")
    assert cls is SELENA and cls.default_canary == "duplicates" and cls.adaptive_attacks == ("lira", "lira-neighbour")
    assert cls.provides == frozenset({"splitai_query"})  # what lira-neighbour reads
    params = {p: build_config(p, {"defense": "selena"}).defense_params for p in ("quick", "cifar10", "paper")}
    assert params["paper"]["num_teachers"] == 25 and params["paper"]["num_query"] == 10
    for p in params.values():
        SELENA(**p)  # valid
        assert 0.3 <= p["num_query"] / p["num_teachers"] <= 0.5


def test_mislabeled_duplicate_leaks_into_the_clean_twin_soft_label(monkeypatch, digits):
    """The mechanism the duplicates canaries exploit (misleading-evaluations paper, section 6): the
    clean twin's query teachers that trained on the mislabeled copy push its soft label to the wrong
    label, in proportion to how many of them saw the copy."""
    train, _, _ = digits
    train = dataclasses.replace(train, x=train.x[:150], y=train.y[:150])
    n_pairs = 30
    wrong = (train.y[:n_pairs] + 1 + np.arange(n_pairs) % 9) % 10
    x = np.concatenate([train.x, train.x[:n_pairs]])
    y = np.concatenate([train.y, wrong])
    dup = dataclasses.replace(train, x=x, y=y)
    spy = Spy()
    monkeypatch.setattr(selena_mod, "train_classifier", spy)
    recipe = TINY.model_copy(update={"epochs": 40, "width": 64})
    fit = SELENA(num_teachers=K, num_query=L).fit_all(dup, FitContext(seed=5, device="cpu", train=recipe))
    masks = fit.split_ai.train_masks
    twins, copies = np.arange(n_pairs), len(train) + np.arange(n_pairs)
    # fraction of each clean twin's query teachers that trained on its mislabeled copy
    frac = np.array([masks[fit.split_ai.member_query_sets[t], c].mean() for t, c in zip(twins, copies)])
    weight = fit.soft_labels[twins, wrong]
    assert np.corrcoef(frac, weight)[0, 1] > 0.8
    assert (frac == 1).any() and weight[frac == 1].min() > 0.5
    assert weight[frac == 0].max(initial=0.0) < 0.2
    # the mislabeled copies' own soft labels come from teachers that never saw them: the clean label
    assert (fit.soft_labels[copies].argmax(axis=1) == train.y[:n_pairs]).mean() > 0.8


def test_one_harness_job_trains_selena_on_duplicates_canaries(tmp_path):
    """The runner's path: the default canary is ``duplicates``, the job saves (C, A, K) logits and
    the student's Split-AI facts."""
    cfg = build_config("quick", {**tiny_overrides(), "defense": "selena", "defense_params.num_teachers": 4,
                                 "defense_params.num_query": 2, "run.out": str(tmp_path), "run.level": "sample"})
    prep = prepare_run(cfg)
    assert prep.levels == ["sample-duplicates"]
    meta = train_one(TrainJob(str(prep.run.path), "sample-duplicates", 0))
    assert meta["defense_info"]["num_teachers"] == 4 and meta["defense_info"]["num_query"] == 2
    assert meta["defense_info"]["teacher_epochs"] == cfg.train.epochs
    signals = prep.run.read_signals("sample-duplicates", 0)
    assert signals is not None and signals.arrays["logits"].shape == (60, 9, 10)
    assert "raw_logits" not in signals.arrays


def test_splitai_neighbour_signal_is_the_mean_softmax_of_the_teachers_that_never_saw_the_neighbour(monkeypatch, digits):
    """The signal ``lira-neighbour`` reads (the paper's ``splitai_nn`` query), computed through the
    runner's path (the checked served model, :func:`compute_signals`), equals an independent
    computation: per neighbour (a training sample), the mean softmax of exactly the teachers whose
    recorded training data did not contain it, on the plain image (one query)."""
    from harness.run.plugin_errors import check_served
    from harness.run.signals import BUILTIN_SIGNALS, compute_signals

    train, x_test, _ = digits
    spy = Spy()
    monkeypatch.setattr(selena_mod, "train_classifier", spy)
    served = SELENA(num_teachers=K, num_query=L).fit(train, FitContext(seed=7, device="cpu", train=TINY))
    seen = _seen_matrix(spy, train)
    neighbours = np.arange(0, len(train), 12)  # training samples, as a near-duplicate is in every model
    teacher_nets = [c["net"] for c in spy.calls if c["targets"] is None]
    probs = np.stack([_softmax(TorchClassifier(net, train.mean, train.std, "cpu").query(train.x[neighbours]))
                      for net in teacher_nets])  # (K, n, classes)
    expected = np.stack([probs[~seen[:, j], row].mean(axis=0) for row, j in enumerate(neighbours)])
    checked = check_served(served, x_test[:4], 10, "selena", "test")
    out = compute_signals(["splitai_neighbour_logits", "neighbour_logits"], BUILTIN_SIGNALS, checked, x_test[:30],
                          x_test[:0], train.augment, 0, neighbour_x=train.x[neighbours])
    sig = out["splitai_neighbour_logits"]
    assert sig.shape == (len(neighbours), 1, 10) and sig.dtype == np.float32  # one plain query, no views
    np.testing.assert_allclose(np.exp(sig[:, 0].astype(np.float64)), expected, atol=1e-5)
    # not the full ensemble (teachers that saw the neighbour included), not the served student
    assert np.abs(np.exp(sig[:, 0]) - probs.mean(axis=0)).max() > 1e-3
    assert np.abs(np.exp(sig[:, 0]) - _softmax(out["neighbour_logits"][:, 0])).max() > 1e-3
