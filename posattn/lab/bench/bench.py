"""`posattn bench`: the cost of every positional method as a ratio to plain fused attention
measured in the same process (attention level), and DIET Table 1 in our numbers (model level).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import statistics
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ... import execution
from ...attention import MultiHeadAttention
from ...encodings import ENCODINGS, ModelDims, build_encoding
from ...encodings.registry import encoding_options
from ...errors import PosAttnConfigError, require_choice
from ...models import PosAttnForMaskedLM
from ...models.config import PosAttnConfig
from ..runs.context import machine
from ..runs.tables import table_lines
from .environment import process_settings, settings_line
from .memory import call_peak_mib
from .timing import step_functions

# SDPA's kernels by the names the bench's rows give them.
SDPA_BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}
# Options that the benchmark needs to build each encoding (rotary layouts are never implicit).
BENCH_OPTIONS = {"rope": {"layout": "half"}, "xpos": {"layout": "half"}}
CAUSAL_ONLY = ("xpos", "fire")
# DIET Table 1: step-time increase over BERT (TPU v2), BERT-small rows.
PAPER_TABLE1 = {
    "shaw": {"train": 24, "infer": 65},
    "tupe-r": {"train": 4, "infer": 27},
    "diet-abs": {"train": 0, "infer": 1},
    "diet-rel": {"train": 0, "infer": 0},
}


@dataclass
class BenchSettings:
    lengths: list[int] = field(default_factory=lambda: [128, 256, 512, 1024])
    batch: int = 8
    heads: int = 8
    head_dim: int = 64
    repeats: int = 5
    model_lengths: list[int] = field(default_factory=lambda: [128, 512])
    long_lengths: list[int] = field(default_factory=lambda: [512, 1024, 2048, 4096, 8192])
    long_batch: int = 1
    model_batch: int = 8
    encodings: list[str] = field(default_factory=lambda: list(ENCODINGS))
    # Attention kernels measured for every encoding ("auto" is what models use by default).
    kernels: list[str] = field(default_factory=lambda: ["auto"])
    # None: bfloat16 on GPU (autocast for models), float32 on CPU.
    dtype: str | None = None
    # SDPA's own kernels without a bias, each pinned, as ratios to the floor (SDPA's choice):
    # which one the floor is, and where the others stand. None: every GPU one on a GPU
    # (flash, cuDNN, memory-efficient), none on CPU.
    floor_backends: list[str] | None = None
    # The model level's dropout inside attention (every model, `learned`'s included).
    attention_dropout: float = 0.0
    # Options per encoding (`--option rope.layout=interleaved`), over BENCH_OPTIONS.
    encoding_options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def options_of(self, encoding: str) -> dict[str, Any]:
        """The options encoding `encoding` is built with at every level."""
        return {**BENCH_OPTIONS.get(encoding, {}), **self.encoding_options.get(encoding, {})}

    def sdpa_backends(self, device: torch.device) -> list[str]:
        names = self.floor_backends
        if names is None:
            names = list(SDPA_BACKENDS) if device.type == "cuda" else []
        for name in names:
            require_choice("floor_backends", name, tuple(SDPA_BACKENDS))
        return names

    def check(self, device: torch.device) -> None:
        """Refuse, naming the setting, what the run could not measure: before its output
        folder is made and before anything is timed."""
        from ...kernels.registry import kernel_names

        for name in self.encodings:
            require_choice("encodings", name, tuple(ENCODINGS))
        for name in self.encoding_options:
            require_choice("--option's encoding", name, tuple(self.encodings))
            encoding_options(name, self.options_of(name))  # refuses an unknown or bad option
        for name in self.kernels:
            require_choice("kernels", name, tuple(kernel_names()))
        self.sdpa_backends(device)
        self.torch_dtype(device)

    def torch_dtype(self, device: torch.device) -> torch.dtype:
        name = self.dtype or ("bfloat16" if device.type == "cuda" else "float32")
        require_choice("dtype", name, ("float32", "bfloat16", "float16"))
        return getattr(torch, name)

    @classmethod
    def quick(cls) -> BenchSettings:
        return cls(
            lengths=[128, 256], repeats=3, model_lengths=[128], model_batch=4,
            long_lengths=[512, 1024],
            encodings=["learned", "shaw", "t5", "tupe-a", "tupe-r", "diet-abs", "diet-rel",
                       "rope", "alibi"],
        )  # fmt: skip


def now() -> float:
    """A wall-clock reading after the GPU's queued work is done."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter()


def measure(fn, repeats: int) -> tuple[float, float]:
    """(median ms, extra peak MiB) of fn after one warm-up call; the memory from one more
    call, outside the timed ones (`call_peak_mib`: on the CPU through the profiler)."""
    fn()
    gc.collect()
    times = []
    for _ in range(repeats):
        start = now()
        fn()
        times.append(1000 * (now() - start))
    return statistics.median(times), call_peak_mib(fn)


def attention_call(
    name: str | None,
    s: BenchSettings,
    n: int,
    train: bool,
    device,
    batch: int | None = None,
    kernel: str = "auto",
    sdpa_backend: str | None = None,
):
    """A closure running one attention call of encoding `name` (None: SDPA without bias,
    at `sdpa_backend`, one of SDPA_BACKENDS, or SDPA's choice)."""
    d_model = s.heads * s.head_dim
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch or s.batch, n, d_model, generator=generator).to(device)
    attention = MultiHeadAttention(d_model, s.heads, kernel=kernel).to(device)
    dtype = s.torch_dtype(torch.device(device))
    q, k, v = (
        heads.to(dtype).detach().requires_grad_(train) for heads in attention.queries_keys_values(x)
    )
    grad = torch.randn_like(q)
    if name is None:

        def pinned():
            return sdpa_kernel(SDPA_BACKENDS[sdpa_backend]) if sdpa_backend else nullcontext()

        def call() -> None:
            with torch.set_grad_enabled(train), pinned():
                out = F.scaled_dot_product_attention(q, k, v)
                if train:
                    out.backward(grad)

        return call
    dims = ModelDims(d_model, s.heads, 1, n, causal=name in CAUSAL_ONLY)
    encoding = build_encoding(name, dims, s.options_of(name)).to(device)
    encoding.requires_grad_(train)

    def call() -> None:
        with torch.set_grad_enabled(train):
            terms = encoding.layer_terms(n, device, q.dtype)[0]
            out = attention.attend(q, k, v, terms)
            if train:
                out.backward(grad)

    return call


@dataclass(frozen=True)
class Paired:
    """A call timed against a floor, alternated: its median ms, and its ratio to the floor -
    the median, the least and the greatest over the alternated pairs (the spread a verdict
    reads beside the median)."""

    ms: float
    ratio: float
    low: float
    high: float


def paired(floor, fn, repeats: int) -> Paired:
    """fn timed against floor with the two calls alternated, so that the machine's slow
    spells hit both sides of every ratio. Python's garbage collector is held off while they
    run (as timeit does): a training step's autograd objects would otherwise start a
    collection inside whichever call happens to cross its threshold."""
    floor(), fn()
    times, ratios = [], []
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            start = now()
            floor()
            middle = now()
            fn()
            end = now()
            times.append(1000 * (end - middle))
            ratios.append((end - middle) / (middle - start))
    finally:
        if was_enabled:
            gc.enable()
    return Paired(statistics.median(times), statistics.median(ratios), min(ratios), max(ratios))


def refusal_of(call) -> str | None:
    """The message of a kernel's refusal of this call (kernel="triton" on CPU, or for an
    encoding it cannot serve), or None once the call has run (it doubles as a warm-up)."""
    try:
        call()
    except PosAttnConfigError as error:
        return str(error)
    return None


@contextmanager
def collections_of_new_objects_only():
    """The objects that exist now (torch's, transformers', the caller's: some 380,000 once
    posattn is imported) moved out of the garbage collector's reach for the block
    (`gc.freeze`), then back (`gc.unfreeze`). Each measured call collects first (`measure`,
    `paired`, `free_memory`: three collections a row), and a full collection traversed them
    all, 0.26 s on the 2-core AMD CPU: more than the tiny calls it preceded, a third of a
    second per row of a GPU bench whose whole run has minutes. Frozen, a collection reaches
    what the bench itself made, which is what it has to free. Where objects are frozen
    already (an outer block, or the caller's own `gc.freeze`), left as it is: `gc.unfreeze`
    would hand back theirs too."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@collections_of_new_objects_only()
def attention_level(s: BenchSettings, device) -> tuple[list[dict], list[dict]]:
    """(measured rows, skipped (encoding, kernel) pairs with the kernel's reason)."""
    rows, skipped = [], []
    backends = s.sdpa_backends(device)  # checked before anything is measured
    for n in s.lengths:
        for train in (False, True):
            floor = attention_call(None, s, n, train, device)
            floor_ms, floor_mib = measure(floor, s.repeats)
            rows.append(dict(encoding="sdpa (no bias)", n=n, train=train, ms=floor_ms,
                             ratio=1.0, extra_mib=floor_mib,
                             scores_mib=scores_mib(s, n, device)))  # fmt: skip
            rows += pinned_floors(s, backends, n, train, device, floor, skipped)
            for name in s.encodings:
                for kernel in s.kernels:
                    try:
                        call = attention_call(name, s, n, train, device, kernel=kernel)
                        reason = refusal_of(call)
                        if reason is None:
                            timed = paired(floor, call, s.repeats)
                            mib = call_peak_mib(call)
                    except torch.OutOfMemoryError:
                        # A materialised [B, H, n, n] bias and its gradient outgrow the GPU
                        # at large n: the row says so instead of ending the benchmark.
                        reason = f"out of memory at n={n} (batch {s.batch}, {s.heads} heads)"
                    call = None
                    free_memory()
                    if reason is not None:
                        print(f"skipped {name} [{kernel}] n={n} train={train}: {reason}")
                        skipped.append(dict(encoding=name, kernel=kernel, n=n, train=train,
                                            reason=reason))  # fmt: skip
                        continue
                    rows.append(dict(encoding=name, kernel=kernel, n=n, train=train,
                                     **timed_fields(timed), extra_mib=mib))  # fmt: skip
            gc.collect()
    return rows, skipped


def pinned_floors(
    s: BenchSettings, backends: list[str], n: int, train: bool, device, floor, skipped: list
) -> list:
    """Rows of SDPA without a bias pinned to each of `backends` (`s.sdpa_backends`), as
    ratios to the floor (SDPA's own choice: the one near 1.00 is it); one that cannot run
    this call (not built for this device or dtype) is a skipped row with torch's reason."""
    rows = []
    for backend in backends:
        name = f"sdpa {backend} (no bias)"
        call = attention_call(None, s, n, train, device, sdpa_backend=backend)
        try:
            timed = paired(floor, call, s.repeats)
            mib = call_peak_mib(call)
        except RuntimeError as error:  # "No viable backend" (its warnings say why)
            reason = str(error).splitlines()[0][:200]
            print(f"skipped {name} n={n} train={train}: {reason}")
            skipped.append(dict(encoding=name, kernel="sdpa", n=n, train=train, reason=reason))
            continue
        rows.append(dict(encoding=name, n=n, train=train, **timed_fields(timed), extra_mib=mib))
    return rows


def scores_mib(s: BenchSettings, n: int, device) -> float:
    """MiB of one [B, H, n, n] tensor in the call's dtype: the unit of the CPU memory target."""
    itemsize = s.torch_dtype(torch.device(device)).itemsize
    return s.batch * s.heads * n * n * itemsize / 2**20


def timed_fields(timed: Paired) -> dict:
    """A row's timing: ms, the median ratio and its spread (least, greatest)."""
    return dict(ms=timed.ms, ratio=timed.ratio, ratio_range=[timed.low, timed.high])


def free_memory() -> None:
    """Drop what the last measured call left behind (on GPU, the allocator's cache too)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@collections_of_new_objects_only()
def long_sequences(s: BenchSettings, device) -> list[dict]:
    """DIET-ABS inside Linformer (k=32) against full attention with DIET-ABS, forward +
    backward of one attention call: the time and memory curves of DIET Eq. 4's point."""
    rows = []
    for n in s.long_lengths:
        for name in ("diet-abs", "diet-abs-lin"):
            ms, mib = measure(attention_call(name, s, n, True, device, s.long_batch), s.repeats)
            rows.append(dict(encoding=name, n=n, ms=ms, extra_mib=mib))
            gc.collect()
    return rows


def bert_small(
    encoding: str,
    n: int,
    kernel: str = "auto",
    attention_dropout: float = 0.0,
    options: dict[str, Any] | None = None,
) -> PosAttnForMaskedLM:
    """DIET Table 1's BERT-small: 4 layers, hidden 512, 8 heads; no dropout inside attention
    unless asked for (`--attention-dropout`: BERT's 0.1), every model of the level alike.
    `options`: the encoding's (default: the bench's own, BENCH_OPTIONS)."""
    config = PosAttnConfig(
        vocab_size=30522, d_model=512, num_layers=4, num_heads=8, ffn_dim=2048, max_len=n,
        encoding=encoding,
        encoding_options=BENCH_OPTIONS.get(encoding, {}) if options is None else options,
        causal=encoding in CAUSAL_ONLY, kernel=kernel, attention_dropout=attention_dropout,
    )  # fmt: skip
    torch.manual_seed(0)
    return PosAttnForMaskedLM(config)


def autocast(functions, device: torch.device, dtype: torch.dtype) -> list:
    """The step functions under autocast to `dtype` (float32: unchanged)."""
    if dtype == torch.float32:
        return list(functions)

    def wrapped(fn):
        def call() -> None:
            with torch.autocast(device.type, dtype=dtype):
                fn()

        return call

    return [wrapped(fn) for fn in functions]


@collections_of_new_objects_only()
def model_level(s: BenchSettings, device) -> list[dict]:
    """Each encoding's train step and inference with each kernel against `learned`'s (default
    kernel), alternated step by step (the baseline model stays built), as +% over `learned`.
    A kernel that refuses an encoding is left out of this level (the attention level says why)."""
    rows = []
    dtype = s.torch_dtype(device)
    for n in s.model_lengths:
        learned = bert_small("learned", n, attention_dropout=s.attention_dropout).to(device)
        baseline = autocast(step_functions(learned, s.model_batch, n), device, dtype)
        for name in s.encodings:
            for kernel in s.kernels:
                try:
                    options = s.options_of(name)
                    model = bert_small(name, n, kernel, s.attention_dropout, options).to(device)
                    steps = autocast(step_functions(model, s.model_batch, n), device, dtype)
                    row = dict(encoding=name, kernel=kernel, n=n)
                    for key, base_fn, fn in zip(("train", "infer"), baseline, steps, strict=True):
                        timed = paired(base_fn, fn, s.repeats)
                        row[f"{key}_ms"], row[f"{key}_pct"] = timed.ms, 100 * (timed.ratio - 1)
                        row[f"{key}_pct_range"] = [100 * (timed.low - 1), 100 * (timed.high - 1)]
                    rows.append(row)
                except PosAttnConfigError as error:
                    print(f"skipped BERT-small {name} [{kernel}] n={n}: {error}")
                model = steps = None
                free_memory()
    return rows


def label(row: dict) -> str:
    """The encoding, with its kernel when it is not the default one."""
    kernel = row.get("kernel", "auto")
    return row["encoding"] if kernel == "auto" else f"{row['encoding']} [{kernel}]"


def chosen_line(context: dict) -> list[str]:
    """The execution choices that differ from posattn's defaults (`--choose`), as a line."""
    defaults = dataclasses.asdict(execution.Choices())
    chosen = {k: v for k, v in context.get("execution", {}).items() if defaults.get(k) != v}
    if not chosen:
        return []
    return ["", "Execution choices: " + ", ".join(f"{k}={v}" for k, v in chosen.items()) + "."]


def options_line(context: dict) -> list[str]:
    """The encoding options given over the bench's own (`--option`), as a line."""
    given = context.get("encoding_options") or {}
    if not given:
        return []
    pairs = [f"{name}.{key}={value}" for name, keys in given.items() for key, value in keys.items()]
    return ["", "Encoding options: " + ", ".join(pairs) + "."]


def markdown(attention_rows: list[dict], model_rows: list[dict], context: dict) -> str:
    method = (
        f"{context['machine']}, torch {context['torch']}. Medians of {context['repeats']} runs "
        "after a warm-up; ratios to SDPA without a bias, alternated call by call in the same "
        "process. Memory: extra peak MiB of tensors one call holds (on GPU torch's allocator, "
        "on CPU torch.profiler's allocation events)."
    )
    lines = [
        "# posattn bench",
        "",
        " ".join(filter(None, (method, settings_line(context)))),
        *chosen_line(context),
        *options_line(context),
        "",
        "## Attention level (ratio to no-bias SDPA; extra peak MiB)",
        "",
    ]
    lengths = sorted({r["n"] for r in attention_rows})
    header = ["encoding"] + [f"{mode} n={n}" for mode in ("fwd", "train") for n in lengths]
    rows = []
    names = list(dict.fromkeys(label(r) for r in attention_rows))
    cell = {(label(r), r["n"], r["train"]): r for r in attention_rows}
    for name in names:
        cells = [name]
        for train in (False, True):
            for n in lengths:
                r = cell.get((name, n, train))  # None: skipped there (out of memory, refused)
                cells.append("-" if r is None else f"{r['ratio']:.2f} ({r['extra_mib']:.0f})")
        rows.append(cells)
    lines += table_lines(header, rows)
    if not model_rows:  # --model-lengths ''
        return "\n".join(lines) + "\n"
    dropout = context.get("attention_dropout", 0.0)
    lines += [
        "",
        "## Model level: BERT-small (4 x 512, 8 heads), +% over `learned`"
        + (f", attention dropout {dropout}" if dropout else ""),
        "",
    ]
    header = [
        "encoding",
        "n",
        "train ms",
        "train +% (least, greatest)",
        "infer ms",
        "infer +% (least, greatest)",
        "DIET Table 1 (train / infer)",
    ]
    rows = []
    for r in model_rows:
        paper = PAPER_TABLE1.get(r["encoding"])
        rows.append([
            label(r), r["n"], f"{r['train_ms']:.1f}",
            with_spread(r.get("train_pct", 0), r.get("train_pct_range"), "+.1f"),
            f"{r['infer_ms']:.1f}",
            with_spread(r.get("infer_pct", 0), r.get("infer_pct_range"), "+.1f"),
            f"+{paper['train']}% / +{paper['infer']}%" if paper else "-",
        ])  # fmt: skip
    lines += table_lines(header, rows)
    return "\n".join(lines) + "\n"


def with_spread(value: float, spread: list[float] | None, spec: str) -> str:
    """A median formatted by `spec`, with the least and greatest of its alternated pairs where
    they were measured."""
    text = format(value, spec)
    if spread is None:
        return text
    return f"{text} ({format(spread[0], spec)}, {format(spread[1], spec)})"


def bench(settings: BenchSettings, output: Path) -> dict:
    output = Path(output)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    settings.check(device)
    output.mkdir(parents=True, exist_ok=True)
    where = machine()
    if device.type == "cuda":
        where += f", {torch.cuda.get_device_name(device)}"
    context = {
        "machine": where,
        "torch": torch.__version__,
        "repeats": settings.repeats,
        "dtype": str(settings.torch_dtype(device)).removeprefix("torch."),
        # posattn.execution's choices in force (`--choose`), the defaults included.
        "execution": dataclasses.asdict(execution.current()),
        "attention_dropout": settings.attention_dropout,
        "encoding_options": settings.encoding_options,
        **process_settings(),
    }
    attention_rows, skipped = attention_level(settings, device)
    model_rows = model_level(settings, device)
    long_rows = long_sequences(settings, device)
    checks = targets(attention_rows, model_rows, device.type)
    result = {
        "context": context,
        "attention": attention_rows,
        "skipped": skipped,
        "model": model_rows,
        "long": long_rows,
        "targets": checks,
    }
    (output / "bench.json").write_text(json.dumps(result, indent=2))
    text = markdown(attention_rows, model_rows, context) + long_markdown(long_rows)
    text += targets_markdown(checks) + skipped_markdown(skipped)
    (output / "bench.md").write_text(text)
    plot_ratios(attention_rows, output / "attention_ratios.png")
    if long_rows:
        plot_long(long_rows, output / "long_sequences.png")
    print(text)
    return result


# Targets on ratios to no-bias SDPA: (mode, encodings, train, lengths, bound), per device.
# CPU: table-based biases train at most 1.5x at n=512 and 1024; GPU (bf16): at most 1.3x in
# training and 1.15x forward at n=1024-8192, extra memory within 10% of no-bias SDPA's.
TABLE_BIASES = ("t5", "diet-rel", "tupe-r", "kerple", "alibi")
ATTENTION_TARGETS = {
    "cpu": [
        ("train", TABLE_BIASES, True, (512, 1024), 1.5),
        ("train", ("shaw", "deberta"), True, (512, 1024), 1.6),
    ],
    "cuda": [
        ("train", TABLE_BIASES, True, (1024, 4096, 8192), 1.3),
        ("fwd", TABLE_BIASES, False, (1024, 4096, 8192), 1.15),
    ],
}
# (encodings, measured row key, length or None, bound in % over `learned`): DIET Table 1's
# +3% for the decoupled methods; on GPU also training within +5% for the table-based ones.
MODEL_TARGETS = {
    "cpu": [
        (("tupe-a", "tupe-r", "diet-abs", "diet-rel"), "train_pct", 3.0),
        (("tupe-a", "tupe-r", "diet-abs", "diet-rel"), "infer_pct", 3.0),
        (("shaw",), "train_pct", 12.0),
        (("shaw",), "infer_pct", 25.0),
    ],
    "cuda": [
        (("t5", "tupe-r", "diet-rel"), "train_pct", 5.0),
        (("tupe-a", "tupe-r", "diet-abs", "diet-rel"), "infer_pct", 3.0),
    ],
}
BIAS_METHODS = ("t5", "bert-r", "tupe-a", "tupe-r", "diet-abs", "diet-rel", "alibi", "kerple")


def memory_checks(attention_rows: list[dict], device_type: str) -> list[dict]:
    """Extra training memory of each bias method at its largest n. GPU: at most 1.1x
    no-bias SDPA's (issue 16's 10%). CPU: what it holds beyond no-bias SDPA, in [B, H, n, n]
    tensors of the call's dtype (the floor row's `scores_mib`), below one - the recomputing
    backward's promise that no tensor of scores per batch element and head exists (SDPA's
    math path holds three)."""
    floors = {r["n"]: r for r in attention_rows
              if r["encoding"] == "sdpa (no bias)" and r["train"]}  # fmt: skip
    if not floors:
        return []
    n = max(floors)
    floor = floors[n]
    checks = []
    for r in attention_rows:
        if r["train"] and r["n"] == n and r["encoding"] in BIAS_METHODS:
            if device_type == "cuda":
                ratio, bound = r["extra_mib"] / max(floor["extra_mib"], 1.0), 1.1
                what = f"{label(r)} train memory n={n} <= {bound}x SDPA's"
                checks.append(dict(target=what, measured=ratio, met=ratio <= bound))
            elif "scores_mib" in floor:
                tensors = (r["extra_mib"] - floor["extra_mib"]) / floor["scores_mib"]
                what = f"{label(r)} train memory n={n} over SDPA's < one [B, H, n, n] tensor"
                checks.append(dict(target=what, measured=tensors, met=tensors < 1.0))
    return checks


def fastest(rows: list[dict], key: str, *fields: str) -> list[dict]:
    """Per value of `fields`, the row of the kernel with the lowest `key`: a target is met
    when some kernel meets it, and says which (rows keep their order of first appearance)."""
    best: dict[tuple, dict] = {}
    for r in rows:
        group = tuple(r[f] for f in fields)
        if group not in best or r[key] < best[group][key]:
            best[group] = r
    return list(best.values())


def targets(attention_rows: list[dict], model_rows: list[dict], device_type: str) -> list[dict]:
    """Each target of this device with the measured value of the fastest kernel measured for
    it, and whether it was met."""
    checks = []
    attention_rows = fastest(attention_rows, "ratio", "encoding", "n", "train")
    for mode, names, train, lengths, bound in ATTENTION_TARGETS[device_type]:
        for r in attention_rows:
            if r["encoding"] in names and r["train"] == train and r["n"] in lengths:
                what = f"{label(r)} {mode} n={r['n']} <= {bound}x"
                checks.append(dict(target=what, measured=r["ratio"], met=r["ratio"] <= bound,
                                   spread=r.get("ratio_range")))  # fmt: skip
    checks += memory_checks(attention_rows, device_type)
    for names, key, bound in MODEL_TARGETS[device_type]:
        for r in fastest([r for r in model_rows if key in r], key, "encoding", "n"):
            if r["encoding"] in names:
                what = f"BERT-small {label(r)} {key[:5]} n={r['n']} <= +{bound:g}%"
                checks.append(dict(target=what, measured=r[key], met=r[key] <= bound,
                                   spread=r.get(f"{key}_range")))  # fmt: skip
    return checks


def targets_markdown(checks: list[dict]) -> str:
    if not checks:
        return ""
    measured = [with_spread(c["measured"], c.get("spread"), ".2f") for c in checks]
    rows = [
        [c["target"], cell, "yes" if c["met"] else "no"]
        for c, cell in zip(checks, measured, strict=True)
    ]
    header = ["target", "measured (least, greatest of the pairs)", "met"]
    lines = ["", "## Targets", "", *table_lines(header, rows)]
    return "\n".join(lines) + "\n"


def skipped_markdown(skipped: list[dict]) -> str:
    """The (encoding, kernel) pairs a kernel refused, once each, with its reason."""
    reasons = {(r["encoding"], r["kernel"]): r["reason"] for r in skipped}
    if not reasons:
        return ""
    rows = [[encoding, kernel, reason] for (encoding, kernel), reason in reasons.items()]
    lines = ["", "## Skipped", "", *table_lines(["encoding", "kernel", "why"], rows)]
    return "\n".join(lines) + "\n"


def long_markdown(rows: list[dict]) -> str:
    if not rows:  # --long-lengths ''
        return ""
    lines = [
        "",
        "## Long sequences: DIET-ABS in Linformer (k=32) vs full attention with DIET-ABS",
        "",
    ]
    header = ["n", "diet-abs ms", "diet-abs MiB", "diet-abs-lin ms", "diet-abs-lin MiB"]
    cells = []
    for n in sorted({r["n"] for r in rows}):
        full = next(r for r in rows if r["n"] == n and r["encoding"] == "diet-abs")
        lin = next(r for r in rows if r["n"] == n and r["encoding"] == "diet-abs-lin")
        cells.append(
            [n, f"{full['ms']:.1f}", f"{full['extra_mib']:.0f}", f"{lin['ms']:.1f}",
             f"{lin['extra_mib']:.0f}"]
        )  # fmt: skip
    lines += table_lines(header, cells)
    return "\n".join(lines) + "\n"


def plot_long(rows: list[dict], path: Path) -> Path:
    from ..runs.figures import plt

    figure, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for name in ("diet-abs", "diet-abs-lin"):
        points = sorted((r["n"], r["ms"], r["extra_mib"]) for r in rows if r["encoding"] == name)
        lengths, times, memory = zip(*points, strict=True)
        axes[0].plot(lengths, times, marker="o", label=name)
        axes[1].plot(lengths, memory, marker="o", label=name)
    axes[0].set(xscale="log", yscale="log", xlabel="n", ylabel="ms (forward + backward)")
    axes[1].set(xscale="log", xlabel="n", ylabel="extra peak MiB")
    for axis in axes:
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def plot_ratios(rows: list[dict], path: Path) -> Path:
    from ..runs.figures import plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for axis, train in zip(axes, (False, True), strict=True):
        for name in dict.fromkeys(label(r) for r in rows):
            points = sorted(
                (r["n"], r["ratio"]) for r in rows if label(r) == name and r["train"] == train
            )
            axis.plot(*zip(*points, strict=True), marker="o", markersize=3, label=name)
        axis.set(
            xscale="log",
            xlabel="sequence length n",
            title="forward + backward" if train else "forward",
        )
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("time / SDPA without bias")
    axes[1].legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
