"""The report document: written by orjson, byte for byte what ``json.dumps`` writes."""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from honestci.audit.report_model import _document_text

#: Floats of every magnitude, the ones whose spelling differs between orjson and Python first.
FLOATS = st.one_of(
    st.sampled_from([1e-05, -1e-05, 1.5e-07, 9.999999999999999e-06, 1e-09, 1e-10, 0.0001, 1e16, -0.0, 5e-324]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=1e-10, max_value=1e-3),
)
#: Text with control characters, DEL, non-ASCII and astral characters, and what looks like numbers.
TEXT = st.one_of(
    st.text(),
    st.sampled_from(['a": 1e-7', '": 0.00001', "e-5", "0.00001", "\x7f", "θ − ±", "😀", "\n1e-7\n"]),
)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), FLOATS, TEXT)
DOCUMENTS = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=40,
)


def _stdlib(data) -> str:
    return json.dumps(data, indent=2, sort_keys=True, allow_nan=False)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(TEXT, DOCUMENTS, max_size=6))
def test_document_text_is_json_dumps_byte_for_byte(data):
    assert _document_text(data) == _stdlib(data)


@pytest.mark.parametrize(
    "value",
    [
        {"x": [1e-05, 2.5e-08, -1e-06, 0.00012, 1e-10, 123.0, 1e16]},
        {"key \u03b8 with \x7f and \U0001f600": "\u2212 \x00 \t", "n": 12},
        {'k": 0.00001': 3, "e-5": "v e-5", "list": [[], {}, [1e-07]]},
        # what orjson cannot write or would write otherwise: the standard library writes it
        {"t": (1, 2.5e-06)},
        {"big": 2**70},
        {"surrogate": "\ud800"},
    ],
)
def test_document_text_cases(value):
    assert _document_text(value) == _stdlib(value)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_document_text_refuses_non_finite_floats(bad):
    # as json.dumps(allow_nan=False): orjson would write null
    with pytest.raises(ValueError):
        _document_text({"value": [bad]})


def test_json_safe_gives_python_numbers_that_orjson_writes():
    import numpy as np
    import orjson

    from honestci.audit.report_model import json_safe

    data = json_safe({"x": np.float64(2.5e-06), "n": np.int64(3), "nan": np.float64("nan"), "t": (np.float64(0.1),)})
    assert data == {"x": 2.5e-06, "n": 3, "nan": None, "t": [0.1]}
    assert all(type(v) is float for v in (data["x"], data["t"][0]))
    orjson.dumps(data)  # no NumPy scalar left: the document takes orjson's path
    assert _document_text(data) == _stdlib(data)


def test_json_safe_treats_subclasses_as_their_base_types():
    import enum
    from collections import OrderedDict

    from honestci.audit.report_model import json_safe

    class Level(enum.IntEnum):
        HIGH = 2

    class Name(str):
        pass

    data = json_safe(OrderedDict(a=[True, Level.HIGH, Name("x"), math.inf, -0.0, None, {1: (2,)}]))
    assert data == {"a": [True, 2, "x", None, -0.0, None, {"1": [2]}]}
    assert _document_text(data) == _stdlib(data)
