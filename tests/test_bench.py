"""`posattn bench` runs and writes its files (a benchmark, not a timed test)."""

from __future__ import annotations

import json

import pytest
import torch

from posattn.cli import main
from posattn.errors import PosAttnConfigError
from posattn.lab.bench import attention_rows, model_rows, report, timing
from posattn.lab.bench.bench import bench
from posattn.lab.bench.settings import BENCH_OPTIONS, BenchSettings
from posattn.lab.bench.targets import targets


def test_bench_writes_json_markdown_and_plots(tmp_path, monkeypatch):
    """Every level's tables, plots and report (the model level's models small: a real
    BERT-small's steps on the CPU took half of this test's minute)."""

    monkeypatch.setattr(model_rows, "bert_small", small_model)
    torch.set_default_dtype(torch.float32)
    try:
        settings = BenchSettings(
            lengths=[32], batch=2, heads=2, head_dim=8, repeats=1, model_lengths=[16],
            model_batch=2, long_lengths=[64, 128],
            encodings=["learned", "tupe-r", "diet-abs", "shaw", "diet-abs-lin"],
        )  # fmt: skip
        bench(settings, tmp_path)
    finally:
        torch.set_default_dtype(torch.float64)
    result = json.loads((tmp_path / "bench.json").read_text())
    names = {r["encoding"] for r in result["attention"]}
    assert names == {"sdpa (no bias)", "learned", "tupe-r", "diet-abs", "shaw", "diet-abs-lin"}
    assert all(r["ms"] > 0 and r["ratio"] > 0 for r in result["attention"])
    floor = [r for r in result["attention"] if r["encoding"] == "sdpa (no bias)"]
    assert all(r["ratio"] == 1.0 for r in floor)
    assert {r["n"] for r in result["long"]} == {64, 128}
    text = (tmp_path / "bench.md").read_text()
    assert "| tupe-r |" in text and "DIET Table 1" in text and "Long sequences" in text
    for figure in ("attention_ratios.png", "long_sequences.png"):
        assert (tmp_path / figure).stat().st_size > 1000
    assert main(["report", str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text()
    assert "<td>tupe-r</td>" in page and 'src="long_sequences.png"' in page


def test_benchs_collections_reach_only_what_it_made(tmp_path, monkeypatch):
    """Every garbage collection `bench` runs before a measured call (three a row) finds the
    objects that existed before it frozen out of its reach (`gc.freeze`: a full collection
    over them took 0.26 s, three times a row), and they are handed back when each level
    ends; what the bench made in between is still collected."""
    import gc

    frozen_at_collections = []
    collect = gc.collect

    def recorded(*args):
        frozen_at_collections.append(gc.get_freeze_count())
        return collect(*args)

    monkeypatch.setattr(gc, "collect", recorded)
    monkeypatch.setattr(model_rows, "bert_small", small_model)
    before = gc.get_freeze_count()
    torch.set_default_dtype(torch.float32)
    try:
        settings = BenchSettings(lengths=[16], batch=1, heads=2, head_dim=8, repeats=1,
                                 model_lengths=[8], model_batch=1, long_lengths=[],
                                 encodings=["alibi"])  # fmt: skip
        bench(settings, tmp_path)
    finally:
        torch.set_default_dtype(torch.float64)
    assert len(frozen_at_collections) >= 6
    assert min(frozen_at_collections) > 100_000 > before == gc.get_freeze_count()
    # A cycle made inside the block is collected there; a block inside another (or inside
    # the caller's own freeze) leaves the outer freeze as it found it: it neither freezes nor
    # unfreezes. (Counted by calls: the frozen count itself drops whenever a frozen object
    # dies by its reference count, as two did once on a test worker.)
    calls = []
    for name in ("freeze", "unfreeze"):
        real = getattr(gc, name)
        monkeypatch.setattr(gc, name, lambda real=real, name=name: (calls.append(name), real())[1])
    with timing.collections_of_new_objects_only():
        assert gc.get_freeze_count() > 100_000
        cycle = []
        cycle.append(cycle)
        del cycle
        assert collect() >= 1
        with timing.collections_of_new_objects_only():
            assert calls == ["freeze"]
        assert calls == ["freeze"]
    assert calls == ["freeze", "unfreeze"] and gc.get_freeze_count() == before


def test_bench_skips_what_a_kernel_refuses_and_says_why(monkeypatch, capsys):
    """kernel="triton" on a CPU (no interpreter) and for Shaw: skipped with the kernel's own
    reason, while SDPA is measured beside it."""
    from posattn.lab.bench.attention_rows import attention_level
    from posattn.lab.bench.report import skipped_markdown

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    torch.set_default_dtype(torch.float32)
    try:
        settings = BenchSettings(
            lengths=[16], batch=1, heads=2, head_dim=8, repeats=1,
            encodings=["t5", "shaw"], kernels=["sdpa", "triton"],
        )  # fmt: skip
        rows, skipped = attention_level(settings, torch.device("cpu"))
    finally:
        torch.set_default_dtype(torch.float64)
    measured = {(r["encoding"], r.get("kernel")) for r in rows}
    assert measured == {("sdpa (no bias)", None), ("t5", "sdpa"), ("shaw", "sdpa")}
    assert {(r["encoding"], r["kernel"]) for r in skipped} == {("t5", "triton"), ("shaw", "triton")}
    assert all("kernel='triton'" in r["reason"] for r in skipped)
    assert "skipped t5 [triton]" in capsys.readouterr().out
    assert "| t5 | triton |" in skipped_markdown(skipped)


def test_empty_levels_are_skipped_and_bad_lengths_named(tmp_path, capsys):
    """--model-lengths '' and --long-lengths '' measure the attention level only (with SDPA
    pinned to flash beside its floor, --floor-backends); a length that is not a positive
    integer is refused with the option named."""
    torch.set_default_dtype(torch.float32)
    try:
        code = main(["bench", "--lengths", "16", "--encodings", "t5", "--model-lengths", "",
                     "--long-lengths", "", "--floor-backends", "flash",
                     "--output", str(tmp_path)])  # fmt: skip
    finally:
        torch.set_default_dtype(torch.float64)
    assert code == 0
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["model"] == [] and result["long"] == []
    names = {r["encoding"] for r in result["attention"]}
    assert names == {"sdpa (no bias)", "sdpa flash (no bias)", "t5"}
    text = (tmp_path / "bench.md").read_text()
    assert "Model level" not in text and "Long sequences" not in text
    assert not (tmp_path / "long_sequences.png").exists()
    with pytest.raises(PosAttnConfigError, match=r"--long-lengths='64,x'.*positive integers"):
        main(["bench", "--long-lengths", "64,x", "--output", str(tmp_path)])
    # the attention level's lengths: checked alike, and never none
    for value in ("abc", "16,-2", "", ","):
        with pytest.raises(PosAttnConfigError, match=r"--lengths=.*positive integers'?$"):
            main(["bench", "--lengths", value, "--output", str(tmp_path)])


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [("--encodings", "t5,nope", "--encodings='nope'"),
     ("--kernels", "auto,nope", "--kernels='nope'"),
     ("--floor-backends", "math", "--floor-backends='math'"),
     ("--dtype", "int8", "--dtype='int8'")],
)  # fmt: skip
def test_settings_it_cannot_measure_are_refused_before_anything_is_written(
    option, value, named, tmp_path
):
    """Refused before the output folder is made and before any timing (an unknown encoding
    was refused only when its row came, after the floors were timed), under the flag typed
    (the message named the setting's Python name, floor_backends)."""
    output = tmp_path / "bench"
    with pytest.raises(PosAttnConfigError, match=rf"^{named} is not allowed"):
        main(["bench", "--lengths", "16", option, value, "--output", str(output)])
    assert not output.exists()


def test_targets_follow_the_device():
    """CPU: table-based biases train within 1.5x at n=512 and 1024, and hold less than one
    [B, H, n, n] tensor more than no-bias SDPA; GPU: 1.3x training and 1.15x forward at
    n=1024-8192, memory within 10% of no-bias SDPA's."""

    def row(encoding, n, train, ratio, mib=100.0):
        return dict(encoding=encoding, kernel="auto", n=n, train=train, ratio=ratio,
                    extra_mib=mib)  # fmt: skip

    floor = dict(row("sdpa (no bias)", 1024, True, 1.0), scores_mib=256.0)
    rows = [floor, row("t5", 1024, True, 1.4, 105.0), row("t5", 1024, False, 1.2),
            row("t5", 512, True, 1.6)]  # fmt: skip
    cpu = {c["target"]: (c["measured"], c["met"]) for c in targets(rows, [], "cpu")}
    memory = "t5 train memory n=1024 over SDPA's < one [B, H, n, n] tensor"
    assert cpu == {"t5 train n=512 <= 1.5x": (1.6, False), "t5 train n=1024 <= 1.5x": (1.4, True),
                   memory: (5 / 256, True)}  # fmt: skip
    gpu = {c["target"]: c["met"] for c in targets(rows, [], "cuda")}
    assert gpu == {"t5 train n=1024 <= 1.3x": False, "t5 fwd n=1024 <= 1.15x": False,
                   "t5 train memory n=1024 <= 1.1x SDPA's": True}  # fmt: skip
    rows[1]["extra_mib"] = 356.0  # 100 of SDPA's and one [B, H, n, n] tensor more
    assert {c["target"]: c["met"] for c in targets(rows, [], "cpu")}[memory] is False


def test_targets_take_the_fastest_kernel_and_name_it():
    """A target is met when some kernel meets it; the target names that kernel."""

    def row(kernel, ratio):
        return dict(encoding="t5", kernel=kernel, n=1024, train=True, ratio=ratio, extra_mib=1.0)

    floor = dict(encoding="sdpa (no bias)", n=1024, train=True, ratio=1.0, extra_mib=1.0)
    checks = targets([floor, row("sdpa", 1.9), row("triton", 1.2)], [], "cuda")
    assert {c["target"]: c["measured"] for c in checks} == {
        "t5 [triton] train n=1024 <= 1.3x": 1.2,
        "t5 [triton] train memory n=1024 <= 1.1x SDPA's": 1.0,
    }
    model = [dict(encoding="t5", kernel=k, n=512, train_pct=p, infer_pct=0.0)
             for k, p in (("sdpa", 4.0), ("triton", 9.0))]  # fmt: skip
    checks = targets([], model, "cuda")
    assert [(c["target"], c["met"]) for c in checks] == [
        ("BERT-small t5 [sdpa] train n=512 <= +5%", True)
    ]


def test_paired_ratios_come_with_their_spread(monkeypatch):
    """The median ratio of the alternated pairs, with the least and the greatest of them: a
    call twice, then four times, then three times the floor's time reads 3 (2 - 4), in the
    rows and in the targets table."""

    clock = iter([0, 1, 3, 3, 4, 8, 8, 9, 12, 12])  # floor 1, call 2; 1, 4; 1, 3
    monkeypatch.setattr(timing, "now", lambda: next(clock))
    timed = timing.paired(lambda: None, lambda: None, repeats=3)
    assert (timed.ms, timed.ratio, timed.low, timed.high) == (3000, 3.0, 2.0, 4.0)
    row = dict(encoding="t5", kernel="triton", n=1024, train=True, extra_mib=1.0,
               **timing.timed_fields(timed))  # fmt: skip
    text = report.targets_markdown(targets([row], [], "cuda"))
    assert "| t5 [triton] train n=1024 <= 1.3x | 3.00 (2.00, 4.00) | no |" in text


def test_out_of_memory_skips_the_call_and_says_so(monkeypatch):
    """A call that runs out of GPU memory (a materialised bias at large n) is a skipped row
    with the reason, and the benchmark goes on."""

    original = attention_rows.attention_call

    def failing(name, *args, **kwargs):
        if name == "t5":
            raise torch.OutOfMemoryError("CUDA out of memory")
        return original(name, *args, **kwargs)

    monkeypatch.setattr(attention_rows, "attention_call", failing)
    torch.set_default_dtype(torch.float32)
    try:
        settings = BenchSettings(lengths=[16], batch=1, heads=2, head_dim=8, repeats=1,
                                 encodings=["t5", "alibi"], kernels=["sdpa"])  # fmt: skip
        rows, skipped = attention_rows.attention_level(settings, torch.device("cpu"))
    finally:
        torch.set_default_dtype(torch.float64)
    assert {r["encoding"] for r in rows} == {"sdpa (no bias)", "alibi"}
    assert {(r["encoding"], r["train"]) for r in skipped} == {("t5", False), ("t5", True)}
    assert all(r["reason"] == "out of memory at n=16 (batch 1, 2 heads)" for r in skipped)


def test_model_level_measures_each_kernel_and_skips_a_refusal(monkeypatch):
    """BERT-small per (encoding, kernel): triton without a GPU or interpreter is refused and
    left out, sdpa measured and labelled."""

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(model_rows, "bert_small", small_model)
    torch.set_default_dtype(torch.float32)
    try:
        settings = BenchSettings(repeats=1, model_lengths=[8], model_batch=1,
                                 encodings=["t5"], kernels=["sdpa", "triton"])  # fmt: skip
        rows = model_rows.model_level(settings, torch.device("cpu"))
    finally:
        torch.set_default_dtype(torch.float64)
    assert [(r["encoding"], r["kernel"], r["n"]) for r in rows] == [("t5", "sdpa", 8)]
    assert rows[0]["train_ms"] > 0 and rows[0]["infer_ms"] > 0


def small_model(encoding, n, kernel="auto", attention_dropout=0.0, options=None):
    """`bench.bert_small`'s stand-in: the same encodings and options, at a size whose steps
    cost milliseconds on the CPU."""
    from posattn.models import PosAttnForMaskedLM
    from posattn.models.config import PosAttnConfig

    config = PosAttnConfig(
        vocab_size=50, d_model=16, num_layers=1, num_heads=2, ffn_dim=32, max_len=n,
        encoding=encoding,
        encoding_options=BENCH_OPTIONS.get(encoding, {}) if options is None else options,
        kernel=kernel, attention_dropout=attention_dropout,
    )  # fmt: skip
    return PosAttnForMaskedLM(config)


def test_bert_small_is_diet_table_1s_model(monkeypatch):
    """The model level's model: 4 layers, hidden 512, 8 heads, BERT's vocabulary, the
    encoding's bench options, no dropout inside attention unless asked for (its config read
    as it is handed to the model: building BERT-small twice took 7 s)."""

    monkeypatch.setattr(model_rows, "PosAttnForMaskedLM", lambda config: config)
    config = model_rows.bert_small("rope", 16, attention_dropout=0.1)
    sizes = (config.num_layers, config.d_model, config.num_heads, config.ffn_dim)
    assert sizes == (4, 512, 8, 2048)
    assert (config.vocab_size, config.max_len, config.kernel) == (30522, 16, "auto")
    assert config.attention_dropout == 0.1 and config.encoding == "rope"
    assert BENCH_OPTIONS["rope"].items() <= dict(config.encoding_options).items()
    assert model_rows.bert_small("t5", 16, "triton").kernel == "triton"
    assert model_rows.bert_small("t5", 16).attention_dropout == 0.0


def test_attention_dropout_reaches_every_model_of_the_model_level(tmp_path, monkeypatch):
    """`--attention-dropout 0.1`: `learned` and each encoding's BERT-small are built with it,
    bench.json and bench.md say so; a probability outside [0, 1) is refused by name."""

    built = []

    def recorded(encoding, n, kernel="auto", attention_dropout=0.0, options=None):
        built.append((encoding, attention_dropout))
        return small_model(encoding, n, kernel, attention_dropout, options)

    monkeypatch.setattr(model_rows, "bert_small", recorded)
    torch.set_default_dtype(torch.float32)
    try:
        main(
            [
                "bench",
                "--lengths",
                "8",
                "--encodings",
                "t5",
                "--model-lengths",
                "8",
                "--long-lengths",
                "",
                "--attention-dropout",
                "0.1",
                "--output",
                str(tmp_path),
            ]
        )
    finally:
        torch.set_default_dtype(torch.float64)
    assert built == [("learned", 0.1), ("t5", 0.1)]
    assert json.loads((tmp_path / "bench.json").read_text())["context"]["attention_dropout"] == 0.1
    assert "+% over `learned`, attention dropout 0.1" in (tmp_path / "bench.md").read_text()
    with pytest.raises(PosAttnConfigError, match=r"--attention-dropout=1\.0 is not allowed"):
        main(["bench", "--attention-dropout", "1.0", "--output", str(tmp_path)])


def test_encoding_options_reach_every_level_and_are_recorded(tmp_path, monkeypatch):
    """`--option rope.layout=interleaved`: the attention level's encoding and the model
    level's BERT-small are built with it over the bench's own options (`learned` as it is);
    bench.json and bench.md say so."""

    built, models = [], []
    build = attention_rows.build_encoding

    def recorded_build(name, dims, options=None):
        built.append((name, dict(options)))
        return build(name, dims, options)

    def recorded_model(encoding, n, kernel="auto", attention_dropout=0.0, options=None):
        models.append((encoding, options))
        return small_model(encoding, n, kernel, attention_dropout, options)

    monkeypatch.setattr(attention_rows, "build_encoding", recorded_build)
    monkeypatch.setattr(model_rows, "bert_small", recorded_model)
    torch.set_default_dtype(torch.float32)
    try:
        main(["bench", "--lengths", "8", "--encodings", "rope,t5", "--model-lengths", "8",
              "--long-lengths", "", "--option", "rope.layout=interleaved",
              "--option", "t5.num_buckets=8", "--output", str(tmp_path)])  # fmt: skip
    finally:
        torch.set_default_dtype(torch.float64)
    assert ("rope", {"layout": "interleaved"}) in built and ("t5", {"num_buckets": 8}) in built
    assert ("rope", {"layout": "half"}) not in built
    assert models == [("learned", None), ("rope", {"layout": "interleaved"}),
                      ("t5", {"num_buckets": 8})]  # fmt: skip
    given = json.loads((tmp_path / "bench.json").read_text())["context"]["encoding_options"]
    assert given == {"rope": {"layout": "interleaved"}, "t5": {"num_buckets": 8}}
    text = (tmp_path / "bench.md").read_text()
    assert "Encoding options: rope.layout=interleaved, t5.num_buckets=8." in text


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("alibi.layout=half", r"--option's encoding='alibi' is not allowed.*'rope'"),
        ("rope.nope=1", r"unknown option\(s\) nope"),
        ("rope.layout=diagonal", r"layout='diagonal' is not allowed"),
        ("rope=half", r"--option='rope=half' is not allowed: ENCODING.KEY=VALUE"),
    ],
)
def test_an_encoding_option_the_run_cannot_take_is_refused_before_anything_is_written(
    tmp_path, option, message
):
    output = tmp_path / "bench"
    with pytest.raises(PosAttnConfigError, match=message):
        main(["bench", "--encodings", "rope", "--option", option, "--output", str(output)])
    assert not output.exists()


def test_paired_timing_holds_the_garbage_collector_off_and_restores_it():
    """Both calls of every pair run with Python's collector off (a collection would land in
    whichever call crosses its threshold); it is on again afterwards, also when a call
    raises."""
    import gc

    from posattn.lab.bench.timing import paired

    seen = []
    timed = paired(lambda: seen.append(gc.isenabled()), lambda: None, repeats=3)
    assert seen == [True, False, False, False]  # the warm-up call, then the timed ones
    assert gc.isenabled() and timed.ms >= 0 and 0 <= timed.low <= timed.ratio <= timed.high

    def fails():
        if not gc.isenabled():
            raise RuntimeError("inside")

    with pytest.raises(RuntimeError, match="inside"):
        paired(lambda: None, fails, repeats=2)
    assert gc.isenabled()


def test_sdpa_pinned_to_each_backend_beside_its_own_choice(capsys):
    """The floor's rows pinned to SDPA's kernels: one that runs is a ratio to the floor (the
    same call); one not built for this device is skipped with torch's reason; the table
    shows a '-' where a row has no measurement; a name outside SDPA's kernels is refused."""
    from posattn.lab.bench.attention_rows import attention_level
    from posattn.lab.bench.report import markdown

    torch.set_default_dtype(torch.float32)
    try:
        settings = BenchSettings(
            lengths=[16], batch=1, heads=2, head_dim=8, repeats=3, encodings=[],
            floor_backends=["flash", "efficient"],
        )  # fmt: skip
        rows, skipped = attention_level(settings, torch.device("cpu"))
    finally:
        torch.set_default_dtype(torch.float64)
    pinned = [r for r in rows if r["encoding"] == "sdpa flash (no bias)"]
    assert [r["train"] for r in pinned] == [False, True]
    assert all(0.2 < r["ratio"] < 5.0 for r in pinned)  # SDPA's own choice on CPU: flash
    assert {(r["encoding"], r["train"]) for r in skipped} == {
        ("sdpa efficient (no bias)", False), ("sdpa efficient (no bias)", True)
    }  # fmt: skip
    assert all("No viable backend" in r["reason"] for r in skipped)
    assert "skipped sdpa efficient (no bias) n=16" in capsys.readouterr().out
    # A row measured at one length only: '-' at the other.
    extra = dict(pinned[0], n=32, encoding="t5")
    floor_32 = dict(encoding="sdpa (no bias)", n=32, train=False, ratio=1.0, extra_mib=0.0)
    text = markdown([*rows, floor_32, extra], [], dict(machine="m", torch="t", repeats=3))
    t5_row = next(line for line in text.splitlines() if line.startswith("| t5 "))
    assert t5_row.count("| - ") == 3
    with pytest.raises(PosAttnConfigError, match=r"floor_backends.*'math'"):
        BenchSettings(floor_backends=["math"]).sdpa_backends(torch.device("cpu"))


def test_execution_choices_hold_for_the_whole_run_and_are_recorded(tmp_path, monkeypatch):
    """`posattn bench --choose fold=true`: the choice is in force while the bench measures
    (read from inside it) and gone after; bench.json records every choice, bench.md the ones
    that differ from the defaults."""
    from posattn import execution
    from posattn.lab.bench import bench as bench_module

    seen = []
    measure = bench_module.attention_level

    def attention_level(settings, device):
        seen.append(execution.current().fold)
        return measure(settings, device)

    monkeypatch.setattr(bench_module, "attention_level", attention_level)
    torch.set_default_dtype(torch.float32)
    try:
        main(["bench", "--lengths", "16", "--encodings", "t5", "--model-lengths", "",
              "--long-lengths", "", "--choose", "fold=true", "--choose", "skew=false",
              "--output", str(tmp_path)])  # fmt: skip
    finally:
        torch.set_default_dtype(torch.float64)
    assert seen == [True] and execution.current().fold is None
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["context"]["execution"]["fold"] is True
    assert "Execution choices: fold=True, skew=False." in (tmp_path / "bench.md").read_text()


def test_extra_peak_counts_what_a_call_holds_at_once():
    """`extra_peak_mib`: 4 MiB held while 8 more are made, then both released: 12 at the
    peak; blocks made and freed one after another inside one autograd Function's backward
    count one block (an op's net figure, read at its end, had counted them all)."""
    from posattn.lab.bench.memory import extra_peak_mib

    def call():
        held = torch.empty(2**20, dtype=torch.float32)
        more = torch.empty(2 * 2**20, dtype=torch.float32)
        del held, more

    assert extra_peak_mib(call) == 12

    class BlockByBlock(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            for _ in range(8):
                block = torch.ones(2**20, dtype=torch.float32)  # 4 MiB, gone before the next
                grad = grad + block.sum()
                del block
            return grad

    x = torch.zeros(4, dtype=torch.float32, requires_grad=True)

    def training_call():
        BlockByBlock.apply(x).sum().backward()

    training_call()
    assert 4 <= extra_peak_mib(training_call) < 4.01


def test_cpu_memory_is_the_tensors_a_call_holds():
    """On the CPU the bench's extra MiB are tensor bytes, not the process's resident set
    (which read 0 for bias-free SDPA wherever freed memory was reused). Bias-free SDPA's
    training call holds its output and the gradients of q, k and v: 4 x [B, H, n, d_h]
    float32 (and its log-sum-exp). From 4 to 8 batch elements, T5 through SDPA's math path
    grows by at least three [4, H, n, n] tensors (probabilities, their gradient, the bias's);
    through the fused CPU path as bias-free SDPA does (its output and gradients, a [B, H, n]
    row or two): no tensor of scores per batch element, and no widened copy of q, k, v or dO
    for the whole batch (it had held four: 8 [4, H, n, d_h] tensors of growth)."""
    from posattn import execution
    from posattn.lab.bench.attention_rows import attention_call
    from posattn.lab.bench.memory import call_peak_mib

    n, heads, head_dim = 256, 2, 16
    mib = {}
    # The fused path from any size on (by default from 8 MiB of bias gradient).
    with execution.choose(recompute_threshold_bytes=0):
        for batch in (4, 8):
            settings = BenchSettings(batch=batch, heads=heads, head_dim=head_dim)
            for name, kernel in ((None, "auto"), ("t5", "sdpa"), ("t5", "auto")):
                call = attention_call(name, settings, n, True, "cpu", kernel=kernel)
                call()
                mib[batch, name, kernel] = call_peak_mib(call)
    rows = 8 * heads * n * head_dim * 4 / 2**20  # one [8, H, n, d_h] float32 tensor
    assert 4 * rows <= mib[8, None, "auto"] < 5.5 * rows
    scores = 4 * heads * n * n * 4 / 2**20  # one [4, H, n, n] float32 tensor
    grown = {kernel: mib[8, "t5", kernel] - mib[4, "t5", kernel] for kernel in ("sdpa", "auto")}
    assert grown["sdpa"] >= 3 * scores
    assert grown["auto"] < mib[8, None, "auto"] - mib[4, None, "auto"] + rows / 8


def test_threads_and_allocator_environment_are_recorded(tmp_path, monkeypatch):
    """A CPU ratio moves with the thread count and with glibc's malloc settings (the T5
    forward at n=1024: 1.20x against 1.12x with freed blocks kept): bench.json records both,
    bench.md says them, and a variable not set is not listed."""
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "1073741824")
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    torch.set_default_dtype(torch.float32)
    try:
        main(["bench", "--lengths", "16", "--encodings", "t5", "--model-lengths", "",
              "--long-lengths", "", "--output", str(tmp_path)])  # fmt: skip
    finally:
        torch.set_default_dtype(torch.float64)
    context = json.loads((tmp_path / "bench.json").read_text())["context"]
    assert context["threads"] == torch.get_num_threads()
    assert context["environment"]["MALLOC_MMAP_THRESHOLD_"] == "1073741824"
    assert "LD_PRELOAD" not in context["environment"]
    threads = torch.get_num_threads()
    line = f"{threads} torch thread{'s' if threads != 1 else ''}"
    text = (tmp_path / "bench.md").read_text()
    assert f"{line}; " in text and "MALLOC_MMAP_THRESHOLD_=1073741824" in text
    assert "LD_PRELOAD" not in text


def test_a_context_without_process_settings_adds_nothing():
    """bench.json files written before the threads were recorded render as before."""
    from posattn.lab.bench.environment import settings_line

    assert settings_line({"machine": "m"}) == ""
    assert settings_line({"threads": 1, "environment": {}}) == "1 torch thread."
    assert settings_line({"threads": 2, "environment": {"OMP_NUM_THREADS": "2"}}) == (
        "2 torch threads; OMP_NUM_THREADS=2."
    )
