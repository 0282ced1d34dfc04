"""Declared ranges of option values, and the one checker every entry point uses.

Each option of a build (the fields of ``TrainConfig``, ``InitConfig`` and ``BuildConfig``)
declares its type and range beside its default with :func:`option`; the command line's own
flags declare theirs with :func:`flag_type`. :func:`check_value` turns a value into the
option's type or raises :class:`OptionError` naming the option and its range, before any
work is done. A dataclass field without a declared range is a mistake the tests catch
(``declared_range``).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
import re
from dataclasses import dataclass
from typing import Any, Callable


class OptionError(ValueError):
    """An option value outside its declared range (or of the wrong type).

    ``option``: the option's name (``steps``); ``value``: what was given; ``expected``: what
    it takes, in words (``an integer >= 1``); or, when ``expected`` is None, ``message`` says
    what is wrong (e.g. which camera a downscale factor is too large for). ``what``: how the
    message calls the option (``build option``).
    """

    def __init__(self, option: str, value: Any, expected: str | None, message: str | None = None,
                 what: str = "build option"):
        self.option, self.value, self.expected = option, value, expected
        self.detail = f"must be {expected}" if expected is not None else str(message)
        text = (f"{what} {option!r} takes {expected}, got {value!r}" if expected is not None
                else f"{what} {option!r} = {_shown(value)}: {message}")
        super().__init__(text)

    def for_flag(self, flag: str) -> str:
        """The message with the command line's spelling of the option (``--steps -5: must be ...``)."""
        return f"{flag} {_shown(self.value)}: {self.detail}"


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


@dataclass(frozen=True)
class Range:
    """What an option takes: ``kind`` ("int", "float" or "bool"), bounds (None: open), whether
    each bound is excluded, and special values allowed outside the bounds (``0`` as "none").
    ``none_ok``: None is a value (e.g. no budget). Floats are always finite."""

    kind: str  # "int", "float", "bool", "choice" (one of ``choices``) or "str"
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    special: tuple = ()
    none_ok: bool = False
    choices: tuple = ()
    pattern: str | None = None  # "str": the whole text must match this regular expression
    forms: str = ""  # "str": what it takes, in words (for messages)

    def describe(self) -> str:
        """The range in words: ``an integer >= 1``, ``a number > 0 and <= 10``, ``True or False``."""
        if self.kind == "bool":
            return "True or False"
        if self.kind == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind == "str":
            return self.forms or "text"
        noun = "an integer" if self.kind == "int" else "a number"
        fmt = (lambda v: str(int(v))) if self.kind == "int" else (lambda v: f"{v:g}")
        parts = []
        if self.low is not None and self.high is not None and not self.low_open and not self.high_open:
            parts.append(f"from {fmt(self.low)} to {fmt(self.high)}")
        else:
            if self.low is not None:
                parts.append(f"{'>' if self.low_open else '>='} {fmt(self.low)}")
            if self.high is not None:
                parts.append(f"{'<' if self.high_open else '<='} {fmt(self.high)}")
        text = f"{noun} {' and '.join(parts)}" if parts else (noun if self.kind == "int" else "a finite number")
        if self.special:
            text = " or ".join(_shown(v) for v in self.special) + " or " + text
        if self.none_ok:
            text += " (or None)"
        return text

    def check(self, name: str, value: Any) -> Any:
        """``value`` as this range's type; OptionError naming ``name`` when it is not in the range."""
        if value is None and self.none_ok:
            return None
        if self.kind == "bool":
            if isinstance(value, bool):
                return value
            raise OptionError(name, value, self.describe())
        if self.kind == "choice":
            if isinstance(value, str) and value in self.choices:
                return value
            raise OptionError(name, value, self.describe())
        if self.kind == "str":
            if isinstance(value, (tuple, list)) and value and all(
                    isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value):
                value = ",".join(f"{v:g}" for v in value)  # the command line reads "1,2,3" as a tuple
            if isinstance(value, str) and (self.pattern is None or re.fullmatch(self.pattern, value)):
                return value
            raise OptionError(name, value, self.describe())
        given = value
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise OptionError(name, given, self.describe())
        if self.kind == "int":
            if not isinstance(value, numbers.Integral):
                raise OptionError(name, given, self.describe())
            value = int(value)
        else:
            value = float(value)
            if not math.isfinite(value):
                raise OptionError(name, given, self.describe())
        if value in self.special:
            return value
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            raise OptionError(name, given, self.describe())
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            raise OptionError(name, given, self.describe())
        return value


_RANGE_KEY = "nurec_usd.range"


def option(default: Any, kind: str | None = None, low: float | None = None, high: float | None = None, *,
           low_open: bool = False, high_open: bool = False, special: tuple = (), none_ok: bool = False,
           choices: tuple = (), pattern: str | None = None, forms: str = "") -> Any:
    """A dataclass field with its default and its declared range.

    ``kind`` is taken from the default (bool, int or float; "choice" with ``choices``; "str" for
    other text, whole-matching ``pattern`` when given, described by ``forms``) unless given
    (needed when the default is None). ``low_open`` / ``high_open`` exclude the bound itself.
    """
    if kind is None:
        kind = ("choice" if choices else "bool" if isinstance(default, bool) else
                "str" if isinstance(default, str) else "int" if isinstance(default, int) else "float")
    declared = Range(kind, low, high, low_open, high_open, tuple(special), none_ok, tuple(choices), pattern, forms)
    if default is not None or not none_ok:
        declared.check("default", default)  # a default outside its own range is a typo here
    return dataclasses.field(default=default, metadata={_RANGE_KEY: declared})


def declared_range(cls: type, name: str) -> Range | None:
    """The range a dataclass field declared with :func:`option`, or None."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.metadata.get(_RANGE_KEY)
    raise KeyError(name)


def check_value(cls: type, name: str, value: Any) -> Any:
    """``value`` as field ``name`` of the dataclass ``cls`` takes it (its declared type and
    range); OptionError naming the field otherwise."""
    declared = declared_range(cls, name)
    if declared is None:
        return value
    return declared.check(name, value)


def check_fields(instance: Any) -> None:
    """Every field of a dataclass instance against its declared range (OptionError on the first bad one)."""
    for f in dataclasses.fields(instance):
        declared = f.metadata.get(_RANGE_KEY)
        if declared is not None:
            declared.check(f.name, getattr(instance, f.name))


# ---------------------------------------------------------------------------------------------
# The command line's flags: argparse types that check the range while parsing (a usage error)


def _parse_number(kind: str, text: str) -> Any:
    if kind == "int":
        return int(text.replace("_", ""), 10)
    return float(text)


def flag_type(kind: str, low: float | None = None, high: float | None = None, *, low_open: bool = False,
              high_open: bool = False, special: tuple = ()) -> Callable[[str], Any]:
    """An argparse ``type`` that parses a number and checks it against a declared range.

    argparse reports a refusal as a usage error (exit 2) naming the flag:
    ``argument --fps: must be a number > 0, got -1``.
    """
    return range_type(Range(kind, low, high, low_open, high_open, tuple(special)))


def range_type(declared: Range) -> Callable[[str], Any]:
    """An argparse ``type`` for a declared range (see :func:`flag_type`)."""

    def parse(text: str) -> Any:
        try:
            value = _parse_number(declared.kind, text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {declared.describe()}, got {text!r}") from None
        try:
            return declared.check("value", value)
        except OptionError:
            raise argparse.ArgumentTypeError(f"must be {declared.describe()}, got {text}") from None

    parse.declared = declared  # the tests check that every numeric flag has one
    parse.__name__ = f"{declared.kind}_in_range"  # argparse names the type in some messages
    return parse


def field_type(cls: type, name: str) -> Callable[[str], Any]:
    """An argparse ``type`` for a flag that sets dataclass field ``name`` (the field's own range)."""
    declared = declared_range(cls, name)
    if declared is None:
        raise KeyError(f"{cls.__name__}.{name} declares no range")
    return range_type(dataclasses.replace(declared, none_ok=False))


# ---------------------------------------------------------------------------------------------
# Devices

DEVICE_FORMS = "auto, cpu, cuda or cuda:N"
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d{1,3})?)$")


def check_device(text: str, option: str = "device") -> str:
    """A device name as the renderers take it (auto, cpu, cuda, cuda:N); OptionError otherwise.
    Whether this machine has that GPU is checked where the device is opened."""
    if not isinstance(text, str) or not _DEVICE.match(text):
        raise OptionError(option, text, DEVICE_FORMS, what="option")
    return text


def device_type(text: str) -> str:
    """argparse ``type`` of ``--device``."""
    try:
        return check_device(text)
    except OptionError:
        raise argparse.ArgumentTypeError(f"must be one of {DEVICE_FORMS}, got {text!r}") from None


device_type.declared = Range("str")  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# Image shrinking: the factor must leave every camera a usable image

MIN_SHRUNK_SIDE = 16  # pixels: one rasterizer tile, and room for SSIM's 11-pixel window


def check_downscale(cameras: dict[str, tuple[int, int]], factor: int, option: str = "downscale") -> None:
    """OptionError when shrinking by ``factor`` leaves a camera (``id -> (width, height)``)
    under ``MIN_SHRUNK_SIDE`` pixels on a side; names the camera and the largest usable factor."""
    if factor == 1 or not cameras:
        return
    largest = max(1, min(min(size) for size in cameras.values()) // MIN_SHRUNK_SIDE)
    for cam_id, (width, height) in cameras.items():
        w, h = width // factor, height // factor
        if min(w, h) < MIN_SHRUNK_SIDE:
            raise OptionError(option, factor, None, what="option", message=
                              f"camera {cam_id!r} ({width}x{height} pixels) would shrink to {w}x{h}; "
                              f"a factor of at most {largest} keeps every camera at least {MIN_SHRUNK_SIDE} "
                              f"pixels on a side")
