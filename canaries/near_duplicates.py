"""The ``near-duplicates`` generator: natural mislabeled near-duplicates (the misleading-evaluations
paper, SELENA section, Figure 11; its code embeds the images in its ``generate_selena_similarities``
notebook and matches them in its SELENA attack).

Every training-pool image is embedded and L2-normalized (:mod:`canaries.embedders`: an OpenCLIP
image encoder, the paper's ``ViT-SO400M-14-SigLIP-384`` / ``webli``; mean-centred pixels; or a
user's function). Each audit sample is matched to a distinct non-audit sample with a *different
label*: the matching that maximizes the total cosine similarity (``scipy.optimize.
linear_sum_assignment(maximize=True)``, as the paper's SELENA attack code; exact on a sparse graph
for large pools). That neighbour is the audit sample's natural
near-duplicate with another label, and every model trains on it. The canary is the audit sample
itself, with its own label: a member makes the model fit two near-identical images with different
labels (a memorization target), and the neighbour attacks query the neighbour instead, scored with
the canary's label: ``lira-neighbour`` queries SELENA's Split-AI ensemble there, as the paper
(``splitai_nn``), ``lira-neighbour-student`` the served model. The pairs are recorded most similar
first (``describe``).

Parameters (``audit.canary_params.near-duplicates.*``): ``embedder`` (``openclip``, default;
``pixels``; or ``path/to/file.py:function``), ``model`` and ``pretrained`` (the OpenCLIP model and
tag; ``pretrained: null`` for random weights), ``checkpoint`` (a local weights file instead of the
tag: giving ``pretrained`` too is refused), ``model_config`` (an OpenCLIP model config JSON),
``batch_size``, ``evaluate`` (the number of
pairs the ROC pools, the most similar first: the audit set is drawn at random, and only a close
neighbour of another label makes a sample vulnerable; default all, as the paper), ``cache``
(default true; false: the embeddings are computed again and the cached copy overwritten). An
unknown parameter is refused, naming these. The canaries do
not change any training set: what makes them canaries is the near-duplicate already in the data. A run never downloads
weights: a tag whose weights are not in the local cache stops the run before training, naming these
parameters.

The pool's embeddings are kept in the run store's cache (``<run.out>/.cache``) per dataset and
embedder (:func:`canaries.embedders.embedding_key`): for OpenCLIP, the model, tag, checkpoint
*content*, model config, open_clip and torch versions and device type. A user's function is keyed
by its file's path and **content only, that one file**: a change in a module it imports or in
weights it loads is not seen, and the old embeddings are reused. Set ``cache=false`` after such a
change (part of the run's configuration, as every canary parameter: that run has a directory of
its own), or delete the cache file that ``canary_info`` names under ``embeddings``. ``canary_info``
records a user function's absolute path and its file's SHA-256, a checkpoint's too. A user's
function must return one finite row of numbers per image, no zero row, and rows that vary: any
other output is refused, naming the embedder.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import numpy as np

from canaries.base import Canaries, CanaryContext, CanaryGenerator
from canaries.embedders import (DEFAULT_MODEL, DEFAULT_PRETRAINED, OpenClipEmbedder, checked_embeddings,
                                embedding_key, file_digest, load_function, pixel_embeddings)

#: a dense (canaries x candidates) assignment up to this many entries; beyond it, the same maximum
#: on a sparse graph of each canary's C best candidates (exact: see :func:`matched_neighbours`)
FULL_MATRIX = 5_000_000


class _Unset(enum.Enum):
    """The default of ``pretrained``: not given (the tag is then :data:`DEFAULT_PRETRAINED`, or
    none with a ``checkpoint``), told apart from a tag or ``null`` given beside a checkpoint."""

    UNSET = "unset"


UNSET = _Unset.UNSET


def matched_neighbours(audit: np.ndarray, candidates: np.ndarray, audit_y: np.ndarray, candidate_y: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """For L2-normalized embeddings of the audit samples (C, D) and the candidates (M, D): each audit
    sample's distinct candidate of a different label, by maximum total cosine similarity; returns
    (candidate position per audit sample (C,), its similarity (C,)).

    Up to :data:`FULL_MATRIX` entries, ``linear_sum_assignment`` on the dense matrix (as the paper's
    code). Beyond, the same maximum on a sparse bipartite graph that keeps each audit sample's C most
    similar candidates of another label (``min_weight_full_bipartite_matching`` on 2 - similarity).
    That loses no optimum: were a sample matched outside its C best in an optimal matching, one of
    those C would be free (the other C - 1 samples hold at most C - 1 of them), and moving it there
    would not lower the total."""
    from scipy.optimize import linear_sum_assignment

    c, m = len(audit), len(candidates)
    if m < c:
        raise ValueError(f"near-duplicates need at least as many non-audit samples as audit samples ({m} < {c})")
    sim = audit @ candidates.T  # (C, M) cosine similarities
    allowed = audit_y[:, None] != candidate_y[None, :]  # a near-duplicate with *another* label
    if not allowed.any(axis=1).all():
        raise ValueError("an audit sample has no non-audit sample of another label to pair with")
    too_few = ValueError("no matching pairs every audit sample with a distinct non-audit sample of another label "
                         "(too few candidates of other labels)")
    if c * m <= FULL_MATRIX:
        finite = np.where(allowed, sim, -np.inf)
        cost = np.where(allowed, sim, sim[allowed].min() - 1e6)  # a forbidden pair only where nothing else is left
        rows, picked = linear_sum_assignment(cost, maximize=True)
        if not np.isfinite(finite[rows, picked]).all():
            raise too_few
    else:
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import min_weight_full_bipartite_matching

        masked = np.where(allowed, sim, -np.inf)
        k = min(c, m)
        top = np.argpartition(-masked, k - 1, axis=1)[:, :k]  # each row's k best (forbidden ones sort last)
        r = np.repeat(np.arange(c), k)
        col = top.ravel()
        keep = allowed[r, col]
        graph = csr_matrix((2.0 - sim[r[keep], col[keep]].astype(np.float64), (r[keep], col[keep])), shape=(c, m))
        try:
            rows, picked = min_weight_full_bipartite_matching(graph)
        except ValueError:
            raise too_few from None
    match = np.empty(c, dtype=np.int64)
    match[rows] = picked
    return match, sim[np.arange(c), match]


class NearDuplicates(CanaryGenerator):
    name = "near-duplicates"
    description = "each audit sample paired with its most similar non-audit sample of another label (OpenCLIP)"
    provides_neighbours = True

    def __init__(self, embedder: str = "openclip", model: str = DEFAULT_MODEL,
                 pretrained: str | None | _Unset = UNSET, checkpoint: str | None = None,
                 model_config: str | None = None, batch_size: int = 256, evaluate: int | None = None,
                 cache: bool = True, **params: Any) -> None:
        super().__init__(**params)  # an unknown parameter: refused, naming the known ones
        if not isinstance(embedder, str) or not (embedder in ("openclip", "pixels") or ".py:" in embedder):
            raise ValueError(f"embedder must be openclip, pixels or path/to/file.py:function, got {embedder!r}")
        if embedder != "openclip":
            given = [n for n, v, d in (("model", model, DEFAULT_MODEL), ("pretrained", pretrained, UNSET),
                                       ("checkpoint", checkpoint, None), ("model_config", model_config, None)) if v != d]
            if given:
                verb = "apply" if len(given) > 1 else "applies"
                raise ValueError(f"{', '.join(given)} {verb} to the openclip embedder only (embedder is {embedder!r})")
        if checkpoint is not None and pretrained is not UNSET:
            raise ValueError(f"checkpoint and pretrained are both given ({checkpoint!r}, {pretrained!r}): the checkpoint "
                             "file is the weights, so give one of them (a tag, pretrained=null for random weights, or "
                             "checkpoint=PATH)")
        if checkpoint is not None and not Path(str(checkpoint)).expanduser().is_file():
            raise ValueError(f"checkpoint {checkpoint!r} (audit.canary_params.near-duplicates.checkpoint) is not a file")
        if ".py:" in embedder and not Path(embedder.rsplit(":", 1)[0]).expanduser().is_file():
            raise ValueError(f"embedder {embedder!r}: {embedder.rsplit(':', 1)[0]} is not a file")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if evaluate is not None and (not isinstance(evaluate, int) or isinstance(evaluate, bool) or evaluate < 1):
            raise ValueError(f"evaluate must be a positive number of pairs (or null: all), got {evaluate!r}")
        if not isinstance(cache, bool):
            raise ValueError(f"cache must be true or false, got {cache!r}")
        self.embedder, self.batch_size, self.evaluate, self.cache = embedder, batch_size, evaluate, cache
        tag = None if checkpoint is not None else DEFAULT_PRETRAINED if pretrained is UNSET else pretrained
        self.openclip = dict(model=model, pretrained=tag, checkpoint=checkpoint, model_config=model_config)
        self._info: dict[str, Any] = {}

    def _embed(self, pool: np.ndarray, ctx: CanaryContext) -> tuple[np.ndarray, str, str, dict[str, Any]]:
        """Embeddings of the whole training pool (cached per dataset and embedder unless ``cache`` is
        false: then computed again and the cached copy overwritten), where they came from, the
        embedder that made them and the files it was identified by (absolute path, SHA-256)."""
        if self.embedder == "pixels":
            return pixel_embeddings(pool), "computed (pixels)", "pixels", {}
        label = self.embedder
        files: dict[str, Any] = {}
        if self.embedder == "openclip":
            enc = OpenClipEmbedder(**self.openclip, batch_size=self.batch_size, device=ctx.device)
            spec: dict[str, Any] = enc.key()
            fn = enc
            weights = self.openclip["checkpoint"] or self.openclip["pretrained"] or "random weights"
            label = f"openclip {enc.model} / {weights}"
            who = f"{label!r}"
            if self.openclip["checkpoint"] is not None:
                ck = Path(str(self.openclip["checkpoint"])).expanduser().resolve()
                files["checkpoint_file"] = {"path": str(ck), "sha256": spec["checkpoint"]}  # the key's digest
        else:
            path_s, _, name = self.embedder.rpartition(":")
            source = Path(path_s).expanduser().resolve()
            digest = file_digest(str(source))
            spec = {"embedder": "function", "file": str(source), "function": name, "source": digest}
            files["embedder_file"] = {"path": str(source), "sha256": digest}
            fn = load_function(self.embedder)
            who = f"{self.embedder!r}"
        key = embedding_key(spec, ctx.data_fingerprint)
        if ctx.store is not None and self.cache:
            cached = ctx.store.load(key)
            if cached is not None and cached.shape[0] == len(pool):
                return cached, f"cached ({ctx.store.where(key)})", label, files
        if self.embedder == "openclip":
            features = fn(pool)  # a missing tag's weights: its error before any work
        else:
            try:
                features = fn(pool)
            except Exception as e:  # a user's function failing: one line naming it, not a traceback
                raise ValueError(f"embedder {who} raised {type(e).__name__}: {e}") from None
        emb = checked_embeddings(features, len(pool), who)
        how = "computed" if self.cache else "computed again (cache=false)"
        if ctx.store is not None:
            ctx.store.save(key, emb)
            how += f", cached in {ctx.store.where(key)}"
        return emb, how, label, files

    def apply(self, x: np.ndarray, y: np.ndarray, ctx: CanaryContext) -> Canaries:
        if ctx.pool_x is None or ctx.pool_y is None:
            raise ValueError("near-duplicates need the training pool (CanaryContext.pool_x / pool_y)")
        emb, how, label, files = self._embed(ctx.pool_x, ctx)
        audit = np.asarray(ctx.pool_indices)
        others = np.setdiff1d(np.arange(len(ctx.pool_y)), audit)
        match, sim = matched_neighbours(emb[audit], emb[others], ctx.pool_y[audit], ctx.pool_y[others])
        neighbour = others[match]  # pool index of each audit sample's near-duplicate
        order = np.argsort(-sim, kind="stable")  # the most similar pairs first
        self._info = {
            "embedder": label,
            **files,
            "embeddings": how,
            "similarity": {"max": float(sim.max()), "median": float(np.median(sim)), "min": float(sim.min())},
            "pairs_most_similar_first": [[int(audit[i]), int(neighbour[i]), round(float(sim[i]), 6)] for i in order[:20]],
        }
        evaluated = np.ones(len(y), dtype=bool)
        if self.evaluate is not None:  # only the most similar pairs: the natural near-duplicates
            if self.evaluate > len(y):
                raise ValueError(f"evaluate {self.evaluate} is larger than the audit size {len(y)}")
            evaluated[:] = False
            evaluated[order[: self.evaluate]] = True
            self._info["evaluated_min_similarity"] = float(sim[order[self.evaluate - 1]])
        return Canaries(x=x.copy(), y=y.copy(), evaluated=evaluated, neighbour_x=ctx.pool_x[neighbour].copy())

    def describe(self) -> dict[str, Any]:
        return dict(self._info)
