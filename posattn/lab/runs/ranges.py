"""The allowed range of every numeric run setting, declared next to its section and checked
once for a whole merged config (merge_config), before anything runs.

A section lists its rules in a class attribute `RANGES = {"steps": AT_LEAST_1, ...}`; a
subclass inherits its bases' rules and may override them. A rule refuses a value with one
line naming the key (its dotted path), the value and the range."""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from ...errors import invalid, is_real


@dataclass(frozen=True)
class Range:
    """A number in [low, high] (either end open, either end absent); `integer` asks for an
    int, `optional` also admits None; `items` applies the rule to each element of a list,
    which must not be empty; `distinct` also refuses a repeated element (a seed twice is one
    run counted twice: an interval over identical runs shrinks to nothing); `why` is said
    with the range."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    optional: bool = False
    items: bool = False
    distinct: bool = False
    why: str = ""

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            text = f"{kind} in {left}{self.low:g}, {self.high:g}{right}"
        elif self.low is not None:
            text = f"{kind} {'>' if self.low_open else '>='} {self.low:g}"
        elif self.high is not None:
            text = f"{kind} {'<' if self.high_open else '<='} {self.high:g}"
        else:
            text = kind
        if self.optional:
            text += " or null"
        if self.items:
            text = f"a non-empty list of {text.replace('an integer', 'integers')}"
            text = text.replace("a number", "numbers")
        if self.distinct:
            text = text.replace("a non-empty list of", "a non-empty list of distinct")
        return f"{text} ({self.why})" if self.why else text

    def admits_number(self, value: Any) -> bool:
        if value is None:
            return self.optional
        if not is_real(value) or (self.integer and not isinstance(value, int)):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def admits(self, value: Any) -> bool:
        if self.items:
            return (
                isinstance(value, list | tuple)
                and len(value) > 0
                and all(self.admits_number(v) for v in value)
                and not (self.distinct and len(set(value)) < len(value))
            )
        return self.admits_number(value)


def _with(rule: Range, **changes) -> Range:
    return Range(**{**rule.__dict__, **changes})


AT_LEAST_1 = Range(low=1, integer=True)  # steps, batch sizes, model sizes, epochs
POSITIVE = Range(low=0, low_open=True)  # learning rates, epsilons
NON_NEGATIVE = Range(low=0)  # weight decay, gradient-norm clipping (0: none)
SEED = Range(low=0, integer=True)
FRACTION = Range(low=0, high=1)  # warmup_ratio
PROBABILITY = Range(low=0, high=1, high_open=True)  # dropout, label smoothing
OPEN_PROBABILITY = Range(low=0, high=1, low_open=True, high_open=True)  # something must happen
POSITIVE_OR_NULL = _with(AT_LEAST_1, optional=True)  # max_* example caps: None means all
POSITIVE_OR_NULL_SCALE = _with(POSITIVE, optional=True)  # a multiplier, None: the default
SEEDS = _with(SEED, items=True, distinct=True)
# A tokenizer asked for fewer tokens than its special tokens returns the text uncut (it only
# logs), so a smaller limit let every example through at full length.
PAIR_LENGTH = Range(low=5, integer=True, why="[CLS] A [SEP] B [SEP] with a token of each text")
# Pretraining packs [CLS] + max_len - 1 corpus tokens a block; 1 left none.
BLOCK_LENGTH = Range(low=2, integer=True, why="[CLS] and at least one corpus token a block")
LEARNING_RATES = _with(POSITIVE, items=True, distinct=True)


def section_rules(section_type: type) -> dict[str, Range]:
    """RANGES of `section_type` and of its bases, the subclass's rule winning."""
    rules: dict[str, Range] = {}
    for cls in reversed(section_type.__mro__):
        rules.update(cls.__dict__.get("RANGES", {}))
    return rules


def check_ranges(config: Any, prefix: str = "") -> None:
    """Refuse the first setting of `config` (a dataclass of sections, recursively) that is
    outside its declared range: `invalid("pretrain.steps", -5, "an integer >= 1")`."""
    rules = section_rules(type(config))
    for item in fields(config):
        value = getattr(config, item.name)
        key = f"{prefix}{item.name}"
        rule = rules.get(item.name)
        if rule is not None and not rule.admits(value):
            raise invalid(key, value, f"expected {rule.describe()}")
        if is_dataclass(value) and not isinstance(value, type):
            check_ranges(value, key + ".")
