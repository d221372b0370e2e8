"""The package version (one place: the API, the explorer page and the wheel read it)."""

__version__ = "0.1.0"
