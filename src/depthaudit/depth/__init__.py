"""Depth sufficiency (SPEC §4): activation-gradient signal, growth value, function-preserving insertion."""

from .growth import activation_gradients, growth_value, mlp_features
from .insert import insert_zero_block

__all__ = ["activation_gradients", "growth_value", "mlp_features", "insert_zero_block"]
