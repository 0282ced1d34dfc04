"""Ctrl-C and SIGTERM: both stop a command the same way.

Schedulers (SLURM, Kubernetes, Ray) stop a job with SIGTERM; a user with Ctrl-C (SIGINT).
Inside :func:`handled`, either raises ``KeyboardInterrupt`` in the main thread (SIGTERM as its
subclass :class:`Terminated`), so every clean-up path written for Ctrl-C (a training run
keeping its state, a staged output folder removed) serves both. The exit code of an
interrupted command is the shell's: 128 + the signal's number (130 for SIGINT, 143 for SIGTERM).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered like Ctrl-C."""


def signal_of(err: BaseException) -> signal.Signals:
    """The signal behind an interrupt: SIGTERM for :class:`Terminated`, else SIGINT."""
    return signal.SIGTERM if isinstance(err, Terminated) else signal.SIGINT


def exit_code(err: BaseException) -> int:
    """The exit code of a command stopped by ``err``: 128 + the signal's number."""
    return 128 + int(signal_of(err))


def describe(err: BaseException) -> str:
    """``Ctrl-C (SIGINT)`` or ``SIGTERM``."""
    return "SIGTERM" if isinstance(err, Terminated) else "Ctrl-C (SIGINT)"


_received: list[signal.Signals] = []  # the signals delivered inside `handled`, in order


def received() -> signal.Signals | None:
    """The first signal delivered inside the current :func:`handled` block, or None."""
    return _received[0] if _received else None


def _on_term(signum, _frame) -> None:
    _received.append(signal.Signals(signum))
    raise Terminated()


def _on_int(signum, _frame) -> None:
    _received.append(signal.Signals(signum))
    raise KeyboardInterrupt()


@contextlib.contextmanager
def handled(only_if_default: bool = False) -> Iterator[None]:
    """SIGINT and SIGTERM raise ``KeyboardInterrupt`` / :class:`Terminated` inside the block,
    and are remembered (:func:`received`); the previous handlers come back after it.

    Outside the main thread (where Python cannot install handlers) this does nothing.
    ``only_if_default``: leave a signal alone when someone already handles it (a library call
    inside a program that has its own handlers, e.g. a Ray worker).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig, handler in ((signal.SIGTERM, _on_term), (signal.SIGINT, _on_int)):
        current = signal.getsignal(sig)
        if current in (_on_term, _on_int):
            continue  # an outer block handles it already
        defaults = (signal.SIG_DFL, signal.default_int_handler)
        if only_if_default and current not in defaults:
            continue
        previous[sig] = current
        signal.signal(sig, handler)
    outermost = bool(previous)
    if outermost:
        _received.clear()
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
