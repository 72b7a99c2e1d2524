"""``calibrate.py --from-raw``: the items of a comparison's lists are checked too, before
anything is fitted (``read_raw``): ``seeds`` and ``diff`` whole numbers, ``trained_tok_s``
numbers or nulls, and, where present, ``wait_s`` / ``straggler_s`` one [run, baseline] pair
of numbers or nulls per pair. Before, only the lists were checked, and a hand-edited item (a
string among the rates) ended in a TypeError inside ``render``, after the fit, exit 1."""

from __future__ import annotations

import pytest

from .helpers import load_bench
from .test_calibrate_raw_shape_hardening import _page, _raw, _refusal

BAD_ITEMS = [
    ("seeds", [0, "1"], "'seeds' missing or not a list of whole numbers"),
    ("seeds", [0, 1.5], "'seeds' missing or not a list of whole numbers"),
    ("seeds", [0, True], "'seeds' missing or not a list of whole numbers"),
    ("diff", [0, None], "'diff' missing or not a list of whole numbers"),
    ("trained_tok_s", [100.0, "110"], "'trained_tok_s' missing or not a list of numbers or "
                                      "nulls"),
    ("wait_s", [[1.0, "1.1"], [1.0, 1.2]], "'wait_s' not a list of [number or null, number "
                                           "or null]"),
    ("wait_s", [[1.0], [1.0, 1.2]], "'wait_s' not a list of [number or null, number or null]"),
    ("straggler_s", "0.1", "'straggler_s' not a list of [number or null, number or null]"),
]


@pytest.mark.parametrize("key, value, message", BAD_ITEMS,
                         ids=[f"{k}={v!r}" for k, v, _ in BAD_ITEMS])
def test_a_list_with_a_bad_item_is_refused_naming_it(tmp_path, key, value, message):
    bench = load_bench("calibrate")
    dump = _raw(bench)
    dump["compared"]["comparisons"][0][key] = value
    assert f"comparison 0: {message}" in (_refusal(bench, tmp_path, dump) or "accepted")


def test_a_string_among_the_rates_fails_in_render_unchecked(tmp_path):
    """What the check spares: the same file rendered without it fails after the fit."""
    bench = load_bench("calibrate")
    dump = _raw(bench)
    dump["compared"]["comparisons"][0]["trained_tok_s"] = [100.0, "110"]
    with pytest.raises(TypeError):
        _page(bench, dump)


@pytest.mark.parametrize("key, value", [("trained_tok_s", [100.0, None]),
                                        ("wait_s", [[1.0, None], [1.0, 1.2]]),
                                        ("wait_s", None), ("straggler_s", None)])
def test_nulls_where_a_run_has_no_figure_are_accepted_and_render(tmp_path, key, value):
    bench = load_bench("calibrate")
    dump = _raw(bench)
    dump["compared"]["comparisons"][0][key] = value
    assert _refusal(bench, tmp_path, dump) is None
    assert "| 1 | reserve_occupy | off | keep |" in _page(bench, dump)
