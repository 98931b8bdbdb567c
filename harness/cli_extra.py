"""Subcommands that belong to other modules (kept here so the core CLI stays small)."""
