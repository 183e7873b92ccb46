"""A lowercase WordPiece tokenizer trained on the corpus, BERT style.

Saved with transformers' `save_pretrained` (tokenizer.json, tokenizer_config.json) plus a
BERT vocab.txt, so it loads as `PreTrainedTokenizerFast`, `BertTokenizerFast` or through
`AutoTokenizer`, and feeds the transformers Trainer and a fill-mask pipeline.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.trainers import WordPieceTrainer

from ..errors import require, require_positive_int
from .layout import paths

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)  # ids 0-4, [PAD] = 0 as in BERT
CONTINUATION = "##"  # WordPiece's mark of a piece inside a word
DEFAULT_VOCAB_SIZE = 16000
MODEL_MAX_LENGTH = 512


def bert_pipeline(model: models.Model, keep_accents: bool) -> Tokenizer:
    """A tokenizer of `model` with BERT's normalisation (lowercase; accents stripped unless
    keep_accents), pre-tokenisation and WordPiece decoding."""
    tokenizer = Tokenizer(model)
    strip = False if keep_accents else None  # None: BERT's rule, stripped when lowercasing
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=strip)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix=CONTINUATION)
    return tokenizer


def symbols_in_order(tokenizer: Tokenizer, files: Sequence[Path]) -> list[str]:
    """The trainer's first symbols, in the order of their ids when given as special tokens:
    every character of the files' words (once normalised and pre-tokenised as `tokenizer`
    does) by code point, as the trainer orders its alphabet, then '##c' for every character
    found inside a word (after its first), sorted."""
    alphabet: set[str] = set()
    inside: set[str] = set()
    for file in files:
        with open(file, encoding="utf-8") as lines:
            for line in lines:
                normalised = tokenizer.normalizer.normalize_str(line)
                for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(normalised):
                    alphabet.update(word)
                    inside.update(word[1:])
    return sorted(alphabet) + sorted(CONTINUATION + c for c in inside)


def train_wordpiece(
    files: Sequence[Path],
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    show_progress: bool = False,
    keep_accents: bool = False,
) -> Tokenizer:
    """Train on text files (one paragraph per line): BERT normalisation (lowercase, accents
    stripped unless keep_accents: stripping also turns Japanese パ into ハ), BERT
    pre-tokenisation, [CLS] A [SEP] (B [SEP]) templates. The same files give the same
    tokenizer on every run."""
    require_positive_int("vocab_size", vocab_size)
    require(vocab_size > len(SPECIAL_TOKENS), "vocab_size", vocab_size, "more than 5")
    learner = bert_pipeline(models.WordPiece(unk_token=UNK), keep_accents)
    # The trainer numbers its alphabet by code point but each '##c' piece when it first meets
    # it, walking its word counts in hash order, so the pieces got other ids on each run;
    # ties between equally frequent pairs are broken by id, so a run could learn other tokens
    # (the 12,000-token multilingual vocabulary differed by a dozen tokens between two
    # prepares of one corpus). Given as special tokens - the alphabet first, as the trainer
    # numbers it, then the pieces sorted - every symbol has its id before training starts.
    symbols = symbols_in_order(learner, files)
    trainer = WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[*SPECIAL_TOKENS, *symbols],
        show_progress=show_progress,
    )
    learner.train([str(f) for f in files], trainer)
    # Renumbered: special tokens first, then the rest sorted, so the same tokens always get
    # the same ids. A new tokenizer: the learner holds the symbols as special tokens too.
    learned = sorted(set(learner.get_vocab()) - set(SPECIAL_TOKENS))
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *learned])}
    tokenizer = bert_pipeline(models.WordPiece(vocab, unk_token=UNK), keep_accents)
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    cls, sep = tokenizer.token_to_id(CLS), tokenizer.token_to_id(SEP)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0",
        pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, cls), (SEP, sep)],
    )
    return tokenizer


def wrap(tokenizer: Tokenizer):
    """The transformers fast tokenizer around a trained `tokenizers.Tokenizer`."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token=UNK,
        pad_token=PAD,
        cls_token=CLS,
        sep_token=SEP,
        mask_token=MASK,
        model_max_length=MODEL_MAX_LENGTH,
        do_lower_case=True,
        # Segment ids for pair tasks, as BERT's tokenizer returns them.
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )


def save_tokenizer(tokenizer: Tokenizer, folder: Path) -> list[Path]:
    """Write the tokenizer files into `folder`; return them."""
    folder.mkdir(parents=True, exist_ok=True)
    written = wrap(tokenizer).save_pretrained(str(folder))
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    (folder / "vocab.txt").write_text("".join(token + "\n" for token, _ in vocab), "utf-8")
    return sorted({Path(p) for p in written if Path(p).is_file()} | {folder / "vocab.txt"})


def load_tokenizer(data_dir: str | os.PathLike | None = None):
    """The prepared tokenizer of `data_dir` as a transformers `PreTrainedTokenizerFast`."""
    from transformers import PreTrainedTokenizerFast

    folder = paths(data_dir).tokenizer
    require(
        (folder / "tokenizer.json").is_file(),
        "data_dir",
        str(paths(data_dir).root),
        "a data directory with a tokenizer; run `posattn data prepare`",
    )
    return PreTrainedTokenizerFast.from_pretrained(str(folder))


def count_tokens(tokenizer: Tokenizer, lines: Iterable[str], batch: int = 4096) -> int:
    """WordPiece tokens in `lines`, without [CLS] / [SEP]."""
    total, chunk = 0, []
    for line in lines:
        chunk.append(line)
        if len(chunk) == batch:
            total += sum(
                len(e.ids) for e in tokenizer.encode_batch(chunk, add_special_tokens=False)
            )
            chunk = []
    if chunk:
        total += sum(len(e.ids) for e in tokenizer.encode_batch(chunk, add_special_tokens=False))
    return total
