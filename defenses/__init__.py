"""Defenses: each trains on a dataset and returns a model that answers the threat model's queries."""

from defenses.base import Defense, FitContext, LabeledImages, ServedModel, TorchClassifier

__all__ = ["Defense", "FitContext", "LabeledImages", "ServedModel", "TorchClassifier"]
