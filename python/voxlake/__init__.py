"""voxlake: Delta tables of numpy volumes streamed into training loops by a Rust pipeline.

``Loader(table, **options)`` iterates batches as dicts of field name -> numpy array, without a
copy (the arrays look at the loader's buffers, given back to it when freed), plus ``label`` and
``id`` where the table has them. ``voxlake.torch.Dataset`` wraps it for ``torch.utils.data``.
``convert(src, table, ...)`` and ``inspect(table)`` are ``compact convert`` and ``compact inspect``
(``inspect(table, row=ID)`` one row by its id, as ``compact inspect --row``; ``show(table, ID)``
its picture, as ``--png``);
``write(table, samples)`` writes samples held in memory (dicts of numpy arrays) the same way;
``write_volumes(table, volumes, brick=...)`` volumes larger than a sample, as bricks.
A list of ``Source(table, proportion=...)`` in place of the table mixes several tables.
The options are those of the Rust ``LoaderBuilder`` (``loader_options()`` lists them with their
defaults); errors are ``VoxlakeError``s carrying the Rust error's message, which pickle (an
error in a ``DataLoader`` worker is raised in the main process) and subclass the builtins a
Python user catches (``ConfigError`` a ``ValueError``, ``NotFoundError`` a
``FileNotFoundError``, ``StoreError`` an ``OSError``, ``OptionError`` a ``TypeError``).
"""

# numpy's C API is loaded here, not by the first batch (~0.1 s).
import numpy as _numpy  # noqa: F401

from ._errors import (
    ConfigError,
    NotFoundError,
    OptionError,
    StoreError,
    TableError,
    VoxlakeError,
    VoxlakeWarning,
)
from ._voxlake import (
    Loader,
    __version__,
    convert,
    default_job,
    default_rank,
    inspect,
    loader_options,
)
from ._show import show
from ._source import Source
from ._write import write, write_volumes

__all__ = [
    "ConfigError",
    "Loader",
    "NotFoundError",
    "OptionError",
    "Source",
    "StoreError",
    "TableError",
    "VoxlakeError",
    "VoxlakeWarning",
    "__version__",
    "convert",
    "default_job",
    "default_rank",
    "inspect",
    "loader_options",
    "show",
    "write",
    "write_volumes",
]


def _options_help() -> str:
    lines = ["", "Options (keyword arguments; left out, the Rust builder's default applies):"]
    for name, kind, doc in loader_options():
        lines.append(f"  {name}: {kind}\n      {doc}")
    return "\n".join(lines)


# help(voxlake.Loader) lists the options from the one list the Rust side keeps.
try:
    Loader.__doc__ = (Loader.__doc__ or "") + _options_help()
except (AttributeError, TypeError):  # an extension type's __doc__ may be read-only
    pass
