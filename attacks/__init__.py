"""Membership-inference attacks that score saved signals (no retraining)."""

from attacks.base import Attack, AttackInput

__all__ = ["Attack", "AttackInput"]
