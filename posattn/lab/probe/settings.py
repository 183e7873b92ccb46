"""What a probe run trains and evaluates: `default` is every task, nine encodings, three seeds
and two positional rates (432 cells), `smoke` is for the tests."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from ...encodings import (
    ModelDims,
    PositionalEncoding,
    build_encoding,
    encoding_options,
)
from ...errors import PosAttnConfigError, invalid, require, require_choice, require_positive_int
from ...models.config import require_word_scale
from ...models.segments import SEGMENT_MODES
from ..runs.fingerprint import fingerprint, run_settings
from ..runs.options import require_distinct_names
from ..runs.variants import OPTION_VARIANTS, split_variant, variant_options
from .tasks import TASKS, probe_task

# The papers' encodings (TUPE: BERT-A, BERT-R, TUPE-A, TUPE-R; DIET: DIET-ABS, DIET-REL), the
# two most used modern ones, and the same model without positions: the control every other
# encoding is paired with (below BERT-A's input table on every task but `absolute`, docs/probes.md).
DEFAULT_ENCODINGS = [
    "learned",
    "bert-r",
    "tupe-a",
    "tupe-r",
    "diet-abs",
    "diet-rel",
    "rope",
    "alibi",
    "none",
]
# Options posattn never picks silently elsewhere; a probe needs one value to run.
PROBE_OPTIONS = {"rope": {"layout": "half"}, "xpos": {"layout": "half"}}


@dataclass
class ProbeSettings:
    tasks: list[str] = field(default_factory=lambda: list(TASKS))
    # Encodings, or an encoding with one of the papers' ablations that set its options
    # (`tupe-a/tie-cls`, `diet-abs/share-none`: lab/runs/variants.py), paired with it by seed.
    encodings: list[str] = field(default_factory=lambda: list(DEFAULT_ENCODINGS))
    seeds: int = 3
    train_len: int = 32  # training lengths are drawn up to this; position tables have this size
    test_lens: list[int] = field(default_factory=lambda: [32, 64, 128, 256])
    steps: int = 250
    batch_size: int = 32
    learning_rate: float = 3e-3
    # Rates for the encoding's own parameters, as multiples of learning_rate. A logit bias
    # must grow to O(log n) to pick one offset, which the shared rate does not reach in a few
    # hundred steps (T5 17%, DIET-REL 21% on `relative` at 1x), while ten times it holds a
    # position table behind projections back (TUPE-A on `relative`: 35% at 10x, 86% at 1x;
    # docs/probes.md). Each (task, encoding) trains at every rate and reports the one whose training
    # loss ends lowest - a loss on examples drawn fresh at each step, so on unseen data
    # (`grid.at_chosen_rate`).
    position_lr_scales: list[float] = field(default_factory=lambda: [1.0, 10.0])
    d_model: int = 64
    num_layers: int = 2
    num_heads: int = 4
    ffn_dim: int = 128
    segments: str = "input"
    # What the word vectors are multiplied by (PosAttnConfig.word_scale; None: 1, as BERT).
    word_scale: float | None = None
    eval_examples: int = 64
    workers: int = 2
    # Encodings every other one is paired with, seed by seed (`paired.py`); None: `learned`
    # (BERT-A, the papers' baseline) and `none` (no positions, the control) where the run
    # has them. Only the summary reads it: changing it re-summarises a finished run.
    paired_with: list[str] | None = None
    # Options per encoding (`--option diet-abs.rank=2`), over PROBE_OPTIONS; they enter the
    # fingerprint of that encoding's cells alone.
    encoding_options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("seeds", "train_len", "steps", "batch_size", "d_model", "num_layers"):
            require_positive_int(name, getattr(self, name))
        for name in ("num_heads", "ffn_dim", "eval_examples", "workers"):
            require_positive_int(name, getattr(self, name))
        require(
            self.d_model % self.num_heads == 0,
            "d_model",
            self.d_model,
            f"a multiple of the number of heads, {self.num_heads}, which share it equally",
        )
        require(self.learning_rate > 0, "learning_rate", self.learning_rate, "a positive rate")
        scales = self.position_lr_scales
        require(
            bool(scales)
            and all(isinstance(s, int | float) and s > 0 for s in scales)
            and len(set(scales)) == len(scales),
            "position_lr_scales",
            scales,
            "positive multipliers of the learning rate, at least one, none repeated",
        )
        require_choice("segments", self.segments, SEGMENT_MODES)
        require_word_scale(self.word_scale)  # the model's own check, before any cell
        require(bool(self.tasks), "tasks", self.tasks, "at least one task")
        require(bool(self.encodings), "encodings", self.encodings, "at least one encoding")
        require(bool(self.test_lens), "test_lens", self.test_lens, "at least one length")
        for name in self.tasks:
            task = probe_task(name)
            require(
                self.train_len >= task.min_length,
                "train_len",
                self.train_len,
                f"at least {task.min_length} for task {name!r}",
            )
        for name in self.encodings:
            # an unknown encoding fails with the known ones, a variant a probe cannot serve
            # with the ones it can
            split_variant(name, OPTION_VARIANTS)
            self.check_options(name)
        require_distinct_names("encodings", self.encodings)  # they would share cells
        for length in self.test_lens:
            require_positive_int("test_lens", length)
            require(
                length >= self.train_len,
                "test_lens",
                self.test_lens,
                f"lengths >= train_len={self.train_len} (the training length and longer)",
            )
        for name in self.encoding_options:
            require_choice("--option's encoding", name, tuple(self.encodings))
        for name in self.paired_with or []:
            require_choice("paired_with", name, tuple(self.encodings))
        if self.paired_with is not None:
            require(
                len(set(self.paired_with)) == len(self.paired_with),
                "paired_with",
                self.paired_with,
                "encodings of the run, none repeated",
            )

    def check_options(self, name: str) -> None:
        """An unknown or bad option fails here, and a variant whose options the encoding does
        not have (`rope/tie-cls`) names the variant."""
        encoding = self.encoding_of(name)
        try:
            encoding_options(encoding, self.options_of(name))
        except PosAttnConfigError as error:
            if name == encoding:
                raise
            raise invalid(
                "encodings",
                name,
                f"options that {encoding!r} has, from the variant and --option ({error})",
            ) from None

    def references(self) -> list[str]:
        """The encodings every other one is paired with (see `paired_with`)."""
        if self.paired_with is not None:
            return list(self.paired_with)
        return [name for name in ("learned", "none") if name in self.encodings]

    def rates_of(self, encoding: str) -> list[float]:
        """The positional rates `encoding` trains at: every candidate, or the first alone for
        an encoding without parameters of its own (none, sinusoidal, rope, xpos, alibi),
        which no rate moves."""
        return self.position_lr_scales if self.learns(encoding) else self.position_lr_scales[:1]

    def learns(self, encoding: str) -> bool:
        """Whether `encoding` has position parameters at this model's sizes, the ones a
        positional rate moves (`PositionalEncoding.positional_parameters`)."""
        built = self.built(encoding)
        return built is None or bool(built.positional_parameters())

    def holds_other_parameters(self, encoding: str) -> bool:
        """Whether some of `encoding`'s parameters are not position terms (Linformer's sequence
        projections E and F): they train at the shared rate, as in `posattn pretrain`."""
        built = self.built(encoding)
        if built is None:
            return False
        return len(built.positional_parameters()) < len(list(built.parameters()))

    def built(self, encoding: str) -> PositionalEncoding | None:
        """`encoding` built at this model's sizes, in whichever direction it serves (None if
        neither: the cells then say why)."""
        for causal in (False, True):
            dims = ModelDims(
                self.d_model, self.num_heads, self.num_layers, self.train_len, causal=causal
            )
            try:
                return build_encoding(self.encoding_of(encoding), dims, self.options_of(encoding))
            except PosAttnConfigError:
                continue
        return None

    @staticmethod
    def encoding_of(name: str) -> str:
        """The registered encoding of an encoding or `ENCODING/VARIANT` name of the run."""
        return name.partition("/")[0]

    def options_of(self, encoding: str) -> dict[str, Any]:
        """The options encoding `encoding` (a name of the run) is built with."""
        return {
            **PROBE_OPTIONS.get(self.encoding_of(encoding), {}),
            **self.given_options(encoding),
        }

    def given_options(self, encoding: str) -> dict[str, Any]:
        """What the run sets of `encoding`'s options: its variant's, then `--option`'s."""
        variant = encoding.partition("/")[2] or None
        return {**variant_options(variant), **self.encoding_options.get(encoding, {})}

    def cell_settings(
        self, encoding: str | None = None, position_lr_scale: float | None = None
    ) -> dict:
        """Everything a (task, encoding, seed, rate) cell's result depends on besides the
        first three, and the posattn version: with `encoding`, the options given for it (none
        given: the settings every cell shares, so cells run before options existed keep their
        fingerprint); the cell's own positional rate (default: the first candidate) where the
        candidates were, so cells run when one rate was the setting keep theirs."""
        # the cell's own rate stands in for the candidates (position_lr_scales)
        skip = {"tasks", "encodings", "seeds", "workers", "paired_with", "encoding_options"}
        skip.add("position_lr_scales")
        if self.word_scale is None:  # cells run before the setting existed keep theirs
            skip.add("word_scale")
        probe = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        scale = self.position_lr_scales[0] if position_lr_scale is None else position_lr_scale
        probe["position_lr_scale"] = float(scale)
        if encoding and self.holds_other_parameters(encoding):
            # Since the rate left Linformer's E and F: cells from before trained them at it.
            probe["rate_reaches"] = "positional parameters"
        given = self.given_options(encoding) if encoding else {}
        return run_settings(probe={**probe, "encoding_options": given} if given else probe)

    def cell_fingerprint(
        self, encoding: str | None = None, position_lr_scale: float | None = None
    ) -> str:
        """The run fingerprint (lab/runs/fingerprint.py) of `cell_settings`."""
        return fingerprint(self.cell_settings(encoding, position_lr_scale))

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS = {
    "default": ProbeSettings(),
    "smoke": ProbeSettings(
        tasks=["relative", "majority"],
        encodings=["diet-rel", "learned"],
        seeds=1,
        train_len=16,
        test_lens=[16, 32],
        steps=200,
        eval_examples=32,
        workers=1,
        position_lr_scales=[10.0],
    ),
}


def preset(name: str, **overrides) -> ProbeSettings:
    if name not in PRESETS:
        raise invalid("--preset", name, f"one of {', '.join(PRESETS)}")
    return replace(PRESETS[name], **overrides)
