"""Word order without fine-tuning: does the pretrained masked LM prefer a sentence as written
to the same words reordered?

Each test sentence of `word-order` labelled original is paired with a reordering of its own
(two adjacent swaps, `order_tasks.reorder` under a salt no task example uses), and both are
scored by pseudo-log-likelihood (Salazar et al., ACL 2020, Eq. 2): every token masked in turn,
the log-probability of the token summed over the sentence. A pair scores 100 when the original
scores higher, 0 when the reordering does, 50 for a tie (within TIE_TOLERANCE nats). A model
without positions sees the same bag of words in both, so it ties on every pair: 50 exactly.

Fine-tuning on `word-order` asks more than this (reading order off [CLS] in a few dozen steps,
a plateau some pretrained models leave and others do not); the zero-shot score asks the masked
LM only what pretraining taught it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ...data.order_tasks import reorder
from ...errors import invalid
from ...models import PosAttnForMaskedLM
from ..runs.ranks import barrier, join_process_group
from ..runs.stages import Stage, is_main_process, save_run, start_stage
from ..runs.standalone import reading_model
from ..runs.trainer import quiet_transformers
from .pretrain import pretrain_stage
from .runconfig import FinetuneSection, RunConfig
from .subset import fixed_subset
from .warm_start import stage_inputs

ZERO_SHOT_TASKS = ("word-order",)
ORIGINAL = "original"
SALT = "zero-shot"  # reorderings of their own, drawn apart from the task's reordered examples
TIE_TOLERANCE = 1e-4  # nats: float32 rounding of two sums of the same terms
MARKER = "zero_shot.json"
METHOD = "pseudo-log-likelihood, each token masked in turn (Salazar et al. 2020)"


def minimal_pairs(records: list[dict], labels: list[str], limit: int | None) -> list[dict]:
    """(original, reordered) pairs from the test records the fine-tuning scores (the first
    `limit` by `fixed_subset`): each record labelled original with its own reordering; one
    that no swap changes is left out."""
    if ORIGINAL not in labels:
        raise invalid("labels", labels, f"the labels of a word-order task, {ORIGINAL!r} among them")
    original = labels.index(ORIGINAL)
    pairs = []
    for record in fixed_subset(list(records), limit):
        if record["label"] != original:
            continue
        reordered = reorder(record["text"], f"{SALT}:{record['id']}")
        if reordered != record["text"]:
            pairs.append({"id": record["id"], "original": record["text"], "reordered": reordered})
    return pairs


@torch.no_grad()
def pseudo_log_likelihood(model, tokenizer, text: str, max_len: int) -> float:
    """Sum over the text's tokens of log p(token | the others), each masked in turn ([CLS]
    and [SEP] are context, never scored); one batch of as many copies as tokens."""
    ids = tokenizer(text, truncation=True, max_length=max_len, return_tensors="pt")["input_ids"][0]
    scored = torch.arange(1, len(ids) - 1)
    rows = torch.arange(len(scored))
    batch = ids.repeat(len(scored), 1)
    labels = torch.full_like(batch, -100)
    labels[rows, scored] = ids[scored]
    batch[rows, scored] = tokenizer.mask_token_id
    # With labels the head scores the masked positions only, one row per copy, in order.
    logits = model(input_ids=batch, attention_mask=torch.ones_like(batch), labels=labels).logits
    return logits.double().log_softmax(-1)[rows, ids[scored]].sum().item()


def preference(original: float, reordered: float) -> float:
    """100 when the original is more likely, 0 when the reordering is, 50 within the tie
    tolerance."""
    if abs(original - reordered) <= TIE_TOLERANCE:
        return 50.0
    return 100.0 if original > reordered else 0.0


def score_pairs(model, tokenizer, pairs: list[dict], max_len: int) -> dict:
    """Per pair the two pseudo-log-likelihoods and the preference; their mean is the score."""
    model.eval()
    scored = []
    for pair in pairs:
        original = pseudo_log_likelihood(model, tokenizer, pair["original"], max_len)
        reordered = pseudo_log_likelihood(model, tokenizer, pair["reordered"], max_len)
        scored.append({**pair, "pll_original": original, "pll_reordered": reordered})
    per_pair = [preference(p["pll_original"], p["pll_reordered"]) for p in scored]
    return {
        "score": sum(per_pair) / len(per_pair),
        "per_pair": per_pair,
        "pairs": scored,
        "method": METHOD,
    }


def zero_shot_stage(config: RunConfig, task: str, output: Path) -> Stage:
    """Fixed by the pretraining it scores and by the test examples and length it reads (the
    English data: zero-shot tasks are English)."""
    settings = {
        "pretraining": pretrain_stage(config, output).settings,
        "zero_shot": {
            "task": task,
            "max_eval_examples": config.finetune.max_eval_examples,
            "max_len": config.finetune.max_len,
            "method": METHOD,
            "tie_tolerance": TIE_TOLERANCE,
        },
    }
    return Stage(Path(output), settings, marker=MARKER, data=stage_inputs(config, (task,)))


def standalone_zero_shot_stage(config: RunConfig, output: Path, model_dir: Path, data) -> Stage:
    """`posattn zero-shot`: every task of ZERO_SHOT_TASKS in one directory, of the model in
    `model_dir` (recorded by its digest: a model given no pretraining run of its own has only
    the preset's settings to tell it apart)."""
    tasks = ZERO_SHOT_TASKS
    one_task = zero_shot_stage(config, tasks[0], output).settings
    scoring = {k: v for k, v in one_task["zero_shot"].items() if k != "task"}
    settings = {**one_task, "zero_shot": {**scoring, "tasks": list(tasks)}}
    read = reading_model(data.folders(tasks), model_dir)
    return Stage(Path(output), settings, marker=MARKER, data=stage_inputs(config, tasks, read))


def score_model(model_dir: Path, task: str, tokenizer, tasks, finetune: FinetuneSection):
    """The masked LM in `model_dir` scored on `task`'s minimal pairs under the fine-tuning's
    caps: the test records it scores (max_eval_examples by `fixed_subset`) at its max_len.
    `tasks`: an object with .records and .spec (PreparedData)."""
    labels = list(tasks.spec(task).labels)
    pairs = minimal_pairs(tasks.records(task, "test"), labels, finetune.max_eval_examples)
    if not pairs:
        raise invalid("task", task, f"a test split with sentences labelled {ORIGINAL!r} to pair")
    return score_pairs(load_masked_lm(model_dir), tokenizer, pairs, finetune.max_len)


def load_masked_lm(model_dir: Path) -> PosAttnForMaskedLM:
    """The masked LM a pretraining wrote; a directory without its MLM head (a classifier, an
    encoder alone) is refused: a freshly drawn head would score noise."""
    with quiet_transformers():  # a partial load is refused below, with its keys named
        model, info = PosAttnForMaskedLM.from_pretrained(str(model_dir), output_loading_info=True)
    missing = sorted(info["missing_keys"])
    if missing:
        raise invalid(
            "pretrained",
            str(model_dir),
            "a masked-LM model directory written by `posattn pretrain` (it lacks "
            f"{', '.join(missing[:4])}{', ...' if len(missing) > 4 else ''})",
        )
    return model


def scored_once(output: Path, score) -> dict:
    """score() on the main process alone, written to output/MARKER; every rank returns what was
    written, read after a barrier. Under a launcher every rank reaches each zero-shot cell, and
    scoring is the same on each: one does it, the others wait."""
    join_process_group()  # the pretraining's Trainer may not have run (its cell reused)
    if is_main_process():
        save_run(Path(output), {MARKER: score()})
    barrier()
    return json.loads((Path(output) / MARKER).read_text())


def zero_shot(
    model_dir: Path, config: RunConfig, task: str, output: Path, tokenizer, tasks
) -> dict:
    """A comparison's zero-shot cell: `score_model`, written to output/MARKER ({task:
    result}) with the stage's fingerprint; returns it."""
    start_stage(zero_shot_stage(config, task, output))
    return scored_once(
        output, lambda: {task: score_model(model_dir, task, tokenizer, tasks, config.finetune)}
    )
