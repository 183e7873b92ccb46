"""Comma-separated command-line lists (arms, tasks, kernels, lengths), parsed one way by every
command: items stripped, empty ones (a trailing comma) dropped, a repeated item refused - a
repeated arm, task or length was measured twice and reported as two."""

from __future__ import annotations

import json
from typing import Any

from .errors import require


def names_of(option: str, value: str, *, none_allowed: bool = False) -> list[str]:
    """The names of a comma-separated option; refused when one is repeated or when none is
    left, unless `none_allowed` ('' for none)."""
    names = [part.strip() for part in value.split(",") if part.strip()]
    require(bool(names) or none_allowed, option, value, "comma-separated names, at least one")
    require(len(set(names)) == len(names), option, value, "comma-separated names, none repeated")
    return names


def positive_integers_of(option: str, value: str, *, none_allowed: bool = False) -> list[int]:
    """The positive integers of a comma-separated option (lengths, sizes); '' for none only
    where `none_allowed`."""
    parts = [part.strip() for part in value.split(",") if part.strip()]
    allowed = "comma-separated positive integers" + (", or '' for none" if none_allowed else "")
    require(
        all(part.isdigit() and int(part) > 0 for part in parts) and (parts or none_allowed),
        option,
        value,
        allowed,
    )
    numbers = [int(part) for part in parts]
    require(len(set(numbers)) == len(numbers), option, value, allowed + ", none repeated")
    return numbers


def seeds_of(option: str, value: str) -> list[int]:
    """The seeds of a comma-separated option (integers >= 0), at least one, none repeated."""
    parts = [part.strip() for part in value.split(",") if part.strip()]
    allowed = "comma-separated seeds (integers >= 0), at least one, none repeated"
    require(bool(parts) and all(part.isdigit() for part in parts), option, value, allowed)
    seeds = [int(part) for part in parts]
    require(len(set(seeds)) == len(seeds), option, value, allowed)
    return seeds


def positive_numbers_of(option: str, value: str) -> list[float]:
    """The positive numbers of a comma-separated option (rates, multipliers), at least one,
    none repeated."""
    allowed = "comma-separated positive numbers, at least one, none repeated"
    try:
        numbers = [float(part) for part in value.split(",") if part.strip()]
    except ValueError:
        numbers = []
    finite = all(0 < number < float("inf") for number in numbers)
    require(bool(numbers) and finite, option, value, allowed)
    require(len(set(numbers)) == len(numbers), option, value, allowed)
    return numbers


def value_of(text: str) -> Any:
    """An option's value from the command line: JSON where it parses (64, 0.5, true, null,
    [1, 2]), else the text itself ("interleaved")."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def encoding_options_of(option: str, pairs: list[str]) -> dict[str, dict[str, Any]]:
    """["rope.layout=interleaved", "t5.num_buckets=64"] -> {"rope": {"layout":
    "interleaved"}, "t5": {"num_buckets": 64}}; an option given twice is refused."""
    options: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        name, separator, value = pair.partition("=")
        encoding, dot, key = name.strip().partition(".")
        allowed = "ENCODING.KEY=VALUE, e.g. rope.layout=interleaved"
        require(bool(separator and dot and encoding and key), option, pair, allowed)
        require(key not in options.get(encoding, {}), option, pair, allowed + ", each once")
        options.setdefault(encoding, {})[key] = value_of(value.strip())
    return options
