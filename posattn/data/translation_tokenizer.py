"""One BPE vocabulary for both sides of a translation set (shared source/target embeddings).

Cased and reversible: NFKC, a Metaspace pre-tokenizer (SentencePiece's "▁" for a space) and
its decoder, so `decode` gives back the text as written and BLEU is scored on detokenised
output. Every encoded segment ends with </s>; <s> starts the decoder.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer

from ..errors import require, require_positive_int

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIAL_TOKENS = (PAD, UNK, BOS, EOS)  # ids 0-3
DEFAULT_TRANSLATION_VOCAB = 4000  # small: ~1M words per language, and CPU-sized models
MODEL_MAX_LENGTH = 512


def train_shared_bpe(texts: Iterable[str], vocab_size: int = DEFAULT_TRANSLATION_VOCAB):
    """A BPE tokenizer trained on the source and target texts together."""
    require_positive_int("vocab_size", vocab_size)
    require(vocab_size > 2 * len(SPECIAL_TOKENS), "vocab_size", vocab_size, "more than 8")
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    eos = tokenizer.token_to_id(EOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}", pair=f"$A {EOS} $B {EOS}", special_tokens=[(EOS, eos)]
    )
    return wrap(tokenizer)


def wrap(tokenizer: Tokenizer):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        model_max_length=MODEL_MAX_LENGTH,
        model_input_names=["input_ids", "attention_mask"],
    )


def save_translation_tokenizer(tokenizer, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = tokenizer.save_pretrained(str(folder))
    return sorted({Path(p) for p in written if Path(p).is_file()})


def load_translation_tokenizer(folder: str | Path):
    from transformers import PreTrainedTokenizerFast

    folder = Path(folder)
    require(
        (folder / "tokenizer.json").is_file(),
        "tokenizer",
        str(folder),
        "a folder with tokenizer.json (posattn data prepare --translation NAME)",
    )
    return PreTrainedTokenizerFast.from_pretrained(str(folder))
