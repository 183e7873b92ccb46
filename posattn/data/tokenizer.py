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
DEFAULT_VOCAB_SIZE = 16000
MODEL_MAX_LENGTH = 512


def train_wordpiece(
    files: Sequence[Path],
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    show_progress: bool = False,
    keep_accents: bool = False,
) -> Tokenizer:
    """Train on text files (one paragraph per line): BERT normalisation (lowercase, accents
    stripped unless keep_accents: stripping also turns Japanese パ into ハ), BERT
    pre-tokenisation, [CLS] A [SEP] (B [SEP]) templates."""
    require_positive_int("vocab_size", vocab_size)
    require(vocab_size > len(SPECIAL_TOKENS), "vocab_size", vocab_size, "more than 5")
    tokenizer = Tokenizer(models.WordPiece(unk_token=UNK))
    strip = False if keep_accents else None  # None: BERT's rule, stripped when lowercasing
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=strip)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    trainer = WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        show_progress=show_progress,
    )
    tokenizer.train([str(f) for f in files], trainer)
    # The trainer numbers tokens in hash order, different on each run; renumber them so that
    # the same tokens always get the same ids: special tokens first, then the rest sorted.
    # (Ties between equally frequent pairs are also broken in hash order, so a tiny corpus
    # can learn slightly different tokens from run to run; the real corpus has not.)
    learned = sorted(set(tokenizer.get_vocab()) - set(SPECIAL_TOKENS))
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *learned])}
    tokenizer.model = models.WordPiece(vocab, unk_token=UNK)
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
