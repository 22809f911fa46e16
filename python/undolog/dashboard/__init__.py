"""The UndoLog dashboard (``undolog dashboard``; extra ``undolog[dashboard]``): people log
in with their own PostgreSQL login, and the engine's roles and row-level security decide
what they see and may do. See docs/dashboard.md."""

from undolog.dashboard.app import create_app

__all__ = ["create_app"]
