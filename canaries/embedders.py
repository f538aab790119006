"""Image embeddings for the ``near-duplicates`` canaries: uint8 images (N, C, H, W) -> L2-normalized
float32 features (N, D), so that a dot product is the cosine similarity.

- :func:`pixel_embeddings`: the mean-centred pixels of each image (no network, no weights);
- :class:`OpenClipEmbedder`: an OpenCLIP image encoder (the ``clip`` extra: ``open_clip_torch``),
  the paper's ``ViT-SO400M-14-SigLIP-384`` / ``webli`` by default. Weights come from open_clip's own
  caches (the Hugging Face hub cache, ``~/.cache/clip``) or a local checkpoint file only: a run never
  downloads, and a pretrained tag whose weights are not there is a ValueError naming the parameters
  that fix it, never a fallback to other weights. ``pretrained=None`` builds random weights (tests),
  drawn from torch seed :data:`RANDOM_WEIGHTS_SEED` so that they are the same on every run;
  ``model_config`` registers an OpenCLIP model config JSON (a custom architecture);
- a user's function ``path/to/file.py:function`` (:func:`load_function`); its output is checked by
  :func:`checked_embeddings` (numbers, one finite row per image, no zero row, not one row repeated),
  every error naming the embedder.

Cache keys (:func:`embedding_key`): an OpenCLIP embedder is identified by its model, tag, the
*content* (SHA-256) of a checkpoint file, its model config's content, the open_clip and torch
versions and the device type (CPU and CUDA embeddings differ in rounding). A user's function is
identified by its file's absolute path, the function's name and **that one file's content only**:
a change in a module it imports or in a file it reads (its weights) is not seen, and the cached
embeddings are reused. Recompute them with ``audit.canary_params.near-duplicates.cache=false``
(computed again and the cached copy overwritten) or by deleting the cache file (its path is in
the level's ``canary_info``, ``embeddings``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

DEFAULT_MODEL = "ViT-SO400M-14-SigLIP-384"
DEFAULT_PRETRAINED = "webli"
#: the torch seed of an OpenCLIP model's random weights (``pretrained=None``), so that its
#: embeddings, hence the canaries, are the same on every machine and run
RANDOM_WEIGHTS_SEED = 0


#: read size of a streamed file hash (a checkpoint can be gigabytes)
HASH_CHUNK = 1 << 20
#: a row whose norm is at most this is a zero row (its cosine similarity is undefined)
ZERO_NORM = 1e-30
#: rows that differ by at most this after normalization are the same direction
SAME_ROW = 1e-6
#: digests of files already hashed in this process, by (resolved path, size, mtime_ns)
_DIGESTS: dict[tuple[str, int, int], str] = {}


def normalized(features: np.ndarray) -> np.ndarray:
    """``features`` (N, D) as float32 rows of unit length (a zero row stays zero)."""
    f = np.asarray(features, dtype=np.float32)
    if f.ndim != 2 or not np.all(np.isfinite(f)):
        raise ValueError(f"an embedder must return finite features of shape (N, D), got shape {f.shape}")
    return f / np.maximum(np.linalg.norm(f, axis=1, keepdims=True), 1e-12)


def pixel_embeddings(images: np.ndarray) -> np.ndarray:
    """Each image's pixels in [0, 1] minus their mean, L2-normalized: cosine similarity in pixel space."""
    x = images.reshape(len(images), -1).astype(np.float32) / 255.0
    return normalized(x - x.mean(axis=1, keepdims=True))


def load_function(ref: str) -> Callable[[np.ndarray], np.ndarray]:
    """``path/to/file.py:function``, a feature function of uint8 images (N, C, H, W)."""
    from harness.core.registry import load_file_attribute

    fn = load_file_attribute(ref)
    if not callable(fn):
        raise ValueError(f"embedder {ref!r} is not a function")
    return fn


def checked_embeddings(features: Any, n: int, who: str) -> np.ndarray:
    """The output of embedder ``who`` (its name as errors show it) for ``n`` images, checked and
    L2-normalized: an array of numbers (N, D) with one finite row per image, no zero row (the cosine
    similarity is undefined there) and, for more than one image, not the same direction in every
    row (similarity 1 everywhere: no pair is nearer than another). Each failure is a ValueError of
    one line naming the embedder."""
    try:
        f = np.asarray(features, dtype=np.float32)
    except (TypeError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else ""
        raise ValueError(f"embedder {who} returned {type(features).__name__}, not an array of numbers "
                         f"({type(e).__name__}: {first})") from None
    if f.ndim != 2 or f.shape[1] < 1:
        raise ValueError(f"embedder {who} must return features of shape (N, D), got shape {f.shape}")
    if f.shape[0] != n:
        raise ValueError(f"embedder {who} returned {f.shape[0]} rows for {n} images")
    bad = np.flatnonzero(~np.isfinite(f).all(axis=1))
    if len(bad):
        raise ValueError(f"embedder {who} returned non-finite values (row {bad[0]} of {n}, "
                         f"{len(bad)} rows in all)")
    norms = np.linalg.norm(f.astype(np.float64), axis=1)
    zero = np.flatnonzero(norms <= ZERO_NORM)
    if len(zero):
        raise ValueError(f"embedder {who} returned a zero row (row {zero[0]} of {n}, {len(zero)} rows in all): "
                         "the cosine similarity is undefined there")
    emb = normalized(f)
    if n > 1 and np.abs(emb - emb[0]).max() <= SAME_ROW:
        raise ValueError(f"embedder {who} returned the same direction for all {n} images (similarity 1 "
                         "everywhere): its features do not vary")
    return emb


def _sha256_stream(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_digest(path: str) -> str:
    """SHA-256 of a small file (a plugin's source, a model config), read every time."""
    return _sha256_stream(Path(path).expanduser())


def content_digest(path: str) -> str:
    """SHA-256 of a possibly large file (a checkpoint), streamed in chunks of :data:`HASH_CHUNK` and
    hashed once per process: memoized by (resolved path, size, mtime_ns), so that one run does not
    read a checkpoint twice. Across processes the content is hashed again: a file swapped for
    another of the same size, with its mtime restored, is seen."""
    p = Path(path).expanduser().resolve()
    st = p.stat()
    memo = (str(p), st.st_size, st.st_mtime_ns)
    if memo not in _DIGESTS:
        _DIGESTS[memo] = _sha256_stream(p)
    return _DIGESTS[memo]


class OpenClipEmbedder:
    """An OpenCLIP image encoder (module docstring). ``checkpoint`` (a local file) replaces the
    ``pretrained`` tag; ``model_config`` is an OpenCLIP model config JSON file (the model is then
    named by its file stem unless ``model`` names another one it defines)."""

    def __init__(self, model: str = DEFAULT_MODEL, pretrained: str | None = DEFAULT_PRETRAINED,
                 checkpoint: str | None = None, model_config: str | None = None, batch_size: int = 256,
                 device: str = "cpu") -> None:
        try:
            import open_clip
        except ImportError:
            raise ValueError("embedder openclip needs open_clip_torch, which is not installed: pip install -e "
                             "\".[clip]\" (or set audit.canary_params.near-duplicates.embedder=pixels)") from None
        self.open_clip = open_clip
        if model_config is not None:
            cfg_path = Path(model_config).expanduser()
            if not cfg_path.is_file():
                raise ValueError(f"model_config {model_config!r} is not a file")
            open_clip.add_model_config(cfg_path)
            if model == DEFAULT_MODEL:
                model = cfg_path.stem
        if model not in open_clip.list_models():
            raise ValueError(f"model {model!r} is not an OpenCLIP model (open_clip.list_models(); or give "
                             "model_config=PATH)")
        self.model, self.pretrained, self.checkpoint, self.model_config = model, pretrained, checkpoint, model_config
        self.batch_size, self.device = batch_size, device

    def key(self) -> dict[str, Any]:
        """What identifies these embeddings (for the run store's cache): the model, the tag, the
        checkpoint's content (:func:`content_digest`), the model config's content, the open_clip and
        torch versions (random weights and numerics change between them) and the device type (CPU
        and CUDA embeddings differ in rounding)."""
        import torch

        ck = Path(self.checkpoint).expanduser() if self.checkpoint else None
        return {"embedder": "openclip", "model": self.model, "pretrained": None if ck else self.pretrained,
                "checkpoint": (content_digest(str(ck)) if ck.is_file() else str(ck)) if ck else None,
                "model_config": file_digest(self.model_config) if self.model_config else None,
                "open_clip": str(getattr(self.open_clip, "__version__", "unknown")),
                "torch": str(torch.__version__),
                "device": torch.device(str(self.device)).type}

    def weights(self) -> tuple[str | None, dict[str, Any]]:
        """(the local weights file, or None for random weights; the tag's preprocessing config)."""
        if self.checkpoint is not None:
            ck = Path(self.checkpoint).expanduser()
            if not ck.is_file():
                raise ValueError(f"checkpoint {self.checkpoint!r} (audit.canary_params.near-duplicates.checkpoint) "
                                 "is not a file")
            return str(ck), {}
        if self.pretrained is None:
            return None, {}
        cfg = self.open_clip.get_pretrained_cfg(self.model, self.pretrained)
        if not cfg:
            tags = self.open_clip.list_pretrained_tags_by_model(self.model)
            raise ValueError(f"pretrained {self.pretrained!r} is not a tag of OpenCLIP model {self.model!r} (its tags: "
                             f"{', '.join(tags) or 'none'})")
        found = cached_weights(cfg)
        if found is None:
            where = cfg.get("hf_hub") or cfg.get("url")
            raise ValueError(
                f"the weights of OpenCLIP {self.model} / {self.pretrained} ({where}) are not in the local caches "
                "(Hugging Face hub cache, ~/.cache/clip), and a run never downloads: fetch them once with "
                f"`python -c \"import open_clip; open_clip.create_model('{self.model}', pretrained='{self.pretrained}')\"` "
                "on a machine with network access, or give audit.canary_params.near-duplicates.checkpoint=PATH "
                "(a local weights file), or pretrained=null for random weights, or embedder=pixels")
        return found, cfg

    def __call__(self, images: np.ndarray) -> np.ndarray:
        import torch
        import torch.nn.functional as F

        path, cfg = self.weights()
        try:
            with torch.random.fork_rng(devices=[]):  # random weights (pretrained=None) are the same on every run
                torch.manual_seed(RANDOM_WEIGHTS_SEED)
                net = self.open_clip.create_model(self.model, pretrained=path, device=self.device)
        except Exception as e:  # a damaged or foreign checkpoint
            raise ValueError(f"OpenCLIP {self.model} could not load its weights from {path}: "
                             f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
        net.eval()
        pre = {**(getattr(net.visual, "preprocess_cfg", None) or {}), **{k: v for k, v in cfg.items() if k in ("mean", "std")}}
        size = getattr(net.visual, "image_size", (224, 224))
        size = (size, size) if isinstance(size, int) else tuple(size)
        mean = torch.tensor(pre.get("mean", (0.48145466, 0.4578275, 0.40821073)), device=self.device).view(1, 3, 1, 1)
        std = torch.tensor(pre.get("std", (0.26862954, 0.26130258, 0.27577711)), device=self.device).view(1, 3, 1, 1)
        out = []
        with torch.no_grad():
            for i in range(0, len(images), self.batch_size):
                x = torch.from_numpy(np.ascontiguousarray(images[i : i + self.batch_size])).to(self.device).float() / 255
                if x.shape[1] == 1:  # grey images: the encoders take RGB
                    x = x.repeat(1, 3, 1, 1)
                x = F.interpolate(x, size=size, mode="bicubic", align_corners=False, antialias=True).clamp(0, 1)
                out.append(net.encode_image((x - mean) / std).float().cpu().numpy())
        return normalized(np.concatenate(out))


def cached_weights(cfg: dict[str, Any]) -> str | None:
    """The local file of a pretrained config's weights in open_clip's caches, or None (no network)."""
    hub = cfg.get("hf_hub", "")
    if hub:
        from huggingface_hub import try_to_load_from_cache

        repo, filename = hub.rstrip("/").rsplit("/", 1) if not hub.endswith("/") else (hub.rstrip("/"), "")
        names = [filename] if filename else []
        names += ["open_clip_model.safetensors", "open_clip_pytorch_model.bin"]
        for name in dict.fromkeys(n for n in names if n):
            found = try_to_load_from_cache(repo, name)
            if isinstance(found, str) and Path(found).is_file():
                return found
    url = cfg.get("url", "")
    if url:
        local = Path("~/.cache/clip").expanduser() / Path(url).name
        if local.is_file():
            return str(local)
    return None


def embedding_key(spec: dict[str, Any], data_fingerprint: str) -> str:
    """The cache key of a pool's embeddings: the embedder's identity and the dataset's fingerprint."""
    return hashlib.sha256(json.dumps({"embedder": spec, "data": data_fingerprint, "format": 1},
                                     sort_keys=True).encode()).hexdigest()[:32]
