"""`posattn inspect`: every analysis that applies to the model, figures + inspect.json."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from ...errors import invalid, require, require_positive_int
from ..runs.device import model_device, resolve_device
from ..runs.tables import table_lines
from .figures import plot_four_terms, plot_head_grid, plot_positional, plot_spectra
from .forward import logits_per_layer
from .heads import CLASSES, bias_classes, head_patterns
from .loading import InspectedModel, load_for_inspection
from .positional import cls_index_of, cls_lines, positional_logits, relative_share
from .rank import rank_summary
from .structure import row_centred, structure
from .terms import four_terms, has_four_terms, is_input_additive

DEFAULT_LENGTH = 64


@dataclass
class InspectSettings:
    """length: tokens per text (None: 64, or the model's max_len if shorter); samples: blocks
    of the prepared corpus (validation split);
    layer, head: 1-based focus (None: every layer; the figures draw head 1 / every head);
    text: one text instead of the corpus; data_dir: the prepared data (posattn data prepare);
    device: where the model runs (lab/runs/device.py: auto, cpu, cuda, cuda:N)."""

    length: int | None = None
    samples: int = 8
    layer: int | None = None
    head: int | None = None
    text: str | None = None
    data_dir: str | None = None
    device: str = "cpu"

    def __post_init__(self) -> None:
        require_positive_int("samples", self.samples)
        for name in ("length", "layer", "head"):
            if getattr(self, name) is not None:
                require_positive_int(name, getattr(self, name))
        if self.length is not None:  # 1 cut the corpus into blocks of [CLS] alone
            require(self.length >= 2, "length", self.length, "[CLS] and at least one token: >= 2")


def input_ids(model: InspectedModel, settings: InspectSettings):
    """([B, n] token ids without padding, a description, the first text's tokens): the text,
    or packed blocks of real corpus text."""
    tokenizer = model.tokenizer
    if tokenizer is None:
        from ...data import load_tokenizer

        tokenizer = load_tokenizer(settings.data_dir)
    if settings.text is not None:
        require(bool(settings.text.strip()), "text", settings.text, "a non-empty text")
        ids = tokenizer(
            settings.text, truncation=True, max_length=settings.length, return_tensors="pt"
        )["input_ids"]
        described = f"--text ({ids.shape[1]} tokens)"
    else:
        from ..runs.mlm_data import pack_paragraphs
        from ..runs.sources import PreparedData

        corpus = PreparedData(settings.data_dir)
        paragraphs = corpus.paragraphs("validation", limit=50 * settings.samples)
        ids = pack_paragraphs(tokenizer, paragraphs, settings.length)[: settings.samples]
        require(len(ids) > 0, "samples", settings.samples, "a corpus long enough for one block")
        described = f"{len(ids)} blocks of {settings.length} tokens, prepared validation corpus"
    vocab = model.encoder.config.vocab_size
    if int(ids.max()) >= vocab:
        raise invalid(
            "tokenizer",
            f"ids up to {int(ids.max())}",
            f"the model's vocabulary of {vocab}: the tokenizer is not the model's",
        )
    tokens = tokenizer.convert_ids_to_tokens(ids[0].tolist())
    return ids, described, tokens


def check_focus(settings: InspectSettings, config) -> None:
    if settings.layer is not None:
        require(
            settings.layer <= config.num_layers,
            "layer",
            settings.layer,
            f"a layer in 1..{config.num_layers}",
        )
    if settings.head is not None:
        require(
            settings.head <= config.num_heads,
            "head",
            settings.head,
            f"a head in 1..{config.num_heads}",
        )


def rounded(values):
    return torch.as_tensor(values).to(torch.float64).round(decimals=6).tolist()


def analyse_terms(found: dict, head: int, figure_dir: Path, caption: str) -> dict:
    full = sum(found.values())
    full_variance = row_centred(full).pow(2).mean()
    numbers, per_head = {}, {}
    for name, term in found.items():
        per_head[name] = [structure(term[:, h]) for h in range(term.shape[1])]
        numbers[name] = {  # every head weighs the same: the mean over heads and texts
            key: sum(h[key] for h in per_head[name]) / len(per_head[name])
            for key in per_head[name][0]
        }
        numbers[name]["within_row_std"] = row_centred(term).pow(2).mean().sqrt().item()
        numbers[name]["variance_ratio"] = (row_centred(term).pow(2).mean() / full_variance).item()
    drawn = {name: term[0, head - 1] for name, term in found.items()}
    figure = plot_four_terms(drawn, numbers, caption, figure_dir / "four_terms.png")
    return {
        "layer": 1,
        "head_drawn": head,
        "terms": numbers,
        "per_head": per_head,
        "matrices_drawn": {name: rounded(m) for name, m in drawn.items()},
        "figure": figure.name,
    }


def analyse_positional(encoder, n: int, settings: InspectSettings, figure_dir: Path) -> dict:
    groups = positional_logits(encoder, n)
    if not groups:
        places = ", ".join(p.value for p in encoder.encoding.places) or "nowhere"
        return {
            "note": f"encoding {encoder.config.encoding!r} adds no content-free logits "
            f"(it acts at: {places})",
            "groups": [],
        }
    cls_index = cls_index_of(encoder)
    heads = [settings.head] if settings.head else list(range(1, encoder.config.num_heads + 1))
    written = []
    for group in groups:
        if settings.layer is not None and settings.layer not in group["layers"]:
            continue
        layers = group["layers"]
        label = f"layers {layers[0]}-{layers[-1]}" if len(layers) > 1 else f"layer {layers[0]}"
        figure = plot_positional(
            group["bias"],
            heads,
            cls_index,
            f"{encoder.config.encoding}: positional logits, {label}",
            figure_dir / f"positional_logits_layer{layers[0]}.png",
        )
        written.append(
            {
                "layers": layers,
                "shape": list(group["bias"].shape),
                "cls": cls_lines(group["bias"], cls_index),
                "classes_alone": bias_classes(group["bias"]),
                "relative_share": relative_share(group["bias"], cls_index),
                "bias": rounded(group["bias"]),
                "figure": figure.name,
            }
        )
    return {"cls_index": cls_index, "groups": written}


def analyse_heads(logits: list, settings: InspectSettings, figure_dir: Path) -> dict:
    numbers = list(range(1, len(logits) + 1))
    if settings.layer is not None:
        numbers = [settings.layer]
    layers = head_patterns([logits[n - 1] for n in numbers])
    figure = plot_head_grid(layers, numbers, figure_dir / "head_patterns.png")
    counts = {c: sum(layer["class"].count(c) for layer in layers) for c in CLASSES}
    return {
        "layers": dict(zip(map(str, numbers), layers, strict=True)),
        "counts": counts,
        "figure": figure.name,
    }


def analyse_rank(encoder, logits, positional, terms, settings, figure_dir) -> dict:
    config = encoder.config
    focus = settings.layer or 1
    layers = {str(i): rank_summary(m) for i, m in enumerate(logits, start=1)}
    panels = {f"layer {focus} logits on text": layers[str(focus)]["spectrum"]}
    positional_rank = None
    if terms is not None:
        positional_rank = rank_summary(terms["position-position"])
        product = "p W^Q W^K^T p^T" if is_input_additive(encoder) else "p U^Q U^K^T p^T"
        panels[f"layer 1 position-position term ({product})"] = positional_rank["spectrum"]
    elif positional:
        group = positional[0]
        positional_rank = rank_summary(group["bias"])
        panels[f"positional logits, layer {group['layers'][0]}"] = positional_rank["spectrum"]
    for summary in layers.values():
        summary.pop("spectrum")
    adds_rank = bool(positional) or not is_input_additive(encoder)
    figure = plot_spectra(
        panels,
        config.d_model // config.num_heads,
        f"{config.encoding}: singular values",
        figure_dir / "rank_spectra.png",
    )
    return {
        "kind": "positions inside attention" if adds_rank else "input-additive",
        "bound": None if adds_rank else config.d_model // config.num_heads,
        "layers": layers,
        "spectra_layer": focus,
        "spectra": {k: rounded(v) for k, v in panels.items()},
        "positional": None
        if positional_rank is None
        else {k: v for k, v in positional_rank.items() if k != "spectrum"},
        "figure": figure.name,
    }


def inspect_model(path: str | Path, output: str | Path, settings: InspectSettings) -> dict:
    """Run every analysis that applies; writes PNGs and inspect.json into `output`."""
    model = load_for_inspection(path, resolve_device(settings.device))
    encoder, config = model.encoder, model.encoder.config
    check_focus(settings, config)
    limit = encoder.encoding.max_positions
    if settings.length is None:
        settings = replace(settings, length=min(DEFAULT_LENGTH, limit or DEFAULT_LENGTH))
    elif limit is not None and settings.length > limit:
        raise invalid("length", settings.length, f"at most the model's max_len={limit}")
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    ids, described, tokens = input_ids(model, settings)
    ids = ids.to(model_device(encoder))  # the analyses below read their results on the CPU
    n = ids.shape[1]
    caption = f"{config.encoding} ({Path(model.source).name}), {described}"
    logits = None
    if not encoder.encoding.projects_keys():
        logits = [layer.cpu() for layer in logits_per_layer(encoder, ids)]
    positional = positional_logits(encoder, n)
    result = {
        "model": {
            "source": model.source,
            "kind": model.kind,
            "encoding": config.encoding,
            "encoding_options": config.encoding_options,
            "places": [p.value for p in encoder.encoding.places],
            "num_layers": config.num_layers,
            "num_heads": config.num_heads,
            "head_dim": config.d_model // config.num_heads,
            "input_additive": is_input_additive(encoder),
        },
        "inputs": {
            "described": described,
            "length": n,
            "texts": len(ids),
            "tokens_of_first": tokens,
        },
        "settings": asdict(settings),
    }
    head = settings.head or 1
    terms = None
    if has_four_terms(encoder):
        terms = {name: term.cpu() for name, term in four_terms(encoder, ids).items()}
    result["terms"] = (
        analyse_terms(terms, head, output, caption + f", layer 1, head {head}")
        if terms is not None
        else {"note": "TUPE Eq. 6 applies to input-additive encodings and bert-ad only"}
    )
    result["positional"] = analyse_positional(encoder, n, settings, output)
    if logits is None:
        note = "keys are projected along the sequence (Linformer): no n x n attention"
        result["heads"] = result["rank"] = {"note": note}
    else:
        result["heads"] = analyse_heads(logits, settings, output)
        result["rank"] = analyse_rank(encoder, logits, positional, terms, settings, output)
    (output / "inspect.json").write_text(json.dumps(result, indent=1))
    (output / "inspect.md").write_text(summary_markdown(result))
    return result


def summary_markdown(result: dict) -> str:
    """The headline numbers as markdown tables (what `posattn report` shows next to the PNGs)."""
    m = result["model"]
    lines = [
        f"# posattn inspect: `{m['encoding']}`",
        "",
        f"Model `{m['source']}` ({m['kind']}), {m['num_layers']} layers x {m['num_heads']} "
        f"heads (d_h = {m['head_dim']}). Inputs: {result['inputs']['described']}.",
        "",
    ]
    terms = result["terms"].get("terms")
    if terms:
        lines += [
            "## TUPE Eq. 6: layer-1 terms (mean over heads and texts)",
            "",
        ]
        header = ["term", "Toeplitz R2", "noise", "rank-1 R2", "noise", "within-row std"]
        header.append("variance / logits")
        keys = ("toeplitz_r2", "noise_toeplitz_r2", "rank1_r2", "noise_rank1_r2")
        keys += ("within_row_std", "variance_ratio")
        rows = [[name, *(f"{s[key]:.3f}" for key in keys)] for name, s in terms.items()]
        lines += [*table_lines(header, rows), ""]
    groups = result["positional"]["groups"]
    if groups:
        lines += [
            "## Content-free positional logits (TUPE Fig. 4)",
            "",
            f"[CLS] at index {result['positional']['cls_index']}; spread = max - min along the "
            "[CLS] row / column (0: constant, as TUPE's untie makes it). The class of the bias "
            "alone: where it would send the attention by itself (head patterns' rule, the "
            "bias taken as the logits); on text, content shares each row with it.",
            "",
        ]
        header = ["layers", "head", "min", "max", "[CLS] row mean", "row spread"]
        header += ["[CLS] column mean", "column spread", "class of the bias alone"]
        rows = []
        for group in groups:
            cls = group["cls"]
            layers = ", ".join(map(str, group["layers"]))
            alone = group.get("classes_alone") or []
            for h, matrix in enumerate(group["bias"]):
                values = [v for row in matrix for v in row]
                column = (
                    [f"{cls['column_mean'][h]:.4f}", f"{cls['column_spread'][h]:.4f}"]
                    if cls["column_mean"]
                    else ["-", "-"]
                )
                rows.append(
                    [layers, h + 1, f"{min(values):.4f}", f"{max(values):.4f}",
                     f"{cls['row_mean'][h]:.4f}", f"{cls['row_spread'][h]:.4f}", *column,
                     alone[h] if h < len(alone) else "-"]
                )  # fmt: skip
        lines += [*table_lines(header, rows), ""]
    heads = result["heads"]
    if "counts" in heads:
        lines += [
            "## Head patterns (TUPE Fig. 6)",
            "",
            *table_lines(list(heads["counts"]), [list(heads["counts"].values())]),
            "",
        ]
    rank = result["rank"]
    if "layers" in rank:
        lines += [
            "## Rank of the logits (DIET Theorem 1)",
            "",
            f"Kind: {rank['kind']}; bound: {rank['bound'] or 'none'}.",
            "",
        ]
        rows = []
        for layer, r in rank["layers"].items():
            numerical = sum(r["numerical_rank"]) / len(r["numerical_rank"])
            energy = sum(r["energy_rank"]) / len(r["energy_rank"])
            rows.append([layer, f"{numerical:.1f}", f"{energy:.1f}"])
        header = ["layer", "numerical rank (mean over heads)", "99% energy rank"]
        lines += [*table_lines(header, rows), ""]
    return "\n".join(lines)
