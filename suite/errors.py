"""Exceptions the suite raises for problems a user can fix.

The CLI prints a ``SuiteError`` as one line and exits non-zero; anything else is a bug.
"""


class SuiteError(Exception):
    """A user-facing error: bad config, unknown name, bad input file."""


class ConfigError(SuiteError):
    """A configuration value is invalid; the message names the field."""


class DataError(SuiteError):
    """Input data is malformed; the message names the file and line."""


class DiskFullError(SuiteError):
    """A write found its filesystem full; the message names the path and the space."""
