"""The SSL defenses (SimCLR, MoCo v2), their augmentation, and the contrastive-similarity attack."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from torch import nn

from attacks.base import AttackInput
from attacks.contrastive import Contrastive, ContrastiveBlackBox
from attacks.ssl_view_lira import SSLViewLiRA
from defenses.base import FitContext, LabeledImages, Normalizer
from defenses.encoders import build_encoder
from defenses.ssl import KeyQueue, MoCo, SimCLR, momentum_update, nt_xent
from harness.core.config import ConfigError, TrainConfig
from harness.core.data import AugmentSpec
from harness.core.metrics import evaluate_scores
from harness.run.signals import check_signals, contrastive_similarity, fisher, ssl_view_outputs
from defenses.ssl_augment import SSLAugment, crop_boxes, grey, hsv_to_rgb, resized_crop, rgb_to_hsv, ssl_augment


# --- losses ---------------------------------------------------------------------------------


def test_nt_xent_hand_computed_four_sample_batch():
    """Views of four samples a, b, -a, -b (2-d unit vectors), identical across the two views, T = 0.5.
    For every anchor the 7 others have similarities +1 (its positive), -1 (twice), 0 (four times),
    so the loss is -log(e^2 / (e^2 + 4 e^0 + 2 e^-2)) = log(1 + 4 e^-2 + 2 e^-4)."""
    a, b = [1.0, 0.0], [0.0, 1.0]
    z = torch.tensor([a, b, [-1.0, 0.0], [0.0, -1.0]])
    expected = math.log(1 + 4 * math.exp(-2) + 2 * math.exp(-4))
    assert float(nt_xent(z, z.clone(), temperature=0.5)) == pytest.approx(expected, rel=1e-6)
    # scale does not matter (projections are L2-normalized)
    assert float(nt_xent(3 * z, 0.5 * z, temperature=0.5)) == pytest.approx(expected, rel=1e-6)


def test_nt_xent_against_a_loop_implementation():
    g = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g)
    u = torch.nn.functional.normalize(torch.cat([z1, z2]), dim=1).tolist()
    n, t, total = 4, 0.5, 0.0
    for i in range(2 * n):
        p = (i + n) % (2 * n)
        sims = {k: sum(x * y for x, y in zip(u[i], u[k])) / t for k in range(2 * n) if k != i}
        total += -sims[p] + math.log(sum(math.exp(s) for s in sims.values()))
    assert float(nt_xent(z1, z2, t)) == pytest.approx(total / (2 * n), rel=1e-5)


def test_key_queue_is_first_in_first_out():
    q = KeyQueue(4, 2, torch.Generator().manual_seed(0))
    assert torch.allclose(q.keys.norm(dim=1), torch.ones(4))  # random unit vectors at the start
    batches = [torch.full((3, 2), float(v)) + torch.arange(3.0)[:, None] for v in (10, 20, 30)]
    enqueued: list[torch.Tensor] = list(q.keys.clone())  # the initial keys, oldest (slot 0) first
    for k in batches:
        q.enqueue(k)
        enqueued += list(k)
        newest = torch.stack(enqueued[-4:])
        # the queue holds exactly the 4 newest keys; the slot written next holds the oldest of them
        assert sorted(map(tuple, q.keys.tolist())) == sorted(map(tuple, newest.tolist()))
        assert torch.equal(q.keys[q.ptr], newest[0])
    q.enqueue(torch.arange(12.0).view(6, 2))  # more than the queue holds: the last 4 stay
    assert sorted(map(tuple, q.keys.tolist())) == sorted(map(tuple, torch.arange(4.0, 12.0).view(4, 2).tolist()))


def test_momentum_update_is_the_exponential_average():
    torch.manual_seed(0)
    key, query = nn.Linear(3, 2), nn.Linear(3, 2)
    before = [p.clone() for p in key.parameters()]
    momentum_update(key, query, 0.99)
    for pk, pb, pq in zip(key.parameters(), before, query.parameters()):
        assert torch.allclose(pk, 0.99 * pb + 0.01 * pq)


def test_moco_key_encoder_follows_the_query_encoder_by_momentum():
    """One MoCo step: the key network becomes m * key + (1 - m) * query (parameters at the step), its
    gradients stay off, and both key batches enter the queue."""
    d = MoCo(encoder="mlp", width=8, queue_size=16, projection_dim=4, key_momentum=0.9)
    enc = build_encoder("mlp", (1, 4, 4), 8)
    heads = nn.ModuleDict(d.init_heads(enc.out_dim))
    state = d.pretrain_state(enc, heads, torch.Generator().manual_seed(0), torch.device("cpu"))
    with torch.no_grad():  # make the key network differ from the query network
        for p in state["key"].parameters():
            p.add_(1.0)
    key_before = [p.clone() for p in state["key"].parameters()]
    query_now = [p.clone() for p in [*enc.parameters(), *heads["projection"].parameters()]]
    v1, v2 = torch.randn(6, 1, 4, 4), torch.randn(6, 1, 4, 4)
    loss = d.pretrain_step(enc, heads, v1, v2, state)
    assert loss.requires_grad and math.isfinite(float(loss.detach()))
    for pk, pb, pq in zip(state["key"].parameters(), key_before, query_now):
        assert torch.allclose(pk, 0.9 * pb + 0.1 * pq, atol=1e-6)
        assert not pk.requires_grad
    assert state["queue"].ptr == 12  # two key batches of 6


def _running_stats(*modules: nn.Module) -> list[torch.Tensor]:
    return [b.clone() for m in modules for k, b in m.state_dict().items() if "running" in k]


def _simclr_step(view_batching: str, v1: torch.Tensor, v2: torch.Tensor, train: bool = True):
    """One SimCLR ``pretrain_step`` from a fixed initialization; returns the loss, the BatchNorm
    running statistics after it and an untouched copy of the initial (encoder, projection)."""
    d = SimCLR(encoder="mlp", width=8, projection_dim=4, view_batching=view_batching)
    torch.manual_seed(3)
    enc = build_encoder("mlp", (1, 4, 4), 8)
    heads = nn.ModuleDict(d.init_heads(enc.out_dim))
    enc.train(train)
    heads.train(train)
    initial = copy.deepcopy((enc, heads["projection"]))
    loss = d.pretrain_step(enc, heads, v1, v2, {})
    return float(loss.detach()), _running_stats(enc, heads), initial


def test_simclr_view_batching_separate_is_one_forward_pass_per_view():
    """``separate`` (the paper's ``get_loss``: ``forward(img1)``, then ``forward(img2)``) equals two
    independent passes, view 1 then view 2, of the same initial network: the same loss and the same
    BatchNorm running statistics (updated twice). ``concat`` equals one pass over the 2N views. In
    train mode the two differ (batch statistics per view vs over both); in eval mode they agree."""
    g = torch.Generator().manual_seed(0)
    v1 = torch.randn(8, 1, 4, 4, generator=g)
    v2 = 2.0 * torch.randn(8, 1, 4, 4, generator=g) + 1.0  # a second view with other statistics
    loss_sep, stats_sep, (enc, proj) = _simclr_step("separate", v1, v2)
    with torch.no_grad():
        z1, z2 = proj(enc(v1)), proj(enc(v2))
    assert loss_sep == pytest.approx(float(nt_xent(z1, z2, 0.5)), rel=1e-6)
    assert all(torch.allclose(a, b) for a, b in zip(stats_sep, _running_stats(enc, proj)))

    loss_cat, stats_cat, (enc, proj) = _simclr_step("concat", v1, v2)
    with torch.no_grad():
        z = proj(enc(torch.cat([v1, v2])))
    assert loss_cat == pytest.approx(float(nt_xent(z[:8], z[8:], 0.5)), rel=1e-6)
    assert all(torch.allclose(a, b) for a, b in zip(stats_cat, _running_stats(enc, proj)))

    assert abs(loss_sep - loss_cat) > 1e-3
    assert not all(torch.allclose(a, b, atol=1e-4) for a, b in zip(stats_sep, stats_cat))
    # every running mean moved by two momentum steps (separate) vs one (concat): for the first
    # BatchNorm, 0.1 * (0.9 m1 + m2) against 0.1 * (m1 + m2) / 2 of the views' batch means m1, m2
    with torch.no_grad():
        h1, h2 = (enc.body[1](v.flatten(1)) for v in (v1, v2))
    m1, m2 = h1.mean(0), h2.mean(0)
    assert torch.allclose(stats_sep[0], 0.1 * (0.9 * m1 + m2), atol=1e-6)
    assert torch.allclose(stats_cat[0], 0.1 * (m1 + m2) / 2, atol=1e-6)
    # in eval mode BatchNorm reads its running statistics: the two forms are the same computation
    assert _simclr_step("separate", v1, v2, train=False)[0] == pytest.approx(
        _simclr_step("concat", v1, v2, train=False)[0], rel=1e-6)
    with pytest.raises(ValueError, match="view_batching"):
        SimCLR(view_batching="split")


def test_moco_passes_each_view_on_its_own_as_the_papers_code():
    """MoCo (the paper's and ours) encodes the queries of view 1 and view 2 in two passes: after one
    step the query encoder's BatchNorm statistics are those of forward(v1) then forward(v2)."""
    d = MoCo(encoder="mlp", width=8, queue_size=16, projection_dim=4)
    torch.manual_seed(4)
    enc = build_encoder("mlp", (1, 4, 4), 8)
    heads = nn.ModuleDict(d.init_heads(enc.out_dim))
    state = d.pretrain_state(enc, heads, torch.Generator().manual_seed(0), torch.device("cpu"))
    ref = copy.deepcopy(nn.Sequential(enc, heads["projection"]))
    g = torch.Generator().manual_seed(1)
    v1, v2 = torch.randn(6, 1, 4, 4, generator=g), 2.0 * torch.randn(6, 1, 4, 4, generator=g) + 1.0
    d.pretrain_step(enc, heads, v1, v2, state)
    with torch.no_grad():
        ref(v1), ref(v2)
    assert all(torch.allclose(a, b) for a, b in zip(_running_stats(enc, heads), _running_stats(ref)))


# --- augmentation ---------------------------------------------------------------------------


def test_ssl_augmentation_draws_per_sample():
    x = torch.rand(1, 3, 16, 16).expand(32, -1, -1, -1).contiguous()  # 32 copies of one image
    out = ssl_augment(x, SSLAugment(), torch.Generator().manual_seed(0))
    flat = out.reshape(32, -1)
    distinct = {tuple(np.round(r.numpy(), 4)) for r in flat}
    assert len(distinct) == 32  # a per-batch draw would give 1
    # reproducible from the generator's seed
    again = ssl_augment(x, SSLAugment(), torch.Generator().manual_seed(0))
    assert torch.equal(out, again)
    assert 0.0 <= float(out.min()) and float(out.max()) <= 1.0


def test_crop_boxes_follow_torchvision_bounds():
    boxes = crop_boxes(2000, 32, 32, (0.08, 1.0), (3 / 4, 4 / 3), torch.Generator().manual_seed(1))
    top, left, h, w = boxes.T
    assert bool(((top >= 0) & (left >= 0) & (top + h <= 32) & (left + w <= 32) & (h > 0) & (w > 0)).all())
    area = (h * w).double() / 1024
    assert 0.05 < float(area.min()) and float(area.max()) <= 1.0  # rounding allows slightly below 0.08
    assert float(area.mean()) == pytest.approx(0.54, abs=0.05)  # E U(0.08, 1) = 0.54


def test_augmentation_ops_match_torchvision():
    tv = pytest.importorskip("torchvision.transforms.v2.functional")
    x = torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    for box in ([2, 2, 4, 4], [0, 1, 7, 5], [3, 1, 2, 6]):
        ref = tv.resized_crop(x, *box, [8, 8], antialias=False)
        assert torch.allclose(resized_crop(x, torch.tensor([box] * 4)), ref, atol=1e-5)
    assert torch.allclose(hsv_to_rgb(rgb_to_hsv(x)), x, atol=1e-5)
    assert torch.allclose(grey(x), tv.rgb_to_grayscale(x), atol=1e-5)


# --- probe ----------------------------------------------------------------------------------


def _digits_like(n: int = 64, seed: int = 0) -> LabeledImages:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n, 1, 8, 8), dtype=np.uint8)
    y = rng.integers(0, 3, size=n).astype(np.int64)
    return LabeledImages(x, y, 3, (0.5,), (0.25,), AugmentSpec(flip=False, shift=1))


def test_probe_leaves_encoder_batchnorm_statistics_unchanged():
    train = _digits_like()
    d = SimCLR(encoder="mlp", width=16, probe_epochs=3, probe_batch_size=16)
    enc = build_encoder("mlp", (1, 8, 8), 16)
    with torch.no_grad():  # non-trivial statistics, as after pre-training
        for m in enc.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
    before = {k: v.clone() for k, v in enc.state_dict().items()}
    ctx = FitContext(seed=0, device="cpu", train=TrainConfig())
    probe = d.train_probe(enc, train, ctx, Normalizer(train.mean, train.std, "cpu"), SSLAugment(flip=False),
                          torch.Generator().manual_seed(0))
    after = enc.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # weights and BN buffers alike
    assert isinstance(probe, nn.Linear) and not probe.training


def test_ssl_fit_serves_logits_and_features():
    train = _digits_like(96)
    for cls in (SimCLR, MoCo):
        extra = {"queue_size": 64} if cls is MoCo else {}
        d = cls(encoder="mlp", width=16, epochs=2, batch_size=32, probe_epochs=2, **extra)
        served = d.fit(train, FitContext(seed=0, device="cpu", train=TrainConfig()))
        out, feats = served.query(train.x[:5]), served.features(train.x[:5])
        assert out.shape == (5, 3) and feats.shape == (5, 16)
        assert served.info()["ssl_method"] == cls.name


def test_ssl_refuses_bad_parameters():
    with pytest.raises(ValueError, match="encoder"):
        SimCLR(encoder="vit")
    with pytest.raises(ValueError, match="queue_size"):
        MoCo(queue_size=0)
    with pytest.raises(ValueError, match="no parameter"):
        SimCLR(queue_size=10)


# --- signals and the attack -----------------------------------------------------------------


def test_fisher_transform_values():
    assert fisher(0.0) == pytest.approx(0.0, abs=1e-12)
    assert fisher(0.5) == pytest.approx(math.log(3))
    assert fisher(-0.5) == pytest.approx(-math.log(3))
    assert np.isfinite(fisher(np.array([1.0, -1.0, 1.5]))).all()  # clipped, guarded


def test_contrastive_views_are_identical_across_models():
    """The views depend on the seed only: two different embeddings of the same views agree on
    which pairs are identical, and a re-run gives the same values."""
    x = np.random.default_rng(0).integers(0, 256, size=(10, 1, 8, 8), dtype=np.uint8)
    spec = AugmentSpec(flip=False, shift=1)
    embed = lambda v: v.reshape(len(v), -1).astype(np.float64) - 100.0  # noqa: E731
    a = contrastive_similarity(embed, x, spec, seed=5, repetitions=2)
    assert a.shape == (10, 9, 2)
    assert np.array_equal(a, contrastive_similarity(embed, x, spec, seed=5, repetitions=2))
    assert not np.array_equal(a, contrastive_similarity(embed, x, spec, seed=6, repetitions=2))


def test_ssl_view_logits_are_taken_on_the_contrastive_pairs_first_views():
    """The paper's SSL confidence baseline reads view 1 of the very pairs the contrastive attacks compare."""
    x = np.random.default_rng(1).integers(0, 256, size=(10, 1, 8, 8), dtype=np.uint8)
    spec = AugmentSpec(flip=False, shift=1)
    seen: list[np.ndarray] = []

    def embed(v: np.ndarray) -> np.ndarray:
        seen.append(v.copy())
        return v.reshape(len(v), -1).astype(np.float64) - 100.0

    contrastive_similarity(embed, x, spec, seed=5, repetitions=2, batch_size=4)
    flat = lambda v: v.reshape(len(v), -1)[:, :3].astype(np.float32)  # noqa: E731
    out = ssl_view_outputs(flat, x, spec, seed=5, repetitions=2, batch_size=4)
    assert out.shape == (10, 9, 2, 3)
    firsts = iter(seen[0::2])  # embed saw v1, v2 of each batch in turn: r, then view a, then rows
    for r in range(2):
        for a in range(9):
            for lo in range(0, 10, 4):
                assert np.array_equal(out[lo : lo + 4, a, r], flat(next(firsts)))
    assert not np.array_equal(out, ssl_view_outputs(flat, x, spec, seed=6, repetitions=2, batch_size=4))


def _ssl_view_logits(s: int = 16, c: int = 60, a: int = 3, r: int = 6, k: int = 4, effect: float = 1.5,
                     seed: int = 2):
    rng = np.random.default_rng(seed)
    membership = np.zeros((s, c), bool)
    for i in range(c):
        membership[rng.permutation(s)[: s // 2], i] = True
    labels = rng.integers(0, k, c)
    logits = rng.normal(0, 1.0, size=(s, c, a, r, k))
    logits[np.arange(s)[:, None], np.arange(c)[None, :], :, :, labels[None, :]] += effect * membership[:, :, None, None]
    return logits.astype(np.float32), labels, membership


def test_ssl_view_lira_recovers_members_whose_augmented_views_are_more_confident():
    logits, labels, membership = _ssl_view_logits()
    c = len(labels)
    inp = AttackInput(signals={"ssl_view_logits": logits}, labels=labels, membership=membership)
    attack = SSLViewLiRA()
    out = attack.score(inp)
    assert set(out) == {"lira-aug3", "lira-noaug", "lira-copies", "lira-copies-noaug"}
    assert attack.primary(list(out), inp) == "lira-aug3"
    ev = np.ones(c, bool)
    auc = {v: evaluate_scores(out[v], membership, ev, [0.01], bootstrap=0, confidence=0.95, seed=0).auc for v in out}
    assert auc["lira-aug3"] > 0.95 and auc["lira-aug3"] > auc["lira-noaug"] > 0.6  # more views, more evidence
    # scored on the label: another class's confidence shows the member's boost only through the softmax
    wrong = AttackInput(signals=inp.signals, labels=(labels + 1) % 4, membership=membership)
    assert evaluate_scores(attack.score(wrong)["lira-aug3"], membership, ev, [0.01], bootstrap=0, confidence=0.95,
                           seed=0).auc < auc["lira-aug3"] - 0.05
    with pytest.raises(ValueError, match="repetitions"):
        SSLViewLiRA(repetitions=7)
    with pytest.raises(ValueError, match="shadows"):
        SSLViewLiRA(shadows="some")


def _paper_lira_loo(scores: np.ndarray, membership: np.ndarray) -> np.ndarray:
    """The paper's ``attack_util.lira_attack_loo`` (per-sample variance), written as its loop:
    ``scores`` (C, S, A), ``membership`` (C, S); returns (S, C)."""
    from scipy.stats import norm

    c, s, _ = scores.shape
    out = np.zeros((s, c))
    for t in range(s):
        keep = np.arange(s) != t
        for i in range(c):
            sh, m = scores[i, keep], membership[i, keep]
            lin = norm.logpdf(scores[i, t], sh[m].mean(0), sh[m].std(0, ddof=1) + 1e-30).mean()
            lout = norm.logpdf(scores[i, t], sh[~m].mean(0), sh[~m].std(0, ddof=1) + 1e-30).mean()
            out[t, i] = lin - lout
    return out


def test_ssl_view_lira_primary_is_the_papers_confidence_pipeline():
    """The primary variant is the paper's ``confidence`` attack: per copy ``log p_y - log(1 - p_y)``
    from a float64 softmax, the mean of those scores over the R repetitions of each view, then the
    paper's leave-one-out LiRA over the A views (all S - 1 shadows). Averaging logits instead, or
    LiRA over the A x R copies (the former primary), gives other scores."""
    logits, labels, membership = _ssl_view_logits(s=8, c=12, a=3, r=4, effect=0.8, seed=5)
    s, c, a, r, k = logits.shape
    z = logits.astype(np.float64)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    p_y = np.take_along_axis(p, np.broadcast_to(labels[None, :, None, None, None], (s, c, a, r, 1)), -1)[..., 0]
    conf = np.log(p_y + 1e-45) - np.log(1 - p_y + 1e-45)  # (S, C, A, R), as _get_score
    per_view = conf.mean(axis=3)  # np.mean(aug_scores[:num_aug], axis=0)
    expected = _paper_lira_loo(per_view.transpose(1, 0, 2), membership.T)
    inp = AttackInput(signals={"ssl_view_logits": logits}, labels=labels, membership=membership)
    out = SSLViewLiRA(repetitions=r, shadows="all").score(inp)
    assert np.allclose(out["lira-aug3"], expected, rtol=1e-7, atol=1e-7)
    assert np.allclose(out["lira-noaug"], _paper_lira_loo(per_view[:, :, :1].transpose(1, 0, 2), membership.T),
                       rtol=1e-7, atol=1e-7)
    copies = _paper_lira_loo(conf.reshape(s, c, a * r).transpose(1, 0, 2), membership.T)
    assert np.allclose(out["lira-copies"], copies, rtol=1e-7, atol=1e-7)
    assert not np.allclose(out["lira-aug3"], copies, rtol=1e-2)
    mean_logits = logits.mean(axis=3, keepdims=True)  # averaging the logits first is another statistic
    other = SSLViewLiRA(repetitions=1, shadows="all").score(
        AttackInput(signals={"ssl_view_logits": mean_logits}, labels=labels, membership=membership))["lira-aug3"]
    assert not np.allclose(out["lira-aug3"], other, rtol=1e-2)
    # only the first `repetitions` copies are read
    changed = logits.copy()
    changed[:, :, :, 2:] = 50.0
    changed_inp = AttackInput(signals={"ssl_view_logits": changed}, labels=labels, membership=membership)
    assert np.array_equal(SSLViewLiRA(repetitions=2).score(changed_inp)["lira-aug3"],
                          SSLViewLiRA(repetitions=2).score(inp)["lira-aug3"])


def _synthetic(s: int = 16, c: int = 60, a: int = 3, r: int = 6, effect: float = 1.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    membership = np.zeros((s, c), bool)
    for i in range(c):
        membership[rng.permutation(s)[: s // 2], i] = True
    base = rng.normal(2.0, 1.0, size=(1, c, 1, 1))  # per-sample difficulty, shared by every model
    sims = base + effect * membership[:, :, None, None] + rng.normal(0, 0.4, size=(s, c, a, r))
    return sims.astype(np.float32), membership


def test_contrastive_attack_recovers_members_when_their_views_are_more_similar():
    sims, membership = _synthetic()
    inp = AttackInput(signals={"contrastive_features": sims}, labels=np.zeros(60, np.int64), membership=membership)
    attack = Contrastive()
    out = attack.score(inp)
    assert set(out) == {"threshold", "lira-noaug", "lira-aug3"}
    assert attack.primary(list(out), inp) == "lira-aug3"
    ev = np.ones(60, bool)
    m = evaluate_scores(out["lira-aug3"], membership, ev, [0.01], bootstrap=0, confidence=0.95, seed=0)
    assert m.auc > 0.95 and m.tpr_at_fpr[0.01] > 0.5
    # no signal, no attack: with effect 0 the AUC is near chance
    sims0, mem0 = _synthetic(effect=0.0, seed=1)
    out0 = Contrastive().score(AttackInput(signals={"contrastive_features": sims0}, labels=np.zeros(60, np.int64),
                                           membership=mem0))
    assert abs(evaluate_scores(out0["lira-aug3"], mem0, ev, [0.01], bootstrap=0, confidence=0.95, seed=0).auc - 0.5) < 0.1


def test_contrastive_attack_is_fitted_on_shadow_models_only():
    """Victim t's scores do not depend on its own membership row (all-shadows mode: the balanced
    mode's dropped shadow depends on membership by design)."""
    sims, membership = _synthetic(seed=3)
    attack = ContrastiveBlackBox(shadows="all")
    base = attack.score(AttackInput(signals={"contrastive_logits": sims}, labels=np.zeros(60, np.int64),
                                    membership=membership))["lira-aug3"]
    flipped = membership.copy()
    flipped[4] = ~flipped[4]
    other = attack.score(AttackInput(signals={"contrastive_logits": sims}, labels=np.zeros(60, np.int64),
                                     membership=flipped))["lira-aug3"]
    assert np.allclose(base[4], other[4])
    assert not np.allclose(base[5], other[5])


def test_contrastive_repetitions_average_the_first_r():
    sims, membership = _synthetic()
    sims[..., 3:] = 1e3  # repetitions beyond the first 3 would dominate the mean
    out = Contrastive(repetitions=3).score(AttackInput(signals={"contrastive_features": sims},
                                                       labels=np.zeros(60, np.int64), membership=membership))
    assert float(np.abs(out["threshold"]).max()) < 100
    with pytest.raises(ValueError, match="repetitions"):
        Contrastive(repetitions=7)


def test_white_box_signal_refused_for_a_defense_without_features():
    with pytest.raises(ConfigError, match="white-box features"):
        check_signals([Contrastive()], frozenset(), "undefended", population_samples=0)
    check_signals([ContrastiveBlackBox()], frozenset(), "undefended", population_samples=0)  # black-box: fine
    check_signals([Contrastive()], frozenset({"features"}), "ssl-simclr", population_samples=0)


# --- end to end -----------------------------------------------------------------------------


@pytest.mark.slow
def test_ssl_simclr_end_to_end_reports_access(tmp_path):
    """A tiny `harness evaluate ssl-simclr` on digits: both SSL canaries, the contrastive attacks'
    signals saved, white-box / black-box stated per attack and for the headline; then an attack
    that needs a signal the run did not save is skipped and said so."""
    import json

    from typer.testing import CliRunner

    from harness.cli import app

    args = ["evaluate", "ssl-simclr", "--out", str(tmp_path), "--workers", "1", "--models", "6", "--epochs", "2",
            "--set", "audit.size=40", "--set", "defense_params.probe_epochs=2", "--set", "attack.bootstrap=0",
            "--set", "attack.names=[lira,threshold]"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    (run_dir,) = tmp_path.iterdir()
    r = json.loads((run_dir / "results.json").read_text())
    assert set(r["sample_by_canary"]) == {"ood", "mislabeled"}
    for lv in ("population", "sample"):
        access = {e["name"]: e["access"] for e in r[lv]["attacks"]}
        assert access == {"lira": "black-box", "threshold": "black-box", "contrastive": "white-box",
                          "contrastive-blackbox": "black-box", "lira-sslview": "black-box", "lira-scaled": "black-box"}
        assert set(r[lv]["headline_attacks"]) == {"lira", "contrastive", "contrastive-blackbox", "lira-sslview"}
        assert r[lv]["best"]["access"] == access[r[lv]["best"]["name"]]
    sig = np.load(run_dir / "sample-ood" / "signals" / "model_0000.npz")
    assert sig["contrastive_features"].shape == (40, 9, 6) and sig["contrastive_logits"].shape == (40, 9, 6)
    assert sig["ssl_view_logits"].shape == (40, 9, 6, 10)
    assert "population_logits" not in sig.files  # rmia is not run: its signal is not computed
    assert "white-box" in res.output
    # re-scoring with RMIA added: the models did not save its population signal
    res2 = CliRunner().invoke(app, ["attack", str(run_dir), "--set", "attack.names=[lira,threshold,rmia]"])
    assert res2.exit_code == 0, res2.output
    r2 = json.loads((run_dir / "results.json").read_text())
    assert "rmia" in r2["population"]["skipped_attacks"] and "did not save" in r2["population"]["skipped_attacks"]["rmia"]
    assert "skipped" in res2.output


def test_white_box_attack_refused_before_training_for_undefended(tmp_path):
    from typer.testing import CliRunner

    from harness.cli import app

    res = CliRunner().invoke(app, ["evaluate", "undefended", "--out", str(tmp_path), "--models", "6",
                                   "--set", "attack.names=[lira,contrastive]"])
    assert res.exit_code != 0 and "white-box features" in res.output and "Traceback" not in res.output
    assert not any(tmp_path.iterdir())  # nothing written


def test_batch_larger_than_a_training_set_refused_before_training(tmp_path):
    """Digits at the quick preset: 1300 training images, 200 audited. The smallest model training set
    (as training_set builds them) bounds the pre-training batch: one more is refused before
    anything is written, with a ConfigError and no traceback; exactly that many passes the check."""
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.defense_config import build_config
    from harness.run.runner import build_level, prepare_run, smallest_training_set, training_set

    cfg = build_config("quick", {"defense": "ssl-simclr", "audit.models": 6, "run.out": str(tmp_path / "ok"),
                                 "run.level": "population"})
    prep = prepare_run(cfg)
    ld = build_level(cfg, prep.data, "population", "none")
    sizes = [len(training_set(prep.data, ld, s)) for s in range(6)]
    smallest = smallest_training_set(ld, len(prep.data.y_train))
    assert smallest == min(sizes) and 1100 < smallest < 1300

    res = CliRunner().invoke(app, ["evaluate", "ssl-simclr", "--out", str(tmp_path / "refused"), "--models", "6",
                                   "--level", "population", "--set", f"defense_params.batch_size={smallest + 1}"])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert f"batch_size {smallest + 1} is larger than the smallest model's training set ({smallest}" in res.output
    assert not (tmp_path / "refused").exists() or not any((tmp_path / "refused").iterdir())
    prepare_run(build_config("quick", {"defense": "ssl-simclr", "audit.models": 6, "run.out": str(tmp_path / "edge"),
                                       "run.level": "population", "defense_params.batch_size": smallest}))
