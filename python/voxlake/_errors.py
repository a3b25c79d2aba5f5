"""The exceptions of voxlake, public as ``voxlake.VoxlakeError`` and the rest.

Declared here in Python, under the module users import (``voxlake``), so that they pickle and
unpickle to the same class: an error in a ``DataLoader`` worker reaches the main process as
the same exception. Each also subclasses the builtin a Python user catches. ``transient`` says
whether the Rust error was a fault that may pass (a store's timeout, a throttled request).
"""

from __future__ import annotations


class VoxlakeError(Exception):
    """Any error of voxlake; its message is the Rust error's, naming the object and the cause."""

    #: Whether retrying later may succeed (a store or network fault), where the Rust error knows.
    transient: bool = False


class TableError(VoxlakeError):
    """The table: not readable as a sample table, its log or a data file corrupt."""


class NotFoundError(TableError, FileNotFoundError):
    """No table at the location, or a data file its log lists is gone from the store."""


class StoreError(VoxlakeError, OSError):
    """The store: a request that failed after its retries, credentials refused, a store away."""


class ConfigError(VoxlakeError, ValueError):
    """Settings that cannot work: a bad state, filter or combination of options."""


class OptionError(ConfigError, TypeError):
    """An unknown or ill-typed keyword argument."""


class VoxlakeWarning(UserWarning):
    """A warning about what a run reads (ranks that may read different versions of the table,
    a shuffle buffer cut to fit the memory budget); it is also logged under ``voxlake``."""


for _class in (VoxlakeError, TableError, NotFoundError, StoreError, ConfigError, OptionError, VoxlakeWarning):
    _class.__module__ = "voxlake"
del _class
