"""Audit design of the paper (Aerni et al. 2024, section 5.2).

C audit samples are drawn from the training pool with a seeded RNG; every other training sample is
in the training set of every model; the membership matrix (S x C, bool) puts each audit sample in
exactly S/2 of the S models. As in the paper's code, membership is drawn for the whole pool and the
audit set is a prefix of one permutation, so changing C does not change the membership of a given
sample, and changing S does not change which samples are audited.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.config import ConfigError


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


def make_design(pool_size: int, audit_size: int, num_models: int, seed: int) -> AuditDesign:
    """Draw the audit samples and a balanced membership matrix from ``seed`` alone.

    Membership: for every pool sample, draw S uniforms and mark the S/2 models with the smallest
    ones as IN (``argsort(U, axis=0)[:S/2]``), which makes every column sum to exactly S/2.
    """
    if num_models % 2 or num_models < 2:
        raise ConfigError(f"the number of models must be even, got {num_models}")
    if not 0 < audit_size <= pool_size:
        raise ConfigError(f"audit size {audit_size} must be between 1 and the training pool size {pool_size}")
    rng_audit, rng_member = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    order = rng_audit.permutation(pool_size)
    audit = order[:audit_size].astype(np.int64)
    u = rng_member.uniform(size=(num_models, pool_size))
    ranks = np.argsort(np.argsort(u, axis=0, kind="stable"), axis=0, kind="stable")
    member_all = ranks < num_models // 2
    return AuditDesign(audit_indices=audit, membership=member_all[:, audit].copy())
