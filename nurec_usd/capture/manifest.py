"""Reading ``capture.json`` and checking it against ``schemas/capture.schema.json``."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from nurec_usd.capture.errors import CaptureError, Problem
from nurec_usd.util.resources import schemas_dir

MANIFEST_NAME = "capture.json"


@lru_cache(maxsize=1)
def capture_schema() -> dict[str, Any]:
    """The JSON Schema of the manifest (shipped in the package as ``nurec_usd.schemas``)."""
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
    errors = sorted(_validator().iter_errors(manifest), key=lambda e: _document_order(e.absolute_path))
    # An if/then branch reports at the intrinsics object; the message says which key.
    return [Problem(file, json_path(err.absolute_path) or "(top level)", _short(err.message)) for err in errors]


def _document_order(path) -> list[tuple[int, int | str]]:
    """Sort key of a JSON path: list indices numerically (cameras[2] before cameras[10])."""
    return [(0, p) if isinstance(p, int) else (1, str(p)) for p in path]


def _short(message: str, limit: int = 300) -> str:
    """jsonschema quotes whole sub-documents in some messages; keep them readable."""
    return message if len(message) <= limit else message[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------------
# Fast validation of long arrays
#
# jsonschema walks every element of an array through its full machinery, which takes seconds on a
# 30-second capture's manifest (thousands of 4x4 poses, timestamps and frame entries). Its "items" is
# replaced here by a plain-Python check of each element that answers only "certainly valid";
# an array with any element it cannot vouch for goes through jsonschema's own "items", so the
# errors (and whether there are any) are exactly jsonschema's.

_ANNOTATIONS = frozenset(("description", "title", "$comment", "default", "examples"))
_FAST_KEYWORDS = frozenset(("$ref", "type", "minItems", "maxItems", "items", "minimum", "maximum", "exclusiveMinimum",
                            "exclusiveMaximum", "minLength", "maxLength", "pattern", "enum", "required",
                            "properties", "additionalProperties")) | _ANNOTATIONS


@lru_cache(maxsize=1)
def _validator():
    import jsonschema

    schema = capture_schema()
    base = jsonschema.validators.validator_for(schema)
    default_items = base.VALIDATORS["items"]
    checkers: dict[int, Callable[[Any], bool]] = {}  # id(sub-schema) -> its compiled check

    def items(validator, items_schema, instance, parent):
        if isinstance(instance, list) and "prefixItems" not in parent and "unevaluatedItems" not in parent:
            check = checkers.get(id(items_schema))
            if check is None:
                check = checkers[id(items_schema)] = _compile(items_schema, schema)
            if all(map(check, instance)):
                return
        yield from default_items(validator, items_schema, instance, parent)

    return jsonschema.validators.extend(base, {"items": items})(schema)


_PY_TYPES = {"number": (int, float), "integer": (int,), "string": (str,), "array": (list,), "object": (dict,),
             "boolean": (bool,), "null": (type(None),)}


def _never(_x: Any) -> bool:
    return False


def _compile(schema: Any, root: dict[str, Any], refs: frozenset[str] = frozenset()) -> Callable[[Any], bool]:
    """A check of ``schema`` that returns True only when its argument certainly satisfies it, and
    False when it does not or when the schema uses keywords not handled here. Types are strict:
    booleans are not numbers, and a float is never vouched for as an integer (jsonschema accepts
    1.0: such a manifest takes the slow path). ``refs``: the definitions being compiled (a
    definition that refers back to itself is left to jsonschema)."""
    if schema is True:
        return lambda _x: True
    if not isinstance(schema, dict) or not _FAST_KEYWORDS.issuperset(schema):
        return _never
    checks: list[Callable[[Any], bool]] = []
    ref = schema.get("$ref")
    if ref is not None:
        if not ref.startswith("#/$defs/") or ref[8:] not in root["$defs"] or ref in refs:
            return _never
        refs = refs | {ref}
        checks.append(_compile(root["$defs"][ref[8:]], root, refs))
    if "type" in schema:
        kinds = [schema["type"]] if isinstance(schema["type"], str) else schema["type"]
        types = tuple(t for k in kinds for t in _PY_TYPES.get(k, ()))
        checks.append(lambda x: type(x) in types)
    if "enum" in schema:
        options = schema["enum"]
        checks.append(lambda x: any(type(e) is type(x) and e == x for e in options))
    number, text, array, obj = [], [], [], []  # each applies only to instances of its type
    for key, test in (("minimum", lambda x, v: x >= v), ("maximum", lambda x, v: x <= v),
                      ("exclusiveMinimum", lambda x, v: x > v), ("exclusiveMaximum", lambda x, v: x < v)):
        if key in schema:
            number.append(lambda x, v=schema[key], test=test: test(x, v))
    if "minLength" in schema:
        text.append(lambda x, v=schema["minLength"]: len(x) >= v)
    if "maxLength" in schema:
        text.append(lambda x, v=schema["maxLength"]: len(x) <= v)
    if "pattern" in schema:
        pattern = re.compile(schema["pattern"])
        text.append(lambda x: pattern.search(x) is not None)
    if "minItems" in schema:
        array.append(lambda x, v=schema["minItems"]: len(x) >= v)
    if "maxItems" in schema:
        array.append(lambda x, v=schema["maxItems"]: len(x) <= v)
    if "items" in schema:
        each = _compile(schema["items"], root, refs)
        array.append(lambda x: all(map(each, x)))
    if "required" in schema:
        obj.append(lambda x, keys=tuple(schema["required"]): all(k in x for k in keys))
    if "properties" in schema or "additionalProperties" in schema:
        props = {k: _compile(v, root, refs) for k, v in schema.get("properties", {}).items()}
        extra = _compile(schema.get("additionalProperties", True), root, refs)
        obj.append(lambda x: all(props.get(k, extra)(v) for k, v in x.items()))
    for kind, group in (((int, float), number), ((str,), text), ((list,), array), ((dict,), obj)):
        if group:
            checks.append(lambda x, kind=kind, group=tuple(group): type(x) not in kind or all(c(x) for c in group))
    if len(checks) == 1:
        return checks[0]
    return lambda x: all(c(x) for c in checks)
