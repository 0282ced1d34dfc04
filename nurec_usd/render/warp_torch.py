"""Passing torch tensors to Warp kernels: zero-copy views and torch's stream."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import warp as wp

_initialised = False


def init_warp() -> None:
    """Initialise Warp once, quietly (its banner is noise in a CLI or a test log)."""
    global _initialised
    if not _initialised:
        wp.config.log_level = 30  # warnings and errors only (no banner, no module-load lines)
        # Tiled kernels on the CPU run one lane per block unless told otherwise.
        wp.config.enable_cpu_blocks = True
        wp.init()
        _initialised = True


def wp_vector(n: int, dtype: torch.dtype):
    """The Warp vector type of length n whose scalars match a torch float dtype."""
    return wp.types.vector(n, wp.float32 if dtype == torch.float32 else wp.float64)


def to_wp(t: torch.Tensor, dtype=None) -> wp.array:
    """A zero-copy Warp view of a contiguous tensor; ``dtype`` folds the last dim into a vector type."""
    init_warp()
    if not t.is_contiguous():
        raise ValueError(f"tensor of shape {tuple(t.shape)} must be contiguous to pass to a Warp kernel")
    if dtype is None:
        return wp.from_torch(t, requires_grad=False)
    return wp.from_torch(t, dtype=dtype, requires_grad=False)


@contextlib.contextmanager
def launch_stream(device: torch.device) -> Iterator[wp.context.Device]:
    """Launch Warp work on torch's current stream of ``device``; yields the Warp device."""
    init_warp()
    wdev = wp.device_from_torch(device)
    if wdev.is_cuda:
        with wp.ScopedStream(wp.stream_from_torch(device)):
            yield wdev
    else:
        yield wdev
