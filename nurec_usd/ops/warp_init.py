"""Initialising Warp once, quietly, without importing torch.

Warp's native library prints "Warp CUDA warning: Could not find or load the NVIDIA CUDA
driver ..." straight to file descriptor 2 whenever it starts on a machine without a CUDA
driver, so every command would say it on a CPU-only machine, where running on the CPU is the
expected case. :func:`init_warp` looks for the driver library itself first (the same names
Warp's native code loads); only when there is none does it run Warp's initialisation with
descriptor 2 captured, and it passes on everything written there except that one line.
Every other warning or error (an old driver, a failed toolkit load, Python-level warnings)
still reaches stderr.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import tempfile
import threading
from collections.abc import Iterator

__all__ = ["init_warp", "cuda_driver_present", "NO_DRIVER_WARNING"]

# The start of the line Warp's native code prints when it cannot load the driver library.
NO_DRIVER_WARNING = "Warp CUDA warning: Could not find or load the NVIDIA CUDA driver"

_lock = threading.Lock()
_initialised = False


def cuda_driver_present() -> bool:
    """Whether the CUDA driver library can be loaded here (the libraries Warp's native code tries)."""
    if sys.platform == "win32":
        names = ["nvcuda.dll"]
    elif sys.platform.startswith("linux"):
        names = ["libcuda.so", "libcuda.so.1"]
    else:  # macOS and others: Warp has no CUDA there
        return False
    for name in names:
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False


@contextlib.contextmanager
def without_stderr_line(prefix: str) -> Iterator[None]:
    """Capture what is written to file descriptor 2 (native code included) inside the block, then
    write it to ``sys.stderr`` without the lines that start with ``prefix``."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()  # Python-level text written inside the block goes to the capture too
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode("utf-8", errors="replace")
            kept = "".join(line for line in text.splitlines(keepends=True) if not line.startswith(prefix))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


def init_warp() -> None:
    """Initialise Warp once: warnings and errors only (no banner), CPU tile blocks on, and no
    "could not find the CUDA driver" line on a machine that has no driver."""
    global _initialised
    with _lock:
        if _initialised:
            return
        import warp as wp

        wp.config.log_level = 30  # warnings and errors only (no banner, no module-load lines)
        # Tiled kernels on the CPU run one lane per block unless told otherwise.
        wp.config.enable_cpu_blocks = True
        if cuda_driver_present():
            wp.init()
        else:
            with without_stderr_line(NO_DRIVER_WARNING):
                wp.init()
        _initialised = True
