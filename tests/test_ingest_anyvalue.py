"""AnyValue → string the way the Collector's AsString does; ids and enums normalised."""

from __future__ import annotations

import pytest

from ingest import anyvalue as av


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.0, "1"),
        (0.5, "0.5"),
        (-0.0, "-0"),
        (123456789.125, "123456789.125"),
        (1e16, "10000000000000000"),
        (1e21, "1e+21"),
        (1.5e-7, "1.5e-7"),
        (1e-6, "0.000001"),
        (3.14159, "3.14159"),
    ],
)
def test_doubles_render_like_go(value: float, expected: str) -> None:
    assert av.format_double(value) == expected


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_doubles_are_rejected(value: float) -> None:
    with pytest.raises(ValueError, match="not a finite number"):
        av.format_double(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"stringValue": "a"}, "a"),
        ({"string_value": "a"}, "a"),
        ({"intValue": "42"}, "42"),
        ({"intValue": 42}, "42"),
        ({"boolValue": True}, "true"),
        ({"boolValue": False}, "false"),
        ({"doubleValue": 2.0}, "2"),
        ({"doubleValue": "2.5"}, "2.5"),
        ({"bytesValue": "AQID"}, "AQID"),
        ({}, ""),
        (None, ""),
        (
            {"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "1"}, {"boolValue": True}, {}]}},
            '["a",1,true,null]',
        ),
        (
            {
                "kvlistValue": {
                    "values": [{"key": "z", "value": {"doubleValue": 1.5}}, {"key": "a", "value": {}}]
                }
            },
            '{"a":null,"z":1.5}',
        ),
        ({"arrayValue": {"values": [{"stringValue": "<&>"}]}}, '["\\u003c\\u0026\\u003e"]'),
        ({"arrayValue": {}}, "[]"),
    ],
)
def test_json_any_values_render_as_collector_asstring(value: object, expected: str) -> None:
    assert av.json_value_string(value) == expected


@pytest.mark.parametrize(
    "value",
    [{"intValue": "x"}, {"doubleValue": "NaN"}, {"doubleValue": "Infinity"}, {"bytesValue": "!!"}, "plain"],
)
def test_bad_json_any_values_raise(value: object) -> None:
    with pytest.raises(ValueError):
        av.json_value_string(value)


def test_deeply_nested_values_are_refused_not_crashing() -> None:
    value: dict = {"stringValue": "leaf"}
    for _ in range(500):
        value = {"arrayValue": {"values": [value]}}
    with pytest.raises(ValueError, match="nested deeper"):
        av.json_value_string(value)


@pytest.mark.parametrize(
    ("value", "size", "expected"),
    [
        ("5B8EFFF798038103D269B633813FC60C", 16, "5b8efff798038103d269b633813fc60c"),
        ("aYQql5kRA2zz6CIIbsqgBw==", 16, "69842a979911036cf3e822086ecaa007"),
        ("Wmn8F4uo+Dc=", 8, "5a69fc178ba8f837"),
        ("eee19b7ec3c1b174", 8, "eee19b7ec3c1b174"),
        ("", 8, ""),
        (None, 16, ""),
    ],
)
def test_ids_hex_or_base64_become_lowercase_hex(value: str | None, size: int, expected: str) -> None:
    assert av.normalize_id(value, size, "id") == expected


@pytest.mark.parametrize(("value", "size"), [("zzz", 16), ("xyz", 8), ("0" * 31, 16), (12, 8), ("g" * 16, 8)])
def test_ids_neither_hex_nor_base64_raise(value: object, size: int) -> None:
    with pytest.raises(ValueError):
        av.normalize_id(value, size, "id")


def test_enums_accept_ints_strings_and_proto_names() -> None:
    assert av.span_kind(2) == av.span_kind("2") == av.span_kind("SPAN_KIND_SERVER") == "Server"
    assert av.span_kind(None) == "Unspecified"
    assert av.status_code("STATUS_CODE_ERROR") == av.status_code(2) == "Error"
    with pytest.raises(ValueError):
        av.span_kind(9)


def test_synthetic_ids_are_deterministic_and_sized() -> None:
    a = av.synthetic_id("f.jsonl", 8, "span", 1, "x")
    assert a == av.synthetic_id("f.jsonl", 8, "span", 1, "x")
    assert a != av.synthetic_id("f.jsonl", 8, "span", 2, "x")
    assert len(a) == 16 and len(av.synthetic_id("f", 16, "trace")) == 32
