"""Power-of-two buckets and dispatch tables (braze/tune/buckets.py)."""

import pytest

from braze.errors import BrazeError
from braze.tune.buckets import bucket_of, buckets, choice_at, describe, merged, override, summary
from braze.tune.products import DEFAULT


def test_buckets_are_powers_of_two_met_by_the_range():
    assert [bucket_of(v) for v in (1, 2, 3, 4, 47, 48, 64)] == [(1, 1), (2, 3), (2, 3), (4, 7), (32, 63), (32, 63),
                                                              (64, 127)]
    assert buckets(1, 100) == [(1, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, 63), (64, 127)]
    assert buckets(3, 3) == [(2, 3)]
    assert buckets(5, 4) == []


def test_override_keeps_the_rest_of_the_table():
    assert override(DEFAULT, 64, 127, "smallm") == ((48, "smallm"), (63, "dnnl"), (127, "smallm"), (None, "dnnl"))
    assert override(DEFAULT, 32, 63, "dnnl") == ((31, "smallm"), (None, "dnnl"))
    assert override(DEFAULT, 1, 1, "dnnl_rt") == ((1, "dnnl_rt"), (48, "smallm"), (None, "dnnl"))
    assert override(DEFAULT, 1, 1 << 40, "smallm") == ((1 << 40, "smallm"), (None, "dnnl"))
    # buckets that meet merge with their neighbours of the same choice
    assert override(override(DEFAULT, 32, 63, "smallm"), 64, 127, "smallm") == ((127, "smallm"), (None, "dnnl"))
    assert merged(((3, "a"), (7, "a"), (None, "b"))) == ((7, "a"), (None, "b"))


@pytest.mark.parametrize("v, want", [(1, "dnnl_rt"), (2, "smallm"), (48, "smallm"), (49, "dnnl"), (10 ** 9, "dnnl")])
def test_choice_at(v, want):
    assert choice_at(override(DEFAULT, 1, 1, "dnnl_rt"), v) == want


def test_a_table_without_an_open_end_is_a_bug():
    with pytest.raises(BrazeError, match="ends without"):
        choice_at(((4, "smallm"),), 5)


def test_tables_in_words():
    assert describe(DEFAULT) == "M <= 48 smallm, >= 49 dnnl"
    assert describe(((1, "a"), (3, "b"), (None, "c"))) == "M <= 1 a, 2..3 b, >= 4 c"
    lines = summary([("fused_0", "768x768 bias", DEFAULT), ("fused_1", "768x768 bias", DEFAULT),
                     ("fused_2", "64x64", ((None, "dnnl"),))])
    assert lines == ["768x768 bias: M <= 48 smallm, >= 49 dnnl  (2 calls)", "64x64: dnnl  (fused_2)"]
