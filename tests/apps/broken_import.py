"""An application module that fails while being imported (the CLI must exit with code 3)."""

raise RuntimeError("apps.broken_import fails on import on purpose")
