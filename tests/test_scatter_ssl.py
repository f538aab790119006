"""SimCLR and MoCo on the fixed scattering maps (issue 66; defenses/scatter_ssl.py): the feature-space
views (the flip is the filter bank's channel permutation plus a spatial flip; crops and noise change the
maps; the draws are the generator's only), the refusals before training, and a toy-scale run of each
through `harness evaluate` with the contrastive attacks on feature-space views."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from harness.cli import app
from test_scatter_preset import _small_cifar

runner = CliRunner()


def test_the_feature_space_flip_is_the_filter_banks_permutation_and_a_spatial_flip():
    """With crops and noise off, a view is the maps as they are or, for the samples the generator
    flips, the maps with each channel moved to its mirror filter's (harness.core.scattering's
    permutation, itself tested against flipped images) and reversed along their width."""
    import torch

    from defenses.scatter_ssl import FeatureViewAugment
    from harness.core.scattering import flip_permutation

    aug = FeatureViewAugment(crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), flip=True, noise=0.0)
    maps = torch.randn(64, 243, 8, 8, generator=torch.Generator().manual_seed(0))
    out = aug(maps, torch.Generator().manual_seed(1))
    perm = torch.as_tensor(flip_permutation(3, 32, 32))
    flipped = torch.flip(maps[:, perm], dims=(-1,))
    same = (out - maps).abs().amax(dim=(1, 2, 3)) < 1e-5
    mirrored = (out - flipped).abs().amax(dim=(1, 2, 3)) < 1e-5
    assert bool((same ^ mirrored).all())  # every sample is one or the other, exactly
    assert 16 < int(mirrored.sum()) < 48  # about half are flipped
    unflippable = FeatureViewAugment(crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), flip=False, noise=0.0)
    assert torch.allclose(unflippable(maps, torch.Generator().manual_seed(1)), maps, atol=1e-5)


def test_views_are_the_generators_and_crops_and_noise_change_the_maps():
    import torch

    from defenses.scatter_ssl import FeatureViewAugment

    aug = FeatureViewAugment(crop_scale=(0.25, 1.0), noise=0.1)
    maps = torch.randn(32, 243, 8, 8, generator=torch.Generator().manual_seed(0))
    a = aug(maps, torch.Generator().manual_seed(5))
    b = aug(maps, torch.Generator().manual_seed(5))
    c = aug(maps, torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.allclose(a, c)
    assert a.shape == maps.shape
    crop_only = FeatureViewAugment(crop_scale=(0.25, 0.25), flip=False, noise=0.0)(maps, torch.Generator().manual_seed(5))
    assert float((crop_only - maps).norm() / maps.norm()) > 0.3  # a quarter of the map, resampled to 8 x 8
    with pytest.raises(ValueError, match="crop_scale"):
        FeatureViewAugment(crop_scale=(0.0, 1.0))


@pytest.mark.parametrize("args, says", [
    (["--set", "defense_params.encoder=scatter-conv"], "reads the scattering maps of RGB 32 x 32 images"),
    (["--set", "defense_params.feature_noise=0.2"], "feature_noise applies to the encoders on scattering maps"),
])
def test_a_map_encoder_on_digits_and_feature_noise_on_images_are_refused_before_training(tmp_path, args, says):
    res = runner.invoke(app, ["evaluate", "ssl-simclr", *args, "--out", str(tmp_path / "runs")])
    assert res.exit_code == 2 and says in res.output and "Traceback" not in res.output
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.parametrize("defense", ["ssl-simclr", "ssl-moco"])
def test_a_toy_run_on_the_scatter_preset_reads_its_canaries_through_feature_space_views(
        defense, cifar_subset, tmp_path, monkeypatch):
    """Both levels, 6 models, 2 epochs: the run trains, the probe beats chance on real test images, the
    record says the views are in feature space, and the white-box and black-box contrastive attacks and
    LiRA on SSL views read every audit sample (their scores are finite)."""
    monkeypatch.setenv("HARNESS_FEATURE_CACHE", str(tmp_path / "features"))
    data = _small_cifar(cifar_subset, tmp_path / "cifar", per_batch=80, test=120)
    res = runner.invoke(app, ["evaluate", defense, "--preset", "cifar10-scatter", "--data-dir", str(data),
                              "--models", "6", "--audit-size", "40", "--set", "audit.population_samples=40",
                              "--set", "data.validation_size=40", "--canary", "mislabeled",
                              "--set", "defense_params.epochs=2", "--set", "defense_params.probe_epochs=2",
                              "--set", "defense_params.batch_size=64", "--set", "attack.bootstrap=20",
                              "--workers", "1", "--out", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    results = json.loads((run_dir / "results.json").read_text())
    level = results["sample"]
    assert level["test_accuracy"]["mean"] > 0.12  # ten classes on 120 images: chance is 0.1 (a 2-epoch toy reads 0.14)
    names = {r["name"] for r in level["attacks"] if r["primary"]}
    assert {"contrastive", "contrastive-blackbox", "lira-sslview", "lira"} <= names
    for r in level["attacks"]:
        if r["name"].startswith("contrastive") and r["primary"]:
            assert np.isfinite(r["auc"])
    meta = json.loads(str(np.load(next((run_dir / "sample-mislabeled" / "signals").glob("*.npz")),
                                  allow_pickle=True)["meta"]))
    assert meta["defense_info"]["views"] == "feature space (scattering maps)"
    assert meta["defense_info"]["feature_dim"] == 1024
