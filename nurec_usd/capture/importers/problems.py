"""Collecting an importer's problems: each names its file and field, all are raised together."""

from __future__ import annotations

from pathlib import Path

from nurec_usd.capture.errors import CaptureError, Problem
from nurec_usd.capture.missing import MissingFiles


class FieldError(Exception):
    """A field that cannot be used (caught and turned into a Problem)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class Problems:
    """The problems found so far while importing from ``root``."""

    def __init__(self, root: Path, missing: MissingFiles | None = None) -> None:
        self.root = root
        self.items: list[Problem] = []
        self.missing = missing  # the refusal's hint when files were reported missing

    def add(self, file: str, field: str, message: str) -> None:
        self.items.append(Problem(file, field, message))

    def raise_if_any(self) -> None:
        """``CaptureError`` listing every problem, when there is one."""
        if self.items:
            raise CaptureError(self.items, str(self.root), hint=self.missing.hint() if self.missing else None)


def relative(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` (posix), or the whole path when it lies outside."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)
