"""Networks on fixed scattering features (defenses/scatter_models.py): images in, the head's logits
out; the transform is outside the parameters and read through the shared cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from defenses.models import build_model, rebuild_model
from harness.core.scattering import scatter


pytestmark = pytest.mark.usefixtures("scatter_cache")


@pytest.mark.parametrize("kind, params", [("scatter-linear", 243 * 64 * 10 + 10),
                                          ("scatter-cnn", 243 * 9 * 64 + 64 + 64 * 9 * 64 + 64 + 1024 * 10 + 10)])
def test_a_scatter_model_takes_images_and_holds_only_its_head(kind, params):
    torch.manual_seed(0)
    net = build_model(kind, (3, 32, 32), 10, 64).eval()
    assert sum(p.numel() for p in net.parameters()) == params
    assert all(k.startswith("head.") for k in net.state_dict())
    x = torch.from_numpy(np.random.default_rng(0).normal(size=(5, 3, 32, 32)).astype(np.float32))
    with torch.no_grad():
        out = net(x)
        assert out.shape == (5, 10)
        # the cache returns the fixed map's values: the transform, then each image's GroupNorm
        expected = torch.nn.functional.group_norm(scatter(x), 27, eps=1e-5)
        assert torch.allclose(out, net.head(expected), atol=1e-5)
        per_group = expected.view(5, 27, -1)
        assert torch.allclose(per_group.mean(-1), torch.zeros(5, 27), atol=1e-4)
        again = rebuild_model(net.harness_arch, net.state_dict())
        assert torch.equal(again(x), out)


def test_every_model_of_a_process_shares_one_cache_and_its_disk_folder(tmp_path):
    from defenses import scatter_models

    a, b = build_model("scatter-linear", (3, 32, 32), 10, 1), build_model("scatter-cnn", (3, 32, 32), 10, 8)
    x = torch.rand(4, 3, 32, 32)
    with torch.no_grad():
        a(x)
        b(x)
    cache = scatter_models.shared_cache()
    assert cache.counts["computed"] == 4 and cache.counts["memory"] == 4
    assert cache.folder is not None and cache.folder.parent == tmp_path / "features"
    assert list(cache.folder.glob("*.keys.npy"))


def test_images_whose_features_do_not_group_are_refused():
    with pytest.raises(ValueError, match="divisible by 4"):
        build_model("scatter-linear", (3, 30, 30), 10, 1)
