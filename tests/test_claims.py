"""lab/runs/claims.py: every verdict rule on constructed measurements (holds, does not hold,
inconclusive, not tested), with the intervals computed by hand, and DIET Theorem 1's ranks."""

from __future__ import annotations

import json
import math

import pytest

from posattn.lab.runs.claims import (
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    Claim,
    Measurements,
    about_equal,
    better,
    chain,
    evaluate_claims,
    lower_final_loss,
    rank_theorem,
    steps_fraction,
)
from posattn.lab.runs.claims_table import default_claims

T2 = 4.302652729911275  # t(0.975, 2)
T2_1 = 12.706204736174707  # t(0.975, 1)


def runs(scores, per_example=None):
    return [
        {
            "seed": seed,
            "score": score,
            "per_example": None if per_example is None else per_example[i],
        }
        for i, (seed, score) in enumerate(enumerate(scores))
    ]


def measured(tasks: dict, kinds: dict | None = None, **extra) -> Measurements:
    """tasks: {task: {encoding: [score per seed]}}."""
    downstream = {t: {e: runs(s) for e, s in encodings.items()} for t, encodings in tasks.items()}
    return Measurements(downstream, kinds or {t: "single" for t in tasks}, **extra)


def result(claim_evaluator, m: Measurements) -> dict:
    return Claim("c", "paper", "statement", "measure", claim_evaluator).evaluated(m)


def by_id(m: Measurements) -> dict:
    return {r["id"]: r for r in evaluate_claims(m, default_claims())}


# --- directional ------------------------------------------------------------------------------


def test_directional_holds_with_the_hand_computed_t_interval():
    # differences per seed 1.0, 0.8, 1.4: mean 16/15, s = sqrt(0.0933...) = 0.30551
    m = measured({"sst2": {"tupe-r": [85.0, 86.0, 87.5], "tupe-a": [84.0, 85.2, 86.1]}})
    r = result(better("tupe-r", "tupe-a"), m)
    half = T2 * math.sqrt(((1 - 16 / 15) ** 2 + (0.8 - 16 / 15) ** 2 + (1.4 - 16 / 15) ** 2) / 2)
    half /= math.sqrt(3)
    difference = r["values"]["difference"]
    assert r["verdict"] == HOLDS and "lies above 0" in r["reason"]
    assert difference["difference"] == pytest.approx(16 / 15)
    assert difference["interval"] == pytest.approx([16 / 15 - half, 16 / 15 + half])
    assert difference["p_value"] == 0.25 and difference["runs"] == 3
    assert difference["method"].startswith("sign-flip")
    assert r["values"]["a_score"]["mean"] == pytest.approx(86.16666666)
    assert r["values"]["tasks"] == ["sst2"] and r["values"]["seeds"] == [0, 1, 2]


def test_directional_does_not_hold_is_inconclusive_and_not_tested():
    m = measured({"sst2": {"tupe-r": [85.0, 86.0, 87.5], "tupe-a": [84.0, 85.2, 86.1]}})
    reverse = result(better("tupe-a", "tupe-r"), m)
    assert reverse["verdict"] == FAILS and "lies below 0" in reverse["reason"]
    noisy = measured({"sst2": {"tupe-r": [85.0, 84.0, 86.5], "tupe-a": [84.0, 85.0, 86.0]}})
    open_ = result(better("tupe-r", "tupe-a"), noisy)
    assert open_["verdict"] == INCONCLUSIVE and "contains 0" in open_["reason"]
    missing = result(better("tupe-r", "bert-r"), m)
    assert missing["verdict"] == INCONCLUSIVE
    assert (
        missing["reason"] == "not tested by this run: needs encodings `bert-r` on downstream tasks"
    )


def test_directional_one_seed_has_no_interval():
    m = measured({"sst2": {"tupe-r": [90.0], "tupe-a": [80.0]}})
    r = result(better("tupe-r", "tupe-a"), m)
    assert r["verdict"] == INCONCLUSIVE and "no interval" in r["reason"]
    assert r["values"]["difference"]["interval"] is None


def test_directional_averages_tasks_and_pairs_by_seed():
    # seeds 0, 1, 2 on task x; only 1, 2 on task y for b: seeds 1 and 2 are used
    m = Measurements(
        {
            "x": {"a": runs([1.0, 2.0, 3.0]), "b": runs([0.0, 1.0, 2.0])},
            "y": {"a": runs([5.0, 6.0, 7.0]), "b": runs([9.0, 3.0, 4.0])[1:]},
        },
        {"x": "single", "y": "pair"},
    )
    r = result(better("a", "b"), m)
    # seed 1: (2 + 6)/2 - (1 + 3)/2 = 2; seed 2: (3 + 7)/2 - (2 + 4)/2 = 2: zero-width at 2
    assert r["values"]["seeds"] == [1, 2]
    assert r["values"]["difference"]["interval"] == [2.0, 2.0]
    assert r["verdict"] == HOLDS
    only_single = result(better("a", "b", "single"), m)
    assert only_single["values"]["tasks"] == ["x"]
    assert only_single["values"]["difference"]["interval"] == [1.0, 1.0]


def test_directional_uses_the_paired_bootstrap_where_per_example_scores_exist():
    a_examples = [[100.0, 100.0, 0.0, 100.0], [100.0, 0.0, 100.0, 100.0]]
    b_examples = [[0.0, 100.0, 0.0, 100.0], [0.0, 0.0, 100.0, 100.0]]  # a: +100 on example 0
    m = Measurements(
        {
            "mrpc": {
                "tupe-a": runs([75.0, 75.0], a_examples),
                "tupe-a/tie-cls": runs([50.0, 50.0], b_examples),
            }
        },
        {"mrpc": "single"},
    )
    r = result(better("tupe-a", "tupe-a/tie-cls", "single"), m)
    difference = r["values"]["difference"]
    assert difference["method"] == "paired bootstrap over runs and examples"
    assert difference["difference"] == 25.0
    # replicates: 100 x (share of example 0 among 4 draws): from 0 (prob (3/4)^4) to 100
    assert difference["interval"][0] == 0.0 and difference["interval"][1] >= 50.0
    assert r["verdict"] == INCONCLUSIVE
    # per-example scores that do not average to the score: the seed-level test instead
    m.downstream["mrpc"]["tupe-a"][0]["score"] = 80.0
    fallback = result(better("tupe-a", "tupe-a/tie-cls", "single"), m)
    assert fallback["values"]["difference"]["method"].startswith("sign-flip")


# --- equivalence ------------------------------------------------------------------------------


def test_equivalence_holds_fails_and_is_inconclusive_against_the_margin():
    base = [85.0, 86.0, 84.0]
    close = {"x": {"diet-abs": [85.1, 85.9, 84.05], "diet-rel": base}}
    r = result(about_equal("diet-abs", "diet-rel", margin=1.0), measured(close))
    assert r["verdict"] == HOLDS and "within +-1" in r["reason"] and r["values"]["margin"] == 1.0
    far = {"x": {"diet-abs": [88.0, 89.2, 86.9], "diet-rel": base}}
    r = result(about_equal("diet-abs", "diet-rel"), measured(far))
    assert r["verdict"] == FAILS and "outside +-1" in r["reason"]
    # differences 0.5, 1.5, 0.2: the interval crosses +1
    crossing = {"x": {"diet-abs": [85.5, 87.5, 84.2], "diet-rel": base}}
    r = result(about_equal("diet-abs", "diet-rel"), measured(crossing))
    assert r["verdict"] == INCONCLUSIVE and "crosses the margin" in r["reason"]
    # a wider margin turns it into holds: differences mean 0.7333, half T2 * s / sqrt(3)
    s = math.sqrt(((0.5 - 2.2 / 3) ** 2 + (1.5 - 2.2 / 3) ** 2 + (0.2 - 2.2 / 3) ** 2) / 2)
    high = 2.2 / 3 + T2 * s / math.sqrt(3)
    assert high == pytest.approx(2.4243, abs=1e-4)
    assert r["values"]["difference"]["interval"][1] == pytest.approx(high)
    r = result(about_equal("diet-abs", "diet-rel", margin=2.5), measured(crossing))
    assert r["verdict"] == HOLDS


def test_equivalence_margin_is_in_points_of_the_score_scale():
    # fractions: point = 0.01, so a margin of 1 point is 0.01
    close = {"x": {"diet-abs": [0.851, 0.859, 0.8405], "diet-rel": [0.85, 0.86, 0.84]}}
    r = result(about_equal("diet-abs", "diet-rel"), measured(close, point=0.01))
    assert r["verdict"] == HOLDS
    r = result(about_equal("diet-abs", "diet-rel"), measured(close, point=1e-4))
    assert r["verdict"] == INCONCLUSIVE  # the same numbers, 1 point = 0.0001: crosses it


def test_sharing_claim_takes_the_default_name_or_the_explicit_variant():
    tasks = {"x": {"diet-abs": [85.0, 86.0, 84.0], "diet-abs/share-none": [85.1, 85.9, 84.05]}}
    claim = by_id(measured(tasks))["diet-abs-sharing"]
    assert claim["verdict"] == HOLDS and claim["values"]["a"] == "diet-abs"
    tasks["x"]["diet-abs/share-layer"] = [80.0, 81.0, 79.0]
    claim = by_id(measured(tasks))["diet-abs-sharing"]
    assert claim["verdict"] == FAILS and claim["values"]["a"] == "diet-abs/share-layer"
    claim = by_id(measured({"x": {"diet-abs": [85.0, 86.0]}}))["diet-abs-sharing"]
    assert claim["reason"] == (
        "not tested by this run: needs encodings `diet-abs/share-none` on downstream tasks"
    )


def test_rate_raised_diet_claims_take_the_faster_diet_arms_and_plain_bert_a():
    tasks = {
        "x": {
            "learned": [70.0, 71.0, 72.0],
            "diet-abs": [70.5, 70.0, 72.5],
            "learned/positional-lr-x10": [60.0, 61.0, 62.0],  # not BERT-A's arm in the claim
            "diet-abs/positional-lr-x10": [75.0, 76.2, 76.8],
        }
    }
    claims = by_id(measured(tasks))
    faster = claims["diet-abs>input:positional-lr-x10"]
    # differences 5.0, 5.2, 4.8: mean 5.0, s = 0.2, half width t(0.975, 2) * 0.2 / sqrt(3)
    half = T2 * 0.2 / math.sqrt(3)
    difference = faster["values"]["difference"]
    assert faster["verdict"] == HOLDS
    assert (faster["values"]["a"], faster["values"]["b"]) == (
        "diet-abs/positional-lr-x10",
        "learned",
    )
    assert difference["difference"] == pytest.approx(5.0)
    assert difference["interval"] == pytest.approx([5.0 - half, 5.0 + half])
    assert claims["diet-abs>input"]["verdict"] == INCONCLUSIVE  # the plain arms: +0.0 +-
    assert claims["diet-abs~rel:positional-lr-x10"]["reason"] == (
        "not tested by this run: needs encodings `diet-rel/positional-lr-x10` on downstream tasks"
    )


def test_rate_raised_bert_r_claims_take_bert_r_with_its_t5_table_faster():
    tasks = {
        "x": {
            "learned": [50.0, 51.0, 49.0],
            "tupe-a": [70.0, 71.0, 72.0],
            "bert-r": [48.0, 50.0, 49.0],  # the plain claims' arm, not these
            "bert-r/attention-lr-x10": [66.0, 68.0, 67.0],
        }
    }
    claims = by_id(measured(tasks))
    above = claims["tupe-order:tupe-a>bert-r:attention-lr-x10"]
    below = claims["tupe-order:bert-r>learned:attention-lr-x10"]
    assert (above["values"]["a"], above["values"]["b"]) == ("tupe-a", "bert-r/attention-lr-x10")
    assert (below["values"]["a"], below["values"]["b"]) == ("bert-r/attention-lr-x10", "learned")
    # differences 4, 3, 5 and 16, 17, 18: means 4 and 17, s = 1, half width t(0.975, 2) / sqrt 3
    half = T2 / math.sqrt(3)
    for claim, mean in ((above, 4.0), (below, 17.0)):
        assert claim["values"]["difference"]["difference"] == pytest.approx(mean)
        interval = claim["values"]["difference"]["interval"]
        assert interval == pytest.approx([mean - half, mean + half])
        assert claim["verdict"] == HOLDS
    assert claims["tupe-order:bert-r>learned"]["values"]["a"] == "bert-r"
    assert claims["tupe-order:bert-r>learned"]["verdict"] == INCONCLUSIVE


def test_rate_raised_linformer_claim_takes_the_faster_factors_and_plain_linformer():
    tasks = {
        "x": {
            "linformer": [70.0, 71.0, 72.0],
            "linformer/positional-lr-x10": [80.0, 81.0, 82.0],  # not Linformer's arm here
            "diet-abs-lin/positional-lr-x10": [71.0, 73.0, 72.0],
        }
    }
    claim = by_id(measured(tasks))["diet-abs-lin>linformer:positional-lr-x10"]
    # differences 1.0, 2.0, 0.0: mean 1.0, s = 1.0, half width t(0.975, 2) / sqrt(3)
    half = T2 / math.sqrt(3)
    assert (claim["values"]["a"], claim["values"]["b"]) == (
        "diet-abs-lin/positional-lr-x10",
        "linformer",
    )
    assert claim["values"]["difference"]["interval"] == pytest.approx([1.0 - half, 1.0 + half])
    assert claim["verdict"] == INCONCLUSIVE
    tasks["x"]["linformer"] = [69.0, 71.5, 70.5]  # differences 2.0, 1.5, 1.5
    assert by_id(measured(tasks))["diet-abs-lin>linformer:positional-lr-x10"]["verdict"] == HOLDS


# --- task kinds -------------------------------------------------------------------------------


def test_untied_cls_claim_uses_single_sentence_tasks_only():
    m = measured(
        {
            "sst2": {"tupe-a": [90.0, 91.0, 92.0], "tupe-a/tie-cls": [89.0, 90.0, 91.0]},
            "mnli": {"tupe-a": [70.0, 71.0, 72.0], "tupe-a/tie-cls": [80.0, 81.0, 82.0]},
        },
        {"sst2": "single", "mnli": "pair"},
    )
    claim = by_id(m)["tupe-untie-cls"]
    assert claim["verdict"] == HOLDS and claim["values"]["tasks"] == ["sst2"]
    assert claim["values"]["difference"]["interval"] == [1.0, 1.0]
    only_pairs = measured(
        {"mnli": {"tupe-a": [1.0, 2.0], "tupe-a/tie-cls": [0.0, 1.0]}}, {"mnli": "pair"}
    )
    assert by_id(only_pairs)["tupe-untie-cls"]["reason"] == (
        "not tested by this run: needs single-sentence tasks (none measured)"
    )


def test_segment_claims_compare_attention_with_input_segments_on_pair_tasks():
    tasks = {
        "mnli": {"diet-rel/segments-attention": [80.0, 81.0, 82.5], "diet-rel": [79.0, 80.0, 81.0]},
        "sst2": {"diet-rel/segments-attention": [10.0, 10.0, 10.0], "diet-rel": [90.0, 90.0, 90.0]},
    }
    claims = by_id(measured(tasks, {"mnli": "pair", "sst2": "single"}))
    rel = claims["diet-segments:diet-rel"]
    assert rel["verdict"] == HOLDS and rel["values"]["tasks"] == ["mnli"]
    assert rel["values"]["b"] == "diet-rel"
    assert claims["diet-segments:diet-abs"]["reason"] == (
        "not tested by this run: needs encodings `diet-abs/segments-attention`, "
        "`diet-abs/segments-input or diet-abs` on sentence-pair tasks"
    )
    # an explicit input variant wins over the plain name
    tasks["mnli"]["diet-rel/segments-input"] = [85.0, 86.0, 87.0]
    rel = by_id(measured(tasks, {"mnli": "pair", "sst2": "single"}))["diet-segments:diet-rel"]
    assert rel["values"]["b"] == "diet-rel/segments-input" and rel["verdict"] == FAILS


# --- the chain --------------------------------------------------------------------------------

ORDER = {"tupe-r": [86.0, 87.0, 88.0], "tupe-a": [85.0, 86.0, 87.0]}
ORDER |= {"bert-r": [84.0, 85.0, 86.0], "learned": [83.0, 84.0, 85.0]}


def test_tupe_order_chain_holds_only_when_every_pair_holds():
    claims = by_id(measured({"x": dict(ORDER)}))
    assert claims["tupe-order"]["verdict"] == HOLDS
    assert claims["tupe-order"]["values"] == {
        "tupe-order:tupe-r>tupe-a": HOLDS,
        "tupe-order:tupe-a>bert-r": HOLDS,
        "tupe-order:bert-r>learned": HOLDS,
    }
    swapped = dict(ORDER, **{"bert-r": [82.0, 83.0, 84.0]})  # BERT-R below BERT-A
    claims = by_id(measured({"x": swapped}))
    assert claims["tupe-order"]["verdict"] == FAILS
    assert claims["tupe-order"]["reason"] == "does not hold: tupe-order:bert-r>learned"
    noisy = dict(ORDER, **{"tupe-r": [86.0, 85.0, 88.0]})
    claims = by_id(measured({"x": noisy}))
    assert claims["tupe-order"]["verdict"] == INCONCLUSIVE
    assert claims["tupe-order"]["reason"] == "inconclusive: tupe-order:tupe-r>tupe-a"
    partial = {k: v for k, v in ORDER.items() if k != "bert-r"}
    claims = by_id(measured({"x": partial}))
    assert claims["tupe-order"]["verdict"] == INCONCLUSIVE
    assert claims["tupe-order"]["reason"] == (
        "not tested by this run: needs encodings `bert-r` on downstream tasks"
    )


def test_chain_of_custom_parts():
    parts = [
        Claim("p", "x", "s", "m", better("a", "b")),
        Claim("q", "x", "s", "m", better("b", "c")),
    ]
    m = measured({"t": {"a": [3.0, 4.0], "b": [2.0, 3.0], "c": [1.0, 2.0]}})
    assert result(chain(parts), m)["verdict"] == HOLDS


# --- the 30% claim ----------------------------------------------------------------------------

LEARNED = [[0, 10.0], [100, 5.0], [200, 4.0], [1000, 3.0]]


def tupe_curve(reach_step: int) -> list[list[float]]:
    return [[0, 10.0], [reach_step - 10, 3.5], [reach_step, 3.0], [1000, 2.5]]


def fraction_result(reach_steps, curves=None) -> dict:
    curves = curves or [tupe_curve(s) for s in reach_steps]
    m = Measurements(mlm_curves={"tupe-a": curves, "learned": [LEARNED] * len(curves)})
    return result(steps_fraction("tupe-a"), m)


def test_steps_fraction_holds_with_the_hand_computed_interval():
    # fractions 0.20, 0.21, 0.22: mean 0.21, s = 0.01, upper 0.21 + T2 * 0.01 / sqrt(3)
    r = fraction_result([200, 210, 220])
    assert r["values"]["fractions"] == [0.2, 0.21, 0.22]
    assert r["values"]["fraction"]["interval"][1] == pytest.approx(0.21 + T2 * 0.01 / math.sqrt(3))
    assert r["verdict"] == HOLDS


def test_steps_fraction_seeds_tied_on_the_eval_grid_are_not_a_zero_width_interval():
    # both seeds first reach learned's final loss at the eval of step 300, the one before at 250:
    # fraction 0.3 each, known to within 0.05; s >= 0.05 / sqrt(12), t(0.975, 1) = 12.7062
    curves = [[[0, 10.0], [250, 3.5], [300, 3.0], [1000, 2.5]]] * 2
    r = fraction_result(None, curves)
    half = 12.706204736174698 * 0.05 / math.sqrt(12) / math.sqrt(2)
    assert r["values"]["resolution"] == pytest.approx(0.05)
    assert r["values"]["fraction"]["interval"] == pytest.approx([0.3 - half, 0.3 + half])
    assert r["verdict"] == INCONCLUSIVE and "to within 0.05" in r["reason"]
    # three seeds spread wider than the grid keep their own spread
    assert fraction_result([200, 210, 220])["values"]["resolution"] == pytest.approx(0.01)


def test_steps_fraction_fails_is_inconclusive_never_reached_and_not_tested():
    assert fraction_result([600, 620, 640])["verdict"] == FAILS
    # fractions 0.2, 0.25, 0.3: upper bound 0.25 + T2 * 0.05 / sqrt(3) = 0.374 > 0.3 > lower
    open_ = fraction_result([200, 250, 300])
    assert open_["verdict"] == INCONCLUSIVE and "contains 0.3" in open_["reason"]
    never = fraction_result(None, [tupe_curve(200), [[0, 10.0], [1000, 3.2]]])
    assert never["verdict"] == FAILS and never["values"]["fractions"] == [0.2, None]
    assert "never reached" in never["reason"] and "fraction > 1" in never["reason"]
    short = fraction_result(None, [tupe_curve(200), [[0, 10.0], [100, 3.2]]])
    assert short["verdict"] == INCONCLUSIVE and "stops before" in short["reason"]
    assert fraction_result([200])["verdict"] == INCONCLUSIVE  # one seed: no interval
    missing = result(steps_fraction("tupe-r"), Measurements(mlm_curves={"learned": [LEARNED]}))
    assert missing["verdict"] == INCONCLUSIVE
    assert missing["reason"] == "not tested by this run: needs MLM validation curves of `tupe-r`"


def loss_result(base_finals, finals) -> dict:
    curves = {
        "learned": [[[100, 7.0], [500, final]] for final in base_finals],
        "tupe-r": [[[100, 7.0], [500, final]] for final in finals],
    }
    return result(lower_final_loss("tupe-r"), Measurements(mlm_curves=curves))


def test_lower_final_loss_is_paired_by_seed_with_the_hand_computed_interval():
    # differences 0.10, 0.12, 0.14: mean 0.12, s = 0.02, interval 0.12 -+ T2 * 0.02 / sqrt(3)
    r = loss_result([6.0, 6.1, 6.2], [5.9, 5.98, 6.06])
    low, high = r["values"]["difference"]["interval"]
    assert r["values"]["difference"]["difference"] == pytest.approx(0.12)
    assert (low, high) == pytest.approx((0.12 - T2 * 0.02 / 3**0.5, 0.12 + T2 * 0.02 / 3**0.5))
    assert r["verdict"] == HOLDS and "p = 0.25" in r["reason"]
    assert "no sign flip of 3 seeds can give p below 0.25" in r["reason"]
    assert loss_result([5.9, 5.98, 6.06], [6.0, 6.1, 6.2])["verdict"] == FAILS
    assert loss_result([6.0, 6.1, 6.2], [6.1, 6.0, 6.25])["verdict"] == INCONCLUSIVE
    missing = result(lower_final_loss("tupe-r"), Measurements(mlm_curves={}))
    assert missing["verdict"] == INCONCLUSIVE and missing["reason"].startswith("not tested")


# --- DIET Theorem 1 ---------------------------------------------------------------------------


def test_rank_theorem_holds_with_exact_ranks():
    r = result(rank_theorem(), Measurements())
    assert r["verdict"] == HOLDS
    assert r["values"]["rank_A_a"] == [4] * 5  # random draws reach the bound d_h exactly
    assert r["values"]["rank_A_r"] == 12  # d_h + d_p
    other = result(rank_theorem(n=24, d=20, head_dim=6, rank=10, trials=2, seed=3), Measurements())
    assert other["values"]["rank_A_a"] == [6, 6] and other["values"]["rank_A_r"] == 16
    with pytest.raises(ValueError, match="d_h < d_p < d"):
        rank_theorem(n=10, d=12, head_dim=4, rank=8)


def test_diet_rel_sharing_claim_reads_the_per_layer_table_against_the_shared_one():
    """DIET's Sec. 4.4: DIET-REL unshared (its default, or the explicit `share-none`) beats
    the table shared across layers."""
    tasks = {"x": {"diet-rel": [85.0, 86.0, 84.0], "diet-rel/share-layer": [80.0, 81.5, 79.0]}}
    claim = by_id(measured(tasks))["diet-rel-sharing"]
    assert claim["verdict"] == HOLDS and claim["values"]["a"] == "diet-rel"
    tasks["x"]["diet-rel/share-none"] = [78.0, 79.0, 77.5]
    claim = by_id(measured(tasks))["diet-rel-sharing"]
    assert claim["verdict"] == FAILS and claim["values"]["a"] == "diet-rel/share-none"
    claim = by_id(measured({"x": {"diet-rel": [85.0, 86.0]}}))["diet-rel-sharing"]
    assert claim["reason"] == (
        "not tested by this run: needs encodings `diet-rel/share-layer` on downstream tasks"
    )


def test_linformer_claim_reads_diet_abs_inside_linformer_against_linformer():
    """DIET Table 2's Linformer rows: DIET-ABS^LIN - Linformer, averaged over the tasks; a run
    with full attention only says which arms it needs."""
    tasks = {"x": {"diet-abs-lin": [70.0, 72.0, 71.0], "linformer": [68.0, 71.5, 69.0]}}
    claim = by_id(measured(tasks))["diet-abs-lin>linformer"]
    # differences 2.0, 0.5, 2.0: mean 1.5, s = sqrt(0.75), half-width t(2) s / sqrt(3)
    half = T2 * math.sqrt(0.75) / math.sqrt(3)
    assert claim["values"]["difference"]["interval"] == pytest.approx([1.5 - half, 1.5 + half])
    assert claim["verdict"] == INCONCLUSIVE  # 1.5 - 2.15 < 0
    tasks["x"]["linformer"] = [68.0, 70.5, 69.0]  # differences 2.0, 1.5, 2.0
    assert by_id(measured(tasks))["diet-abs-lin>linformer"]["verdict"] == HOLDS
    claim = by_id(measured({"x": {"diet-abs": [85.0], "learned": [84.0]}}))
    assert claim["diet-abs-lin>linformer"]["reason"] == (
        "not tested by this run: needs encodings `diet-abs-lin`, `linformer` on downstream tasks"
    )


# --- the table --------------------------------------------------------------------------------


def test_default_claims_have_unique_ids_and_every_result_field():
    claims = default_claims()
    assert len({c.id for c in claims}) == len(claims) == 23
    results = evaluate_claims(Measurements(), claims)
    assert [r["id"] for r in results] == [c.id for c in claims]
    for r in results:
        assert set(r) == {"id", "paper", "statement", "measure", "values", "verdict", "reason"}
        if r["id"] != "diet-theorem1":
            assert r["verdict"] == INCONCLUSIVE
            assert r["reason"].startswith("not tested by this run: needs ")


def test_measurements_are_checked():
    with pytest.raises(ValueError, match="task_kinds"):
        Measurements(task_kinds={"x": "triple"})
    with pytest.raises(ValueError, match="'seed' and 'score'"):
        Measurements(downstream={"x": {"a": [{"score": 1.0}]}})
    with pytest.raises(ValueError, match="point"):
        Measurements(point=0)


# --- results.json, markdown, figure, report ---------------------------------------------------


def compare_like_run(root):
    """A run directory as a comparison writes it: results.json with claims, downstream and
    baselines, and the downstream figure."""
    from posattn.lab.runs.claims import evaluate_claims
    from posattn.lab.runs.claims_table import default_claims
    from posattn.lab.runs.results import downstream_summary, plot_downstream

    m = measured(
        {"sst2": dict(ORDER), "mnli": {"learned": [70.0]}},
        {"sst2": "single", "mnli": "pair"},
        baselines={"sst2": {"majority": 50.0, "bag_of_words": 78.0, "random_init": 60.0}},
    )
    root.mkdir()
    output = {"claims": evaluate_claims(m, default_claims()), **downstream_summary(m)}
    (root / "results.json").write_text(json.dumps(output))
    plot_downstream(output, root / "downstream.png")
    return root, output


def test_results_json_shape_and_downstream_intervals(tmp_path):
    run, output = compare_like_run(tmp_path / "compare")
    assert set(output) == {"claims", "downstream", "baselines"}
    learned = output["downstream"]["sst2"]["learned"]
    half = T2 * 1.0 / math.sqrt(3)  # 83, 84, 85: s = 1
    assert learned["mean"] == 84.0 and learned["runs"] == 3
    assert learned["interval"] == pytest.approx([84 - half, 84 + half])
    assert output["downstream"]["mnli"]["learned"] == {"mean": 70.0, "interval": None, "runs": 1}
    assert output["baselines"]["sst2"]["bag_of_words"] == 78.0
    verdicts = {c["id"]: c["verdict"] for c in output["claims"]}
    assert verdicts["tupe-order"] == HOLDS and verdicts["diet-theorem1"] == HOLDS
    assert (run / "downstream.png").stat().st_size > 1000


def test_downstream_intervals_are_cut_to_the_declared_bounds():
    from posattn.lab.runs.claims import ACCURACY_PERCENT
    from posattn.lab.runs.results import downstream_summary

    wide = {"sst2": {"learned": [10.0, 95.0], "t5": [96.0, 98.0]}}
    whole = downstream_summary(measured(wide))["downstream"]["sst2"]
    cut = downstream_summary(measured(wide, bounds=ACCURACY_PERCENT))["downstream"]["sst2"]
    assert whole["learned"]["interval"][0] < 0 and whole["learned"]["interval"][1] > 100
    assert cut["learned"] == {"mean": 52.5, "interval": [0.0, 100.0], "runs": 2}
    assert cut["t5"]["interval"] == [pytest.approx(97.0 - T2_1), 100.0]
    # a claim's per-encoding scores are cut the same way; its paired difference is not a score
    values = result(better("t5", "learned"), measured(wide, bounds=ACCURACY_PERCENT))["values"]
    assert values["b_score"]["interval"] == [0.0, 100.0]
    with pytest.raises(ValueError, match=r"bounds=\(100\.0, 0\.0\)"):
        measured(wide, bounds=(100.0, 0.0))


def test_claims_markdown_table():
    from posattn.lab.runs.results import claims_markdown

    text = claims_markdown(
        [
            {"id": "a", "paper": "P", "statement": "x | y", "verdict": HOLDS, "reason": "r"},
            {"id": "b", "paper": "P", "statement": "s", "verdict": INCONCLUSIVE, "reason": "q"},
        ]
    )
    lines = text.splitlines()
    assert lines[0] == "## Claims"
    assert lines[2].startswith("2 claims: 1 holds, 0 does not hold, 1 inconclusive.")
    assert lines[4] == "| claim | paper | statement | verdict | reason |"
    assert lines[6] == "| `a` | P | x \\| y | **holds** | r |"


def test_report_shows_the_claims_table(tmp_path):
    from posattn.cli import main

    run, output = compare_like_run(tmp_path / "compare")
    assert main(["report", str(run)]) == 0
    page = (run / "report.html").read_text()
    assert '<section class="claims">' in page and "<h2>Claims</h2>" in page
    assert "<td><code>tupe-order</code></td>" in page
    assert page.count("<strong>holds</strong>") == sum(
        c["verdict"] == HOLDS for c in output["claims"]
    )
    # the flattened JSON table names the claims instead of repeating them
    assert "<td>claims</td><td>23 claims: see the Claims section</td>" in page
    assert "<td>downstream.sst2.learned.mean</td><td>84</td>" in page
    text = (run / "report.md").read_text()
    assert "| `diet-theorem1` | DIET (Chen et al., EMNLP 2021) |" in text
    assert text.index("## Claims") < text.index("## Figures")
    # a run whose own markdown has the claims section: not repeated from results.json
    (run / "results.md").write_text("## Claims\n\n| claim |\n|---|\n| x |\n")
    assert main(["report", str(run)]) == 0
    assert '<section class="claims">' not in (run / "report.html").read_text()
