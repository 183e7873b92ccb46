"""A model card (README.md, huggingface_hub's ModelCard format: YAML metadata, then prose) in
every model directory a run saves: which encoding (paper, equation, options), the model's
sizes, what it was trained on and how long, and the run's measured metrics, so that a directory
copied away from its run still says what it is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard, ModelCardData

from ...data.manifest import write_atomic
from ...encodings import encoding_class
from .config import to_yaml

CARD_FILE = "README.md"
# Metrics too long for a card (per-step curves, hypotheses): the run's metrics.json keeps them.
SCALARS = (int, float, str, bool)


def scalar_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if isinstance(v, SCALARS) or v is None}


def model_card(
    model_config, run_config: Any = None, metrics: dict | None = None, kind: str = "model"
) -> ModelCard:
    """The card of a model with PosAttnConfig `model_config`, trained by `run_config` (a run
    config dataclass, written as YAML) with `metrics` (scalars shown, the rest referred to)."""
    encoding = encoding_class(model_config.encoding)
    options = json.dumps(model_config.encoding_options or {}, sort_keys=True)
    data = ModelCardData(
        library_name="posattn",
        license="apache-2.0",
        tags=["posattn", "positional-encoding", model_config.encoding],
    )
    sizes = (
        f"{model_config.num_layers} layers, d_model {model_config.d_model}, "
        f"{model_config.num_heads} heads, FFN {model_config.ffn_dim}, max_len "
        f"{model_config.max_len}, {model_config.norm}-LN, vocabulary {model_config.vocab_size}"
    )
    lines = [
        f"# posattn {kind}: `{model_config.encoding}`",
        "",
        f"A {kind} with the `{model_config.encoding}` positional encoding "
        f"({encoding.paper}, {encoding.equation}), built and trained by posattn.",
        "",
        f"- **Encoding options:** `{options}`",
        f"- **Segments:** {model_config.segments}; **causal:** {model_config.causal}",
        f"- **Sizes:** {sizes}",
        "",
        "## How to use",
        "",
        "```python",
        "import posattn  # registers the posattn classes with transformers' Auto classes",
        "from transformers import AutoModel",
        "",
        'model = AutoModel.from_pretrained("path/to/this/directory")',
        "```",
    ]
    if run_config is not None:
        lines += ["", "## Training", "", "```yaml", to_yaml(run_config).rstrip(), "```"]
    if metrics:
        rows = [f"| {k} | {v} |" for k, v in scalar_metrics(metrics).items()]
        lines += ["", "## Results", "", "| metric | value |", "|---|---|", *rows]
        lines += ["", "Every measured value, curves included, is in the run's `metrics.json`."]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines) + "\n")


def write_model_card(
    model_dir: Path,
    model_config,
    run_config: Any = None,
    metrics: dict | None = None,
    kind: str = "model",
) -> Path:
    """Write README.md into model_dir atomically; returns its path."""
    path = Path(model_dir) / CARD_FILE
    write_atomic(path, str(model_card(model_config, run_config, metrics, kind)))
    return path
