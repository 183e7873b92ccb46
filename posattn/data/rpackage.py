"""Data shipped inside an installed R package, read without R.

An R package keeps its data sets in a lazy-load database `data/Rdata.{rdx,rdb}`:
the .rdx is a gzip-compressed serialized R list whose `variables` entry maps each object name
to (offset, length) in the .rdb; each .rdb record is a 4-byte big-endian uncompressed length
followed by the compressed serialization (zlib; or, when the index says compressed = 2 or 3,
a one-byte type '2' bzip2 / 'Z' xz / '0' none, then the stream). Stand-alone files under
`extdata/` are .rda files (gzip around "RDX3" plus a serialization). PyPI `rdata` parses the
serialization itself; this module only finds the bytes and turns the results into plain
Python (lists of str, dicts of columns).
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import struct
import warnings
import zlib
from pathlib import Path
from typing import Any


def _rdata():
    # Imported lazily: rdata pulls in pandas and xarray, which only `prepare` needs.
    import rdata

    return rdata


def to_python(value: Any) -> Any:
    """numpy string arrays -> list[str]; data frames -> {column: list}; dicts recursively."""
    if isinstance(value, dict):
        return {str(k): to_python(v) for k, v in value.items()}
    if hasattr(value, "to_dict") and hasattr(value, "columns"):  # a pandas DataFrame
        return {str(column): to_python(value[column]) for column in value.columns}
    if hasattr(value, "tolist"):
        return [None if missing(item) else item for item in value.tolist()]
    return value


def missing(item: Any) -> bool:
    """R's NA, whichever way it was converted: None, NaN or pandas.NA."""
    try:
        return item is None or bool(item != item)
    except TypeError:  # pandas.NA refuses bool()
        return True


def deserialize(raw: bytes) -> Any:
    rdata = _rdata()
    with warnings.catch_warnings():
        # rdata warns about headerless records and tibble classes; both are expected here.
        warnings.simplefilter("ignore")
        parsed = rdata.parser.parse_data(raw)
        return to_python(rdata.conversion.convert(parsed))


def decompress_record(blob: bytes, compressed: Any) -> bytes:
    (length,) = struct.unpack(">I", blob[:4])
    if compressed in (2, 3):
        kind, stream = blob[4:5], blob[5:]
        raw = {b"2": bz2.decompress, b"Z": lzma.decompress, b"0": bytes}[kind](stream)
    else:
        raw = zlib.decompress(blob[4:])
    if len(raw) != length:
        raise ValueError(f"lazy-load record: expected {length} bytes, got {len(raw)}")
    return raw


def read_lazyload(stem: Path) -> dict[str, Any]:
    """Every object of the lazy-load database `stem`.rdx / `stem`.rdb, by name."""
    index = deserialize(gzip.decompress(stem.with_suffix(".rdx").read_bytes()))
    compressed = index.get("compressed", [True])
    compressed = compressed[0] if isinstance(compressed, list) else compressed
    database = stem.with_suffix(".rdb").read_bytes()
    objects = {}
    for name, (offset, size) in index["variables"].items():
        blob = database[int(offset) : int(offset) + int(size)]
        objects[name] = deserialize(decompress_record(blob, compressed))
    return objects


def read_rda(path: Path) -> dict[str, Any]:
    """The named objects of an .rda file."""
    rdata = _rdata()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_python(rdata.read_rda(path))


def package_data(root: Path, package: str) -> dict[str, Any]:
    """The data sets of R package `package` unpacked under `root` (a Debian r-cran-* tree)."""
    return read_lazyload(root / "usr/lib/R/site-library" / package / "data" / "Rdata")
