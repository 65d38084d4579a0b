"""The hot paths' JSON codec: orjson's speed, the standard library's bytes, values and errors.

A job written by ``payload.encode`` must be byte for byte what the standard encoder wrote
(Sidekiq's compact form, non-ASCII as UTF-8, "/" unescaped), and a job read by
``payload.parse_json`` must give the value or the error ``json.loads`` gave, whoever wrote it."""

from __future__ import annotations

import json
import sys

import pytest

from jobsapp import codec
from jobsapp.errors import MalformedPayload
from jobsapp.payload import _STRICT_ENCODE, compact_json, encode, normalize_item, parse_json

#: Values as jobs carry them: every JSON type, text that JSON escapes, text Ruby writes as is.
VALUES = [
    {"class": "app.jobs.Import", "args": [1, -2, 0, 2**63 - 1, -(2**63), 2**64 - 1], "retry": True, "queue": "default"},
    {"args": [0.1, 1732460000.123456, -0.0, 3.0, 1.7976931348623157e308, 5e-324], "created_at": 1732460000.5},
    {"args": ["é ü 中文 😀", "a/b</script>", 'quote " backslash \\ tab \t newline \n', "\u2028\u2029", "\x00\x1f\x7f"]},
    {"args": [None, True, False, [], {}, [[[{"deep": [1, {"deeper": None}]}]]]], "kwargs": {"dry_run": True, "ünïcode key": "v"}},
    {"args": [2**70, -(2**65)]},  # beyond 64 bits: the standard encoder writes them
]


@pytest.mark.parametrize("value", VALUES)
def test_compact_encoding_is_the_standard_encoders_byte_for_byte(value):
    # Given a value whose numbers have no exponent, When it is encoded by the codec
    # Then the bytes are the standard compact encoder's
    assert codec.dumps_compact(value, _STRICT_ENCODE) == compact_json(value).encode("utf-8")


def test_an_encoded_job_is_what_the_standard_encoder_wrote():
    # Given a job item as the client prepares it, When payload.encode writes it
    item = normalize_item({"class": "app.jobs.Import", "args": ["Zoë/ü", 1.5, 2**80], "kwargs": {"a": [1, None]}})
    # Then its bytes are the standard library's
    assert encode(item) == json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def test_values_orjson_would_change_are_left_to_the_standard_encoder():
    # Given a subclass of int and str, and a lone surrogate
    class Count(int):
        pass

    class Name(str):
        pass

    # When they are encoded, Then the standard encoder's answer comes back: the text, or its error
    assert codec.dumps_compact([Count(3), Name("x")], _STRICT_ENCODE) == b'[3,"x"]'
    with pytest.raises(UnicodeEncodeError):
        codec.dumps_compact(["\ud800"], _STRICT_ENCODE)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"class":"A","args":[1,2.5,"\\u00e9\\/x",null,true,{"k":[]}]}',
        b'{"a":1,"a":2}',
        '{"text":"é"}',
        b"18446744073709551616",
        b"[-9223372036854775809, 123456789012345678901234567890]",
        b"-0",
        b"1E400",
        b"[NaN, Infinity, -Infinity]",
        b'"\\ud800"',
        b"  [1]  ",
    ],
)
def test_decoding_gives_what_json_loads_gives(raw):
    # Given JSON any client may have written (some of it only Python's parser takes)
    # When the codec parses it, Then the value is json.loads's (NaN compared by its text)
    assert repr(codec.loads(raw)) == repr(json.loads(raw))


@pytest.mark.parametrize("raw", [b"", b"{", b"[1,]", b"\xff\xfe", b'{"a" 1}', b"nul"])
def test_invalid_json_raises_what_json_loads_raises(raw):
    # Given bytes that are not JSON, When the codec parses them, Then json.loads's error is raised
    with pytest.raises(ValueError) as expected:
        json.loads(raw)
    with pytest.raises(type(expected.value)) as raised:
        codec.loads(raw)
    assert str(raised.value) == str(expected.value)


def test_a_payload_nested_past_the_interpreters_limit_is_still_malformed():
    # Given a job nested far deeper than orjson's and Python's limits
    raw = b"[" * (sys.getrecursionlimit() * 100) + b"]" * (sys.getrecursionlimit() * 100)
    # When it is read, Then it is malformed, as before (never a crash)
    with pytest.raises(MalformedPayload):
        parse_json(raw)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinity_are_refused_as_the_standard_encoder_refuses_them(bad):
    # Given a value holding NaN or Infinity (orjson alone would write null)
    # When it is encoded, Then the standard encoder's ValueError is raised
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        codec.dumps_compact({"args": [None, bad]}, _STRICT_ENCODE)
