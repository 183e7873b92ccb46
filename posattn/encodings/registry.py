"""Encoding names -> classes; options are validated by each class's Options dataclass."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from ..errors import PosAttnConfigError, invalid, is_bool, is_integer, is_real
from .absolute import Learned, NoPosition, Sinusoidal
from .alibi import Alibi
from .base import ModelDims, PositionalEncoding
from .deberta import Deberta
from .diet import DietAbsolute, DietRelative
from .fire import Fire
from .kerple import Kerple
from .linformer import DietAbsLin, Linformer
from .rotary import Rope, Xpos
from .shaw import ShawRelative
from .t5 import BertRelative, T5Bias
from .tupe import BertAd, TupeAbsolute, TupeRelative

ENCODINGS: dict[str, type[PositionalEncoding]] = {
    cls.name: cls
    for cls in (
        NoPosition,
        Sinusoidal,
        Learned,
        ShawRelative,
        T5Bias,
        BertRelative,
        BertAd,
        TupeAbsolute,
        TupeRelative,
        DietAbsolute,
        DietRelative,
        Rope,
        Xpos,
        Alibi,
        Deberta,
        Kerple,
        Fire,
        Linformer,
        DietAbsLin,
    )
}


def encoding_class(name: str) -> type[PositionalEncoding]:
    if name not in ENCODINGS:
        raise invalid("encoding", name, f"available encodings are {', '.join(ENCODINGS)}")
    return ENCODINGS[name]


def encoding_options(name: str, options: dict[str, Any] | None = None):
    """Validated options dataclass of encoding `name`."""
    cls = encoding_class(name)
    options = dict(options or {})
    known = {f.name for f in dataclasses.fields(cls.Options)}
    unknown = sorted(set(options) - known)
    if unknown:
        allowed = ", ".join(sorted(known)) or "none"
        raise PosAttnConfigError(
            f"encoding_options={options!r} is not allowed for encoding {name!r}: "
            f"unknown option(s) {', '.join(unknown)}; its options are: {allowed}"
        )
    check_option_types(name, cls.Options, options)
    return cls.Options(**options)


# What an option declared bool, int or float takes (an int stands for a float: YAML writes
# 500000 for a rotary base); the Options classes check the ranges.
SCALAR_KINDS = (
    (bool, is_bool, "True or False"),
    (int, is_integer, "an integer"),
    (float, is_real, "a finite number"),
)


def check_option_types(name: str, options_class: type, options: dict[str, Any]) -> None:
    """Refuse an option whose value is not of its declared scalar kind: a string "false" for
    a bool was taken as true, "1" for a float failed inside a comparison, inf or nan
    passed."""
    hints = typing.get_type_hints(options_class)
    for key, value in options.items():
        declared = hints[key]
        kinds = typing.get_args(declared) if isinstance(declared, types.UnionType) else ()
        kinds = kinds or (declared,)
        if value is None and type(None) in kinds:
            continue
        for kind, admits, description in SCALAR_KINDS:
            if kind in kinds:
                if not admits(value):
                    if type(None) in kinds:
                        description += " or None"
                    raise invalid(key, value, f"{description} (option of encoding {name!r})")
                break


def build_encoding(
    name: str, dims: ModelDims, options: dict[str, Any] | None = None
) -> PositionalEncoding:
    return encoding_class(name)(dims, encoding_options(name, options))


REQUIRED = object()  # marks an option without a default in `option_defaults`


def option_defaults(name: str) -> dict[str, Any]:
    return {
        f.name: REQUIRED if f.metadata.get("required") else f.default
        for f in dataclasses.fields(encoding_class(name).Options)
    }
