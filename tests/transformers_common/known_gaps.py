"""THE table of transformers common tests that posattn fails today because of a known gap.

Each entry is marked xfail(strict=True): when the gap is closed the test passes, the XPASS
fails the suite, and the entry is removed. An entry's test runs with its subtests folded into
the test (the first failing subtest fails it), so that subtests that pass do not each count as
a strict XPASS. Keys are test names; an entry may be limited to
some model families ("encoder", "causal", "seq2seq") or encodings (or labels of the
tester's SETTINGS).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gap:
    reason: str
    families: tuple[str, ...] | None = None  # None: every family
    encodings: tuple[str, ...] | None = None  # None: every encoding

    def applies(self, family: str, encoding: str) -> bool:
        return (self.families is None or family in self.families) and (
            self.encodings is None or encoding in self.encodings
        )


ATTENTIONS = Gap("output_attentions=True is ignored: the models return no attention probabilities")
HIDDEN_STATES = Gap("output_hidden_states=True is ignored: the models return no hidden states")
RETURN_DICT = Gap("return_dict=False is ignored: the models always return a ModelOutput")
# transformers skips its inputs_embeds tests for a forward without the argument: marked here so
# that they fail the suite (XPASS) once they run and pass.
INPUTS_EMBEDS = Gap("inputs_embeds is not an argument of the models' forward")
SEQ2SEQ_GENERATE = Gap(
    "PosAttnForSeq2SeqLM has no generate() (no GenerationMixin)", families=("seq2seq",)
)

# test name -> the gaps that fail it, the first that applies to a family and encoding wins.
KNOWN_GAPS: dict[str, tuple[Gap, ...]] = {
    "test_attention_outputs": (ATTENTIONS,),
    "test_retain_grad_hidden_states_attentions": (ATTENTIONS,),
    "test_hidden_states_output": (HIDDEN_STATES,),
    "test_model_outputs_equivalence": (RETURN_DICT,),
    "test_inputs_embeds": (INPUTS_EMBEDS,),
    # (for an encoder-decoder without the argument transformers returns early: a pass)
    "test_inputs_embeds_matches_input_ids": (
        Gap(INPUTS_EMBEDS.reason, families=("encoder", "causal")),
    ),
    "test_problem_types": (
        Gap(
            "config.problem_type is ignored: multi_label_classification takes the "
            "single-label loss",
            families=("encoder",),
        ),
    ),
    "test_generation_tester_mixin_inheritance": (SEQ2SEQ_GENERATE,),
    "test_greedy_generate_equals_argmax_of_full_forwards": (SEQ2SEQ_GENERATE,),
    "test_generate_with_cache_equals_without": (SEQ2SEQ_GENERATE,),
    "test_can_init_all_missing_weights": (
        Gap(
            "_init_weights knows nn.Linear, nn.Embedding and nn.LayerNorm only: an encoding's "
            "own parameters stay uninitialised when a checkpoint lacks them",
            # every encoding with raw parameters (learned's table is an nn.Embedding); DIET's
            # segment bias table too
            encodings=(
                "t5",
                "tupe-r",
                "diet-abs",
                "shaw",
                "deberta",
                "linformer",
                "diet-abs+segments",
            ),
        ),
    ),
}


def gap_for(test: str, family: str, encoding: str) -> str | None:
    """The reason `test` fails for this family and encoding, or None."""
    for gap in KNOWN_GAPS.get(test, ()):
        if gap.applies(family, encoding):
            return gap.reason
    return None
