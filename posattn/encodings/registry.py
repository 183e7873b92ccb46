"""Encoding names -> classes; options are validated by each class's Options dataclass."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import PosAttnConfigError, invalid
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
    return cls.Options(**options)


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
