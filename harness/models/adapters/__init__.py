"""Adapters that give foreign models the feature contract (harness.models.feature_backbone)."""
