"""The near-duplicates embedding cache: what its key holds (a checkpoint's content, the open_clip
and torch versions, the device type), ``cache=false`` to recompute what the key cannot see (a user
function's imports and weights), and the provenance ``canary_info`` records."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import canaries.embedders as embedders
from canaries.base import CanaryContext
from canaries.near_duplicates import NearDuplicates
from harness.cli import app
from harness.run.runstore import ArrayCache

runner = CliRunner()
TINY_CLIP = {"embed_dim": 32,
             "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "patch_size": 8, "head_width": 32},
             "text_cfg": {"context_length": 8, "vocab_size": 64, "width": 32, "heads": 2, "layers": 1}}


def _pool(n: int = 60, audit_size: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (n, 3, 4, 4), dtype=np.uint8)
    y = rng.integers(0, 5, n)
    return x, y, np.sort(rng.choice(n, audit_size, replace=False))


def _apply(gen: NearDuplicates, x: np.ndarray, y: np.ndarray, audit: np.ndarray, store: ArrayCache | None) -> dict:
    ctx = CanaryContext(num_classes=5, rng=np.random.default_rng(0), pool_indices=audit, pool_x=x, pool_y=y,
                        data_fingerprint="test", store=store)
    gen.apply(x[audit], y[audit], ctx)
    return gen.describe()


def _cached(root: Path) -> np.ndarray:
    (only,) = root.glob("*.npy")
    return np.load(only)


def _tiny_config(tmp_path: Path) -> str:
    cfg = tmp_path / "tiny-test-clip.json"
    cfg.write_text(json.dumps(TINY_CLIP))
    return str(cfg)


def test_cache_false_recomputes_what_the_key_cannot_see_and_overwrites_the_cached_copy(tmp_path):
    """The function's file is keyed, the weights it loads are not: after they change the cached
    embeddings are reused (documented); cache=false computes them again and replaces the copy."""
    f = tmp_path / "emb.py"
    f.write_text("from pathlib import Path\nimport numpy as np\n\n"
                 "def features(images):\n"
                 "    w = np.load(Path(__file__).with_name('w.npy'))\n"
                 "    return images.reshape(len(images), -1).astype(np.float32) @ w\n")
    rng = np.random.default_rng(1)
    np.save(tmp_path / "w.npy", rng.normal(size=(48, 8)).astype(np.float32))
    x, y, audit = _pool()
    root = tmp_path / "cache"
    store = ArrayCache(root)
    ref = f"{f}:features"
    assert _apply(NearDuplicates(embedder=ref), x, y, audit, store)["embeddings"].startswith("computed, cached in")
    first = _cached(root)
    np.save(tmp_path / "w.npy", rng.normal(size=(48, 8)).astype(np.float32))  # new weights, same source file
    assert _apply(NearDuplicates(embedder=ref), x, y, audit, store)["embeddings"].startswith("cached")
    info = _apply(NearDuplicates(embedder=ref, cache=False), x, y, audit, store)
    assert info["embeddings"].startswith("computed again (cache=false), cached in")
    fresh = _cached(root)  # overwritten in place: one entry, the new weights' embeddings
    assert not np.allclose(fresh, first)
    w = np.load(tmp_path / "w.npy")
    expect = x.reshape(len(x), -1).astype(np.float32) @ w
    assert np.allclose(fresh, expect / np.linalg.norm(expect, axis=1, keepdims=True), atol=1e-5)
    assert _apply(NearDuplicates(embedder=ref), x, y, audit, store)["embeddings"].startswith("cached")
    assert np.array_equal(_cached(root), fresh)


@pytest.mark.parametrize("value", ["maybe", 1, None])
def test_cache_must_be_true_or_false(value):
    with pytest.raises(ValueError, match=f"cache must be true or false, got {value!r}"):
        NearDuplicates(embedder="pixels", cache=value)


def test_a_bad_cache_value_on_the_command_line_is_one_error_line_before_training(tmp_path):
    out = tmp_path / "runs"
    res = runner.invoke(app, ["evaluate", "undefended", "--canary", "near-duplicates", "--models", "6", "--out", str(out),
                              "--set", "audit.canary_params.near-duplicates.cache=maybe"])
    assert res.exit_code == 2, res.output
    assert "cache must be true or false, got 'maybe'" in " ".join(res.output.split())
    assert res.output.count("error:") == 1 and "Traceback" not in res.output and not out.exists()


def test_a_checkpoint_is_keyed_by_its_content_not_its_size_and_mtime(tmp_path, monkeypatch):
    """A same-size checkpoint swapped in with its mtime restored gets another key (in a new process:
    the in-process memo is emptied); within one process the file is hashed once."""
    pytest.importorskip("open_clip", reason="open_clip_torch is not installed (pip install -e \".[clip]\")")
    cfg = _tiny_config(tmp_path)
    ck = tmp_path / "weights.pt"
    ck.write_bytes(b"A" * 4096)
    st = ck.stat()
    monkeypatch.setattr(embedders, "_DIGESTS", {}, raising=False)
    enc = embedders.OpenClipEmbedder(model_config=cfg, pretrained=None, checkpoint=str(ck))
    before = enc.key()
    assert before["checkpoint"] == hashlib.sha256(b"A" * 4096).hexdigest()
    ck.write_bytes(b"B" * 4096)
    os.utime(ck, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert ck.stat().st_size == st.st_size and ck.stat().st_mtime_ns == st.st_mtime_ns
    monkeypatch.setattr(embedders, "_DIGESTS", {}, raising=False)  # a new process
    after = enc.key()
    assert after["checkpoint"] == hashlib.sha256(b"B" * 4096).hexdigest()
    assert embedders.embedding_key(before, "d") != embedders.embedding_key(after, "d")

    stream = getattr(embedders, "_sha256_stream", None)

    def no_second_read(path: Path) -> str:
        assert Path(path).resolve() != ck.resolve(), f"{path} hashed twice in one process"
        return stream(path)

    monkeypatch.setattr(embedders, "_sha256_stream", no_second_read, raising=False)
    assert enc.key() == after  # memoized by (path, size, mtime_ns)


def test_the_openclip_key_holds_the_open_clip_and_torch_versions_and_the_device_type(tmp_path, monkeypatch):
    open_clip = pytest.importorskip("open_clip", reason="open_clip_torch is not installed (pip install -e \".[clip]\")")
    import torch

    cfg = _tiny_config(tmp_path)

    def key(device: str) -> str:
        return embedders.embedding_key(
            embedders.OpenClipEmbedder(model_config=cfg, pretrained=None, device=device).key(), "d")

    spec = embedders.OpenClipEmbedder(model_config=cfg, pretrained=None, device="cuda:0").key()
    assert (spec.get("open_clip"), spec.get("torch"), spec.get("device")) == (open_clip.__version__,
                                                                                torch.__version__, "cuda")
    cpu = key("cpu")
    assert key("cuda") != cpu and key("cuda:1") == key("cuda")  # the device type, not its index
    monkeypatch.setattr(open_clip, "__version__", "0.0.1")
    assert key("cpu") != cpu
    monkeypatch.undo()
    monkeypatch.setattr(torch, "__version__", "0.0.1")
    assert key("cpu") != cpu


def test_canary_info_records_the_users_embedder_file_by_absolute_path_and_digest(tmp_path, monkeypatch):
    f = tmp_path / "emb.py"
    f.write_text("import numpy as np\n\ndef features(images):\n"
                 "    return images.reshape(len(images), -1).astype(np.float32) - 127.5\n")
    monkeypatch.chdir(tmp_path)
    x, y, audit = _pool()
    info = _apply(NearDuplicates(embedder="emb.py:features"), x, y, audit, None)
    assert info["embedder"] == "emb.py:features"  # as given
    assert info["embedder_file"] == {"path": str(f.resolve()), "sha256": hashlib.sha256(f.read_bytes()).hexdigest()}


def test_canary_info_records_a_checkpoint_by_absolute_path_and_digest(tmp_path):
    open_clip = pytest.importorskip("open_clip", reason="open_clip_torch is not installed (pip install -e \".[clip]\")")
    import torch

    cfg = _tiny_config(tmp_path)
    open_clip.add_model_config(Path(cfg))
    ck = tmp_path / "tiny.pt"
    torch.save(open_clip.create_model("tiny-test-clip").state_dict(), ck)
    x, y, audit = _pool(40, 8)
    info = _apply(NearDuplicates(embedder="openclip", model_config=cfg, checkpoint=str(ck), batch_size=64),
                  x, y, audit, ArrayCache(tmp_path / "cache"))
    assert info["checkpoint_file"] == {"path": str(ck.resolve()), "sha256": hashlib.sha256(ck.read_bytes()).hexdigest()}
    assert info["embeddings"].startswith("computed, cached in")
