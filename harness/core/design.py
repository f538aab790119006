"""Audit design of the paper (Aerni et al. 2024, section 5.2).

C audit samples are drawn from the training pool with a seeded RNG; every other training sample is
in the training set of every model; the membership matrix (S x C, bool) puts each audit sample in
exactly S/2 of the S models. As in the paper's code, membership is drawn for the whole pool and the
audit set is a prefix of one permutation, so changing C does not change the membership of a given
sample, and changing S does not change which samples are audited.

Two RNG trees produce the design (``audit.rng``):

- ``harness`` (default): ``SeedSequence(seed).spawn(2)`` gives one stream for the audit order and
  one for membership; each canary generator has its own stream.
- ``paper``: the paper code's tree (protocol notes §1.3), spawn calls in its order, so seed 0 with
  a 50 000-sample pool, 64 models and 500 canaries gives the paper's canaries, membership, label
  changes and blank colours exactly (:func:`paper_rng_tree`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.core.errors import ConfigError

RNG_MODES = ("harness", "paper")


@dataclass(frozen=True)
class PaperDraws:
    """The paper code's per-sample random draws for the C audit samples (protocol notes §1.3),
    taken at the samples' pool indices from the whole-pool arrays:

    - ``label_offsets`` (C,) in 0..K-2: ``label_changes``; the wrong label is ``r if r < y else r + 1``;
    - ``colors`` (C, 3) uint8: the blank canaries' RGB colours;
    - ``blank_labels`` (C,) in 0..K-1: the blank canaries' labels.
    """

    label_offsets: np.ndarray
    colors: np.ndarray
    blank_labels: np.ndarray


@dataclass(frozen=True)
class AuditDesign:
    """Which pool indices are audited and which models each audit sample is a member of."""

    audit_indices: np.ndarray  # (C,) int64 indices into the training pool, in draw order
    membership: np.ndarray  # (S, C) bool; every column has exactly S/2 True

    @property
    def num_models(self) -> int:
        return int(self.membership.shape[0])

    @property
    def audit_size(self) -> int:
        return int(self.membership.shape[1])

    def non_audit_indices(self, pool_size: int) -> np.ndarray:
        """Indices of the samples that are in every model's training set."""
        keep = np.ones(pool_size, dtype=bool)
        keep[self.audit_indices] = False
        return np.flatnonzero(keep)


def balanced_membership(u: np.ndarray) -> np.ndarray:
    """(S, N) bool from uniforms ``u`` (S, N): for every sample, the S/2 models with the smallest
    draws are IN (the paper's ``argsort(U, axis=0)[:S/2]``), so every column sums to exactly S/2."""
    s = u.shape[0]
    ranks = np.argsort(np.argsort(u, axis=0, kind="stable"), axis=0, kind="stable")
    return ranks < s // 2


@dataclass(frozen=True)
class PaperRngTree:
    """The whole-pool arrays of the paper code's ``DatasetGenerator`` (protocol notes §1.3)."""

    canary_order: np.ndarray  # (N,) permutation of the pool; the audit set is its prefix
    membership: np.ndarray  # (S, N) bool, exactly S/2 per sample
    label_changes: np.ndarray  # (N,) in 0..K-2
    colors: np.ndarray  # (N, 3) uint8
    blank_labels: np.ndarray  # (N,) in 0..K-1

    def draws(self, indices: np.ndarray) -> PaperDraws:
        """The per-sample draws of the pool samples ``indices`` (in that order)."""
        return PaperDraws(label_offsets=self.label_changes[indices], colors=self.colors[indices],
                          blank_labels=self.blank_labels[indices])


def paper_rng_tree(seed: int, pool_size: int, num_models: int, num_classes: int) -> PaperRngTree:
    """The paper code's RNG tree, spawn for spawn (protocol notes §1.3)::

        rng = default_rng(seed); _, rng_shadow, rng = rng.spawn(3)
        U = rng_shadow.uniform(size=(M, N))                 -> membership
        rng_can, rng = rng.spawn(2); canary_order = rng_can.permutation(N)
        rng_ct, rng = rng.spawn(2)
          rng_noise, rng_ct = rng_ct.spawn(2); label_changes = rng_noise.integers(K - 1, size=N)
          rng_blank, rng_ct = rng_ct.spawn(2); colors = rng_blank.integers(0, 256, (N, 3, 1, 1), uint8)
                                               blank_labels = rng_blank.integers(0, K, N)

    (K = 10 in the paper: ``integers(9)`` and ``integers(0, 10)``.) The "target" child and the
    poison streams are drawn by the paper but unused here.
    """
    root = np.random.default_rng(seed)
    _, rng_shadow, rng = root.spawn(3)
    u = rng_shadow.uniform(size=(num_models, pool_size))
    membership = balanced_membership(u)
    rng_can, rng = rng.spawn(2)
    canary_order = rng_can.permutation(pool_size)
    rng_ct, rng = rng.spawn(2)
    rng_noise, rng_ct = rng_ct.spawn(2)
    label_changes = rng_noise.integers(num_classes - 1, size=pool_size)
    rng_blank, rng_ct = rng_ct.spawn(2)
    colors = rng_blank.integers(0, 256, (pool_size, 3, 1, 1), dtype=np.uint8)
    blank_labels = rng_blank.integers(0, num_classes, pool_size)
    return PaperRngTree(canary_order=canary_order.astype(np.int64), membership=membership,
                        label_changes=label_changes.astype(np.int64), colors=colors[:, :, 0, 0].copy(),
                        blank_labels=blank_labels.astype(np.int64))


def design_from_tree(tree: PaperRngTree, audit_size: int) -> AuditDesign:
    """The paper's design: the audit set is ``canary_order[:C]`` in permutation order (not sorted)."""
    audit = tree.canary_order[:audit_size]
    return AuditDesign(audit_indices=audit, membership=tree.membership[:, audit].copy())


def make_design(pool_size: int, audit_size: int, num_models: int, seed: int, rng: str = "harness",
                num_classes: int = 10) -> AuditDesign:
    """Draw the audit samples and a balanced membership matrix from ``seed`` alone.

    Membership: for every pool sample, draw S uniforms and mark the S/2 models with the smallest
    ones as IN (``argsort(U, axis=0)[:S/2]``), which makes every column sum to exactly S/2.
    ``rng`` picks the RNG tree (module docstring).
    """
    if num_models % 2 or num_models < 2:
        raise ConfigError(f"the number of models must be even, got {num_models}")
    if not 0 < audit_size <= pool_size:
        raise ConfigError(f"audit size {audit_size} must be between 1 and the training pool size {pool_size}")
    if rng == "paper":
        return design_from_tree(paper_rng_tree(seed, pool_size, num_models, num_classes), audit_size)
    if rng != "harness":
        raise ConfigError(f"audit.rng must be one of {', '.join(RNG_MODES)}, got {rng!r}")
    rng_audit, rng_member = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    order = rng_audit.permutation(pool_size)
    audit = order[:audit_size].astype(np.int64)
    member_all = balanced_membership(rng_member.uniform(size=(num_models, pool_size)))
    return AuditDesign(audit_indices=audit, membership=member_all[:, audit].copy())
