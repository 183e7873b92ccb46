"""Positional encodings: one module per family, all behind `PositionalEncoding`."""

from .base import LayerTerms, ModelDims, Place, PositionalEncoding
from .registry import (
    ENCODINGS,
    REQUIRED,
    build_encoding,
    encoding_class,
    encoding_options,
    option_defaults,
)
from .t5 import t5_relative_bucket

__all__ = [
    "ENCODINGS",
    "REQUIRED",
    "LayerTerms",
    "ModelDims",
    "Place",
    "PositionalEncoding",
    "build_encoding",
    "encoding_class",
    "encoding_options",
    "option_defaults",
    "t5_relative_bucket",
]
