"""Reading ``capture.json`` and checking it against ``schemas/capture.schema.json``."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from nurec_usd.capture.errors import CaptureError, Problem

MANIFEST_NAME = "capture.json"


@lru_cache(maxsize=1)
def capture_schema() -> dict[str, Any]:
    """The JSON Schema of the manifest (shipped in the package as ``nurec_usd.schemas``)."""
    from nurec_usd.resources import schemas_dir

    text = schemas_dir().joinpath("capture.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def json_path(parts: Any) -> str:
    """``["cameras", 0, "intrinsics", "fx"]`` -> ``cameras[0].intrinsics.fx``."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def find_manifest(path: Path) -> tuple[Path, Path]:
    """Accept a capture directory or its ``capture.json``. Returns (root, manifest path)."""
    path = Path(path)
    if not path.exists():
        raise CaptureError([Problem(str(path), "", "no such capture directory or file")])
    if path.is_dir():
        return path, path / MANIFEST_NAME
    return path.parent, path


def read_manifest(manifest_path: Path) -> dict[str, Any]:
    """Parse the manifest. Raises ``CaptureError`` when it is missing or not JSON."""
    name = manifest_path.name
    if not manifest_path.exists():
        raise CaptureError([Problem(str(manifest_path), "",
                                    f"{manifest_path.parent} has no {MANIFEST_NAME}: not a capture directory")])
    try:
        text = manifest_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CaptureError([Problem(name, "", f"cannot read the manifest ({exc})")], str(manifest_path.parent)) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CaptureError([Problem(name, f"line {exc.lineno}, column {exc.colno}", f"not valid JSON: {exc.msg}")],
                           str(manifest_path.parent)) from None
    if not isinstance(data, dict):
        raise CaptureError([Problem(name, "", f"the manifest must be a JSON object, found {type(data).__name__}")],
                           str(manifest_path.parent))
    return data


def schema_problems(manifest: dict[str, Any], file: str = MANIFEST_NAME) -> list[Problem]:
    """Every place where the manifest breaks the schema, in document order."""
    import jsonschema

    validator_cls = jsonschema.validators.validator_for(capture_schema())
    validator = validator_cls(capture_schema())
    errors = sorted(validator.iter_errors(manifest), key=lambda e: _document_order(e.absolute_path))
    # An if/then branch reports at the intrinsics object; the message says which key.
    return [Problem(file, json_path(err.absolute_path) or "(top level)", _short(err.message)) for err in errors]


def _document_order(path) -> list[tuple[int, int | str]]:
    """Sort key of a JSON path: list indices numerically (cameras[2] before cameras[10])."""
    return [(0, p) if isinstance(p, int) else (1, str(p)) for p in path]


def _short(message: str, limit: int = 300) -> str:
    """jsonschema quotes whole sub-documents in some messages; keep them readable."""
    return message if len(message) <= limit else message[: limit - 3] + "..."
