"""Experiments built on the runner: the audit (and later ladder, saturation, growth)."""
