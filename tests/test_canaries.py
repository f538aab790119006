import numpy as np

from canaries.base import CanaryContext
from canaries.mislabeled import Mislabeled, random_wrong_labels
from canaries.none import NoCanaries
from harness.defense_config import build_config
from harness.core.data import load_digits
from harness.run.runner import build_level


def test_every_mislabeled_label_differs_from_the_true_one():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, size=20000)
    wrong = random_wrong_labels(y, 10, rng)
    assert (wrong != y).all()
    assert wrong.min() == 0 and wrong.max() == 9


def test_wrong_labels_are_uniform_over_the_other_classes():
    rng = np.random.default_rng(1)
    y = np.full(90000, 4)
    counts = np.bincount(random_wrong_labels(y, 10, rng), minlength=10)
    assert counts[4] == 0
    others = np.delete(counts, 4)
    # each of the 9 wrong classes gets 10000 +- a few standard deviations (sd ~ 95)
    assert np.abs(others - 10000).max() < 500


def test_mislabeled_generator_keeps_images_and_evaluates_all():
    x = np.random.default_rng(0).integers(0, 256, (50, 1, 8, 8), dtype=np.uint8)
    y = np.arange(50) % 10
    ctx = CanaryContext(num_classes=10, rng=np.random.default_rng(0), pool_indices=np.arange(50))
    c = Mislabeled().apply(x, y, ctx)
    assert np.array_equal(c.x, x) and (c.y != y).all() and c.evaluated.all()
    n = NoCanaries().apply(x, y, ctx)
    assert np.array_equal(n.y, y) and n.evaluated.all()


def test_levels_share_the_design_and_canaries_are_seeded():
    cfg = build_config("quick", {"audit.size": 100})
    data = load_digits(cfg.data.test_size, cfg.seed)
    pop = build_level(cfg, data, "population", "none")
    smp = build_level(cfg, data, "sample", "mislabeled")
    again = build_level(cfg, data, "sample", "mislabeled")
    assert np.array_equal(pop.design.membership, smp.design.membership)
    assert np.array_equal(smp.canaries.y, again.canaries.y)
    true = data.y_train[smp.design.audit_indices]
    assert (smp.canaries.y != true).all() and np.array_equal(pop.canaries.y, true)
