"""`posattn probe --encodings tupe-a,tupe-a/tie-cls`: an encoding and one of the papers'
ablations that set its options in one run - the variant's options reach its model and its
cells' fingerprint, the plain encoding's cells keep theirs, its cells live in files of their
own, it is paired with the plain encoding by seed, and variants that cannot apply are refused
by name."""

from __future__ import annotations

import json

import pytest

from posattn import PosAttnConfigError
from posattn.cli import main
from posattn.lab.probe import grid
from posattn.lab.probe.cell import build_model, encoding_of, probe_config
from posattn.lab.probe.settings import preset
from posattn.lab.probe.tasks import probe_task
from posattn.lab.runs.variants import OPTION_VARIANTS, split_variant, variant_options

TIED = "tupe-a/tie-cls"


def test_the_variants_a_probe_serves_set_encoding_options_alone():
    assert OPTION_VARIANTS == (
        "tie-cls",
        "tupe-scale",
        "share-none",
        "share-layer",
        "share-head",
        "no-input-positions",
    )
    assert split_variant(TIED) == ("tupe-a", "tie-cls")
    assert split_variant("rope") == ("rope", None)
    assert variant_options("share-none") == {"sharing": "none"}
    assert variant_options(None) == {}


def test_a_variant_builds_its_encoding_with_the_variants_options():
    settings = preset("smoke", encodings=["tupe-a", TIED, "diet-abs/share-none"])
    majority = probe_task("majority")
    config = probe_config(majority, TIED, settings)
    assert (config.encoding, config.encoding_options) == ("tupe-a", {"untie_cls": False})
    assert encoding_of(build_model(majority, TIED, settings)).options.untie_cls is False
    assert encoding_of(build_model(majority, "tupe-a", settings)).options.untie_cls is True
    unshared = encoding_of(build_model(majority, "diet-abs/share-none", settings))
    assert unshared.options.sharing == "none"
    others = preset(
        "smoke",
        encodings=["diet-rel/share-layer", "linformer/no-input-positions", "bert-ad/tupe-scale"],
    )
    assert others.options_of("diet-rel/share-layer") == {"sharing": "layer"}
    assert others.options_of("linformer/no-input-positions") == {"input_positions": False}
    assert others.options_of("bert-ad/tupe-scale") == {"scale_multiple": 2.0}
    # an --option on the variant's name adds to its options
    given = preset("smoke", encodings=[TIED], encoding_options={TIED: {"cls_index": 1}})
    assert given.options_of(TIED) == {"untie_cls": False, "cls_index": 1}


def test_only_the_variants_cells_have_a_fingerprint_of_their_own():
    plain = preset("smoke", encodings=["tupe-a"])
    both = preset("smoke", encodings=["tupe-a", TIED])
    assert both.cell_fingerprint("tupe-a") == plain.cell_fingerprint("tupe-a")
    assert both.cell_fingerprint(TIED) != both.cell_fingerprint("tupe-a")
    # the variant is its options: the same cell as the option given by hand
    by_hand = preset(
        "smoke", encodings=["tupe-a"], encoding_options={"tupe-a": {"untie_cls": False}}
    )
    assert both.cell_fingerprint(TIED) == by_hand.cell_fingerprint("tupe-a")
    cell = grid.cell_path(grid.Path("run"), "majority", TIED, 0, 10.0)
    assert cell == grid.Path("run/cells/majority__tupe-a+tie-cls__lr10__seed0.json")


def test_a_run_pairs_the_variant_with_its_encoding(tmp_path):
    output = tmp_path / "run"
    args = ["probe", "--preset", "smoke", "--tasks", "majority", "--encodings",
            f"tupe-a,{TIED}", "--paired-with", "tupe-a", "--output", str(output)]  # fmt: skip
    assert main(args) == 0
    cells = sorted(path.name for path in (output / "cells").glob("*.json"))
    assert cells == [
        "majority__tupe-a+tie-cls__lr10__seed0.json",
        "majority__tupe-a__lr10__seed0.json",
    ]
    untied, tied = (json.loads((output / "cells" / name).read_text()) for name in cells[::-1])
    assert tied["encoding"] == TIED and untied["encoding"] == "tupe-a"
    # the same data, another model: the training losses differ
    assert tied["final_train_loss"] != untied["final_train_loss"]
    results = json.loads((output / "results.json").read_text())
    accuracy = {
        name: results["results"]["majority"][name]["lengths"]["16"]["token"]["mean"]
        for name in ("tupe-a", TIED)
    }
    paired = results["paired"]["tupe-a"]["majority"][TIED]["16"]["token"]
    assert paired["difference"] == pytest.approx(100 * (accuracy[TIED] - accuracy["tupe-a"]))
    report = (output / "results.md").read_text()
    assert f"`{TIED}` |" in report
    assert f"Encoding options given: `{TIED}` untie_cls=False." in report


def test_variants_that_cannot_apply_are_refused_by_name():
    with pytest.raises(PosAttnConfigError, match=r"encodings='rope/tie-cls'.*untie_cls"):
        preset("smoke", encodings=["rope/tie-cls"])
    with pytest.raises(PosAttnConfigError, match=r"variant of 'tupe-a'='segments-attention'"):
        preset("smoke", encodings=["tupe-a/segments-attention"])
    with pytest.raises(PosAttnConfigError, match=r"variant of 'diet-rel'='positional-lr-x10'"):
        preset("smoke", encodings=["diet-rel/positional-lr-x10"])
    with pytest.raises(PosAttnConfigError, match=r"^encodings='tupe-b'"):
        preset("smoke", encodings=["tupe-b/tie-cls"])
    with pytest.raises(PosAttnConfigError, match=r"encodings=.*without repeated names"):
        preset("smoke", encodings=[TIED, TIED])
