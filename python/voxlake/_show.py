"""``voxlake.show``: a picture of one sample, as ``compact inspect TABLE --row ID --png`` draws it."""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from ._voxlake import picture


def show(table: str, id: str, *, storage_options: Optional[Dict[str, str]] = None) -> np.ndarray:
    """The picture of the sample ``id`` of ``table``'s latest version: its first field's middle
    slices of each channel on one colour scale (a mask field of its grid overlaid in red), with
    its colour bar and a title naming the id, label and version. Returns the image as an
    ``(height, width, 3)`` uint8 array, and shows it where IPython displays images (a
    notebook). An id the version lacks is a ``NotFoundError``."""
    width, height, rgb, png = picture(table, id, storage_options=storage_options)
    image = np.frombuffer(rgb, dtype=np.uint8).reshape(height, width, 3)
    _display(png)
    return image


def _display(png: bytes) -> None:
    """Shows `png` in a notebook (an IPython kernel); nothing elsewhere."""
    try:
        from IPython import get_ipython  # type: ignore[import-not-found]
        from IPython.display import Image, display  # type: ignore[import-not-found]
    except ImportError:
        return
    shell: Any = get_ipython()
    if shell is not None and getattr(shell, "kernel", None) is not None:
        display(Image(data=png, format="png"))
