"""Progress of long stages: a tqdm bar on a terminal, plain periodic lines anywhere else.

A tqdm bar that writes to a pipe or a log file is either garbage (carriage returns) or, with
``disable=None``, nothing at all for minutes. :func:`progress_bar` returns a bar when its
stream is a terminal and a :class:`PlainProgress` otherwise, which writes one line at most
every ``interval_s`` seconds and one when it closes::

    train: 250/3000 steps (8%), loss 0.0412, psnr 21.30, gaussians 123,456; 12.5 steps/s, 3m40s left
    train: 3000/3000 steps (100%), loss 0.0198, psnr 27.10, gaussians 998,311; 12.1 steps/s, 4m08s in all

Both take the calls tqdm's users make (``update``, ``set_postfix``, ``n`` / ``total`` /
``refresh``, ``close``, ``with``), so the code that reports progress does not care which it
got. ``NUREC_USD_PROGRESS_INTERVAL_S`` sets the interval between plain lines (default 10 s).
"""

from __future__ import annotations

import os
import sys
import time
from typing import IO, Any

__all__ = ["PlainProgress", "progress_bar", "INTERVAL_ENV", "DEFAULT_INTERVAL_S"]

INTERVAL_ENV = "NUREC_USD_PROGRESS_INTERVAL_S"
DEFAULT_INTERVAL_S = 10.0


def _interval_from_env() -> float:
    text = os.environ.get(INTERVAL_ENV)
    if not text:
        return DEFAULT_INTERVAL_S
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{INTERVAL_ENV}={text!r}: expected a number of seconds") from None
    if not value >= 0:  # also refuses NaN
        raise ValueError(f"{INTERVAL_ENV}={text!r}: expected a number of seconds >= 0")
    return value


def _duration(seconds: float) -> str:
    """``42s``, ``3m40s``, ``1h05m``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _plural(unit: str) -> str:
    return unit if unit.endswith("s") else unit + "s"


class PlainProgress:
    """A tqdm-like progress report as plain lines: one at most every ``interval_s`` seconds (at an
    ``update`` or ``refresh``) while the work is not complete, and one at ``close`` when anything
    was done.

    Args:
        total: the amount of work (None: unknown; may be set later through ``total``).
        desc: what the work is, the start of every line.
        unit: the unit of work, singular ("step", "frame").
        file: where lines go (default: ``sys.stderr`` at the time of each write).
        interval_s: the shortest time between two periodic lines (default: ``$NUREC_USD_PROGRESS_INTERVAL_S``,
            else 10 s); 0 writes a line at every update.
        postfix_follows: the caller sets the postfix after each ``update`` (as a training loop does with
            its loss): lines are then written at ``set_postfix``, so that they show the new values.
    """

    def __init__(self, total: int | None = None, desc: str = "", unit: str = "it", file: IO[str] | None = None,
                 interval_s: float | None = None, postfix_follows: bool = False):
        self.total = total
        self.desc = desc
        self.unit = unit
        self.n = 0
        self.file = file
        self.interval_s = _interval_from_env() if interval_s is None else float(interval_s)
        self.postfix: dict[str, Any] = {}
        self.postfix_follows = postfix_follows
        self._start = time.monotonic()
        self._last_time = self._start
        self._last_n = 0
        self._closed = False

    # -- tqdm's calls -------------------------------------------------------------------------

    def update(self, n: int = 1) -> None:
        """``n`` more units done."""
        self.n += n
        if not self.postfix_follows:
            self._maybe_write()

    def set_postfix(self, ordered_dict: dict[str, Any] | None = None, refresh: bool = True, **kwargs: Any) -> None:
        """Values shown after the count (e.g. loss and PSNR); they replace the previous ones. (``refresh``
        is tqdm's redraw flag: a line is due by the interval alone.)"""
        self.postfix = {**(ordered_dict or {}), **kwargs}
        self._maybe_write()

    def refresh(self) -> None:
        """Write a line if the interval has passed (after ``n`` or ``total`` were set directly)."""
        self._maybe_write()

    def close(self) -> None:
        """Write the closing line (when anything was done); later calls do nothing."""
        if self._closed:
            return
        self._closed = True
        if self.n > 0:
            elapsed = time.monotonic() - self._start
            rate = self.n / elapsed if elapsed > 0 else float("inf")
            self._write(rate, f"{_duration(elapsed)} in all")

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- lines --------------------------------------------------------------------------------

    def _maybe_write(self) -> None:
        now = time.monotonic()
        if self._closed or now - self._last_time < self.interval_s or self.n == self._last_n:
            return
        if self.total and self.n >= self.total:  # the closing line says it
            return
        rate = (self.n - self._last_n) / (now - self._last_time) if now > self._last_time else float("inf")
        left = None
        if self.total and rate > 0 and rate != float("inf"):
            left = f"{_duration(max(self.total - self.n, 0) / rate)} left"
        self._last_time, self._last_n = now, self.n
        self._write(rate, left)

    def line(self, rate: float, tail: str | None) -> str:
        """The text of one line."""
        count = f"{self.n:,}/{self.total:,} {_plural(self.unit)}" if self.total else f"{self.n:,} {_plural(self.unit)}"
        if self.total:
            count += f" ({100.0 * self.n / self.total:.0f}%)"
        parts = [count, *(f"{k} {v}" for k, v in self.postfix.items())]
        speed = f"{rate:.1f} {_plural(self.unit)}/s" if rate != float("inf") else None
        end = "; ".join(x for x in (speed, tail) if x)
        return f"{self.desc}: {', '.join(parts)}" + (f"; {end}" if end else "")

    def _write(self, rate: float, tail: str | None) -> None:
        out = self.file if self.file is not None else sys.stderr
        out.write(self.line(rate, tail) + "\n")
        out.flush()


def progress_bar(total: int | None, desc: str, unit: str = "it", *, enabled: bool = True,
                 file: IO[str] | None = None, leave: bool = True, interval_s: float | None = None,
                 postfix_follows: bool = False):
    """A progress report for ``total`` units of work: a tqdm bar when ``file`` (default stderr) is a
    terminal, a :class:`PlainProgress` when it is not (``interval_s``, ``postfix_follows``: see there),
    and a disabled tqdm (every call a no-op) when ``enabled`` is False. ``leave``: whether the
    terminal bar stays once closed."""
    from tqdm import tqdm

    out = file if file is not None else sys.stderr
    if not enabled:
        return tqdm(total=total, disable=True)
    isatty = getattr(out, "isatty", None)
    if isatty is not None and isatty():
        return tqdm(total=total, desc=desc, unit=unit, file=out, dynamic_ncols=True, leave=leave)
    return PlainProgress(total, desc, unit, file=file, interval_s=interval_s, postfix_follows=postfix_follows)
