"""``voxlake.Source``: one table of a mixture, given in place of the table to ``Loader``,
``voxlake.torch.Dataset`` and ``DataLoader`` as a list (``[Source(a, proportion=0.6),
Source(b, proportion=0.4)]``). Each batch of a mixture has a ``source`` field: each sample's
source, as its index in the list.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Dict, Optional, Union

from ._errors import OptionError


@dataclasses.dataclass(frozen=True)
class Source:
    """A table of a mixture and its share of each epoch's draws: ``proportion`` (a share of the
    draws, relative to the other sources'; every source has one or none does), ``repeat``
    (draws per row per epoch, fractional allowed) or ``choose`` (draws per epoch); none of them:
    every row once. ``filter``, ``version``, ``timestamp`` and ``storage_options`` are this
    table's own (default: the loader's options)."""

    table: str
    proportion: Optional[float] = None
    repeat: Optional[float] = None
    choose: Optional[int] = None
    filter: Optional[str] = None
    version: Optional[int] = None
    timestamp: Optional[Union[datetime, str]] = None
    storage_options: Optional[Dict[str, str]] = None

    def __post_init__(self) -> None:
        if not isinstance(self.table, str):
            raise OptionError(f"Source: table must be a str, got {type(self.table).__name__}")
        given = [n for n in ("proportion", "repeat", "choose") if getattr(self, n) is not None]
        if len(given) > 1:
            raise OptionError(f"Source({self.table!r}): give one of proportion, repeat, choose, not {' and '.join(given)}")
        if self.version is not None and self.timestamp is not None:
            raise OptionError(f"Source({self.table!r}): give version or timestamp, not both")

    def fixed(self) -> bool:
        """Whether it names its own version (or time)."""
        return self.version is not None or self.timestamp is not None

    def at_version(self, version: int) -> "Source":
        """This source at ``version``, unless it names its own."""
        return self if self.fixed() else dataclasses.replace(self, version=int(version))
