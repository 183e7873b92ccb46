"""Launch a function in N CPU processes joined by gloo, as torchrun would (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR/PORT, the launcher's own store), and record what each rank writes to
disk."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch.multiprocessing as mp
from torch.distributed import TCPStore


def launch(world: int, function, *args) -> None:
    """function(*args) in `world` spawned processes; raises if any of them fails.

    As torchrun does, the launcher holds the rendezvous store, bound to a port the system
    picks, and every rank joins it as a client: a port probed free and handed to rank 0 to
    bind could be taken in between by another process on a loaded machine."""
    store = TCPStore("127.0.0.1", 0, world, is_master=True, wait_for_workers=False)
    mp.start_processes(
        _rank_main, args=(world, store.port, function, args), nprocs=world, start_method="spawn"
    )
    del store


def _rank_main(rank: int, world: int, port: int, function, args) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        TORCHELASTIC_USE_AGENT_STORE="True",
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
    )
    import torch

    torch.set_num_threads(1)
    function(*args)


def record_writes(log: Path) -> None:
    """From now on, every file this process renames into place (write_atomic, checkpoint
    moves) or writes with Path.write_text/write_bytes is appended to `log` (JSON lines)."""
    real_replace = os.replace
    real_text, real_bytes = Path.write_text, Path.write_bytes

    def note(path) -> None:
        with open(log, "a") as out:
            out.write(json.dumps(str(path)) + "\n")

    def replace(source, target, *rest, **kw):
        note(target)
        return real_replace(source, target, *rest, **kw)

    def write_text(self, *a, **kw):
        note(self)
        return real_text(self, *a, **kw)

    def write_bytes(self, *a, **kw):
        note(self)
        return real_bytes(self, *a, **kw)

    os.replace = replace
    Path.write_text, Path.write_bytes = write_text, write_bytes


def written(log: Path) -> list[str]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def compare_worker(arguments: list[str], logs: str) -> None:
    """`posattn compare ARGUMENTS` on this rank, its writes and its fine-tuning runs logged
    under `logs` (writes-RANK.jsonl, runs-RANK.jsonl)."""
    from posattn.cli import main
    from posattn.lab.pretraining import finetune

    rank = os.environ["RANK"]
    record_writes(Path(logs) / f"writes-{rank}.jsonl")
    real_once = finetune.finetune_once

    def logged_once(pretrained, tokenizer, splits, num_labels, config, lr, seed, output):
        with open(Path(logs) / f"runs-{rank}.jsonl", "a") as out:
            out.write(json.dumps([config.finetune.tasks, lr, seed]) + "\n")
        return real_once(pretrained, tokenizer, splits, num_labels, config, lr, seed, output)

    finetune.finetune_once = logged_once
    assert main(arguments) == 0


def sharded_training_worker(encodings: list[str], steps: int, result: str) -> None:
    """Per encoding, the same tiny masked LM trained `steps` AdamW steps on the same global
    batches twice on this rank's half of each batch: data-parallel (DDP), then sharded with
    FSDP2 - each layer (_no_split_modules) and the positional encoding its own unit, then the
    root. Rank 0 writes {encoding: {"ddp": losses, "fsdp": losses}} to `result`."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    from posattn.encodings import PositionalEncoding
    from posattn.models import PosAttnForMaskedLM
    from posattn.models.config import PosAttnConfig

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    generator = torch.Generator().manual_seed(1)
    batches = [torch.randint(5, 50, (8, 16), generator=generator) for _ in range(steps)]

    def build(encoding: str) -> PosAttnForMaskedLM:
        torch.manual_seed(0)
        options = {"layout": "half"} if encoding in ("rope", "xpos") else {}
        config = PosAttnConfig(vocab_size=50, d_model=32, num_layers=2, num_heads=2, ffn_dim=64,
                               max_len=16, dropout=0.0, attention_dropout=0.0, encoding=encoding,
                               encoding_options=options)  # fmt: skip
        return PosAttnForMaskedLM(config)

    def train(model) -> list[float]:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses = []
        for ids in batches:
            mine = ids[rank::world]  # this rank's half of the global batch
            loss = model(input_ids=mine, labels=mine).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            losses.append(mean.item() / world)
        return losses

    found = {}
    mesh = init_device_mesh("cpu", (world,))
    for encoding in encodings:
        ddp = train(DistributedDataParallel(build(encoding)))
        model = build(encoding)
        split = set(model._no_split_modules)
        for module in model.modules():
            if isinstance(module, PositionalEncoding):
                # its terms and input rows are read by the layers after its own forward
                fully_shard(module, mesh=mesh, reshard_after_forward=False)
            elif type(module).__name__ in split:
                fully_shard(module, mesh=mesh)
        fully_shard(model, mesh=mesh)
        found[encoding] = {"ddp": ddp, "fsdp": train(model)}
    if rank == 0:
        Path(result).write_text(json.dumps(found))
    dist.destroy_process_group()


def zero_shot_compare_worker(arguments: list[str], logs: str) -> None:
    """`posattn compare ARGUMENTS` on this rank, each call of the zero-shot scoring logged
    under `logs` (scored-RANK.jsonl) with the cell's directory, and every write (writes-RANK)."""
    from posattn.cli import main
    from posattn.lab.pretraining import zero_shot

    rank = os.environ["RANK"]
    record_writes(Path(logs) / f"writes-{rank}.jsonl")
    real_score = zero_shot.score_model

    def logged_score(model_dir, task, *args):
        with open(Path(logs) / f"scored-{rank}.jsonl", "a") as out:
            out.write(json.dumps([str(model_dir), task]) + "\n")
        return real_score(model_dir, task, *args)

    zero_shot.score_model = logged_score
    assert main(arguments) == 0
