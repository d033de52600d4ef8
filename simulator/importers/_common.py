"""What every importer shares: the error type and the positive-integer check."""

from __future__ import annotations


class ConfigImportError(ValueError):
    """A configuration that cannot be translated into a scenario; the message names the key."""


def positive_int(value: object, key: str) -> int:
    """`value` if it is a positive integer (not a bool), else ConfigImportError naming `key`."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigImportError(f"{key}: expected a positive integer, got {value!r}")
    return value
