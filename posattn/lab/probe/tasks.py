"""Synthetic probe tasks, generated on the fly from a seed, each isolating one positional skill.

Every example is a token sequence of at most the requested length n (right-padded to n), with
a target at each scored position (-100 elsewhere) and segment ids. Two model kinds read them:

- causal-lm: a decoder (`PosAttnForCausalLM`); position t is scored from tokens 0..t only.
  Sequence outputs (reverse, sort, recall) are next-token targets after a separator, so
  teacher-forced exact match equals exact match of greedy decoding.
- encoder-tagging: a bidirectional encoder with a token-level head; a target at one or every
  position (majority reads the [CLS] output at position 0).

One vocabulary serves every task (`VOCAB_SIZE`): specials, the offsets k of relative-given, 16
content symbols and 128 keys for recall.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ...errors import invalid

PAD, CLS, SEP, NO, YES = 0, 1, 2, 3, 4
MAX_OFFSET = 4
OFFSET_TOKEN = {k: 4 + k for k in range(1, MAX_OFFSET + 1)}  # ids 5..8
SYMBOLS = tuple(range(9, 25))  # 16 content symbols
KEYS = tuple(range(25, 25 + 128))  # distinct keys of associative recall
VOCAB_SIZE = KEYS[-1] + 1
IGNORE = -100

ABSOLUTE_POSITION = 1  # absolute: every position outputs the token at this position
RELATIVE_OFFSET = 2  # relative: every position outputs the token this many places back

CAUSAL_LM, ENCODER_TAGGING = "causal-lm", "encoder-tagging"

# (token ids, targets, segment ids), all of one length <= the requested n
Example = tuple[list[int], list[int], list[int]]


def _symbols(rng: random.Random, count: int) -> list[int]:
    return [rng.choice(SYMBOLS) for _ in range(count)]


def absolute(rng: random.Random, n: int) -> Example:
    """[CLS] x_1 .. x_{n-1}; every position i > p outputs x_p, p = ABSOLUTE_POSITION."""
    ids = [CLS, *_symbols(rng, n - 1)]
    targets = [ids[ABSOLUTE_POSITION] if i > ABSOLUTE_POSITION else IGNORE for i in range(n)]
    return ids, targets, [0] * n


def relative(rng: random.Random, n: int) -> Example:
    """[BOS] x_1 .. x_{n-1}; position i outputs x_{i-k} (k = RELATIVE_OFFSET) where i - k >= 1."""
    ids = [CLS, *_symbols(rng, n - 1)]
    k = RELATIVE_OFFSET
    targets = [ids[i - k] if i - k >= 1 else IGNORE for i in range(n)]
    return ids, targets, [0] * n


def relative_given(rng: random.Random, n: int) -> Example:
    """[BOS] <k> x_2 .. x_{n-1}, k in 1..4 given by its token; position i outputs x_{i-k}
    where i - k >= 2."""
    k = rng.randint(1, MAX_OFFSET)
    ids = [CLS, OFFSET_TOKEN[k], *_symbols(rng, n - 2)]
    targets = [ids[i - k] if i - k >= 2 else IGNORE for i in range(n)]
    return ids, targets, [0] * n


def _transduction(source: list[int], output: list[int]) -> Example:
    """[BOS] source [SEP] output, output scored as next tokens from the [SEP] on."""
    ids = [CLS, *source, SEP, *output]
    first = len(source) + 1  # the [SEP]: it predicts output[0]
    targets = [ids[i + 1] if first <= i < len(ids) - 1 else IGNORE for i in range(len(ids))]
    return ids, targets, [0] * len(ids)


def reverse(rng: random.Random, n: int) -> Example:
    """[BOS] x_1 .. x_m [SEP] x_m .. x_1, m = (n - 2) // 2."""
    source = _symbols(rng, (n - 2) // 2)
    return _transduction(source, source[::-1])


def sort(rng: random.Random, n: int) -> Example:
    """[BOS] x_1 .. x_m [SEP] sorted(x), m = (n - 2) // 2 (symbols ordered by id)."""
    source = _symbols(rng, (n - 2) // 2)
    return _transduction(source, sorted(source))


def majority(rng: random.Random, n: int) -> Example:
    """[CLS] x_1 .. x_{n-1} over two symbols a, b; the [CLS] output is the more frequent one
    (never a tie: n - 1 is made odd by leaving the last position as padding if needed)."""
    a, b = SYMBOLS[0], SYMBOLS[1]
    count = n - 1 if (n - 1) % 2 else n - 2
    share = rng.uniform(0.2, 0.8)  # vary the margin: some sequences are close calls
    body = [a if rng.random() < share else b for _ in range(count)]
    winner = a if body.count(a) > body.count(b) else b
    ids = [CLS, *body]
    return ids, [winner] + [IGNORE] * count, [0] * len(ids)


def recall(rng: random.Random, n: int) -> Example:
    """[BOS] k_1 v_1 .. k_m v_m [SEP] q_1 w_1 .. q_Q w_Q: after each queried key q comes its
    value w (scored as the next token at q's position). Keys distinct (from 128), values
    from the 16 symbols, queries drawn from the m keys with replacement; m = (n - 2) // 3
    (at most 128) and Q = (n - 2 - 2m) // 2."""
    pairs = min((n - 2) // 3, len(KEYS))
    queries = (n - 2 - 2 * pairs) // 2
    keys = rng.sample(KEYS, pairs)
    values = _symbols(rng, pairs)
    asked = [rng.randrange(pairs) for _ in range(queries)]
    ids = [CLS, *(t for pair in zip(keys, values, strict=True) for t in pair), SEP]
    targets = [IGNORE] * len(ids)
    for q in asked:
        ids += [keys[q], values[q]]
        targets += [values[q], IGNORE]
    return ids, targets, [0] * len(ids)


def shift_equal(rng: random.Random, n: int) -> Example:
    """[CLS] a_1 .. a_m [SEP] b_1 .. b_m, segments 0 and 1; each b_j is tagged YES when it
    equals a_j (the token m + 1 places back, at the same offset in the other segment) and NO
    otherwise. Half of the pairs are equal (B is A shifted by m + 1 positions); in the others
    each b_j differs from a_j with probability 1/2. Exact match: the whole decision "equal up
    to a shift" and where not. m = (n - 2) // 2."""
    m = (n - 2) // 2
    a = _symbols(rng, m)
    b = list(a)
    if rng.random() < 0.5:
        for j in range(m):
            if rng.random() < 0.5:
                b[j] = rng.choice([s for s in SYMBOLS if s != a[j]])
    ids = [CLS, *a, SEP, *b]
    targets = [IGNORE] * (m + 2) + [YES if x == y else NO for x, y in zip(a, b, strict=True)]
    return ids, targets, [0] * (m + 1) + [1] * (m + 1)


@dataclass(frozen=True)
class ProbeTask:
    name: str
    skill: str
    model: str  # CAUSAL_LM or ENCODER_TAGGING
    min_length: int
    make: Callable[[random.Random, int], Example]

    def batch(self, rng: random.Random, size: int, length: int) -> dict[str, Tensor]:
        """`size` examples of length <= `length`, right-padded to `length`: input_ids,
        attention_mask, token_type_ids and targets ([B, length] each)."""
        if length < self.min_length:
            raise invalid("length", length, f"task {self.name!r} needs >= {self.min_length}")
        rows = {key: [] for key in ("input_ids", "attention_mask", "token_type_ids", "targets")}
        for _ in range(size):
            ids, targets, segments = self.make(rng, length)
            pad = length - len(ids)
            rows["input_ids"].append(ids + [PAD] * pad)
            rows["attention_mask"].append([1] * len(ids) + [0] * pad)
            rows["token_type_ids"].append(segments + [0] * pad)
            rows["targets"].append(targets + [IGNORE] * pad)
        return {key: torch.tensor(value) for key, value in rows.items()}


TASKS: dict[str, ProbeTask] = {
    task.name: task
    for task in (
        ProbeTask(
            "absolute", "the token at a fixed absolute position", ENCODER_TAGGING, 3, absolute
        ),
        ProbeTask("relative", f"the token {RELATIVE_OFFSET} places back", CAUSAL_LM, 4, relative),
        ProbeTask(
            "relative-given", "the token k places back, k given", CAUSAL_LM, 7, relative_given
        ),
        ProbeTask("reverse", "reverse a sequence after [SEP]", CAUSAL_LM, 4, reverse),
        ProbeTask("sort", "sort a sequence after [SEP]", CAUSAL_LM, 4, sort),
        ProbeTask("majority", "the majority symbol, read from [CLS]", ENCODER_TAGGING, 3, majority),
        ProbeTask("recall", "the values of queried keys", CAUSAL_LM, 7, recall),
        ProbeTask(
            "shift-equal", "where segment B equals A shifted", ENCODER_TAGGING, 4, shift_equal
        ),
    )
}


def probe_task(name: str) -> ProbeTask:
    if name not in TASKS:
        raise invalid("task", name, f"one of {', '.join(TASKS)}")
    return TASKS[name]
