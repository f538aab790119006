import torch

from defenses.models import build_model


def test_wrn16_4_has_the_papers_parameter_count():
    net = build_model("wrn16-4", (3, 32, 32), 10, width=0)
    assert sum(p.numel() for p in net.parameters()) == 2_751_146
    assert net(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_small_models_run_on_their_inputs():
    assert build_model("mlp", (1, 8, 8), 10, 32)(torch.zeros(3, 1, 8, 8)).shape == (3, 10)
    assert build_model("cnn", (3, 32, 32), 10, 8)(torch.zeros(3, 3, 32, 32)).shape == (3, 10)
