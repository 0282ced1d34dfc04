"""Opening and checking a USD stage: one-line errors for files USD cannot open, and the
validators a simulator's pipeline runs (``python -m nurec_usd validate STAGE``).

:func:`check_stage` runs every validator of OpenUSD's ``UsdValidation`` registry and, where
the ``usd-validation-nvidia`` package is installed, NVIDIA's asset validator with its default
rules and its ``GaussianSplatSchemaChecker`` (off by default there). Payloads are loaded, so
the Gaussians are checked too.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from nurec_usd.export.usd_schema import register_schema

__all__ = ["USD_SUFFIXES", "FAILING", "StageOpenError", "UsdIssue", "is_usd_path", "stage_file", "open_stage",
           "check_stage", "nvidia_available"]

USD_SUFFIXES = (".usd", ".usda", ".usdc", ".usdz")
# Severities that make a stage fail the check; "info" is reported only.
FAILING = ("error", "warning")


class StageOpenError(ValueError):
    """A file USD cannot open as a stage; the message is one line naming the file."""


@dataclass(frozen=True)
class UsdIssue:
    """One finding of a validator."""

    severity: str  # "error", "warning" or "info"
    where: str  # a prim or property path, or "stage"
    validator: str  # e.g. "usdGeomValidators:StageMetadataChecker", "nvidia:GaussianSplatSchemaChecker"
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.where}: {self.validator}: {self.message}"


def is_usd_path(path: str | Path) -> bool:
    """Whether ``path`` names a USD file (by its suffix) or a folder holding an export's
    ``root.usda`` (an export folder, or a run folder's ``usd/``) and no capture manifest."""
    path = Path(path)
    if path.suffix.lower() in USD_SUFFIXES:
        return True
    if path.is_dir() and not (path / "capture.json").exists():
        return (path / "root.usda").is_file() or (path / "usd" / "root.usda").is_file()
    return False


def stage_file(path: str | Path) -> Path:
    """The stage to open for ``path``: the file itself, or a folder's ``root.usda`` (an export
    folder) or ``usd/root.usda`` (a run folder)."""
    path = Path(path)
    if path.is_dir():
        for candidate in (path / "root.usda", path / "usd" / "root.usda"):
            if candidate.is_file():
                return candidate
        raise StageOpenError(f"{path}: no root.usda here or in {path / 'usd'} (is it an export or run folder?)")
    return path


def _reason(err: Exception) -> str:
    """The first message of a ``Tf.ErrorException`` (USD's text inside quotes, the file's name taken out)."""
    text = str(err)
    found = re.findall(r" : '(.*)'\s*$", text, flags=re.MULTILINE)
    reason = found[0] if found else (text.strip().splitlines() or ["unknown error"])[0]
    return re.sub(r"\s*[@<][^@<>]*[@>]\s*", " ", reason).strip() or "unknown error"


def open_stage(path: str | Path, load_payloads: bool = True):
    """``Usd.Stage.Open`` of ``path``, with a :class:`StageOpenError` of one line (the file, and
    USD's reason) instead of USD's multi-line exception when it is not a stage USD can read."""
    register_schema()
    from pxr import Tf, Usd

    path = Path(path)
    if not path.is_file():
        raise StageOpenError(f"{path}: no such file")
    if path.suffix.lower() not in USD_SUFFIXES:
        raise StageOpenError(f"{path}: not a USD file (expected {', '.join(USD_SUFFIXES)})")
    try:
        stage = Usd.Stage.Open(str(path), Usd.Stage.LoadAll if load_payloads else Usd.Stage.LoadNone)
    except Tf.ErrorException as err:
        raise StageOpenError(f"{path}: not a USD stage USD can read ({_reason(err)})") from None
    if stage is None:
        raise StageOpenError(f"{path}: not a USD stage USD can read")
    return stage


def _site(site) -> str:
    if site.IsProperty():
        return str(site.GetProperty().GetPath())
    if site.IsPrim():
        return str(site.GetPrim().GetPath())
    return "stage"


def _openusd_issues(stage) -> list[UsdIssue]:
    from pxr import UsdValidation

    kinds = {UsdValidation.ValidationErrorType.Error: "error", UsdValidation.ValidationErrorType.Warn: "warning"}
    validators = UsdValidation.ValidationRegistry().GetOrLoadAllValidators()
    out = []
    for err in UsdValidation.ValidationContext(validators).Validate(stage):
        sites = sorted({_site(s) for s in err.GetSites()}) or ["stage"]
        where = "stage" if sites == ["/"] else ", ".join(sites)
        validator = err.GetValidator()
        name = validator.GetMetadata().name if validator else "UsdValidation"
        out.append(UsdIssue(kinds.get(err.GetType(), "info"), where, f"{name}.{err.GetName()}", err.GetMessage()))
    return out


def _nvidia_where(at) -> str:
    for owner in (at, getattr(at, "prim_id", None)):
        path = getattr(owner, "path", None)
        if path is not None:
            return str(path)
    return "stage"


def _nvidia_issues(stage) -> list[UsdIssue]:
    import usd_validation_nvidia as uvn

    engine = uvn.ValidationEngine()
    engine.enable_rule(uvn.GaussianSplatSchemaChecker)
    kinds = {"ERROR": "error", "FAILURE": "error", "WARNING": "warning"}
    out = []
    for issue in engine.validate(stage).issues:
        severity = kinds.get(getattr(issue.severity, "name", ""), "info")
        rule = getattr(issue.rule, "__name__", str(issue.rule))
        out.append(UsdIssue(severity, _nvidia_where(issue.at), f"nvidia:{rule}", str(issue.message)))
    return out


def nvidia_available() -> bool:
    """Whether NVIDIA's asset validator (``usd-validation-nvidia``) is installed."""
    return importlib.util.find_spec("usd_validation_nvidia") is not None


def check_stage(path: str | Path) -> tuple[list[UsdIssue], list[str]]:
    """Run the validators on the stage at ``path`` (a USD file, or see :func:`stage_file`), payloads loaded.

    Returns:
        The issues found, and the names of the checkers that ran.

    Raises:
        StageOpenError: USD cannot open the file as a stage.
    """
    stage = open_stage(stage_file(path))
    issues = _openusd_issues(stage)
    ran = ["OpenUSD UsdValidation (every registered validator)"]
    if nvidia_available():
        issues += _nvidia_issues(stage)
        ran.append("NVIDIA usd-validation-nvidia (default rules + GaussianSplatSchemaChecker)")
    return issues, ran
