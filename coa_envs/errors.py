"""Which errors are the user's to fix: the marker the command line reads.

An error that derives from :class:`UserError` is an *expected* mistake -- a mistyped option,
data that is not there, a model name that names nothing, a config file that is not YAML --
whose message already says what was wrong, where, and what to do. ``coa`` prints such an
error as one message without a traceback (``--debug`` shows it); every other exception is a
bug and keeps its traceback. The classes keep their usual bases (``ValueError``,
``FileNotFoundError``...), so code that catches those still does.

Stdlib only and imports nothing of the project: a leaf every layer may use.
"""

from __future__ import annotations

__all__ = ["OptionError", "UserError"]


class UserError(Exception):
    """Marker: the message alone lets the user fix this (no traceback on the command line)."""


class OptionError(UserError, ValueError):
    """An option (key, type, value or combination) that cannot work; the message names it."""
