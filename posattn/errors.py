"""One way to reject bad input: name the parameter, the value, and what is allowed."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class PosAttnConfigError(ValueError):
    """A parameter or input that posattn cannot use; from `invalid`, it also holds the
    parameter, value and what is allowed (`parameter`, `value`, `allowed`)."""

    parameter: str | None = None


def invalid(parameter: str, value: Any, allowed: str) -> PosAttnConfigError:
    error = PosAttnConfigError(f"{parameter}={value!r} is not allowed: {allowed}")
    error.parameter, error.value, error.allowed = parameter, value, allowed
    return error


@contextmanager
def named_as_flags(*fields: str) -> Iterator[None]:
    """A command's settings refused under the flags that set them: an error naming one of
    `fields` (train_len; a command passes its options' destinations, `*vars(args)`) is
    raised again naming its flag (--train-len), the name the user typed; any other error
    passes unchanged."""
    try:
        yield
    except PosAttnConfigError as error:
        if error.parameter not in fields:
            raise
        flag = "--" + error.parameter.replace("_", "-")
        raise invalid(flag, error.value, error.allowed) from None


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
