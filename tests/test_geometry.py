"""Snapshot geometry: element types, pitched/interior/linear plans, overrides, bounds."""

import struct
from pathlib import Path

import numpy as np
import pytest

from cudump.errors import CudumpError
from cudump.kernels.args import ArgValue, arg_values, decode_args
from cudump.kernels.elements import ElementType, element_type
from cudump.kernels.expr import parse_expr
from cudump.kernels.geometry import Allocation, CopyPlan, GeometryError, plan_copy
from cudump.kernels.signature import parse_param_type, parse_signature
from cudump.policy.rules import ArgOverride, load_rules

ROOT = Path(__file__).resolve().parent.parent
BASE = 0x7F00_0000_0000


def ptr(type_text: str | None, address: int, index: int = 0) -> ArgValue:
    ptype = parse_param_type(type_text) if type_text is not None else None
    return ArgValue(index, ptype, struct.pack("<Q", address), address)


def pitched(width_bytes: int, height: int, pitch: int, base: int = BASE) -> Allocation:
    return Allocation(base, pitch * height, "pitched", pitch, width_bytes, height, 4)


def override(**fields) -> ArgOverride:
    exprs = {k: parse_expr(v) for k, v in fields.items() if k in
             ("channels", "width", "height", "pitch", "count")}
    rest = {k: v for k, v in fields.items() if k not in exprs}
    return ArgOverride(**exprs, **rest)


# ---------------------------------------------------------------- element types


@pytest.mark.parametrize("base,dtype,channels", [
    ("unsigned char", "uint8", 1), ("char", "int8", 1), ("signed char", "int8", 1),
    ("uchar", "uint8", 1), ("short", "int16", 1), ("unsigned short", "uint16", 1),
    ("ushort", "uint16", 1), ("int", "int32", 1), ("unsigned int", "uint32", 1),
    ("uint", "uint32", 1), ("long", "int64", 1), ("unsigned long", "uint64", 1),
    ("long long", "int64", 1), ("unsigned long long", "uint64", 1), ("float", "float32", 1),
    ("double", "float64", 1), ("__half", "float16", 1), ("half", "float16", 1),
    ("bool", "bool", 1), ("uchar4", "uint8", 4), ("uchar3", "uint8", 3),
    ("uchar1", "uint8", 1), ("char2", "int8", 2), ("short3", "int16", 3),
    ("ushort4", "uint16", 4), ("int2", "int32", 2), ("uint4", "uint32", 4),
    ("float4", "float32", 4), ("float1", "float32", 1), ("double2", "float64", 2),
    ("longlong2", "int64", 2), ("__half2", "float16", 2), ("::uchar4", "uint8", 4),
])
def test_element_types(base, dtype, channels):
    elem = element_type(base)
    assert (elem.dtype, elem.channels, elem.note) == (dtype, channels, None)
    assert elem.itemsize == np.dtype(dtype).itemsize * channels


def test_bfloat16_is_stored_as_bits():
    elem = element_type("__nv_bfloat16")
    assert (elem.dtype, elem.channels, elem.itemsize) == ("uint16", 1, 2)
    assert "bfloat16" in elem.note


@pytest.mark.parametrize("base", ["device::uchar8", "uchar8", "uchar5", "float0",
                                  "long double", "__int128", "std::array<char*, 3ul>", ""])
def test_unknown_element_types(base):
    assert element_type(base) is None


# ---------------------------------------------------------------- pitched


def test_pitched_allocation_drops_the_padding():
    alloc = pitched(1920 * 4, 1080, 8192)
    plan = plan_copy(ptr("uchar4*", BASE), alloc, None, {})
    assert plan == CopyPlan(0, BASE, 7680, 1080, 8192, "uint8", (1080, 1920, 4), "uchar4*")
    assert plan.nbytes == 7680 * 1080


def test_interior_pointer_starts_at_its_row_and_column():
    alloc = pitched(7680, 1080, 8192)
    row, col = 10, 400
    address = BASE + row * 8192 + col
    plan = plan_copy(ptr("uchar4*", address), alloc, None, {})
    width = (7680 - col) // 4
    assert (plan.address, plan.width_bytes, plan.height, plan.pitch) == (
        address, width * 4, 1080 - row, 8192)
    assert plan.shape == (1080 - row, width, 4)
    assert plan.note is None


def test_partial_element_at_the_end_of_a_row_is_cut():
    alloc = pitched(7680, 4, 8192)
    plan = plan_copy(ptr("uchar4*", BASE + 2), alloc, None, {})
    assert plan.shape == (4, (7680 - 2) // 4, 4)
    assert plan.width_bytes == (7680 - 2) // 4 * 4
    assert plan.note == ("rows of 7678 bytes are not whole 4-byte elements; the last 2 bytes "
                         "of each row are left out")


def test_pointer_in_the_padding():
    alloc = pitched(7680, 1080, 8192)
    address = BASE + 3 * 8192 + 7680
    with pytest.raises(GeometryError) as info:
        plan_copy(ptr("uchar4*", address), alloc, None, {})
    assert str(info.value) == (f"pointer 0x{address:x} is in the padding of row 3 of the "
                               f"pitched allocation 0x{BASE:x} (column 7680 >= width 7680 bytes)")


def test_single_channel_pitched_image_is_2d():
    plan = plan_copy(ptr("unsigned char const*", BASE), pitched(640, 480, 1024), None, {})
    assert plan.shape == (480, 640) and plan.dtype == "uint8"


# ---------------------------------------------------------------- linear


def test_linear_from_pointer_to_end():
    alloc = Allocation(BASE, 1000, "linear")
    plan = plan_copy(ptr("float*", BASE + 8), alloc, None, {})
    assert plan == CopyPlan(0, BASE + 8, 992, 1, 992, "float32", (248,), "float*")


def test_linear_vector_type_and_leftover_bytes():
    alloc = Allocation(BASE, 1003, "managed")
    plan = plan_copy(ptr("uchar4*", BASE), alloc, None, {})
    assert plan.shape == (250, 4) and plan.width_bytes == 1000
    assert plan.note == "the last 3 bytes do not fill a whole element and are left out"


def test_unknown_element_type_reads_bytes():
    alloc = Allocation(BASE, 64, "async")
    plan = plan_copy(ptr("device::uchar8*", BASE), alloc, None, {})
    assert (plan.dtype, plan.shape) == ("uint8", (64,))
    assert plan.note == "element type 'device::uchar8' is unknown; read as bytes"


def test_untyped_pointer_reads_bytes_and_pointer_to_pointer_reads_addresses():
    alloc = Allocation(BASE, 48, "range")
    assert plan_copy(ptr(None, BASE), alloc, None, {}).shape == (48,)
    plan = plan_copy(ptr("float**", BASE), alloc, None, {})
    assert (plan.dtype, plan.shape) == ("uint64", (6,))


def test_less_than_one_element_left():
    alloc = Allocation(BASE, 10, "linear")
    with pytest.raises(GeometryError) as info:
        plan_copy(ptr("double*", BASE + 4), alloc, None, {})
    assert str(info.value) == (f"pointer 0x{BASE + 4:x} leaves 6 bytes in its allocation, "
                               "less than one 8-byte element")


# ---------------------------------------------------------------- overrides


def test_dtype_and_channels_override_on_linear_image():
    alloc = Allocation(BASE, 2560 * 480, "linear")
    values = {"arg4": 2560, "arg5": 640, "arg6": 480}
    o = override(dtype="uint8", channels=4, width="arg5", height="arg6", pitch="arg4")
    plan = plan_copy(ptr("device::uchar8*", BASE, 2), alloc, o, values)
    assert plan == CopyPlan(2, BASE, 2560, 480, 2560, "uint8", (480, 640, 4), "device::uchar8*")


def test_override_pitch_wider_than_rows():
    alloc = Allocation(BASE, 4096 * 100, "linear")
    o = override(width=1000, height=100, pitch=4096)
    plan = plan_copy(ptr("float*", BASE), alloc, o, {})
    assert (plan.width_bytes, plan.height, plan.pitch, plan.shape) == (4000, 100, 4096,
                                                                       (100, 1000))


def test_last_row_needs_only_its_width():
    # 3 rows at pitch 100 of 40 bytes need 2 * 100 + 40 bytes, not 300.
    alloc = Allocation(BASE, 240, "linear")
    plan = plan_copy(ptr("unsigned char*", BASE), alloc, override(width=40, pitch=100), {})
    assert (plan.height, plan.shape) == (3, (3, 40))
    with pytest.raises(GeometryError):
        plan_copy(ptr("unsigned char*", BASE), alloc, override(width=40, pitch=100, height=4),
                  {})


def test_pitch_only_gives_tight_rows_of_the_pitch():
    alloc = Allocation(BASE, 1000, "linear")
    plan = plan_copy(ptr("float*", BASE), alloc, override(pitch=100), {})
    assert (plan.width_bytes, plan.height, plan.shape) == (100, 10, (10, 25))


def test_width_only_on_linear_memory_takes_whole_rows():
    alloc = Allocation(BASE, 1000, "linear")
    plan = plan_copy(ptr("unsigned char*", BASE), alloc, override(width=300), {})
    assert (plan.pitch, plan.height, plan.shape) == (300, 3, (3, 300))


def test_height_only_on_pitched_memory_keeps_its_width():
    alloc = pitched(7680, 1080, 8192)
    plan = plan_copy(ptr("uchar4*", BASE), alloc, override(height=540), {})
    assert (plan.width_bytes, plan.height, plan.pitch, plan.shape) == (7680, 540, 8192,
                                                                       (540, 1920, 4))


def test_count_override():
    alloc = Allocation(BASE, 4 * 1000, "linear")
    o = override(dtype="float32", count="arg5 * arg6")
    plan = plan_copy(ptr(None, BASE), alloc, o, {"arg5": 20, "arg6": 50})
    assert plan == CopyPlan(0, BASE, 4000, 1, 4000, "float32", (1000,), None)


def test_channels_override_keeps_the_signature_dtype():
    alloc = Allocation(BASE, 64, "linear")
    plan = plan_copy(ptr("float*", BASE), alloc, override(channels=2), {})
    assert (plan.dtype, plan.shape) == ("float32", (8, 2))


def test_count_beyond_the_allocation():
    alloc = Allocation(BASE, 4000, "linear")
    with pytest.raises(GeometryError) as info:
        plan_copy(ptr("float*", BASE + 4), alloc, override(count=1000), {})
    assert str(info.value) == (f"1000 elements of 4 bytes need 4000 bytes from "
                               f"0x{BASE + 4:x}, but the allocation has 3996 left")


def test_image_beyond_the_allocation():
    alloc = Allocation(BASE, 2560 * 479, "linear")
    o = override(dtype="uint8", channels=4, width=640, height=480, pitch=2560)
    with pytest.raises(GeometryError) as info:
        plan_copy(ptr("device::uchar8*", BASE), alloc, o, {})
    need = 479 * 2560 + 2560
    assert str(info.value) == (f"480 rows of 2560 bytes at pitch 2560 need {need} bytes from "
                               f"0x{BASE:x}, but the allocation has {2560 * 479} left")


def test_width_wider_than_pitch():
    alloc = Allocation(BASE, 1 << 20, "linear")
    with pytest.raises(GeometryError) as info:
        plan_copy(ptr("uchar4*", BASE), alloc, override(width=100, pitch=256), {})
    assert str(info.value) == "width 100 x 4 bytes = 400 bytes exceeds the pitch of 256 bytes"


def test_height_without_width_on_linear_memory():
    alloc = Allocation(BASE, 1000, "linear")
    with pytest.raises(GeometryError) as info:
        plan_copy(ptr("float*", BASE), alloc, override(height=2), {})
    assert str(info.value) == ("the rule gives no width for a buffer in linear memory; "
                               "add 'width' to its override")


@pytest.mark.parametrize("fields,values,message", [
    ({"width": "arg5 / 3"}, {"arg5": 1000},
     "width = arg5 / 3 gives 333.3333333333333, expected a whole number >= 1"),
    ({"width": "arg5 - 2000"}, {"arg5": 1000},
     "width = arg5 - 2000 gives -1000, expected a whole number >= 1"),
    ({"width": 4, "height": "arg9"}, {}, "height = arg9: arg9 has no numeric value in this launch "
                             "at column 1"),
    ({"count": "arg1 // arg2"}, {"arg1": 4, "arg2": 0},
     "count = arg1 // arg2: division by zero at column 6"),
    ({"channels": 0}, {}, "channels = 0 gives 0, expected a whole number >= 1"),
])
def test_expression_problems(fields, values, message):
    alloc = Allocation(BASE, 1 << 20, "linear")
    with pytest.raises(GeometryError) as info:
        plan_copy(ptr("float*", BASE), alloc, override(**fields), values)
    assert str(info.value) == message


# ---------------------------------------------------------------- pointers


def test_untracked_pointer():
    with pytest.raises(GeometryError) as info:
        plan_copy(ptr("float*", 0xDEAD000), None, None, {})
    assert str(info.value) == "pointer 0xdead000 is not in any tracked allocation"
    assert isinstance(info.value, CudumpError)


@pytest.mark.parametrize("address", [BASE - 1, BASE + 100])
def test_pointer_outside_the_allocation(address):
    alloc = Allocation(BASE, 100, "linear")
    with pytest.raises(GeometryError) as info:
        plan_copy(ptr("float*", address), alloc, None, {})
    assert str(info.value) == (f"pointer 0x{address:x} is outside its allocation "
                               f"0x{BASE:x}..0x{BASE + 100:x}")


def test_argument_without_a_value():
    arg = ArgValue(3, parse_param_type("float2"), b"\0" * 8, None)
    with pytest.raises(GeometryError) as info:
        plan_copy(arg, Allocation(BASE, 8, "linear"), None, {})
    assert str(info.value) == "argument 3 has no pointer value"


# ---------------------------------------------------------------- the ZED rule


def test_zed_rule_plans_the_seed_kernel():
    (rule,) = load_rules([ROOT / "rules" / "zed.yaml"])
    sig = parse_signature("void device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>(uchar4*, int, "
                          "device::uchar8*, device::uchar8*, int, int, int, float)")
    width, height = 1280, 720
    src_pitch, dst_pitch = 5632, 5632  # cuMemAllocPitch rounds 5120 bytes up
    src, left, right = BASE, BASE + (1 << 24), BASE + (2 << 24)
    raw = [struct.pack("<Q", src), struct.pack("<i", src_pitch), struct.pack("<Q", left),
           struct.pack("<Q", right), struct.pack("<i", dst_pitch), struct.pack("<i", width),
           struct.pack("<i", height), struct.pack("<f", 1.0)]
    args = decode_args(sig, raw)
    values = arg_values(args)
    allocs = {src: pitched(width * 4, height, src_pitch, src),
              left: pitched(width * 4, height, dst_pitch, left),
              right: Allocation(right, dst_pitch * height, "linear")}
    plans = {i: plan_copy(args[i], allocs[args[i].value], rule.overrides.get(i), values)
             for i in rule.selected_args(args)}
    assert set(plans) == {0, 2, 3}
    # arg0: one uchar4 per two pixels of the side-by-side frame -> width uchar4 per row.
    assert plans[0] == CopyPlan(0, src, width * 4, height, src_pitch, "uint8",
                                (height, width, 4), "uchar4*")
    for i, address in ((2, left), (3, right)):
        assert plans[i] == CopyPlan(i, address, width * 4, height, dst_pitch, "uint8",
                                    (height, width, 4), "device::uchar8*")


def test_element_type_dataclass_itemsize():
    assert ElementType("float16", 3).itemsize == 6
