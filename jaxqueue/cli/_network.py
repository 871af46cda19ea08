"""Command-line family (filled in by the module that owns it)."""


def register(top, group) -> None:
    """Add this family's sub-commands (none yet)."""
