import torch

from defenses.models import build_model


def test_wrn16_4_has_the_papers_parameter_count():
    net = build_model("wrn16-4", (3, 32, 32), 10, width=0)
    assert sum(p.numel() for p in net.parameters()) == 2_751_146
    assert net(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_small_models_run_on_their_inputs():
    assert build_model("mlp", (1, 8, 8), 10, 32)(torch.zeros(3, 1, 8, 8)).shape == (3, 10)
    assert build_model("cnn", (3, 32, 32), 10, 8)(torch.zeros(3, 3, 32, 32)).shape == (3, 10)


def test_batchnorm_kinds_are_the_kinds_with_batchnorm_layers():
    from torch import nn

    from defenses.models import BATCHNORM_KINDS, MODEL_KINDS

    for kind in MODEL_KINDS:
        net = build_model(kind, (3, 32, 32), 10, 8)
        has_bn = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in net.modules())
        assert has_bn == (kind in BATCHNORM_KINDS), kind


def test_mlp_bn_trains_on_a_one_sample_batch_and_rebuilds_from_its_state():
    from defenses.models import rebuild_model

    net = build_model("mlp-bn", (1, 8, 8), 10, 16).train()
    before = net.body[2].running_mean.clone()
    assert net(torch.ones(1, 1, 8, 8)).shape == (1, 10)  # no error; running statistics untouched
    assert torch.equal(net.body[2].running_mean, before)
    net(torch.randn(4, 1, 8, 8))
    assert not torch.equal(net.body[2].running_mean, before)
    copy = rebuild_model(net.harness_arch, net.state_dict())
    x = torch.randn(3, 1, 8, 8)
    assert torch.equal(copy(x), net.eval()(x))


def test_airbench_network_shape_size_and_input_check():
    import pytest
    import torch

    from defenses.models import build_model

    net = build_model("airbench", (3, 32, 32), 10, 64)
    # whiten 3->24 (2x2, bias), groups 24->64, 64->256, 256->256 (3x3 convs, no bias, 2 BN each), head 256->10
    convs = 3 * 24 * 4 + 24 + 9 * (24 * 64 + 64 * 64 + 64 * 256 + 256 * 256 + 256 * 256 + 256 * 256)
    bns = 2 * (64 + 64 + 256 + 256 + 256 + 256)  # weight and bias per BatchNorm channel
    assert sum(p.numel() for p in net.parameters()) == convs + bns + 256 * 10
    out = net(torch.randn(4, 3, 32, 32))
    assert out.shape == (4, 10)
    with pytest.raises(ValueError, match="32x32"):
        build_model("airbench", (1, 8, 8), 10, 64)
