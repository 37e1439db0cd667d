"""The checkpoint file format: a magic line, a SHA-256, a JSON header, raw arrays; no pickle.

Layout (version 2)::

    asyncspec checkpoint v2\\n
    <64 hex digits: SHA-256 of everything after this line>\\n
    <header: one line of JSON>\\n
    <sections: the bytes of each section the header lists, in its order>

The header is a JSON object; its ``sections`` list names each section, its
kind and its length in bytes: an array of little-endian integers (``u1``,
``u2``, ``u4``, ``i4``, ``i8``) or UTF-8 JSON (``json``).  The checksum is
verified before the header is parsed, so a truncated or modified file is
refused before anything in it is decoded; nothing is ever unpickled,
evaluated or imported by name (values: ``checker/checkpoint_values.py``).

Example:
    >>> from array import array
    >>> blob = dump({"note": "x"}, [("a", "i4", array("i", [1, -2])), ("b", "json", [1, "two"])])
    >>> header, sections = parse(blob)
    >>> header["note"], list(sections["a"]), sections["b"]
    ('x', [1, -2], [1, 'two'])
"""
from __future__ import annotations

import hashlib
import hmac
import json
import sys
from array import array
from typing import Any

VERSION = 2
MAGIC = b"asyncspec checkpoint v"
MAX_HEADER = 1 << 20  # bytes: a header lists a dozen sections

KINDS = {"u1": "B", "u2": "H", "u4": "I", "i4": "i", "i8": "q"}
"""Array kinds and the ``array`` typecode of each (sizes checked below)."""
assert all(array(code).itemsize == int(kind[1]) for kind, code in KINDS.items())

Section = tuple[str, str, Any]  # name, kind, an array (integer kinds) or JSON data ("json")


class FormatError(ValueError):
    """A file that is not a readable checkpoint of this format: what is wrong, in one short phrase."""


def dump(header: dict[str, Any], sections: list[Section]) -> bytes:
    """The file holding ``header`` (given ``sections`` and ``format``) and ``sections``."""
    payloads = [_payload(kind, data) for _, kind, data in sections]
    listed = [{"name": name, "kind": kind, "bytes": len(p)} for (name, kind, _), p in zip(sections, payloads)]
    head = json.dumps({**header, "format": "asyncspec-checkpoint", "version": VERSION, "sections": listed},
                      separators=(",", ":"))
    rest = b"".join([head.encode(), b"\n", *payloads])
    return b"".join([MAGIC, str(VERSION).encode(), b"\n", hashlib.sha256(rest).hexdigest().encode(), b"\n", rest])


def _payload(kind: str, data: Any) -> bytes:
    if kind == "json":
        return json.dumps(data, separators=(",", ":"), allow_nan=False).encode()
    arr = data if isinstance(data, array) and data.typecode == KINDS[kind] else array(KINDS[kind], data)
    if sys.byteorder == "big":
        arr = array(arr.typecode, arr)
        arr.byteswap()
    return arr.tobytes()


def parse(blob: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and the sections (name -> array or JSON data) of the file ``blob``."""
    rest = _verified(blob)
    end = rest.find(b"\n", 0, MAX_HEADER)
    if end < 0:
        raise FormatError("malformed checkpoint (no header line)")
    header = _json(rest[:end], "header")
    if not isinstance(header, dict) or header.get("format") != "asyncspec-checkpoint" \
            or header.get("version") != VERSION or not isinstance(header.get("sections"), list):
        raise FormatError("malformed checkpoint (a header without its format, version or sections)")
    sections: dict[str, Any] = {}
    at = end + 1
    for entry in header["sections"]:
        if not isinstance(entry, dict) or set(entry) != {"name", "kind", "bytes"} \
                or not isinstance(entry["name"], str) or entry["kind"] not in (*KINDS, "json") \
                or type(entry["bytes"]) is not int or not 0 <= entry["bytes"] <= len(rest) - at:
            raise FormatError("malformed checkpoint (a section entry that does not fit the file)")
        data = rest[at:at + entry["bytes"]]
        at += entry["bytes"]
        sections[entry["name"]] = _json(data, entry["name"]) if entry["kind"] == "json" \
            else _array(entry["kind"], data, entry["name"])
    if at != len(rest):
        raise FormatError(f"malformed checkpoint ({len(rest) - at} bytes after the last section)")
    return header, sections


def _verified(blob: bytes) -> bytes:
    """What follows the checksum line, once it matches; ``FormatError`` naming what the file is."""
    if not blob.startswith(MAGIC):
        raise FormatError(_foreign(blob))
    line_end = blob.find(b"\n", 0, 64)
    version = blob[len(MAGIC):line_end]
    if line_end < 0 or not version.isdigit():
        raise FormatError("not an asyncspec checkpoint (a damaged first line)")
    if int(version) != VERSION:
        raise FormatError(f"a checkpoint of format version {int(version)}; this asyncspec reads version {VERSION}")
    digest, rest = blob[line_end + 1:line_end + 65], blob[line_end + 66:]
    if blob[line_end + 65:line_end + 66] != b"\n" or \
            not hmac.compare_digest(hashlib.sha256(rest).hexdigest().encode(), digest):
        raise FormatError("a damaged checkpoint (its checksum does not match: truncated or modified)")
    return rest


def _foreign(blob: bytes) -> str:
    """What a file that does not start like a checkpoint looks like."""
    if not blob:
        return "an empty file, not an asyncspec checkpoint"
    if blob[:1] == b"\x80":
        return "a pickle file (an older asyncspec's checkpoint, or a foreign file; never unpickled), not a checkpoint"
    return "not an asyncspec checkpoint"


def _json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data.decode())
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise FormatError(f"malformed checkpoint (its {what[:40]!r} section is not valid JSON)") from None


def _array(kind: str, data: bytes, what: str) -> array[int]:
    arr = array(KINDS[kind])
    if len(data) % arr.itemsize:
        raise FormatError(f"malformed checkpoint (section {what[:40]!r} is not a whole number of {kind} items)")
    arr.frombytes(data)
    if sys.byteorder == "big":
        arr.byteswap()
    return arr
