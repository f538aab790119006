"""The feature cache (harness/core/feature_cache.py): a row's features come from its own content,
computed once, read back from memory or from another instance's disk shards; another transform's
parameters (a stale key) or a damaged shard are never read."""

from __future__ import annotations

import numpy as np
import torch

from harness.core.feature_cache import FeatureCache, cache_key


class Counting:
    """A deterministic feature map that counts the rows it computes: x -> (sum, max, 2 x[0])."""

    def __init__(self, scale: float = 1.0) -> None:
        self.rows = 0
        self.scale = scale

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += len(x)
        flat = x.reshape(len(x), -1)
        return self.scale * torch.stack([flat.sum(1), flat.amax(1), 2 * flat[:, 0]], 1)


def _images(n: int, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).normal(size=(n, 3, 4, 4)).astype(np.float32))


def test_each_row_is_computed_once_and_read_back_in_any_order_and_batch():
    fn = Counting()
    cache = FeatureCache(fn, {"map": "counting"})
    x = _images(10)
    first = cache(x)
    assert fn.rows == 10 and torch.equal(first, fn(x))
    fn.rows = 0
    perm = torch.tensor([3, 9, 0, 0, 5])
    again = cache(x[perm])
    assert fn.rows == 0 and torch.equal(again, first[perm])  # memory hits, in the order asked
    mixed = torch.cat([x[:2], _images(3, seed=1)])
    out = cache(mixed)
    assert fn.rows == 3 and torch.equal(out[:2], first[:2]) and torch.equal(out[2:], Counting()(mixed[2:]))
    assert cache.counts == {"computed": 13, "memory": 7, "disk": 0}


def test_a_second_instance_reads_the_first_ones_shards_from_disk(tmp_path):
    """Another process (an executor's worker) sharing the folder computes nothing the first did."""
    x = _images(12)
    a = FeatureCache(Counting(), {"map": "counting"}, tmp_path)
    fa = a(x)
    fn_b = Counting()
    b = FeatureCache(fn_b, {"map": "counting"}, tmp_path)
    fb = b(x[[11, 4, 4, 0]])
    assert fn_b.rows == 0 and b.counts["disk"] == 4 and torch.equal(fb, fa[[11, 4, 4, 0]])
    assert (tmp_path / cache_key({"map": "counting"}) / "params.json").is_file()


def test_a_stale_key_is_never_read(tmp_path):
    """Features cached for other parameters (a changed transform) live in another folder: the new
    map computes every row, and its values are its own."""
    x = _images(5)
    FeatureCache(Counting(), {"map": "counting", "J": 2}, tmp_path)(x)
    fn = Counting(scale=3.0)
    new = FeatureCache(fn, {"map": "counting", "J": 3}, tmp_path)
    out = new(x)
    assert fn.rows == 5 and new.counts["disk"] == 0
    assert torch.allclose(out, 3.0 * Counting()(x))


def test_a_damaged_shard_is_skipped_and_its_rows_computed_again(tmp_path):
    x = _images(6)
    FeatureCache(Counting(), {"map": "counting"}, tmp_path)(x)
    folder = tmp_path / cache_key({"map": "counting"})
    (values,) = folder.glob("*.values.npy")
    values.write_bytes(b"not a numpy file")
    fn = Counting()
    again = FeatureCache(fn, {"map": "counting"}, tmp_path)(x)
    assert fn.rows == 6 and torch.equal(again, Counting()(x))
    fn2 = Counting()
    assert torch.equal(FeatureCache(fn2, {"map": "counting"}, tmp_path)(x), again) and fn2.rows == 0  # rewritten


def test_equal_values_in_another_dtype_or_shape_are_other_inputs():
    fn = Counting()
    cache = FeatureCache(fn, {"map": "counting"})
    x = _images(2)
    cache(x)
    cache(x.reshape(2, 3, 16, 1))
    assert fn.rows == 4


def test_inputs_with_gradients_bypass_the_cache():
    """A defense optimizing its inputs through the map (DFKD's synthesis) gets gradients, uncached."""
    fn = Counting()
    cache = FeatureCache(fn, {"map": "counting"})
    x = _images(3).requires_grad_()
    cache(x).sum().backward()
    assert x.grad is not None and cache.counts["computed"] == 0 and fn.rows == 3


def test_memory_is_bounded(tmp_path):
    cache = FeatureCache(Counting(), {"map": "counting"}, memory_rows=4)
    cache(_images(10))
    assert len(cache._memory) == 4


def test_a_repeated_batch_is_answered_whole_and_a_fingerprint_twin_is_not():
    """A batch seen before (every model's queries) is answered from the batch memo, values equal to
    the rows'; a batch whose fingerprint matches but whose content differs (a value the fingerprint's
    stride skips) gets its own features, never the memoized ones."""
    import harness.core.feature_cache as fc

    fn = Counting()
    cache = FeatureCache(fn, {"map": "counting"})
    x = _images(6)
    first = cache(x)
    assert fc.batch_fingerprint(x.numpy()) not in cache._batches  # seen once: not memoized yet
    again = cache(x.clone())
    assert fc.batch_fingerprint(x.numpy()) in cache._batches  # seen twice: memoized
    assert fn.rows == 6 and torch.equal(again, first) and cache.counts["memory"] == 6
    real_digests = fc.row_digests
    fc.row_digests = lambda arr: (_ for _ in ()).throw(AssertionError("rows hashed for a memoized batch"))
    try:
        assert torch.equal(cache(x.clone()), first) and cache.counts["memory"] == 12
    finally:
        fc.row_digests = real_digests
    twin = x.clone()
    twin[2, 0, 0, 1] += 1.0  # flat index 1: not among the fingerprint's values (0, 61, ...)
    assert fc.batch_fingerprint(twin.numpy()) == fc.batch_fingerprint(x.numpy())
    out = cache(twin)
    assert fn.rows == 7 and torch.equal(out, Counting()(twin))
    assert not torch.equal(out[2], first[2]) and torch.equal(out[[0, 1, 3, 4, 5]], first[[0, 1, 3, 4, 5]])


def test_batches_are_kept_within_the_memory_budget():
    """The batch memo holds at most ``memory_rows`` rows; past it, batches go through the rows."""
    fn = Counting()
    cache = FeatureCache(fn, {"map": "counting"}, memory_rows=8)
    a, b = _images(5, seed=1), _images(5, seed=2)
    cache(a), cache(a)
    cache(b), cache(b)  # 10 rows > 8: not memoized as a batch
    assert len(cache._batches) == 1 and cache._batch_rows == 5
    assert torch.equal(cache(b), Counting()(b))


def test_a_batch_asked_for_once_leaves_the_memo_to_repeated_ones():
    """A model's own training set (asked for once) does not take the room of the queries every
    model repeats: with room for 8 rows, a 5-row batch seen once and then a 5-row batch seen twice,
    the repeated one is memoized."""
    import harness.core.feature_cache as fc

    cache = FeatureCache(Counting(), {"map": "counting"}, memory_rows=8)
    own, queries = _images(5, seed=1), _images(5, seed=2)
    cache(own)
    cache(queries), cache(queries)
    assert list(cache._batches) == [fc.batch_fingerprint(queries.numpy())] and cache._batch_rows == 5
