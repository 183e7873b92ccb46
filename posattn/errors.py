"""One way to reject bad input: name the parameter, the value, and what is allowed."""

from __future__ import annotations

import math
from typing import Any


class PosAttnConfigError(ValueError):
    """A parameter or input that posattn cannot use."""


def invalid(parameter: str, value: Any, allowed: str) -> PosAttnConfigError:
    return PosAttnConfigError(f"{parameter}={value!r} is not allowed: {allowed}")


def require(condition: bool, parameter: str, value: Any, allowed: str) -> None:
    """Raise `invalid(...)` unless `condition` holds."""
    if not condition:
        raise invalid(parameter, value, allowed)


def require_choice(parameter: str, value: Any, choices: tuple[Any, ...] | list[Any]) -> None:
    require(value in choices, parameter, value, f"expected one of {', '.join(map(repr, choices))}")


def is_integer(value: Any) -> bool:
    """An int, and not a bool (which Python counts as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """A finite int or float, and not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def is_bool(value: Any) -> bool:
    """True or False: a string such as "false" is not a switch (it is truthy)."""
    return isinstance(value, bool)


def require_probability(parameter: str, value: Any) -> None:
    """A finite number in [0, 1) (a dropout rate, label smoothing's epsilon)."""
    require(is_real(value) and 0.0 <= value < 1.0, parameter, value, "a probability in [0, 1)")


def require_positive_int(parameter: str, value: Any) -> None:
    require(
        is_integer(value) and value >= 1,
        parameter,
        value,
        "expected an integer >= 1",
    )
