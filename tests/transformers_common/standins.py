"""What transformers' sdist leaves out of the files the harness runs, written here.

`test_modeling_common.py` imports `exporters/test_export.py` and `generation/test_utils.py`,
and `test_configuration_common.py` imports `utils/test_configuration_utils.py`; the sdist ships
none of the three. `install(package)` puts these stand-ins under the package's names, each only
where the extracted package lacks the file (a later sdist that ships it is used as it is).

- ExportTesterMixin: empty. Its tests (torch.export of every model) are not shipped, so none run.
- GenerationTesterMixin: two checks of posattn's own on `generate`, not transformers' suite:
  greedy decoding equals the argmax loop over full forwards, and the key/value cache does
  not change the tokens.
- config_common_kwargs: every `PreTrainedConfig` field a model config must take and keep,
  each with a value other than its default.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import torch

config_common_kwargs = {
    "output_hidden_states": True,
    "return_dict": False,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "architectures": ["PosAttnTestArchitecture"],
    "problem_type": "regression",
}


class ExportTesterMixin:
    """transformers' export tests are not in the sdist: none run."""


class GenerationTesterMixin:
    """posattn's checks of `generate` on every class of `generation_classes`, the classes the
    test says must generate (transformers' `all_generative_model_classes` lists only those
    that already can)."""

    max_new_tokens = 4
    generation_classes: tuple = ()

    def _generation_inputs(self, model_class):
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        self.assertTrue(model_class.can_generate(), f"{model_class.__name__} cannot generate")
        model = model_class(config).eval()
        keep = ("input_ids", "attention_mask")
        return model, {name: inputs[name] for name in keep if name in inputs}

    def _greedy_by_full_forwards(self, model, inputs) -> torch.Tensor:
        """The argmax continuation, one full forward (no cache) per new token."""
        if model.config.is_encoder_decoder:
            start = model.config.decoder_start_token_id
            tokens = torch.full_like(inputs["input_ids"][:, :1], start)
            for _ in range(self.max_new_tokens):
                logits = model(**inputs, decoder_input_ids=tokens).logits
                tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            return tokens
        tokens, mask = inputs["input_ids"], inputs.get("attention_mask")
        for _ in range(self.max_new_tokens):
            logits = model(input_ids=tokens, attention_mask=mask).logits
            tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            if mask is not None:
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        return tokens

    def _generate(self, model, inputs, **options) -> torch.Tensor:
        return model.generate(
            **inputs,
            max_new_tokens=self.max_new_tokens,
            min_new_tokens=self.max_new_tokens,
            do_sample=False,
            num_beams=1,
            pad_token_id=model.config.pad_token_id,
            **options,
        )

    @torch.no_grad()
    def test_greedy_generate_equals_argmax_of_full_forwards(self):
        self.assertTrue(self.generation_classes, "no class to generate with")
        for model_class in self.generation_classes:
            model, inputs = self._generation_inputs(model_class)
            # Right-padded prompts would continue after their padding: greedy on full rows.
            inputs.pop("attention_mask", None)
            expected = self._greedy_by_full_forwards(model, inputs)
            torch.testing.assert_close(self._generate(model, inputs), expected, rtol=0, atol=0)

    @torch.no_grad()
    def test_generate_with_cache_equals_without(self):
        self.assertTrue(self.generation_classes, "no class to generate with")
        for model_class in self.generation_classes:
            model, inputs = self._generation_inputs(model_class)
            inputs.pop("attention_mask", None)
            cached = self._generate(model, inputs, use_cache=True)
            uncached = self._generate(model, inputs, use_cache=False)
            torch.testing.assert_close(cached, uncached, rtol=0, atol=0)


STANDINS = {
    "exporters.test_export": {"ExportTesterMixin": ExportTesterMixin},
    "generation.test_utils": {"GenerationTesterMixin": GenerationTesterMixin},
    "utils.test_configuration_utils": {"config_common_kwargs": config_common_kwargs},
}


def install(package: str, package_dir: Path) -> list[str]:
    """Register the stand-ins that `package` (extracted at package_dir) lacks; their names."""
    installed = []
    for dotted, names in STANDINS.items():
        parent, leaf = dotted.split(".")
        if (package_dir / parent / f"{leaf}.py").is_file():
            continue
        parent_name = f"{package}.{parent}"
        if parent_name not in sys.modules:
            parent_module = types.ModuleType(parent_name)
            parent_module.__path__ = []
            sys.modules[parent_name] = parent_module
        module = types.ModuleType(f"{parent_name}.{leaf}")
        module.__dict__.update(names)
        sys.modules[module.__name__] = module
        setattr(sys.modules[parent_name], leaf, module)
        installed.append(dotted)
    return installed
