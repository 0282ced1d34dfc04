"""The one error type a capture raises: every problem found, each naming its file and field."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a capture.

    Attributes:
        file: the file the problem is in, relative to the capture directory where possible.
        field: where in that file, as a JSON path (``cameras[0].frames[3].image``) or a
            named part of a binary file (``header.point_count``); empty when the whole file.
        message: what is wrong, in words a user can act on.
    """

    file: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.field}" if self.field else self.file
        return f"{where}: {self.message}"


class CaptureError(Exception):
    """A capture that cannot be used, with every problem found (not just the first).

    ``hint`` (optional) is one line printed after the problems: what the user can do about
    them (e.g. that ``--skip-missing`` drops frames whose image is missing).
    """

    def __init__(self, problems: list[Problem], root: str | None = None, hint: str | None = None):
        if not problems:
            raise ValueError("CaptureError needs at least one problem")
        self.problems = list(problems)
        self.root = root
        self.hint = hint
        super().__init__(self._format())

    def _format(self) -> str:
        head = f"capture {self.root}" if self.root else "capture"
        count = len(self.problems)
        lines = [f"{head}: {count} problem{'s' if count != 1 else ''}"]
        lines += [f"  - {p}" for p in self.problems]
        if self.hint:
            lines.append(self.hint)
        return "\n".join(lines)


class SweepFormatError(ValueError):
    """A sweep file that cannot be read: ``path``, the ``field`` that is wrong, and ``message``."""

    def __init__(self, path: Path, field: str, message: str):
        where = f"{path}: {field}" if field else str(path)
        super().__init__(f"{where}: {message}")
        self.path = path
        self.field = field
        self.message = message
