"""shim/protocol.h and cudump/wire/protocol.py are one definition of the wire protocol.

A C program generated from the Python layouts includes the header and prints
every constant, struct size and field offset; each must equal Python's. A field
Python names that the header lacks fails to compile.
"""

from __future__ import annotations

import subprocess
from enum import Enum
from pathlib import Path

import pytest

from cudump.launches.scopes import ScopeKind
from cudump.wire import protocol as p
from cudump.wire.reading import read_message

ROOT = Path(__file__).resolve().parent.parent

CONSTANTS: dict[str, int] = {
    "PROTO_VERSION": p.VERSION, "PROTO_MAGIC": p.MAGIC, "PROTO_MAX_MESSAGE": p.MAX_MESSAGE,
    "PROTO_MAX_REPLY": p.MAX_REPLY, "PROTO_MAX_COPIES": p.MAX_COPIES,
    "PROTO_MAX_FRAMES": p.MAX_FRAMES, "PROTO_MAX_PARAMS": p.MAX_PARAMS,
    "PROTO_CONTROL_SIZE": p.CONTROL_SIZE, "PROTO_STAGING_ALIGN": p.STAGING_ALIGN,
    "PROTO_BEHIND_ALIGN": p.BEHIND_ALIGN, "PROTO_BEHIND_SEGMENT": p.BEHIND_SEGMENT,
    "PROTO_TOKEN_SIZE": p.TOKEN_SIZE, "PROTO_RING_SLOT_SIZE": p.RING_SLOT_SIZE,
    "PROTO_TOOL_RESULT": p.TOOL_RESULT, "PROTO_TOOL_MODE_SHIFT": p.TOOL_MODE_SHIFT,
    "PROTO_TOOL_SUM_SHIFT": p.TOOL_SUM_SHIFT,
    "PROTO_MAX_REPEAT": p.MAX_REPEAT, "PROTO_REPEAT_WAYS": p.REPEAT_WAYS,
    "PROTO_MAX_KEYS": p.MAX_KEYS, "PROTO_RESULT_SLOT_SIZE": p.RESULT_SLOT_SIZE,
    "PROTO_IMAGE_CHUNK": p.IMAGE_CHUNK, "API_COUNT": len(p.APIS),
    "PROTO_MAX_COUNTERS": p.MAX_COUNTERS, "PROTO_MAX_SELECTORS": p.MAX_SELECTORS,
    "PROTO_MAX_FUNCS": p.MAX_FUNCS, "PROTO_COUNTS_ALIGN": p.COUNTS_ALIGN,
    "PROTO_MAX_TMAPS": p.MAX_TMAPS, "PROTO_TMAP_BYTES": p.TMAP_BYTES,
    "PROTO_TMAP_STEP": p.TMAP_STEP, "PROTO_TMAP_RANK": p.TMAP_RANK,
    "PROTO_FLIGHT_PARAM_BYTES": p.FLIGHT_PARAM_BYTES, "PROTO_FLIGHT_SLOT_SIZE": p.FLIGHT_SLOT_SIZE,
    "PROTO_MAX_FLIGHT": p.MAX_FLIGHT, "PROTO_HOST_SLOT_SIZE": p.HOST_SLOT_SIZE,
    "HOST_API_COUNT": len(p.HOST_APIS), "PROTO_MAX_SCOPE_NAME": p.MAX_SCOPE_NAME,
}
ENUMS: list[tuple[type[Enum], str]] = [
    (p.Kind, "MSG_"), (p.Want, "WANT_"), (p.Option, "OPTION_"), (p.LaunchFlag, "LAUNCH_"),
    (p.PlanFlag, "PLAN_"), (p.ResultFlag, "RESULT_"), (p.Phase, "PHASE_"), (p.CopyFlag, "COPY_"),
    (p.ResumeMode, "RESUME_"), (p.NoticeKind, "NOTICE_"), (p.WatchThen, "WATCH_THEN_"),
    (p.MemoryOp, "MEM_"), (p.ToolMode, "TOOL_"), (p.Gate, "GATE_"), (p.FlightFlag, "FLIGHT_"),
    (ScopeKind, "SCOPE_"),
]
for enum, prefix in ENUMS:
    for member in enum:
        CONSTANTS[prefix + str(member.name)] = int(member.value)
for code, kind in enumerate(p.ALLOC_KINDS):
    CONSTANTS[f"KIND_{kind.upper()}"] = code
for code, fmt in enumerate(p.IMAGE_FORMATS):
    CONSTANTS[f"IMAGE_{fmt.upper()}"] = code
for code, enc in enumerate(p.TMAP_ENCODINGS):
    CONSTANTS[f"TMAP_{enc.upper()}"] = code
for code, api in enumerate(p.APIS):
    CONSTANTS[f"API_{api}"] = code
for code, api in enumerate(p.HOST_APIS):
    CONSTANTS[f"HOST_API_{api}"] = code


def probe_source() -> str:
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "protocol.h"',
             "int main(void) {"]
    for name in CONSTANTS:
        lines.append(f'    printf("value {name} %lld\\n", (long long)({name}));')
    for layout in p.LAYOUTS:
        lines.append(f'    printf("sizeof {layout.name} %zu\\n", sizeof(struct {layout.name}));')
        for field in layout.offsets():
            lines.append(f'    printf("offsetof {layout.name}.{field} %zu\\n", '
                         f"offsetof(struct {layout.name}, {field}));")
    # Names of the table-generated lists, in order.
    lines.append("#define NAME(x) printf(\"kindname %s\\n\", #x);")
    lines.append("    PROTO_ALLOC_KINDS(NAME)")
    lines.append("#undef NAME")
    lines.append("#define NAME(x) printf(\"apiname %s\\n\", #x);")
    lines.append("    PROTO_APIS(NAME)")
    lines.append("#undef NAME")
    lines.append("#define NAME(x) printf(\"hostapiname %s\\n\", #x);")
    lines.append("    PROTO_HOST_APIS(NAME)")
    lines.append("#undef NAME")
    lines.append("#define NAME(x) printf(\"imagename %s\\n\", #x);")
    lines.append("    PROTO_IMAGE_FORMATS(NAME)")
    lines.append("#undef NAME")
    lines.append("#define NAME(x) printf(\"tmapname %s\\n\", #x);")
    lines.append("    PROTO_TMAP_ENCODINGS(NAME)")
    lines.append("    return 0;\n}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    tmp = tmp_path_factory.mktemp("protocol")
    src, exe = tmp / "probe.c", tmp / "probe"
    src.write_text(probe_source())
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", f"-I{ROOT / 'shim'}", str(src), "-o",
                    str(exe)], check=True)
    return subprocess.run([str(exe)], check=True, capture_output=True,
                          text=True).stdout.splitlines()


def test_constants_agree(probed: list[str]) -> None:
    c_values = {ln.split()[1]: int(ln.split()[2]) for ln in probed if ln.startswith("value ")}
    assert c_values == CONSTANTS


def test_struct_layouts_agree(probed: list[str]) -> None:
    sizes = {ln.split()[1]: int(ln.split()[2]) for ln in probed if ln.startswith("sizeof ")}
    offsets = {ln.split()[1]: int(ln.split()[2]) for ln in probed if ln.startswith("offsetof ")}
    for layout in p.LAYOUTS:
        assert sizes[layout.name] == layout.size, layout.name
        for field, offset in layout.offsets().items():
            assert offsets[f"{layout.name}.{field}"] == offset, f"{layout.name}.{field}"


def test_name_tables_agree(probed: list[str]) -> None:
    assert tuple(ln.split()[1] for ln in probed if ln.startswith("kindname ")) == p.ALLOC_KINDS
    assert tuple(ln.split()[1] for ln in probed if ln.startswith("apiname ")) == p.APIS
    assert tuple(ln.split()[1] for ln in probed
                 if ln.startswith("hostapiname ")) == p.HOST_APIS
    assert tuple(ln.split()[1] for ln in probed
                 if ln.startswith("imagename ")) == p.IMAGE_FORMATS
    assert tuple(ln.split()[1] for ln in probed
                 if ln.startswith("tmapname ")) == p.TMAP_ENCODINGS


def test_every_header_struct_is_mirrored() -> None:
    """A struct added to the header without a Python layout fails here."""
    text = (ROOT / "shim" / "protocol.h").read_text()
    import re

    in_c = set(re.findall(r"^struct (proto_\w+) \{", text, re.MULTILINE))
    assert in_c == {layout.name for layout in p.LAYOUTS}


def test_ring_slot_is_one_event() -> None:
    """The trace ring's slot holds its header and one event, nothing else."""
    assert p.RING_SLOT.size == p.RING_SLOT_SIZE == 16 + p.LAUNCH.size


def test_host_write_slot_is_two_cache_lines() -> None:
    """The host-write ring's slot is its record, padded to two cache lines."""
    assert p.HOST_WRITE.size == p.HOST_SLOT_SIZE == 128


def test_framing_round_trip() -> None:
    import socket

    a, b = socket.socketpair()
    with a, b:
        payload = p.wants_payload(int(p.Want.TRACE | p.Want.STOP), 7,
                                  [p.Selector(3, 100, 2, p.NO_LIMIT)])
        a.sendall(p.encode(p.Kind.WANTS, payload, tag=42))
        msg = read_message(b)
        assert msg is not None and msg.kind == p.Kind.WANTS and msg.tag == 42
        fields = p.WANTS.unpack(msg.payload)
        assert (fields["wants"], fields["generation"], fields["nselectors"]) == (5, 7, 1)
        assert [fields[f"sel[0].{k}"] for k in ("counter", "every", "skip", "count")] == [
            3, 100, 2, p.NO_LIMIT]
        assert fields["sel[1].every"] == 0
        a.sendall(p.HEADER.pack(size=p.MAX_MESSAGE + 1, kind=1, flags=0, tag=0))
        with pytest.raises(p.ProtocolError):
            read_message(b)


def test_pack_takes_fields_by_name_and_zeroes_the_rest() -> None:
    """Both ways of packing (one value per field, and with array fields) agree with unpack."""
    copy = p.COPY.pack(offset=7, src=0x7F00, phase=1)
    assert p.COPY.unpack(copy) == {"phase": 1, "flags": 0, "src": 0x7F00, "width": 0,
                                   "height": 0, "pitch": 0, "offset": 7}
    out = p.TOOL_OUT.unpack(p.TOOL_OUT.pack(words=[3, 4], rc=-2))
    assert (tuple(out["words"]), out["done"], out["rc"]) == ((3, 4), 0, -2)
