"""The manifest check's fast path for long arrays reports exactly what plain jsonschema reports.

``schema_problems`` vouches for array elements with a compiled plain-Python check and hands any
array it cannot vouch for to jsonschema. Here the bundled sample's manifest is broken in
hundreds of ways (every kind of wrong value at seeded random places, keys removed and added,
arrays shortened and lengthened) and each result is compared with a plain jsonschema run.
"""

from __future__ import annotations

import copy
import json
import math
import random
from pathlib import Path

import jsonschema
import pytest

from nurec_usd.capture.manifest import _document_order, _short, capture_schema, json_path, schema_problems

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "tiny" / "capture.json"
BAD_VALUES = [None, True, False, "x", "", -1, 0, 1, 1.0, 1.5, -0.0, math.nan, math.inf, [], [1, 2], {}, {"k": 1},
              10 ** 20, "../x.png", "a" * 200]


def plain_problems(manifest: dict) -> list[tuple[str, str]]:
    """What jsonschema alone reports, formatted as ``schema_problems`` formats it."""
    schema = capture_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(manifest), key=lambda e: _document_order(e.absolute_path))
    return [(json_path(e.absolute_path) or "(top level)", _short(e.message)) for e in errors]


def fast_problems(manifest: dict) -> list[tuple[str, str]]:
    return [(p.field, p.message) for p in schema_problems(manifest)]


def _places(node, path=()):
    """Every (container, key) in the document, with the path to it."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield path + (k,), node, k
            yield from _places(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield path + (i,), node, i
            yield from _places(v, path + (i,))


def _mutations(manifest: dict, count: int, seed: int):
    rng = random.Random(seed)
    paths = [p for p, _, _ in _places(manifest)]
    for _ in range(count):
        m = copy.deepcopy(manifest)
        where = rng.choice(paths)
        container = m
        for k in where[:-1]:
            container = container[k]
        key = where[-1]
        action = rng.random()
        if action < 0.7:
            container[key] = copy.deepcopy(rng.choice(BAD_VALUES))
        elif action < 0.8 and isinstance(container, dict):
            del container[key]
        elif action < 0.9 and isinstance(container, dict):
            container["unexpected_key"] = 1
        elif isinstance(container[key], list) and container[key]:
            if rng.random() < 0.5:
                container[key].pop()
            else:
                container[key].append(copy.deepcopy(container[key][-1]))
        else:
            container[key] = rng.choice(BAD_VALUES)
        yield where, m


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads(SAMPLE.read_text())


def test_the_valid_sample_passes_both(manifest):
    assert plain_problems(manifest) == [] and fast_problems(manifest) == []


def test_broken_manifests_get_jsonschemas_problems(manifest):
    broken = 0
    for where, m in _mutations(manifest, count=400, seed=7):
        expected = plain_problems(m)
        assert fast_problems(m) == expected, f"mutation at {where}"
        broken += bool(expected)
    assert broken > 200  # most mutations break the manifest: the comparison is not vacuous


@pytest.mark.parametrize("edit, field", [
    (lambda m: m["rig"]["T_world_rig"][3][1].__setitem__(2, True), "rig.T_world_rig[3][1][2]"),
    (lambda m: m["rig"]["timestamps_us"].__setitem__(5, 1.5), "rig.timestamps_us[5]"),
    (lambda m: m["rig"]["timestamps_us"].__setitem__(5, -3), "rig.timestamps_us[5]"),
    (lambda m: m["cameras"][1]["frames"][2].__setitem__("image", ""), "cameras[1].frames[2].image"),
    (lambda m: m["tracks"][0]["T_world_box"][4].pop(), "tracks[0].T_world_box[4]"),
])
def test_an_error_deep_in_a_long_array_is_named(manifest, edit, field):
    m = copy.deepcopy(manifest)
    edit(m)
    problems = fast_problems(m)
    assert problems == plain_problems(m)
    assert [f for f, _ in problems] == [field]
