"""From a capture record to the replay engine's launch spec: one region per allocation, so
that pointers into one allocation still alias; pitched allocations kept with their pitch;
and what the replay cannot restore, found in the image."""

from __future__ import annotations

from cudump.analysis.replay import Capture, launch_spec, module_variables, replay_notes
from cudump.rundir.captures import CaptureRecord


def alloc(base: int, size: int, kind: str = "linear", pitch: int = 0, width: int = 0,
          height: int = 0, elem: int = 0) -> dict:
    return {"base": base, "size": size, "kind": kind, "pitch": pitch, "width": width,
            "height": height, "elem": elem}


def buffer(arg: int, address: int, nbytes: int, offset: int = 0) -> dict:
    return {"arg": arg, "offset": offset, "address": address, "width": nbytes, "height": 1,
            "pitch": nbytes, "dtype": "uint8", "shape": [nbytes], "before": f"b{arg}.npy",
            "after": f"a{arg}.npy"}


def capture(pointers: list[dict], buffers: list[dict], nparams: int, **extra) -> Capture:
    params = b"".join(p["value"].to_bytes(8, "little") for p in pointers)
    data = {"pid": 1, "launch": 7, "occurrence": 2, "kernel": "k(char*, char*)",
            "mangled": "_Z1kPcS_", "grid": [1, 1, 1], "block": [32, 1, 1], "smem": 0,
            "api": "cuLaunchKernel", "image": "modules/x.ptx", "image_format": "ptx",
            "params": params.hex(), "layout": [[8 * i, 8] for i in range(nparams)],
            "pointers": pointers, "buffers": buffers, "problems": []}
    data.update(extra)
    return Capture(CaptureRecord.from_json(data), 1)


def test_two_pointers_into_one_allocation_share_a_region():
    a = alloc(0x10000, 4096)
    spec = launch_spec(capture(
        [{"arg": 0, "offset": 0, "value": 0x10100, "alloc": a},
         {"arg": 1, "offset": 0, "value": 0x10400, "alloc": a}],
        [buffer(0, 0x10100, 0x300), buffer(1, 0x10400, 0xc00)], 2))
    assert len(spec.regions) == 1
    assert spec.regions[0].size == 0x11000 - 0x10100   # from the lowest pointer to the end
    assert [(p.region, p.delta) for p in spec.pointers] == [(0, 0), (0, 0x300)]
    assert [(b.region, b.delta) for b in spec.buffers] == [(0, 0), (0, 0x300)]


def test_separate_allocations_get_separate_regions():
    spec = launch_spec(capture(
        [{"arg": 0, "offset": 0, "value": 0x20000, "alloc": alloc(0x20000, 64)},
         {"arg": 1, "offset": 0, "value": 0x30000, "alloc": alloc(0x30000, 64)}],
        [buffer(0, 0x20000, 64), buffer(1, 0x30000, 64)], 2))
    assert [r.size for r in spec.regions] == [64, 64]
    assert [p.region for p in spec.pointers] == [0, 1]


def test_pitched_allocation_is_one_region_from_its_base_with_its_pitch():
    img = alloc(0x40000, 512 * 10, "pitched", pitch=512, width=400, height=10, elem=4)
    row2 = 0x40000 + 2 * 512
    b = {"arg": 0, "offset": 0, "address": row2, "width": 400, "height": 8, "pitch": 512,
         "dtype": "uint8", "shape": [8, 100, 4], "before": "b.npy", "after": "a.npy"}
    spec = launch_spec(capture([{"arg": 0, "offset": 0, "value": row2, "alloc": img}], [b], 1))
    (region,) = spec.regions
    assert (region.kind, region.size, region.pitch, region.width, region.height) == (
        "pitched", 5120, 512, 400, 10)
    assert spec.pointers[0].delta == spec.buffers[0].delta == 1024


def test_pointer_inside_a_by_value_struct_keeps_its_byte_offset():
    a = alloc(0x50000, 256)
    spec = launch_spec(capture(
        [{"arg": 0, "offset": 8, "value": 0x50000, "alloc": a}],
        [buffer(0, 0x50000, 256, offset=8)], 1, layout=[[0, 16]],
        params=(b"\0" * 8 + (0x50000).to_bytes(8, "little")).hex()))
    assert (spec.pointers[0].arg, spec.pointers[0].offset) == (0, 8)
    assert spec.buffers[0].label == "arg0+8"


PTX = b""".version 8.0
.target sm_90
.global .align 4 .u32 frames;
.const .align 4 .b8 lut[1024];
.visible .global .align 8 .f64 gain = 0d3FF0000000000000;
.visible .entry k(.param .u64 p)
{
    .reg .b32 r<2>;
    .shared .align 4 .b8 tile[128];
    ret;
}
"""


def test_module_variables_in_ptx_are_named():
    assert module_variables(PTX) == ["frames", "gain", "lut"]
    assert module_variables(b".version 8.0\n.visible .entry k()\n{\n ret;\n}\n") == []
    assert module_variables(b"\x50\xed\x55\xba" + b"\0" * 12) is None   # a fat binary


def test_notes_say_what_the_replay_does_not_restore():
    c = capture([], [], 0, api="cuLaunchKernelEx_ptsz")
    notes = replay_notes(c, PTX)
    assert notes == [
        "the module has module-scope variables (frames, gain, lut): the replay starts them "
        "from the image's initial values, not from what they held at the launch",
        "launched with cuLaunchKernelEx: its launch attributes (clusters, priorities ...) "
        "were not captured; the replay uses cuLaunchKernel"]
    assert replay_notes(capture([], [], 0), b".version 8.0\n") == []


def test_a_capture_record_reads_back_what_it_writes():
    from cudump.kernels.geometry import Allocation
    from cudump.rundir.captures import CapturedAllocation, CapturedPointer, CaptureFormatError

    a = alloc(0x10000, 4096)
    record = capture([{"arg": 0, "offset": 0, "value": 0x10100, "alloc": a}],
                     [buffer(0, 0x10100, 0x300)], 1).record
    again = CaptureRecord.from_json(record.to_json())
    assert again == record and again.pointers[0].alloc == CapturedAllocation(
        0x10000, 4096, "linear", 0, 0, 0, 0)
    assert list(record.to_json())[:3] == ["pid", "launch", "occurrence"]
    pointer = CapturedPointer(1, 8, 0x20000, CapturedAllocation.of(Allocation(0x20000, 64,
                                                                             "linear")))
    assert pointer.to_json() == {
        "arg": 1, "offset": 8, "value": 0x20000,
        "alloc": {"base": 0x20000, "size": 64, "kind": "linear", "pitch": 0, "width": 0,
                  "height": 0, "elem": 0}}
    try:
        CaptureRecord.from_json({"pid": 1})
    except CaptureFormatError as err:
        assert str(err) == "not a captured launch: field 'launch' is missing"
    else:
        raise AssertionError("no CaptureFormatError")
