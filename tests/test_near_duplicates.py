"""Natural near-duplicate canaries (the paper's OpenCLIP neighbours, SELENA section) and the
neighbour-query attack: planted pairs are recovered exactly, weights are never fetched silently,
embeddings are cached per dataset, and lira-neighbour runs beside LiRA on SELENA."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from canaries.base import CanaryContext
from canaries.embedders import pixel_embeddings
from canaries.near_duplicates import NearDuplicates, matched_neighbours
from harness.cli import app
from harness.defense_config import build_config
from harness.core.data import load_cifar10
from harness.core.design import make_design
from harness.run.runstore import ArrayCache

runner = CliRunner()
TINY_CLIP = {"embed_dim": 32,
             "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "patch_size": 8, "head_width": 32},
             "text_cfg": {"context_length": 8, "vocab_size": 64, "width": 32, "heads": 2, "layers": 1}}


def test_matching_recovers_planted_pairs_and_never_pairs_a_label_with_itself():
    rng = np.random.default_rng(0)
    c, m, d = 30, 400, 16
    cand = rng.normal(size=(m, d))
    cand /= np.linalg.norm(cand, axis=1, keepdims=True)
    cand_y = rng.integers(0, 5, m)
    partner = rng.permutation(m)[:c]
    audit = cand[partner] + 0.01 * rng.normal(size=(c, d))  # a near-copy of its partner
    audit /= np.linalg.norm(audit, axis=1, keepdims=True)
    audit_y = (cand_y[partner] + 1) % 5  # with another label
    match, sim = matched_neighbours(audit, cand, audit_y, cand_y)
    assert np.array_equal(match, partner) and np.all(sim > 0.99)
    assert len(set(match)) == c  # distinct neighbours
    same = audit_y.copy()
    same[0] = cand_y[partner[0]]  # its twin now has its own label: it must pair elsewhere
    match2, _ = matched_neighbours(audit, cand, same, cand_y)
    assert match2[0] != partner[0] and cand_y[match2[0]] != same[0]
    assert np.all(cand_y[match2] != same)


def test_the_large_pool_route_finds_the_same_planted_pairs(monkeypatch):
    import canaries.near_duplicates as nd

    monkeypatch.setattr(nd, "FULL_MATRIX", 100)  # force the sparse route
    rng = np.random.default_rng(1)
    cand = rng.normal(size=(2000, 8))
    cand /= np.linalg.norm(cand, axis=1, keepdims=True)
    cand_y = rng.integers(0, 10, 2000)
    partner = rng.permutation(2000)[:50]
    audit = cand[partner] + 0.001 * rng.normal(size=(50, 8))
    audit /= np.linalg.norm(audit, axis=1, keepdims=True)
    match, _ = nd.matched_neighbours(audit, cand, (cand_y[partner] + 3) % 10, cand_y)
    assert np.array_equal(match, partner)


def _full_optimum(audit, cand, audit_y, cand_y) -> float:
    """The maximum total similarity over cross-label matchings, by the dense assignment."""
    from scipy.optimize import linear_sum_assignment

    sim = audit @ cand.T
    cost = np.where(audit_y[:, None] != cand_y[None, :], sim, -1e9)
    r, c = linear_sum_assignment(cost, maximize=True)
    assert cost[r, c].min() > -1e8
    return float(cost[r, c].sum())


@pytest.mark.parametrize("spare_label", ["other", "own"])
def test_the_large_pool_route_is_the_exact_maximum_when_samples_compete(monkeypatch, spare_label):
    """66 audit samples whose best 64 candidates are the same: a route that kept only each row's
    64 best would leave two samples with a poor or a same-label partner. The sparse route must reach
    the dense assignment's total, with distinct cross-label partners."""
    import canaries.near_duplicates as nd

    monkeypatch.setattr(nd, "FULL_MATRIX", 100)
    rng = np.random.default_rng(3)
    c, m, d = 66, 3000, 16
    hub = rng.normal(size=d)
    cand = rng.normal(size=(m, d))
    cand[:64] = hub + 0.05 * rng.normal(size=(64, d))  # the 64 candidates every audit sample prefers
    cand /= np.linalg.norm(cand, axis=1, keepdims=True)
    audit = hub + 0.05 * rng.normal(size=(c, d))
    audit /= np.linalg.norm(audit, axis=1, keepdims=True)
    audit_y = np.zeros(c, dtype=int)
    cand_y = np.ones(m, dtype=int)
    if spare_label == "own":  # beyond the hub only a few candidates have another label
        cand_y[64:] = 0
        cand_y[rng.choice(np.arange(64, m), 5, replace=False)] = 2
    match, sim = nd.matched_neighbours(audit, cand, audit_y, cand_y)
    assert len(set(match)) == c and np.all(cand_y[match] != audit_y)
    assert sim.sum() == pytest.approx(_full_optimum(audit, cand, audit_y, cand_y), abs=1e-9)
    assert np.allclose(sim, (audit @ cand.T)[np.arange(c), match])


def test_both_routes_reach_the_same_total_on_random_pools(monkeypatch):
    import canaries.near_duplicates as nd

    rng = np.random.default_rng(4)
    for _ in range(5):
        c, m = int(rng.integers(5, 40)), int(rng.integers(60, 300))
        cand = rng.normal(size=(m, 6))
        cand /= np.linalg.norm(cand, axis=1, keepdims=True)
        audit = rng.normal(size=(c, 6))
        audit /= np.linalg.norm(audit, axis=1, keepdims=True)
        audit_y, cand_y = rng.integers(0, 3, c), rng.integers(0, 3, m)
        dense = nd.matched_neighbours(audit, cand, audit_y, cand_y)[1].sum()
        monkeypatch.setattr(nd, "FULL_MATRIX", 1)
        sparse = nd.matched_neighbours(audit, cand, audit_y, cand_y)[1].sum()
        monkeypatch.setattr(nd, "FULL_MATRIX", 5_000_000)
        assert sparse == pytest.approx(dense, abs=1e-9) == _full_optimum(audit, cand, audit_y, cand_y)


def test_too_few_candidates_of_other_labels_is_one_clear_error():
    import canaries.near_duplicates as nd

    audit = np.eye(3)
    cand = np.eye(3)[[0, 1, 2, 0]]
    with pytest.raises(ValueError, match="too few candidates of other labels"):
        nd.matched_neighbours(audit, cand, np.zeros(3, int), np.array([1, 0, 0, 0]))


def _planted_cifar(subset: Path, num_pairs: int = 12):
    """The CIFAR-10 subset with near-duplicate pairs planted: for some audit samples, a non-audit
    sample is replaced by a slightly noised copy of the audit image with another label."""
    data = load_cifar10(subset, download=False)
    x, y = data.x_train.copy(), data.y_train.copy()
    design = make_design(len(y), 60, 6, seed=0)
    audit = design.audit_indices
    others = np.setdiff1d(np.arange(len(y)), audit)
    rng = np.random.default_rng(7)
    partners = rng.choice(others, num_pairs, replace=False)
    for a, b in zip(audit[:num_pairs], partners):
        x[b] = np.clip(x[a].astype(int) + rng.integers(-3, 4, x[a].shape), 0, 255).astype(np.uint8)
        y[b] = (y[a] + 1) % 10
    return x, y, audit, partners


def _context(x, y, audit, store=None):
    return CanaryContext(num_classes=10, rng=np.random.default_rng(0), pool_indices=audit, pool_x=x, pool_y=y,
                         data_fingerprint="test", store=store)


def _recovered(gen, x, y, audit, partners, store=None):
    can = gen.apply(x[audit], y[audit], _context(x, y, audit, store))
    k = len(partners)
    return all(np.array_equal(can.neighbour_x[i], x[partners[i]]) for i in range(k)), can


def test_cifar_subset_planted_pairs_are_recovered_with_pixel_embeddings(cifar_subset):
    x, y, audit, partners = _planted_cifar(cifar_subset)
    ok, can = _recovered(NearDuplicates(embedder="pixels"), x, y, audit, partners)
    assert ok
    assert np.array_equal(can.x, x[audit]) and np.array_equal(can.y, y[audit]) and can.evaluated.all()
    info = NearDuplicates(embedder="pixels")
    info.apply(x[audit], y[audit], _context(x, y, audit))
    first = info.describe()["pairs_most_similar_first"]
    assert {p[0] for p in first[:12]} == set(audit[:12].tolist())  # the planted pairs are the most similar


def test_cifar_subset_planted_pairs_are_recovered_with_a_random_init_openclip_model(cifar_subset, tmp_path):
    pytest.importorskip("open_clip", reason="open_clip_torch is not installed (pip install -e \".[clip]\")")
    cfg = tmp_path / "tiny-test-clip.json"
    cfg.write_text(json.dumps(TINY_CLIP))
    x, y, audit, partners = _planted_cifar(cifar_subset)
    store = ArrayCache(tmp_path / "cache")
    gen = NearDuplicates(embedder="openclip", model_config=str(cfg), pretrained=None, batch_size=512)
    ok, _ = _recovered(gen, x, y, audit, partners, store)
    assert ok and gen.describe()["embeddings"].startswith("computed, cached in")
    assert gen.describe()["embedder"] == "openclip tiny-test-clip / random weights"  # the model that ran
    again = NearDuplicates(embedder="openclip", model_config=str(cfg), pretrained=None, batch_size=512)
    ok2, _ = _recovered(again, x, y, audit, partners, store)
    assert ok2 and again.describe()["embeddings"].startswith("cached")  # per dataset fingerprint and embedder


def test_random_init_openclip_embeddings_are_the_same_on_every_run(tmp_path):
    pytest.importorskip("open_clip", reason="open_clip_torch is not installed (pip install -e \".[clip]\")")
    import torch

    from canaries.embedders import OpenClipEmbedder

    cfg = tmp_path / "tiny-test-clip.json"
    cfg.write_text(json.dumps(TINY_CLIP))
    images = np.random.default_rng(0).integers(0, 256, (6, 3, 32, 32), dtype=np.uint8)
    first = OpenClipEmbedder(model_config=str(cfg), pretrained=None)(images)
    torch.manual_seed(123)  # whatever the global torch state
    again = OpenClipEmbedder(model_config=str(cfg), pretrained=None)(images)
    assert np.array_equal(first, again)


def test_evaluate_keeps_the_most_similar_pairs(cifar_subset):
    x, y, audit, partners = _planted_cifar(cifar_subset)
    can = NearDuplicates(embedder="pixels", evaluate=12).apply(x[audit], y[audit], _context(x, y, audit))
    assert can.evaluated.sum() == 12 and can.evaluated[:12].all()


def test_a_named_tag_without_local_weights_stops_before_anything_is_written(tmp_path, monkeypatch):
    pytest.importorskip("open_clip", reason="open_clip_torch is not installed (pip install -e \".[clip]\")")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty Hugging Face cache
    monkeypatch.setenv("HOME", str(tmp_path))  # an empty ~/.cache/clip
    out = tmp_path / "runs"
    res = runner.invoke(app, ["evaluate", "undefended", "--canary", "near-duplicates", "--models", "6", "--out", str(out),
                              "--set", "audit.canary_params.near-duplicates.embedder=openclip",
                              "--set", "audit.canary_params.near-duplicates.model=RN50",
                              "--set", "audit.canary_params.near-duplicates.pretrained=openai"])
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "are not in the local caches" in text and "audit.canary_params.near-duplicates.checkpoint=PATH" in text
    assert "a run never downloads" in text and not out.exists()


def test_bad_parameters_are_refused():
    for params, message in (({"embedder": "clip"}, "embedder must be openclip, pixels"),
                            ({"embedder": "pixels", "pretrained": "webli2"},
                             r"^pretrained applies to the openclip embedder only \(embedder is 'pixels'\)$"),
                            ({"embedder": "pixels", "model": "RN50", "pretrained": None},
                             "^model, pretrained apply to the openclip embedder only"),
                            ({"evaluate": 0}, "evaluate must be a positive number"),
                            ({"checkpoint": "/no/such/weights.pt"}, "checkpoint '/no/such/weights.pt' .* is not a file")):
        with pytest.raises(ValueError, match=message):
            NearDuplicates(**params)


def test_a_users_embedder_function(tmp_path, cifar_subset):
    f = tmp_path / "emb.py"
    f.write_text("import numpy as np\n\ndef features(images):\n"
                 "    return images.reshape(len(images), -1).astype(np.float32) - 127.5\n")
    x, y, audit, partners = _planted_cifar(cifar_subset)
    ok, _ = _recovered(NearDuplicates(embedder=f"{f}:features"), x, y, audit, partners, ArrayCache(tmp_path / "c"))
    assert ok


def test_a_failing_or_missing_embedder_function_is_one_error_line_before_training(tmp_path):
    f = tmp_path / "emb.py"
    f.write_text("import numpy as np\n\ndef bad(images):\n    return 1 / 0\n\n"
                 "def words(images):\n    return [['a', 'b']] * len(images)\n\n"
                 "def zeros(images):\n    return np.zeros((len(images), 4))\n")
    for ref, message in ((f"{f}:bad", "raised ZeroDivisionError: division by zero"),
                         (f"{tmp_path / 'none.py'}:f", "none.py is not a file"),
                         (f"{f}:words", f"embedder '{f}:words' returned list, not an array of numbers"),
                         (f"{f}:zeros", f"embedder '{f}:zeros' returned a zero row (row 0 of")):
        out = tmp_path / "runs"
        res = runner.invoke(app, ["evaluate", "undefended", "--canary", "near-duplicates", "--models", "6", "--out",
                                  str(out), "--set", f"audit.canary_params.near-duplicates.embedder={ref}"])
        assert res.exit_code == 2 and message in " ".join(res.output.split()), res.output
        assert res.output.count("error:") == 1 and "Traceback" not in res.output and not out.exists()


@pytest.mark.parametrize("body, message", [
    ("np.zeros((len(images), 4))", "returned a zero row (row 0 of 60, 60 rows in all): the cosine similarity is undefined"),
    ("np.where(np.arange(len(images))[:, None] == 3, 0.0, images.reshape(len(images), -1) + 1.0)",
     "returned a zero row (row 3 of 60, 1 rows in all)"),
    ("np.tile([1.0, 2.0, 3.0], (len(images), 1))", "returned the same direction for all 60 images"),
    ("np.outer(np.arange(1, len(images) + 1), [1.0, 2.0])", "returned the same direction for all 60 images"),
    ("[['x'] * 3] * len(images)", "returned list, not an array of numbers (ValueError: could not convert string"),
    ("np.ones((len(images) - 1, 3))", "returned 59 rows for 60 images"),
    ("np.full((len(images), 3), np.nan)", "returned non-finite values (row 0 of 60"),
    ("np.ones(len(images))", "must return features of shape (N, D), got shape (60,)"),
])
def test_a_degenerate_or_malformed_embedding_is_refused_naming_the_embedder(tmp_path, body, message):
    """Zero rows (cosine undefined), one direction for every image (similarity 1 everywhere) and
    output that is not (N, D) finite numbers: each an error that names the user's function."""
    f = tmp_path / "emb.py"
    f.write_text(f"import numpy as np\n\ndef features(images):\n    return {body}\n")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (60, 3, 4, 4), dtype=np.uint8)
    y = rng.integers(0, 5, 60)
    audit = np.arange(10)
    ref = f"{f}:features"
    with pytest.raises(ValueError, match="^" + re.escape(f"embedder '{ref}' {message}")):
        NearDuplicates(embedder=ref).apply(x[audit], y[audit], _context(x, y, audit, ArrayCache(tmp_path / "c")))
    assert not (tmp_path / "c").exists()  # nothing cached


def test_unknown_canary_parameters_are_refused_naming_the_known_ones(tmp_path):
    from canaries.blank import Blank
    from canaries.ood import OutOfDistribution

    with pytest.raises(ValueError, match=r"^unknown parameter\(s\) \['foo'\]; known: \['batch_size', 'cache', "
                                         r"'checkpoint', 'embedder', 'evaluate', 'model', 'model_config', 'pretrained'\]$"):
        NearDuplicates(foo=1)
    with pytest.raises(ValueError, match=r"^unknown parameter\(s\) \['foo'\]; known: \['label', 'source'\]$"):
        OutOfDistribution(foo=1)  # it has two: not 'takes no parameters'
    with pytest.raises(ValueError, match=r"^takes no parameters, got \['foo'\]$"):
        Blank(foo=1)
    for canary, known in (("near-duplicates", "['batch_size', 'cache', 'checkpoint'"), ("ood", "['label', 'source']")):
        out = tmp_path / "runs"
        res = runner.invoke(app, ["evaluate", "undefended", "--canary", canary, "--models", "6", "--out", str(out),
                                  "--set", f"audit.canary_params.{canary}.foo=1"])
        text = " ".join(res.output.split())
        assert res.exit_code == 2 and f"error: canary '{canary}': unknown parameter(s) ['foo']; known: {known}" in text
        assert "unexpected keyword" not in text and res.output.count("error:") == 1 and not out.exists()


def test_a_checkpoint_with_a_pretrained_tag_is_refused(tmp_path):
    ck = tmp_path / "weights.pt"
    ck.write_bytes(b"0")
    for tag in ("webli", None):
        with pytest.raises(ValueError, match=r"^checkpoint and pretrained are both given"):
            NearDuplicates(checkpoint=str(ck), pretrained=tag)
    gen = NearDuplicates(checkpoint=str(ck))  # the checkpoint alone: its weights, no tag
    assert gen.openclip["pretrained"] is None and gen.openclip["checkpoint"] == str(ck)


def test_pixel_embeddings_are_unit_vectors():
    e = pixel_embeddings(np.random.default_rng(0).integers(0, 256, (5, 3, 4, 4), dtype=np.uint8))
    assert np.allclose(np.linalg.norm(e, axis=1), 1)


def _paper_splitai_nn(probs: np.ndarray, labels: np.ndarray, membership: np.ndarray) -> np.ndarray:
    """The paper's ``splitai_nn_lira_logit``, written out independently (``attack_util``): the score
    ``log(p_y + 1e-30) - log(sum_{j != y} p_j + 1e-30)`` of Split-AI's mean softmax ``probs`` (S, C, K)
    with the canary's label, then for each victim t and sample i the online likelihood ratio of
    Gaussians fitted to the other S - 1 models' IN and OUT scores (means, ddof=1 deviations)."""
    from scipy.stats import norm

    s, c, _ = probs.shape
    p_y = probs[:, np.arange(c), labels]
    score = np.log(p_y + 1e-30) - np.log(probs.sum(-1) - p_y + 1e-30)
    out = np.zeros((s, c))
    for t in range(s):
        for i in range(c):
            others = np.arange(s) != t
            ins, outs = score[others & membership[:, i], i], score[others & ~membership[:, i], i]
            out[t, i] = (norm.logpdf(score[t, i], ins.mean(), ins.std(ddof=1))
                         - norm.logpdf(score[t, i], outs.mean(), outs.std(ddof=1)))
    return out


def test_lira_neighbour_is_the_papers_splitai_nn_on_the_splitai_signal():
    """lira-neighbour reads Split-AI's answer at the neighbour (not the served outputs there) and its
    primary variant, with the paper's shadows, is the paper's splitai_nn score; lira-neighbour-student
    reads the served outputs instead."""
    from attacks.base import AttackInput
    from attacks.lira import LiRANeighbour, LiRANeighbourStudent

    rng = np.random.default_rng(0)
    s, c, k = 10, 30, 10
    membership = np.zeros((s, c), bool)
    for i in range(c):
        membership[rng.permutation(s)[: s // 2], i] = True
    labels = rng.integers(0, k, c)
    probs = rng.dirichlet(np.ones(k), size=(s, c))
    probs[membership, labels[np.nonzero(membership)[1]]] += 0.5  # members: more weight on the canary's label
    probs /= probs.sum(-1, keepdims=True)
    splitai = np.log(probs).astype(np.float32)[:, :, None, :]  # (S, C, 1, K): one plain query
    served = rng.normal(size=(s, c, 9, k)).astype(np.float32)  # the student's outputs: pure noise here
    inp = AttackInput(signals={"splitai_neighbour_logits": splitai, "neighbour_logits": served}, labels=labels,
                      membership=membership, trained_with_augmentation=True)
    attack = LiRANeighbour(shadows="all")
    assert attack.needs == frozenset({"splitai_neighbour_logits"})
    variants = attack.score(inp)
    assert attack.primary(list(variants), inp) == "online-logit-noaug-persample"  # one query: no augA variant
    want = _paper_splitai_nn(probs.astype(np.float32).astype(np.float64), labels, membership)
    np.testing.assert_allclose(variants["online-logit-noaug-persample"], want, rtol=1e-4, atol=1e-4)
    # it does not read the served outputs: replacing them changes nothing
    other = AttackInput(signals={"splitai_neighbour_logits": splitai, "neighbour_logits": -served}, labels=labels,
                        membership=membership, trained_with_augmentation=True)
    np.testing.assert_array_equal(attack.score(other)["online-logit-noaug-persample"],
                                  variants["online-logit-noaug-persample"])
    student = LiRANeighbourStudent(shadows="all")
    assert student.needs == frozenset({"neighbour_logits"})
    a, b = (student.score(x)["online-logit-aug9-persample"] for x in (inp, other))
    assert not np.allclose(a, b)


@pytest.mark.slow
def test_selena_reports_lira_neighbour_beside_lira_on_near_duplicate_canaries(tmp_path):
    """A tiny SELENA run: lira-neighbour (Split-AI at the neighbour) is a headline candidate, white-box
    and left out of the leak; lira-neighbour-student (the student there) is reported
    beside it. Then the same run as an older version left it (no Split-AI signal): the attack phase
    still works, lists lira-neighbour as skipped and takes the headline without it."""
    from harness.audit.headline import SPLIT_AI

    res = runner.invoke(app, ["evaluate", "selena", "--canary", "near-duplicates", "--models", "6", "--epochs", "2",
                              "--set", "defense_params.num_teachers=4", "--set", "defense_params.num_query=2",
                              "--set", "attack.names=[lira,lira-neighbour-student]",
                              "--set", "attack.bootstrap=20", "--out", str(tmp_path)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    (run_dir,) = tmp_path.iterdir()
    r = json.loads((run_dir / "results.json").read_text())
    sample = r["sample"]
    # lira-neighbour reads Split-AI, which SELENA never serves: a declared ablation, out of both figures
    assert sample["canary"] == "near-duplicates" and sample["headline_attacks"] == ["lira"]
    assert r["attack_roles"]["declared"] == ["lira", "lira-neighbour"]
    access = {a["name"]: a["access"] for a in sample["attacks"]}
    assert access == {"lira": "black-box", "lira-neighbour": "white-box", "lira-neighbour-student": "black-box",
                      "lira-scaled": "black-box"}  # lira-scaled: every run's per-model-scale read (issue 65)
    leak = sample["figure"]["leak"]
    assert sample["figure"]["excluded_attacks"] == {"lira-neighbour": SPLIT_AI}
    assert not any(c.split("/")[1].startswith("lira-neighbour:") for c in leak["labels"])
    assert any(c.split("/")[1].startswith("lira-neighbour-student:") for c in leak["labels"])
    assert "not applicable" in r["population"]["skipped_attacks"]["lira-neighbour"]
    assert sample["canary_info"]["embedder"] == "pixels"
    design = np.load(run_dir / "sample-near-duplicates" / "design.npz")
    assert design["neighbour_x"].shape == design["canary_x"].shape
    signals = sorted((run_dir / "sample-near-duplicates" / "signals").glob("model_*.npz"))
    with np.load(signals[0]) as z:
        assert z["splitai_neighbour_logits"].shape == (len(design["canary_x"]), 1, 10)
        assert z["neighbour_logits"].shape == z["logits"].shape
    assert "lira-neighbour" in res.output
    # a run from before lira-neighbour read Split-AI: its models saved no splitai_neighbour_logits
    for f in signals:
        with np.load(f) as z:
            kept = {k: z[k] for k in z.files if k != "splitai_neighbour_logits"}
        np.savez(f, **kept)
    res2 = runner.invoke(app, ["attack", str(run_dir)], env={"COLUMNS": "200"})
    assert res2.exit_code == 0, res2.output
    r2 = json.loads((run_dir / "results.json").read_text())
    why = r2["sample"]["skipped_attacks"]["lira-neighbour"]
    assert "did not save" in why and "headline is taken without it" in why
    assert r2["sample"]["headline_attacks"] == ["lira"] and r2["sample"]["best"]["name"] == "lira"
    assert any("declared attack lira-neighbour skipped" in n for n in r2["notes"])
    assert "lira-neighbour-student" in {a["name"] for a in r2["sample"]["attacks"]}


def test_lira_neighbour_student_asked_for_without_near_duplicate_canaries_is_refused(tmp_path):
    res = runner.invoke(app, ["evaluate", "undefended", "--set", "attack.names=[lira,lira-neighbour-student]",
                              "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "add --canary near-duplicates" in " ".join(res.output.split()), res.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("canary", [["--canary", "near-duplicates"], []])
def test_lira_neighbour_is_refused_for_a_defense_without_split_ai(tmp_path, canary):
    """The paper's splitai_nn needs SELENA's Split-AI: any other defense is refused before training,
    one line naming the missing access and the student-query attack to use instead."""
    res = runner.invoke(app, ["evaluate", "undefended", *canary, "--set", "attack.names=[lira,lira-neighbour]",
                              "--out", str(tmp_path / "o")])
    text = " ".join(res.output.split())
    assert res.exit_code == 2 and res.output.count("error:") == 1, res.output
    assert ("attack 'lira-neighbour' needs signal 'splitai_neighbour_logits'" in text
            and "which needs a Split-AI ensemble's outputs (SELENA's); defense 'undefended''s served model does not "
                "provide them" in text and "lira-neighbour-student queries the served model" in text), text
    assert not (tmp_path / "o").exists()


def test_canaries_without_neighbours_keep_their_fingerprints():
    """A run from before the neighbour field resumes: its level fingerprint is unchanged."""
    from harness.core.data import load_dataset
    from harness.run.runner import build_level

    cfg = build_config("quick", {"audit.models": 6})
    data = load_dataset(cfg.data, cfg.seed)
    ld = build_level(cfg, data, "sample-mislabeled", "mislabeled")
    assert not ld.canaries.has_neighbours
    from harness.run.runstore import sha256_arrays, sha256_json

    c = ld.canaries
    before = sha256_json({"run": "x", "level": ld.level, "canary": ld.canary, "arrays": sha256_arrays(
        ld.design.audit_indices, ld.design.membership, c.x, c.y, c.evaluated, c.extra_x, c.extra_y,
        ld.population_indices)})
    assert ld.fingerprint("x") == before
