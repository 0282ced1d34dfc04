"""Files shipped with the package: the schemas folder.

Installed, ``schemas/`` is the sub-package ``nurec_usd.schemas``; run from a source tree
(``PYTHONPATH=.``, as on a GPU machine without an install) it is the repository's
top-level ``schemas/`` folder.
"""

from __future__ import annotations

from importlib import resources
from importlib.abc import Traversable
from pathlib import Path


def schemas_dir() -> Traversable:
    """The folder holding ``capture.schema.json`` and ``usd/``."""
    try:
        return resources.files("nurec_usd.schemas")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "schemas"  # nurec_usd/util/ -> the repository
