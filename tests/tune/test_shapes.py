"""``--shapes HIST.json`` (braze/tune/shapes.py): tuning measures the buckets a shape histogram
reaches, the most called first, and a bad histogram is an error that says what to write."""

import importlib
import json

import pytest

from braze.codegen.isa import host_isa
from braze.errors import BrazeError
from braze.ir.parser import parse_module
from braze.options import Options
from braze.pipeline import compile_to_c

dispatch_module = importlib.import_module("braze.tune.dispatch")


def _compile(module, tmp_path, hist, monkeypatch):
    """Compiles with tune=fast and this histogram; what it would have measured."""
    seen = []

    def measure(db, env, todo, mode, budget_s, cache_dir=None):
        seen.extend(todo)
        return 0
    monkeypatch.setattr(dispatch_module, "measure", measure)
    path = tmp_path / "hist.json"
    path.write_text(hist if isinstance(hist, str) else json.dumps(hist))
    opts = Options(tune="fast", tune_db=str(tmp_path / "db.jsonl"), tune_shapes=str(path))
    _, m = compile_to_c(module, host_isa(), options=opts)
    return seen, m


def test_only_the_buckets_the_shapes_reach_are_measured_the_most_called_first(module_of, tmp_path, monkeypatch):
    # the MLP's two products have M = batch (1..300): 9 buckets each without a histogram
    seen, m = _compile(module_of(), tmp_path, [{"batch": 5}, {"dims": {"batch": 100}, "count": 3}, {"batch": 6}],
                       monkeypatch)
    assert len(seen) == 2
    assert [bs for _, _, _, bs in seen] == [[(64, 127), (4, 7)]] * 2  # 3 calls reach [64, 127], 2 reach [4, 7]
    assert m.tuning["shapes"] == str(tmp_path / "hist.json")
    assert parse_module(m.to_text()).tuning == m.tuning  # the IR says where the buckets came from


def test_a_histogram_without_a_shape_in_a_bucket_measures_nothing_there(module_of, tmp_path, monkeypatch):
    seen, _ = _compile(module_of(), tmp_path, [{"batch": 1}], monkeypatch)
    assert [bs for _, _, _, bs in seen] == [[(1, 1)]] * 2


@pytest.mark.parametrize("hist, words", [
    ("not json", ["cannot read the shape histogram", "JSON"]),
    ([], ["not a non-empty JSON list"]),
    ([{"batch": 5}, 7], ["entry 1 is not an object"]),
    ([{"seq": 5}], ["names the dim 'seq'", "the model does not have"]),
    ([{"batch": 301}], ["batch=301 is not an integer in batch's range [1, 300]"]),
    ([{"dims": {"batch": 3}, "count": 0}], ["positive integer count"]),
    ([{}], ["gives no batch"]),
])
def test_a_bad_histogram_is_an_error_naming_the_problem(module_of, tmp_path, monkeypatch, hist, words):
    with pytest.raises(BrazeError) as e:
        _compile(module_of(), tmp_path, hist, monkeypatch)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_a_missing_histogram_file_is_named(module_of, tmp_path):
    opts = Options(tune="fast", tune_db=str(tmp_path / "db.jsonl"), tune_shapes=str(tmp_path / "nope.json"))
    with pytest.raises(BrazeError, match="nope.json does not exist"):
        compile_to_c(module_of(), host_isa(), options=opts)
