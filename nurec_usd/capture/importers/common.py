"""Helpers every importer shares: rigid-transform inversion, sensor ids and actor labels in the
capture format's rules."""

from __future__ import annotations

import re
from typing import Mapping

import numpy as np


def invert_rigid(T: np.ndarray) -> np.ndarray:
    """The inverse of a rigid 4x4 transform ``T`` (rotation transposed, no general matrix inverse)."""
    out = np.eye(4)
    out[:3, :3] = T[:3, :3].T
    out[:3, 3] = -T[:3, :3].T @ T[:3, 3]
    return out


def sensor_id(name: str) -> str:
    """A source's sensor or track name as an id of the capture format (``^[A-Za-z0-9_][A-Za-z0-9_.-]*$``,
    at most 128 characters): other characters become ``_``, and a leading ``.`` or ``-`` gets one before it."""
    out = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    if not out or out[0] in ".-":
        out = "_" + out
    return out[:128]


def label(name: str, labels: Mapping[str, str]) -> str:
    """An actor class of the capture format for a source's class ``name``: looked up in ``labels``
    by its lower-case text, then by its snake_case form, which is used as the label otherwise."""
    text = name.strip().lower()
    snake = re.sub(r"[^a-z0-9]+", "_", text).strip("_")
    return labels.get(text) or labels.get(snake) or snake or "unknown"
