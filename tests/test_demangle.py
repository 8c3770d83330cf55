"""Demangling of the seed's kernel names and of names that are not mangled."""

import pytest

from cudump.kernels.demangle import demangle

ZED = "_ZN6device12FrP0k5607tPVILN2sl14YUV_CONVENTIONE2EEEvP6uchar4iPNS_6uchar8ES6_iiif"
NV12 = "_Z12nv12_to_uyvyPKhjPhjjj"


def test_seed_kernel_demangles():
    assert demangle(ZED) == (
        "void device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>"
        "(uchar4*, int, device::uchar8*, device::uchar8*, int, int, int, float)")


def test_seed_nv12_demangles():
    assert demangle(NV12) == (
        "nv12_to_uyvy(unsigned char const*, unsigned int, unsigned char*, "
        "unsigned int, unsigned int, unsigned int)")


@pytest.mark.parametrize("name", ["nv12_to_uyvy", "my_kernel", "", "i", "Z3foo"])
def test_extern_c_names_come_back_unchanged(name):
    assert demangle(name) == name


@pytest.mark.parametrize("name", ["_Zfoo", "_Z", "_ZN6device"])
def test_undemanglable_names_come_back_unchanged(name):
    assert demangle(name) == name
