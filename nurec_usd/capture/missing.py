"""Frames whose data file is missing: each reported, or (``skip_missing``) dropped with one warning.

Trimmed copies of public datasets often lack some of the images (or sweeps) their own
description lists. By default each missing file is a problem (the capture is refused, and the
refusal says how to go on without them); with ``skip_missing`` (``--skip-missing`` on the
command line) those frames are left out and one ``MissingFilesWarning`` gives their count.
The native loader and every importer use this one helper, so the wording is the same everywhere.
"""

from __future__ import annotations

import warnings
from pathlib import Path

#: The option's name as the command line spells it (the Python API: ``skip_missing=True``).
OPTION = "--skip-missing"


class MissingFilesWarning(UserWarning):
    """Frames or sweeps were left out because their file is missing (``skip_missing``)."""


class MissingFiles:
    """Tracks the frames (and sweeps) of one capture whose file is missing.

    An importer calls ``drop(shown)`` for each frame whose file does not exist: with ``skip``
    it returns True (leave the frame out); otherwise False (report the problem as usual) and
    the refusal gets ``hint()``. After loading, ``warn()`` emits the one warning.
    """

    def __init__(self, skip: bool) -> None:
        self.skip = bool(skip)
        self.dropped: list[tuple[str, str]] = []  # (file as shown, "frame" or "sweep")
        self.reported = 0

    def drop(self, shown: str, kind: str = "frame") -> bool:
        """Whether the frame (``kind="sweep"``: the sweep) whose file ``shown`` is missing is to be left out."""
        if self.skip:
            self.dropped.append((shown, kind))
            return True
        self.reported += 1
        return False

    def hint(self) -> str | None:
        """The refusal's last line when files were reported missing, else None."""
        if not self.reported:
            return None
        what = "1 file is" if self.reported == 1 else f"{self.reported} files are"
        return (f"hint: {what} missing; {OPTION} (skip_missing=True in Python) leaves the frames "
                "and sweeps whose file is missing out and loads the rest")

    def message(self) -> str | None:
        """What ``warn`` says (also for an importer's ``metadata["warnings"]``), or None when nothing was left out."""
        if not self.dropped:
            return None
        counts = []
        for kind in ("frame", "sweep"):
            n = sum(k == kind for _, k in self.dropped)
            if n:
                counts.append(f"{n} {kind}{'s' if n != 1 else ''}")
        first = ", ".join(shown for shown, _ in self.dropped[:3]) + (", ..." if len(self.dropped) > 3 else "")
        return f"{OPTION}: left out {' and '.join(counts)} whose file is missing ({first})"

    def warn(self, stacklevel: int = 3) -> None:
        """One ``MissingFilesWarning`` with the count, when anything was left out."""
        message = self.message()
        if message:
            warnings.warn(message, MissingFilesWarning, stacklevel=stacklevel)


def is_missing(path: Path) -> bool:
    """Whether nothing at all is at ``path`` (a folder or an unreadable file is a problem, not missing)."""
    try:
        return not path.exists() and not path.is_symlink()
    except OSError:
        return False
