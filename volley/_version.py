"""The package version, in a module of its own so that checkpoints can record it without
importing the package's public names (and with them every layer)."""

__version__ = "0.1.0"
