"""Features of a fixed transform, computed once per input and kept: in memory and on disk.

A fixed, data-independent feature map (the scattering transform of the ``cifar10-scatter`` preset,
:mod:`harness.core.scattering`) costs far more than the head trained on it, and every model of a run
(and every run on the same data) asks for the features of the same images. :class:`FeatureCache`
wraps the map ``fn`` and keys each input row by its content: a BLAKE2b digest of its dtype, shape and
bytes. A row seen before is read back; only new rows are computed (in one call), so the cache can
never return another input's features, whatever order or batch the rows come in.

A whole batch seen before (a run queries every model with the same views of the same images) is
answered without hashing its rows: a batch is looked up by a fingerprint of a strided subset of its
bytes and then compared with the stored batch in full (``np.array_equal``), so a fingerprint match
with other content falls through to the rows. Its features are returned without a copy, shared by
every caller: callers must not modify them in place. A batch is memoized when it is seen the second
time (a model's own training set, asked for once, would otherwise take the room of the queries that
every model repeats); batches are kept up to ``memory_rows`` rows in all, and the rows they hold are
not stored twice.

On disk (``root``, one folder per :func:`cache_key`: the transform's name and parameters, the
library versions and the device type, since CPU and GPU round differently) each computed batch is
one shard: ``<digest-of-its-keys>.keys.npy`` (n x 16 bytes) and ``.values.npy`` (n x D float32),
written atomically, read with memory mapping. Another process of the same run (an executor's
worker) sees the shards the first one wrote. A shard that cannot be read, or whose arrays disagree,
is skipped (its rows are computed again and written anew). A change of transform parameters or
versions is a new folder: a stale entry is never read.

Inputs that carry gradients (a defense optimizing its inputs through the map) or that a transform
such as ``torch.func.vmap`` batches are passed to ``fn`` directly, uncached.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

#: bytes of a row's digest (BLAKE2b-128: a collision among the rows of any dataset is beyond reach)
DIGEST_BYTES = 16
#: fingerprints of batches seen once that are remembered (beyond it, forgotten all at once)
SEEN_ONCE_LIMIT = 100_000
#: a batch's fingerprint reads every FINGERPRINT_STRIDE-th value of each row (the full comparison follows)
FINGERPRINT_STRIDE = 61


def cache_key(params: dict[str, Any]) -> str:
    """The folder name of one transform's features: a digest of its (JSON) parameters."""
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:24]


def batch_fingerprint(x: np.ndarray) -> bytes:
    """A cheap key of a whole batch: its dtype, shape and every :data:`FINGERPRINT_STRIDE`-th value of
    each row (not a proof of equality: a hit is compared in full)."""
    flat = x.reshape(len(x), -1) if x.ndim else x.reshape(1, 1)
    sub = np.ascontiguousarray(flat[:, ::FINGERPRINT_STRIDE])
    return hashlib.blake2b(repr((x.dtype.str, x.shape)).encode() + sub.tobytes(), digest_size=DIGEST_BYTES).digest()


def row_digests(x: np.ndarray) -> list[bytes]:
    """One digest per row of ``x`` (first axis): the row's dtype, shape and bytes."""
    x = np.ascontiguousarray(x)
    head = repr((x.dtype.str, x.shape[1:])).encode()
    return [hashlib.blake2b(head + row.tobytes(), digest_size=DIGEST_BYTES).digest() for row in x]


class FeatureCache:
    """``fn`` (float tensors (N, ...) -> (N, ...)) memoized by input content; see the module docstring.

    ``root``: the disk folder (None: memory only); ``params``: what identifies ``fn`` (its
    :func:`cache_key`); ``memory_rows``: the most rows kept in memory (beyond it, rows come from disk
    or are computed again: augmented or synthetic inputs never repeat, and must not fill memory)."""

    def __init__(self, fn: Callable[[Any], Any], params: dict[str, Any], root: Path | None = None,
                 memory_rows: int = 20_000) -> None:
        self.fn = fn
        self.params = dict(params)
        self.folder = Path(root) / cache_key(self.params) if root is not None else None
        self.memory_rows = memory_rows
        self._memory: dict[bytes, np.ndarray] = {}
        self._disk: dict[bytes, tuple[int, int]] = {}  # digest -> (shard, row)
        self._shards: list[np.ndarray] = []  # memory-mapped values, one per shard read
        self._seen_files: set[str] = set()
        self._batches: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}  # fingerprint -> (inputs, features)
        self._batch_rows = 0
        self._seen_once: set[bytes] = set()  # fingerprints of batches seen once (memoized when seen again)
        #: rows computed / read from memory / read from disk, for tests and the run's record
        self.counts = {"computed": 0, "memory": 0, "disk": 0}

    def __call__(self, x: Any) -> Any:
        import torch

        if x.requires_grad or _is_functorch_wrapped(x):
            return self.fn(x)
        arr = np.ascontiguousarray(x.detach().cpu().numpy())
        fp = batch_fingerprint(arr)
        seen = self._batches.get(fp)
        if seen is not None and seen[0].shape == arr.shape and np.array_equal(seen[0], arr):
            self.counts["memory"] += len(arr)
            return torch.from_numpy(seen[1]).to(x.device)
        keys = row_digests(arr)
        found: dict[int, np.ndarray] = {}
        missing: list[int] = []
        for i, k in enumerate(keys):
            v = self._memory.get(k)
            if v is not None:
                found[i] = v
                self.counts["memory"] += 1
            else:
                missing.append(i)
        if missing and self.folder is not None:
            missing = self._from_disk(keys, missing, found)
        if missing:
            computed = self.fn(x[missing]).detach().cpu().numpy().astype(np.float32, copy=False)
            self.counts["computed"] += len(missing)
            for j, i in enumerate(missing):
                found[i] = computed[j]
                self._remember(keys[i], computed[j])
            if self.folder is not None:
                self._write_shard([keys[i] for i in missing], computed)
        out = np.stack([found[i] for i in range(len(keys))]) if keys else np.zeros((0,), np.float32)
        if fp not in self._seen_once:  # a batch seen once (a model's own training set) is not memoized
            if len(self._seen_once) >= SEEN_ONCE_LIMIT:
                self._seen_once.clear()
            self._seen_once.add(fp)
        elif keys and self._batch_rows + len(keys) <= self.memory_rows:
            self._batches[fp] = (arr.copy(), out)
            self._batch_rows += len(keys)
            for i, k in enumerate(keys):  # the memory's rows become views of the batch's: one copy kept
                if k in self._memory:
                    self._memory[k] = out[i]
        return torch.from_numpy(out).to(x.device)

    def missing(self, x: Any) -> list[int]:
        """The rows of ``x`` (a tensor or array) this cache holds neither in memory nor on disk."""
        arr = x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
        keys = row_digests(arr)
        out = [i for i, k in enumerate(keys) if k not in self._memory]
        if out and self.folder is not None:
            if any(keys[i] not in self._disk for i in out):
                self._scan()
            out = [i for i in out if keys[i] not in self._disk]
        return out

    # -- memory ----------------------------------------------------------------------------------

    def _remember(self, key: bytes, value: np.ndarray) -> None:
        if len(self._memory) < self.memory_rows:
            self._memory[key] = value

    # -- disk ------------------------------------------------------------------------------------

    def _from_disk(self, keys: list[bytes], missing: list[int], found: dict[int, np.ndarray]) -> list[int]:
        if any(keys[i] not in self._disk for i in missing):
            self._scan()  # another process may have written the rows since the last look
        still = []
        for i in missing:
            where = self._disk.get(keys[i])
            if where is None:
                still.append(i)
                continue
            value = np.array(self._shards[where[0]][where[1]])
            found[i] = value
            self._remember(keys[i], value)
            self.counts["disk"] += 1
        return still

    def _scan(self) -> None:
        if self.folder is None or not self.folder.is_dir():
            return
        for kf in sorted(self.folder.glob("*.keys.npy")):
            if kf.name in self._seen_files:
                continue
            vf = kf.with_name(kf.name[: -len(".keys.npy")] + ".values.npy")
            try:
                k = np.load(kf, allow_pickle=False)
                v = np.load(vf, mmap_mode="r", allow_pickle=False)
                if k.ndim != 2 or k.shape[1] != DIGEST_BYTES or k.dtype != np.uint8 or len(v) != len(k):
                    continue  # not a shard of ours: skipped, its rows computed again
            except (OSError, ValueError):
                continue  # unreadable (a damaged file): skipped, its rows computed again
            self._seen_files.add(kf.name)
            self._shards.append(v)
            s = len(self._shards) - 1
            for r, row in enumerate(k):
                self._disk.setdefault(row.tobytes(), (s, r))

    def _write_shard(self, keys: list[bytes], values: np.ndarray) -> None:
        import io

        from harness.core.atomic import atomic_write_bytes

        assert self.folder is not None
        self.folder.mkdir(parents=True, exist_ok=True)
        params_file = self.folder / "params.json"
        if not params_file.is_file():
            atomic_write_bytes(params_file, (json.dumps(self.params, sort_keys=True, indent=1) + "\n").encode())
        k = np.frombuffer(b"".join(keys), np.uint8).reshape(len(keys), DIGEST_BYTES)
        name = hashlib.sha256(k.tobytes()).hexdigest()[:24]
        for suffix, arr in ((".values.npy", values), (".keys.npy", k)):  # keys last: a shard is whole once they exist
            buf = io.BytesIO()
            np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
            atomic_write_bytes(self.folder / (name + suffix), buf.getvalue())


def _is_functorch_wrapped(x: Any) -> bool:
    """Whether ``x`` is a tensor that torch.func transforms wrap (vmap's batched, grad's tracked)."""
    try:
        from torch._C._functorch import is_batchedtensor, is_gradtrackingtensor
    except ImportError:  # pragma: no cover - older torch
        return False
    return bool(is_batchedtensor(x) or is_gradtrackingtensor(x))
