"""Per-canary parameters (``audit.canary_params.<canary>.<param>``) and DP-SGD's three canaries in
one command."""

import numpy as np
import pytest

from harness.core.config import ConfigError

from harness.defense_config import build_config
from harness.run.runner import prepare_run


def test_each_generator_gets_only_its_own_parameters(tmp_path):
    cfg = build_config("quick", {"defense": "dpsgd-medium", "run.out": str(tmp_path),
                                 "audit.canary_params.ood.source": "photos", "audit.canary_params.ood.label": "random"})
    assert cfg.audit.canary_params == {"ood": {"source": "photos", "label": "random"}}
    prep = prepare_run(cfg)  # mislabeled and blank would refuse a 'source': they never see it
    assert prep.levels == ["population", "sample-mislabeled", "sample-ood", "sample-blank"]
    info = prep.run.load_manifest()["levels"]["sample-ood"]["canary_info"]
    assert info["params"] == {"source": "photos", "label": "random"} and info["source"].startswith("photos")


def test_dpsgd_runs_its_three_canaries_in_one_command_at_the_quick_preset(tmp_path):
    cfg = build_config("quick", {"defense": "dpsgd-medium", "run.out": str(tmp_path)})
    prep = prepare_run(cfg)
    assert prep.levels == ["population", "sample-mislabeled", "sample-ood", "sample-blank"]
    blank = prep.run.load_level("sample-blank").canaries
    assert (blank.x == blank.x[:, :, :1, :1]).all()  # one colour per image: not uniform noise


def test_dpsgd_runs_its_three_canaries_in_one_command_at_the_cifar10_preset(tmp_path, cifar_subset):
    cfg = build_config("cifar10", {"defense": "dpsgd-medium", "run.out": str(tmp_path), "data.path": str(cifar_subset)})
    prep = prepare_run(cfg)
    assert prep.levels == ["population", "sample-mislabeled", "sample-ood", "sample-blank"]
    assert prep.run.load_level("sample-ood").canaries.x.shape[1:] == (3, 32, 32)


@pytest.mark.parametrize("overrides, message", [
    ({"audit.canary_params": {"source": "photos"}}, "keyed by canary name"),
    ({"audit.canary_params.uniform.seed": 1}, "does not audit 'uniform'"),
    ({"run.level": "population", "audit.canary": "blank"}, r"run\.level \(--level\) population runs none"),
    ({"run.level": "population", "audit.canary_params.mislabeled.x": 1}, r"run\.level \(--level\) population runs none"),
])
def test_canary_parameters_that_would_be_ignored_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        build_config("quick", {"defense": "dpsgd-medium", **overrides})


def test_unknown_canary_parameters_fail_before_training(tmp_path):
    cfg = build_config("quick", {"defense": "dpsgd-medium", "run.out": str(tmp_path),
                                 "audit.canary_params.blank.colour": "red"})
    with pytest.raises(ConfigError, match="canary 'blank'.*no parameters"):
        prepare_run(cfg)
    assert not any(tmp_path.iterdir())  # nothing written


def test_preset_canary_parameters_are_defaults_for_canaries_the_run_audits():
    # the quick preset gives ood its source; a run without ood canaries drops it, one with keeps it
    assert build_config("quick", {}).audit.canary_params == {}
    assert build_config("quick", {"audit.canary": "ood"}).audit.canary_params == {"ood": {"source": "photos"}}
    # a user value replaces the preset's
    cfg = build_config("quick", {"audit.canary": "ood", "audit.canary_params.ood.source": "/x.pt"})
    assert cfg.audit.canary_params == {"ood": {"source": "/x.pt"}}


def test_the_paper_preset_reads_the_papers_ood_file_from_the_data_folder(tmp_path):
    import torch

    from harness.core.data import AugmentSpec, ImageDataset
    from harness.run.runner import build_level

    # data.download=false: no network here (tests/test_canaries_more.py covers the download itself)
    cfg = build_config("paper", {"defense": "dpsgd-medium", "data.path": str(tmp_path), "audit.size": 4,
                                 "audit.models": 6, "audit.population_samples": 0, "data.download": False})
    assert cfg.audit.canary_params == {}
    data = ImageDataset("x", np.zeros((10, 3, 32, 32), np.uint8), np.arange(10) % 10, np.zeros((2, 3, 32, 32), np.uint8),
                        np.zeros(2, np.int64), 10, (0.5,) * 3, (0.2,) * 3, AugmentSpec(True, 4))
    with pytest.raises(ConfigError, match="ood_imagenet_samples.pt.*data.download is false"):
        build_level(cfg, data, "sample-ood", "ood")
    # another file under the paper's name is refused before any training (its MD5 is not the paper's)
    torch.save(torch.full((4, 3, 32, 32), 9, dtype=torch.uint8), tmp_path / "ood_imagenet_samples.pt")
    with pytest.raises(ConfigError, match="is not the paper's ood_imagenet_samples.pt"):
        build_level(cfg, data, "sample-ood", "ood")
    # ... named as the source, it is read
    cfg = build_config("paper", {"defense": "dpsgd-medium", "data.path": str(tmp_path), "audit.size": 4,
                                 "audit.models": 6, "audit.population_samples": 0, "data.download": False,
                                 "audit.canary_params.ood.source": str(tmp_path / "ood_imagenet_samples.pt")})
    ld = build_level(cfg, data, "sample-ood", "ood")
    assert (ld.canaries.x == 9).all() and ld.canary_info["source"].endswith("ood_imagenet_samples.pt")


def test_the_paper_preset_downloads_the_papers_ood_file_into_the_data_folder(tmp_path, monkeypatch):
    """data.download (on by default) fetches the missing file while the run is planned, before any
    training; the URL is the shared copy's file:// address (no network in tests)."""
    import torch

    from harness.core import data as data_module
    from harness.core.data import AugmentSpec, ImageDataset
    from harness.run.runner import build_level

    from conftest import SHARED

    paper_file = SHARED / "data" / "ood_imagenet_samples.pt"
    if not paper_file.is_file():
        pytest.skip(f"{paper_file} not found (only CI and developers have ../shared)")
    monkeypatch.setattr(data_module, "PAPER_OOD_URL", paper_file.as_uri())
    folder = tmp_path / "data"
    cfg = build_config("paper", {"defense": "dpsgd-medium", "data.path": str(folder), "audit.size": 4,
                                 "audit.models": 6, "audit.population_samples": 0})
    data = ImageDataset("x", np.zeros((10, 3, 32, 32), np.uint8), np.arange(10) % 10, np.zeros((2, 3, 32, 32), np.uint8),
                        np.zeros(2, np.int64), 10, (0.5,) * 3, (0.2,) * 3, AugmentSpec(True, 4))
    ld = build_level(cfg, data, "sample-ood", "ood")
    assert sorted(p.name for p in folder.iterdir()) == ["ood_imagenet_samples.pt"]
    assert ld.canary_info["is_papers_file"] is True
    assert ld.canary_info["source"] == str(folder / "ood_imagenet_samples.pt")
    raw = torch.load(paper_file, weights_only=True).numpy()
    assert np.array_equal(ld.canaries.x, raw[:4])  # the audit's 4 canaries: the file's first 4 images
