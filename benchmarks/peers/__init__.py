"""Tiny launchers for peer servers that have no command-line interface."""
