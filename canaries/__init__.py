"""Canary generators: rewrite the audit samples into the most vulnerable samples a defense must protect."""

from canaries.base import Canaries, CanaryGenerator

__all__ = ["Canaries", "CanaryGenerator"]
