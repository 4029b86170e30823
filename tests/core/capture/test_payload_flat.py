"""bound_payload's shortcut for small flat dicts gives what the full walk gives, as a copy."""

from __future__ import annotations

import base64
import math
from types import MappingProxyType
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from molt.capture.payload import bound_payload

_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.text(alphabet=st.characters(max_codepoint=127), max_size=700),  # ASCII, some past the blob floor
    st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", min_size=500, max_size=600),
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=3),
)
_key = st.one_of(st.text(max_size=12), st.text(alphabet=st.characters(max_codepoint=127), max_size=12), st.integers())


def _walked(value: dict[Any, Any], **kw: Any) -> Any:
    # A mapping that is not a dict takes the full walk, which turns it into a dict like any mapping.
    return bound_payload(MappingProxyType(value), **kw)


@settings(max_examples=400, deadline=None)
@given(
    value=st.dictionaries(_key, _leaf, max_size=12),
    max_bytes=st.sampled_from([0, 64, 200, 2048, 192 * 1024]),
    max_str=st.sampled_from([4, 64, 32 * 1024]),
    max_items=st.sampled_from([1, 3, 256]),
)
def test_a_flat_dict_bounds_to_what_the_walk_gives(value: dict[Any, Any], max_bytes: int, max_str: int,
                                                   max_items: int) -> None:
    kw = dict(max_bytes=max_bytes, max_str=max_str, max_items=max_items)
    fast, walked = bound_payload(value, **kw), _walked(value, **kw)
    assert orjson.dumps(fast) == orjson.dumps(walked)
    assert fast is not value  # the agent may change its dict after the callback; the event must not


def test_the_shortcut_is_taken_and_its_result_is_a_copy() -> None:
    args = {"q": "q0", "n": 3, "x": 1.5, "ok": True, "none": None}
    out = bound_payload(args, max_bytes=2048)
    assert out == args and out is not args
    args["q"] = "changed"
    assert out["q"] == "q0"


def test_what_the_shortcut_must_not_keep_as_is() -> None:
    # each of these needs the walk: a blob, a long string, a float JSON cannot hold, a huge int,
    # too many keys, a budget the copy would break
    blob = base64.b64encode(bytes(range(256)) * 3).decode()
    assert bound_payload({"b": blob})["b"]["$molt"] == "dropped"
    assert bound_payload({"s": "x" * 100}, max_str=10)["s"].startswith("x" * 10 + "…[molt: truncated")
    assert bound_payload({"f": math.inf}) == {"f": "inf"}
    assert bound_payload({"i": 1 << 70}) == {"i": str(1 << 70)}
    assert bound_payload({str(i): i for i in range(5)}, max_items=2) == {
        "0": 0, "1": 1, "$molt": "truncated", "$molt_omitted_keys": 3}
    assert bound_payload({"s": "y" * 200}, max_bytes=50) != {"s": "y" * 200}
