"""The `trainer:` section every Trainer run shares: precision, accumulation, checkpointing,
logging, compilation, data-loading workers and sharding, passed to `TrainingArguments` as they
are named there. Checked when the config is merged (bad values named with their key) and, for
what depends on the machine (fp16 and tf32 need a CUDA GPU), when a run builds its arguments."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import torch

from ...errors import invalid, require
from . import ranges as r

# transformers' FSDPOption values; "offload" and "auto_wrap" go with a sharding strategy.
FSDP_OPTIONS = (
    "full_shard",
    "shard_grad_op",
    "no_shard",
    "hybrid_shard",
    "hybrid_shard_zero2",
    "offload",
    "auto_wrap",
)
FSDP_STRATEGIES = FSDP_OPTIONS[:5]


def reporting_integrations() -> tuple[str, ...]:
    """The names `report_to` accepts in this transformers (plus "none" and "all")."""
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    return (*INTEGRATION_TO_CALLBACK, "none", "all")


@dataclass
class TrainerSection:
    """bf16 / fp16: mixed precision (at most one); tf32: TensorFloat-32 matmuls on Ampere+
    GPUs (null: torch's default); gradient_accumulation_steps: micro-batches per optimiser
    step, the configured batch_size staying the global batch; report_to: transformers'
    integrations ([] logs nowhere); fsdp: transformers' FSDP options ("full_shard auto_wrap"),
    "" for none, with fsdp_config its settings (e.g. {fsdp_version: 2}); save_on_each_node:
    every machine writes checkpoints (when their disks are not shared); positional_lr_scale:
    the positional encodings' learning rate as a multiple of the run's (param_groups.py);
    input_positions_lr_scale: the input position table's (BERT's, in learned, bert-r and
    linformer), null for positional_lr_scale's - so that bert-r's T5 table can train at ten
    times the rate and its input table at the run's."""

    bf16: bool = False
    fp16: bool = False
    tf32: bool | None = None
    gradient_accumulation_steps: int = 1
    gradient_checkpointing: bool = False
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])
    torch_compile: bool = False
    dataloader_num_workers: int = 0
    fsdp: str = ""
    fsdp_config: dict[str, Any] = field(default_factory=dict)
    save_on_each_node: bool = False
    positional_lr_scale: float = 1.0
    input_positions_lr_scale: float | None = None

    RANGES: ClassVar[dict[str, r.Range]] = {
        "gradient_accumulation_steps": r.AT_LEAST_1,
        "positional_lr_scale": r.POSITIVE,
        "input_positions_lr_scale": r.POSITIVE_OR_NULL_SCALE,
        "dataloader_num_workers": r.Range(low=0, integer=True),
    }

    def check(self, prefix: str = "trainer.") -> None:
        """Choices that ranges cannot express, each refused with its key."""
        require(
            not (self.bf16 and self.fp16),
            f"{prefix}fp16",
            self.fp16,
            f"false when {prefix}bf16 is true: one mixed precision at a time",
        )
        known = reporting_integrations()
        for name in self.report_to:
            require(
                name in known,
                f"{prefix}report_to",
                list(self.report_to),
                f"names among {', '.join(known)}",
            )
        options = self.fsdp.split()
        for option in options:
            require(
                option in FSDP_OPTIONS,
                f"{prefix}fsdp",
                self.fsdp,
                f"options among {', '.join(FSDP_OPTIONS)}",
            )
        require(
            not options or any(o in FSDP_STRATEGIES for o in options),
            f"{prefix}fsdp",
            self.fsdp,
            f"a sharding strategy ({', '.join(FSDP_STRATEGIES)}) with any other option",
        )
        require(
            bool(options) or not self.fsdp_config,
            f"{prefix}fsdp_config",
            dict(self.fsdp_config),
            f"empty unless {prefix}fsdp names a sharding strategy",
        )

    def result_settings(self) -> dict:
        """The knobs that change a run's numbers, where they differ from the defaults: they
        join its stage fingerprint (workers, logging or checkpointing change nothing)."""
        default = TrainerSection()
        return {
            name: getattr(self, name)
            for name in (
                "bf16",
                "fp16",
                "tf32",
                "torch_compile",
                "positional_lr_scale",
                "input_positions_lr_scale",
            )
            if getattr(self, name) != getattr(default, name)
        }


def check_machine(
    section: TrainerSection,
    cuda: bool | None = None,
    prefix: str = "trainer.",
    kernel: str | None = None,
) -> None:
    """What needs a CUDA GPU, refused on a machine without one (before any training); with
    the model's `kernel`, a kernel that cannot run on the machine's device (kernel="triton"
    on a CPU outside Triton's interpreter: refused at the first forward otherwise)."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    if kernel == "triton":
        from ...kernels.table_bias import refusal, unavailable

        reason = unavailable(torch.device("cuda" if cuda else "cpu"))
        if reason is not None:
            raise refusal(kernel, reason)
    if cuda:
        return
    for name in ("fp16", "tf32"):
        if getattr(section, name):
            raise invalid(
                f"{prefix}{name}",
                True,
                "false on a machine without a CUDA GPU (trainer.bf16 runs on CPUs too)",
            )
    # accelerate shards with FSDP on GPUs only: CPU processes would quietly run DDP instead
    if section.fsdp:
        raise invalid(
            f"{prefix}fsdp",
            section.fsdp,
            '"" on a machine without a CUDA GPU (the Trainer shards on GPUs only; CPU '
            "processes train data-parallel with the same global batch)",
        )


def positional_rates(section: TrainerSection) -> dict:
    """The positional learning rates of `section` as AtomicCheckpointTrainer keywords."""
    return {
        "positional_lr_scale": section.positional_lr_scale,
        "input_positions_lr_scale": section.input_positions_lr_scale,
    }


def trainer_arguments(section: TrainerSection, cuda: bool | None = None) -> dict:
    """`section` as TrainingArguments keywords (after check_machine)."""
    check_machine(section, cuda)
    arguments = {item.name: getattr(section, item.name) for item in fields(section)}
    # the Trainer's optimiser groups take them
    del arguments["positional_lr_scale"], arguments["input_positions_lr_scale"]
    # transformers 5 names it activation_checkpointing (gradient_checkpointing: an alias)
    arguments["activation_checkpointing"] = arguments.pop("gradient_checkpointing")
    arguments["report_to"] = list(section.report_to) or "none"
    arguments["fsdp"] = section.fsdp or None
    arguments["fsdp_config"] = dict(section.fsdp_config) or None
    return arguments
