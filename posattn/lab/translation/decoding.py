"""Greedy and beam-search decoding against one small interface, `NextTokenScorer`:

    scorer(prefixes [k, t], parents [k]) -> log p(next token | prefix, source) [k, vocab]

Row i of `prefixes` extends row `parents[i]` of the previous call's prefixes by one token (the
first call's rows are the start tokens, parents = their own indices). A scorer that recomputes
everything ignores `parents`; a scorer with a key/value cache reorders its cache by them and
feeds only the last column. Both give the same log-probabilities, so the searches below do not
know which one runs.

Beam search (Wu et al. 2016, GNMT Sec. 7): the k best prefixes by summed log-probability are
kept; a hypothesis ends at </s>; finished ones are ranked by log P(Y|X) / lp(Y) with the length
penalty lp(Y) = ((5 + |Y|) / 6)^alpha, |Y| counting the generated tokens and </s>. A sentence
stops when k hypotheses have finished (fairseq's rule); at the length limit the open ones are
finished as they are. DIET decodes with k = 10 and alpha = 0.6.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from ...errors import require, require_positive_int


class NextTokenScorer(Protocol):
    def __call__(self, prefixes: Tensor, parents: Tensor) -> Tensor: ...


@dataclass(frozen=True)
class SearchSettings:
    beam_size: int = 10
    length_penalty: float = 0.6
    max_new_tokens: int = 128

    def __post_init__(self) -> None:
        require_positive_int("beam_size", self.beam_size)
        require_positive_int("max_new_tokens", self.max_new_tokens)
        require(self.length_penalty >= 0, "length_penalty", self.length_penalty, "a number >= 0")


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha."""
    return ((5.0 + length) / 6.0) ** alpha


def strip_eos(tokens: list[int], eos: int) -> list[int]:
    return tokens[: tokens.index(eos)] if eos in tokens else tokens


@torch.no_grad()
def greedy_search(
    scorer: NextTokenScorer,
    batch_size: int,
    start: int,
    eos: int,
    max_new_tokens: int,
    device: torch.device | str = "cpu",
) -> list[list[int]]:
    """The argmax token at every step until </s> (or the limit); </s> is not returned.
    device: the scorer's model's, where prefixes and parents are made."""
    require_positive_int("max_new_tokens", max_new_tokens)
    prefixes = torch.full((batch_size, 1), start, dtype=torch.long, device=device)
    parents = torch.arange(batch_size, device=device)
    finished = torch.zeros(batch_size, dtype=torch.bool, device=device)
    for _ in range(max_new_tokens):
        log_probs = scorer(prefixes, parents)
        next_tokens = log_probs.argmax(-1).masked_fill(finished, eos)
        prefixes = torch.cat([prefixes, next_tokens[:, None]], dim=1)
        finished |= next_tokens == eos
        if finished.all():
            break
    return [strip_eos(row[1:], eos) for row in prefixes.tolist()]


@torch.no_grad()
def beam_search(
    scorer: NextTokenScorer,
    batch_size: int,
    start: int,
    eos: int,
    settings: SearchSettings,
    device: torch.device | str = "cpu",
) -> list[list[int]]:
    """The best finished hypothesis per sentence (without </s>), see the module docstring.
    device: the scorer's model's, where prefixes, parents and scores are made."""
    k = settings.beam_size
    prefixes = torch.full((batch_size * k, 1), start, dtype=torch.long, device=device)
    parents = torch.arange(batch_size * k, device=device)
    scores = torch.full((batch_size, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # k copies of the start; only one may expand at first
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(batch_size)]
    done = [False] * batch_size
    for step in range(1, settings.max_new_tokens + 1):
        log_probs = scorer(prefixes, parents).float()
        vocab = log_probs.shape[-1]
        candidates = (scores.reshape(-1, 1) + log_probs).reshape(batch_size, k * vocab)
        top_scores, top_index = candidates.topk(min(2 * k, k * vocab), dim=1)
        next_parents, next_tokens, next_scores = [], [], []
        penalty = length_penalty(step, settings.length_penalty)
        for b in range(batch_size):
            chosen = []
            if not done[b]:
                for rank, (score, index) in enumerate(
                    zip(top_scores[b].tolist(), top_index[b].tolist(), strict=True)
                ):
                    if score == float("-inf"):
                        break
                    row, token = b * k + index // vocab, index % vocab
                    if token == eos:
                        if rank < k:  # an </s> below the k best would never have been kept
                            tokens = prefixes[row, 1:].tolist()
                            finished[b].append((score / penalty, tokens))
                    else:
                        chosen.append((row, token, score))
                    if len(chosen) == k:
                        break
                done[b] = len(finished[b]) >= k
            if done[b] or not chosen:
                done[b] = True
                chosen = [(b * k, eos, float("-inf"))] * k  # a placeholder, never read again
            chosen += [(chosen[0][0], chosen[0][1], float("-inf"))] * (k - len(chosen))
            for row, token, score in chosen:
                next_parents.append(row)
                next_tokens.append(token)
                next_scores.append(score)
        if all(done):
            break
        parents = torch.tensor(next_parents, device=device)
        new_tokens = torch.tensor(next_tokens, device=device)[:, None]
        prefixes = torch.cat([prefixes[parents], new_tokens], dim=1)
        scores = torch.tensor(next_scores, device=device).reshape(batch_size, k)
    else:
        # The limit: open hypotheses finish as they are.
        penalty = length_penalty(settings.max_new_tokens, settings.length_penalty)
        for b in range(batch_size):
            if not done[b]:
                for j in range(k):
                    if scores[b, j] > float("-inf"):
                        tokens = prefixes[b * k + j, 1:].tolist()
                        finished[b].append((float(scores[b, j]) / penalty, tokens))
    return [max(found, key=lambda item: item[0])[1] if found else [] for found in finished]
