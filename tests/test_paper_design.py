"""The paper's audit design and canaries: the RNG tree's oracles (protocol notes §6), the blank
canary, paired model seeds."""

import numpy as np
import pytest

from canaries.base import CanaryContext, PaperDraws
from canaries.blank import Blank, fill_images
from harness.defense_config import build_config
from harness.core.data import AugmentSpec, ImageDataset
from harness.core.design import make_design, paper_rng_tree
from harness.run.runner import build_level, model_seed


def test_paper_rng_tree_reproduces_the_protocol_notes_oracles():
    tree = paper_rng_tree(0, 50_000, 64, 10)
    order = tree.canary_order
    assert order[:10].tolist() == [18263, 32432, 4748, 23677, 19639, 37729, 38674, 32862, 5167, 10021]
    assert (tree.membership.sum(axis=0) == 32).all()  # every sample IN for exactly 32 of 64 models
    can = order[:500]
    per_model = tree.membership[:, can].sum(axis=1)
    assert per_model[:5].tolist() == [247, 252, 238, 243, 229]
    assert (per_model.min(), per_model.max(), per_model.mean()) == (222, 272, 250)
    assert tree.membership[:16, 18263].astype(int).tolist() == [1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1]
    assert tree.label_changes[can[:10]].tolist() == [4, 6, 4, 3, 3, 8, 1, 3, 7, 8]
    assert tuple(tree.colors[can[0]]) == (208, 27, 122)
    assert tree.blank_labels[can[:10]].tolist() == [7, 4, 2, 2, 8, 0, 8, 7, 0, 2]
    d = make_design(50_000, 500, 64, 0, rng="paper")
    assert np.array_equal(d.audit_indices, can) and np.array_equal(d.membership, tree.membership[:, can])
    # the default tree is a different one (ours), also exactly balanced
    ours = make_design(50_000, 500, 64, 0)
    assert not np.array_equal(ours.audit_indices, can) and (ours.membership.sum(axis=0) == 32).all()


def _pool(n: int, k: int = 10) -> ImageDataset:
    rng = np.random.default_rng(0)
    return ImageDataset(
        name="synthetic", x_train=rng.integers(0, 256, (n, 3, 2, 2), dtype=np.uint8),
        y_train=rng.integers(0, k, n).astype(np.int64), x_test=np.zeros((20, 3, 2, 2), np.uint8),
        y_test=np.zeros(20, np.int64), num_classes=k, mean=(0.5,) * 3, std=(0.25,) * 3,
        augment=AugmentSpec(flip=False, shift=0),
    )


def test_audit_rng_paper_gives_the_papers_canaries_through_the_harness():
    data = _pool(50_000)
    cfg = build_config("quick", {"audit.rng": "paper", "audit.models": 64, "audit.size": 500,
                                 "audit.population_samples": 0})
    mis = build_level(cfg, data, "sample-mislabeled", "mislabeled")
    assert mis.design.audit_indices[:3].tolist() == [18263, 32432, 4748]
    y = data.y_train[mis.design.audit_indices[:10]]
    r = np.array([4, 6, 4, 3, 3, 8, 1, 3, 7, 8])
    assert mis.canaries.y[:10].tolist() == np.where(r < y, r, r + 1).tolist()  # label_noise of the paper
    blank = build_level(cfg, data, "sample-blank", "blank")
    assert tuple(blank.canaries.x[0, :, 0, 0]) == (208, 27, 122) and (blank.canaries.x[0] == blank.canaries.x[0, :, :1, :1]).all()
    assert blank.canaries.y[:10].tolist() == [7, 4, 2, 2, 8, 0, 8, 7, 0, 2]
    assert model_seed(0, 5, "paper", 64) == 6  # the paper's seed s + 1 (global seed 0)
    assert model_seed(1, 5, "paper", 64) == 65 + 6  # g (M + 1) + i + 1


def test_model_seeds_are_shared_by_every_experiment():
    # one seed per model index, whatever the level: population vs sample level is a paired comparison
    assert model_seed(0, 3) == model_seed(0, 3) != model_seed(0, 4)
    assert model_seed(0, 3) != model_seed(1, 3)


def test_blank_canaries_are_one_random_colour_with_labels_over_all_classes():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (3000, 3, 4, 4), dtype=np.uint8)
    y = rng.integers(0, 10, 3000)
    c = Blank().apply(x, y, CanaryContext(num_classes=10, rng=np.random.default_rng(2), pool_indices=np.arange(3000)))
    assert c.x.shape == x.shape and c.evaluated.all()
    assert (c.x == c.x[:, :, :1, :1]).all()  # each image is one colour
    colours = {tuple(im[:, 0, 0]) for im in c.x}
    assert len(colours) > 2900  # drawn per canary
    assert set(np.unique(c.y)) == set(range(10))
    assert 0.05 < (c.y == y).mean() < 0.15  # uniform over all K classes: the true label 1/K of the time
    grey = fill_images(np.array([[255, 0, 0], [0, 0, 255]], np.uint8), (1, 2, 2))
    assert grey[:, 0, 0, 0].tolist() == [76, 29]  # luma of pure red and pure blue
    paper = PaperDraws(label_offsets=np.zeros(2, np.int64), colors=np.array([[1, 2, 3], [4, 5, 6]], np.uint8),
                       blank_labels=np.array([9, 0]))
    p = Blank().apply(x[:2], y[:2], CanaryContext(10, np.random.default_rng(0), np.arange(2), paper=paper))
    assert p.x[:, :, 0, 0].tolist() == [[1, 2, 3], [4, 5, 6]] and p.y.tolist() == [9, 0]


def test_blank_and_uniform_are_different_canaries_in_the_list():
    from typer.testing import CliRunner

    from harness.cli import app

    out = CliRunner().invoke(app, ["list"], env={"COLUMNS": "250"}).output
    blank = next(line for line in out.splitlines() if "│ blank " in line)
    uniform = next(line for line in out.splitlines() if "│ uniform " in line)
    assert "one random colour" in blank and "noise" in uniform and "not the paper" in uniform


@pytest.mark.parametrize("rng", ["harness", "paper"])
def test_membership_stays_balanced_on_small_pools(rng):
    d = make_design(1300, 200, 32, 3, rng=rng)
    assert (d.membership.sum(axis=0) == 16).all() and len(set(d.audit_indices.tolist())) == 200
