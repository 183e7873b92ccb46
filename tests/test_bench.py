"""`posattn bench` runs and writes its files (a benchmark, not a timed test)."""

from __future__ import annotations

import json

import pytest
import torch

from posattn.cli import main
from posattn.errors import PosAttnConfigError
from posattn.lab.bench.bench import BenchSettings, bench


def test_bench_writes_json_markdown_and_plots(tmp_path):
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


def test_bench_skips_what_a_kernel_refuses_and_says_why(monkeypatch, capsys):
    """kernel="triton" on a CPU (no interpreter) and for Shaw: skipped with the kernel's own
    reason, while SDPA is measured beside it."""
    from posattn.lab.bench.bench import attention_level, skipped_markdown

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
    """--model-lengths '' and --long-lengths '' measure the attention level only; a length that
    is not a positive integer is refused with the option named."""
    torch.set_default_dtype(torch.float32)
    try:
        code = main(["bench", "--lengths", "16", "--encodings", "t5", "--model-lengths", "",
                     "--long-lengths", "", "--output", str(tmp_path)])  # fmt: skip
    finally:
        torch.set_default_dtype(torch.float64)
    assert code == 0
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["model"] == [] and result["long"] == []
    assert {r["encoding"] for r in result["attention"]} == {"sdpa (no bias)", "t5"}
    text = (tmp_path / "bench.md").read_text()
    assert "Model level" not in text and "Long sequences" not in text
    assert not (tmp_path / "long_sequences.png").exists()
    with pytest.raises(PosAttnConfigError, match=r"--long-lengths='64,x'.*positive integers"):
        main(["bench", "--long-lengths", "64,x", "--output", str(tmp_path)])


def test_targets_follow_the_device():
    """CPU: table-based biases train within 1.5x at n=512 and 1024; GPU: 1.3x training and
    1.15x forward at n=1024-8192, memory within 10% of no-bias SDPA's."""
    from posattn.lab.bench.bench import targets

    def row(encoding, n, train, ratio, mib=100.0):
        return dict(encoding=encoding, kernel="auto", n=n, train=train, ratio=ratio,
                    extra_mib=mib)  # fmt: skip

    rows = [row("sdpa (no bias)", 1024, True, 1.0), row("t5", 1024, True, 1.4, 105.0),
            row("t5", 1024, False, 1.2), row("t5", 512, True, 1.6)]  # fmt: skip
    cpu = {c["target"]: c["met"] for c in targets(rows, [], "cpu")}
    assert cpu == {"t5 train n=512 <= 1.5x": False, "t5 train n=1024 <= 1.5x": True,
                   "t5 train memory n=1024 <= 2.5x SDPA's": True}  # fmt: skip
    gpu = {c["target"]: c["met"] for c in targets(rows, [], "cuda")}
    assert gpu == {"t5 train n=1024 <= 1.3x": False, "t5 fwd n=1024 <= 1.15x": False,
                   "t5 train memory n=1024 <= 1.1x SDPA's": True}  # fmt: skip
