"""Commands that run outside the Trainer put inputs on the model's device: decoding, probe
cells and inspection. This machine may have only a CPU, so the routing is checked with the
model on the "meta" device: the first module forward records where its inputs are and stops
the run (a meta model cannot finish one). Inputs left on the CPU are caught there. The CUDA
tests at the end run where a GPU is present."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_encoder
from test_seq2seq import seq2seq

from posattn import PosAttnConfigError
from posattn.lab.probe import cell as probe_cell
from posattn.lab.probe.settings import preset
from posattn.lab.probe.tasks import probe_task
from posattn.lab.runs.device import model_device, resolve_device, to_device
from posattn.lab.translation.decoding import SearchSettings, beam_search, greedy_search
from posattn.lab.translation.translate import translate_ids

META = torch.device("meta")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class Stop(Exception):
    """Raised by the recording hook once the first forward has shown its inputs."""


def input_devices(model: torch.nn.Module, run) -> set[torch.device]:
    """Devices of the tensors the first submodule forward of `model` that takes tensors
    receives in `run()`."""
    seen: set[torch.device] = set()

    def record(module, args, kwargs):
        devices = {v.device for v in [*args, *kwargs.values()] if isinstance(v, torch.Tensor)}
        if devices:  # (an encoding's forward takes only lengths, a device and a dtype)
            seen.update(devices)
            raise Stop

    handles = [m.register_forward_pre_hook(record, with_kwargs=True) for m in model.modules()]
    try:
        with pytest.raises(Stop):
            run()
    finally:
        for handle in handles:
            handle.remove()
    return seen


def test_the_recorder_sees_cpu_inputs_given_to_a_meta_model():
    """The check can fail: ids left on the CPU reach the meta model's first forward."""
    model = seq2seq("sinusoidal").to(META)
    ids = torch.randint(4, 30, (2, 5))
    assert input_devices(model, lambda: model.encode(ids, torch.ones_like(ids))) == {
        torch.device("cpu")
    }


@pytest.mark.parametrize("beam", [1, 3])
def test_decoding_moves_sources_to_the_model(beam):
    model = seq2seq("diet-rel").to(META)
    assert model_device(model) == META
    ids = torch.randint(4, 30, (2, 5))
    settings = SearchSettings(beam, 0.6, 4)
    run = lambda: translate_ids(model, ids, torch.ones_like(ids), settings)  # noqa: E731
    assert input_devices(model, run) == {META}


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_searches_make_prefixes_on_the_given_device(search):
    seen = []

    def scorer(prefixes, parents):
        seen.append((prefixes.device, parents.device))
        raise Stop

    with pytest.raises(Stop):
        if search == "greedy":
            greedy_search(scorer, 2, 1, 2, 4, device=META)
        else:
            beam_search(scorer, 2, 1, 2, SearchSettings(3, 0.6, 4), device=META)
    assert seen == [(META, META)]


@pytest.mark.parametrize("step", ["train", "evaluate"])
def test_probe_cells_move_batches_to_the_model(step):
    settings = preset("smoke")
    task = probe_task("majority")
    model = probe_cell.build_model(task, "learned", settings).to(META)
    if step == "train":
        run = lambda: probe_cell.train(model, task, settings, 0, 10.0)  # noqa: E731
    else:
        run = lambda: probe_cell.evaluate(model, task, 8, 4, seed=0)  # noqa: E731
    assert input_devices(model, run) == {META}


def test_a_probe_cell_trains_on_its_device(monkeypatch):
    seen: set[torch.device] = set()
    built = []
    real = probe_cell.build_model

    def build_hooked(*args):
        built.append(hooked(real(*args), seen))
        return built[-1]

    monkeypatch.setattr(probe_cell, "build_model", build_hooked)
    with pytest.raises(Stop):
        probe_cell.run_cell(probe_task("majority"), "learned", 0, preset("smoke"), META)
    assert seen == {META} and model_device(built[0]) == META


def hooked(model, seen: set):
    """`model` with a hook that records its first forward's input devices, then stops."""

    def record(module, args, kwargs):
        devices = {v.device for v in [*args, *kwargs.values()] if isinstance(v, torch.Tensor)}
        if devices:
            seen.update(devices)
            raise Stop

    for module in model.modules():
        module.register_forward_pre_hook(record, with_kwargs=True)
    return model


def test_inspection_runs_the_model_on_the_chosen_device(tmp_path, monkeypatch):
    from posattn.lab.inspection import run as inspect_run
    from posattn.lab.inspection.loading import load_for_inspection
    from posattn.models import PosAttnModel

    torch.manual_seed(0)
    model = PosAttnModel(tiny_encoder("learned", vocab_size=40).config)
    model.save_pretrained(tmp_path / "model")
    loaded = load_for_inspection(tmp_path / "model", META)
    weight = next(loaded.encoder.parameters())
    assert weight.device == META and weight.dtype == torch.float64
    seen: set[torch.device] = set()
    monkeypatch.setattr(inspect_run, "resolve_device", lambda name: META)
    monkeypatch.setattr(
        inspect_run,
        "load_for_inspection",
        lambda path, device: hooked_inspected(load_for_inspection(path, device), seen),
    )
    monkeypatch.setattr(
        inspect_run,
        "input_ids",
        lambda model, settings: (torch.randint(5, 40, (2, 8)), "random ids", ["t"] * 8),
    )
    with pytest.raises(Stop):
        inspect_run.inspect_model(
            tmp_path / "model", tmp_path / "out", inspect_run.InspectSettings()
        )
    assert seen == {META}


def hooked_inspected(inspected, seen):
    hooked(inspected.encoder, seen)
    return inspected


def test_to_device_moves_tensors_and_keeps_other_values():
    batch = {"ids": torch.ones(2, dtype=torch.long), "name": "x"}
    moved = to_device(batch, META)
    assert moved["ids"].device == META and moved["name"] == "x"


def test_device_names_are_checked():
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    for bad in ("tpu", "cuda:x", "mps"):
        with pytest.raises(PosAttnConfigError, match=r"--device=.*auto, cpu, cuda or cuda:N"):
            resolve_device(bad)
    if not torch.cuda.is_available():
        with pytest.raises(PosAttnConfigError, match=r"--device='cuda' .*no CUDA GPU"):
            resolve_device("cuda")
    else:
        count = torch.cuda.device_count()
        with pytest.raises(PosAttnConfigError, match=f"cuda:0 to cuda:{count - 1}"):
            resolve_device(f"cuda:{count}")


@cuda
@pytest.mark.parametrize("beam", [1, 3])
def test_decoding_on_a_gpu_equals_the_cpu(beam):
    model = seq2seq("diet-rel")
    ids = torch.randint(4, 30, (3, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    settings = SearchSettings(beam, 0.6, 8)
    on_cpu = translate_ids(model, ids, mask, settings)
    assert translate_ids(model.to("cuda"), ids, mask, settings) == on_cpu


@cuda
def test_a_probe_cell_on_a_gpu_matches_the_cpu_run():
    settings = preset("smoke")
    task = probe_task("majority")
    cpu = probe_cell.run_cell(task, "alibi", 0, settings, "cpu")
    gpu = probe_cell.run_cell(task, "alibi", 0, settings, "cuda")
    assert gpu["status"] == cpu["status"] == "ok"
    # the same weights and batches; kernels differ in float32 rounding only
    assert gpu["final_train_loss"] == pytest.approx(cpu["final_train_loss"], rel=2e-2)


@cuda
def test_inspection_on_a_gpu_gives_the_cpu_numbers(tmp_path):
    from posattn.lab.inspection import run as inspect_run
    from posattn.models import PosAttnModel

    torch.manual_seed(0)
    PosAttnModel(tiny_encoder("learned", vocab_size=40).config).save_pretrained(tmp_path / "m")
    ids = torch.randint(5, 40, (2, 8), generator=torch.Generator().manual_seed(0))
    results = {}
    for device in ("cpu", "cuda"):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(inspect_run, "input_ids", lambda m, s: (ids, "ids", ["t"] * 8))
            settings = inspect_run.InspectSettings(device=device)
            results[device] = inspect_run.inspect_model(tmp_path / "m", tmp_path / device, settings)
    cpu_terms, gpu_terms = results["cpu"]["terms"]["terms"], results["cuda"]["terms"]["terms"]
    for name, numbers in cpu_terms.items():
        for key, value in numbers.items():
            assert gpu_terms[name][key] == pytest.approx(value, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("command", ["probe", "inspect"])
def test_commands_take_a_device_option_and_name_a_bad_one(command, tmp_path, capsys):
    from posattn.cli import entry

    arguments = {
        "probe": ["probe", "--preset", "smoke", "--output", str(tmp_path / "probe")],
        "inspect": ["inspect", str(tmp_path / "model"), "--output", str(tmp_path / "inspect")],
    }[command]
    if command == "inspect":
        from posattn.models import PosAttnModel

        PosAttnModel(tiny_encoder("learned", vocab_size=40).config).save_pretrained(
            tmp_path / "model"
        )
    assert entry([*arguments, "--device", "tpu"]) == 2
    error = capsys.readouterr().err
    assert "--device='tpu' is not allowed" in error and "Traceback" not in error
