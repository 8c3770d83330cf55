"""Decoding of raw launch parameter bytes by signature type."""

import struct

import numpy as np
import pytest

from cudump.kernels.args import arg_values, decode_args
from cudump.kernels.signature import parse_signature

ZED = parse_signature(
    "void device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>"
    "(uchar4*, int, device::uchar8*, device::uchar8*, int, int, int, float)")


def zed_raw(src, src_pitch, left, right, dst_pitch, width, height, gain):
    return [struct.pack("<Q", src), struct.pack("<i", src_pitch), struct.pack("<Q", left),
            struct.pack("<Q", right), struct.pack("<i", dst_pitch), struct.pack("<i", width),
            struct.pack("<i", height), struct.pack("<f", gain)]


def test_decodes_the_seed_kernel_launch():
    raw = zed_raw(0x7F12_3400_0000, 8192, 0x7F12_3500_0000, 0x7F12_3600_0000, 7680, 1920,
                  1080, 0.75)
    args = decode_args(ZED, raw)
    assert [a.index for a in args] == list(range(8))
    assert [a.value for a in args] == [0x7F12_3400_0000, 8192, 0x7F12_3500_0000,
                                       0x7F12_3600_0000, 7680, 1920, 1080, 0.75]
    assert [a.looks_like_pointer for a in args] == [True, False, True, True] + [False] * 4
    assert args[2].type.text == "device::uchar8*"
    assert args[7].raw == struct.pack("<f", 0.75)


def test_arg_values_for_expressions():
    raw = zed_raw(0x1000, 64, 0x2000, 0x3000, 32, 8, 4, 2.0)
    values = arg_values(decode_args(ZED, raw))
    assert values == {"arg0": 0x1000, "arg1": 64, "arg2": 0x2000, "arg3": 0x3000,
                      "arg4": 32, "arg5": 8, "arg6": 4, "arg7": 2.0}


def test_signedness_and_sizes_follow_the_type():
    sig = parse_signature("k(int, unsigned int, short, unsigned char, long, unsigned long long,"
                          " signed char, bool)")
    raw = [struct.pack("<i", -5), struct.pack("<I", 0xFFFFFFFF), struct.pack("<h", -2),
           bytes([200]), struct.pack("<q", -(2**40)), struct.pack("<Q", 2**63 + 1),
           struct.pack("<b", -100), bytes([1])]
    values = [a.value for a in decode_args(sig, raw)]
    assert values == [-5, 0xFFFFFFFF, -2, 200, -(2**40), 2**63 + 1, -100, 1]


def test_floating_types():
    sig = parse_signature("k(float, double, __half)")
    raw = [struct.pack("<f", -1.25), struct.pack("<d", 1e300),
           np.array([0.5], dtype=np.float16).tobytes()]
    assert [a.value for a in decode_args(sig, raw)] == [-1.25, 1e300, 0.5]


def test_vector_by_value_and_odd_sizes_have_no_value():
    sig = parse_signature("k(float2, std::array<char*, 3ul>, float)")
    raw = [struct.pack("<ff", 1, 2), struct.pack("<QQQ", 0x10, 0x20, 0x30), b"\0\0"]
    args = decode_args(sig, raw)
    assert [a.value for a in args] == [None, None, None]
    assert arg_values(args) == {}
    assert [a.looks_like_pointer for a in args] == [False, False, False]
    assert args[1].words() == [(0, 0x10), (8, 0x20), (16, 0x30)]


def test_unknown_types_read_as_unsigned_words():
    sig = parse_signature("k(sl::YUV_CONVENTION, device::uchar8)")
    raw = [struct.pack("<i", 2), struct.pack("<Q", 0xDEAD_BEEF_0000)]
    args = decode_args(sig, raw)
    assert [a.value for a in args] == [2, 0xDEAD_BEEF_0000]
    assert not args[1].looks_like_pointer  # typed, and not a pointer type


def test_untyped_arguments_without_a_signature():
    raw = [struct.pack("<Q", 0x7000_0000_0000), struct.pack("<i", -1), b"\1\2\3"]
    args = decode_args(None, raw)
    assert [a.type for a in args] == [None, None, None]
    assert [a.value for a in args] == [0x7000_0000_0000, 0xFFFFFFFF, None]
    assert [a.looks_like_pointer for a in args] == [True, False, False]


def test_extern_c_signature_has_no_types():
    args = decode_args(parse_signature("nv12_to_uyvy"), [struct.pack("<Q", 5)])
    assert args[0].type is None and args[0].value == 5 and args[0].looks_like_pointer


def test_more_raw_parameters_than_the_signature_names():
    sig = parse_signature("k(int)")
    args = decode_args(sig, [struct.pack("<i", 3), struct.pack("<Q", 9)])
    assert args[0].type is not None and args[1].type is None
    assert [a.value for a in args] == [3, 9]


@pytest.mark.parametrize("text", ["void (*)(int)", "double (*)(int, float)"])
def test_function_pointers_are_not_buffers(text):
    sig = parse_signature(f"k({text})")
    arg = decode_args(sig, [struct.pack("<Q", 0x1234)])[0]
    assert arg.value == 0x1234
    assert not arg.looks_like_pointer


def test_double_pointer_is_a_pointer():
    sig = parse_signature("k(float**)")
    arg = decode_args(sig, [struct.pack("<Q", 0xABC)])[0]
    assert arg.value == 0xABC and arg.looks_like_pointer
