"""Reporting: report cards (terminal, Markdown), figures, and the report.json schema."""

from .card import audit_markdown, audit_terminal, fmt_ms

__all__ = ["audit_markdown", "audit_terminal", "fmt_ms"]
