"""bench/sampler_callers.py: a thread's samples counted for the shim's innermost function."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from sampler_callers import frame_parts, located, report, tally  # noqa: E402

NAMES = {"0x10": "toollaunch", "0x20": "call_kernel", "0x30": "hook_cuLaunchKernel",
         "0x40": "accept_jobs"}


def resolve(offsets):
    return {offset: NAMES[offset] for offset in offsets}


# Frames after the first are return addresses, named a byte before (0x11 -> 0x10).
RAW = """\
libc.so.6+0xbab57 libcuda.so.1+0x5 libcudump.so+0x11 libcudump.so+0x31 python3+0x1
libcuda.so.1+0x9 libcudump.so+0x21 libcudump.so+0x31 python3+0x1
libcuda.so.1+0x9 libcudump.so+0x11 libcudump.so+0x31 python3+0x1
libcudump.so+0x40 libcudump.so+0x31 python3+0x1
python3+0x2 ?
"""


def test_frames_are_split_at_the_last_plus_and_return_addresses_moved_to_their_call():
    assert frame_parts("lib+x.so+0x1f") == ("lib+x.so", "0x1f")
    assert frame_parts("?") == ("?", "")
    assert located(["a.so+0x10", "b.so+0x10", "?", "c.so+0x0"]) == [
        ("a.so", "0x10"), ("b.so", "0xf"), ("?", ""), ("c.so", "0x0")]


def test_each_sample_counts_for_the_shims_innermost_function_by_the_library_it_was_in():
    c = tally(RAW.splitlines(), resolve)
    assert (c.samples, c.with_shim) == (5, 4)
    assert dict(c.by_function["toollaunch"]) == {"libc.so.6": 1, "libcuda.so.1": 1}
    assert dict(c.by_function["call_kernel"]) == {"libcuda.so.1": 1}
    assert dict(c.by_function["accept_jobs"]) == {"libcudump.so:accept_jobs": 1}
    assert "hook_cuLaunchKernel" not in c.by_function   # never the innermost
    text = report(c, top=2)
    assert text.splitlines()[0] == "5 samples,  80.00% with the shim on the stack"
    assert text.splitlines()[2] == (" 40.00%  toollaunch  (libc.so.6 20.00%, "
                                    "libcuda.so.1 20.00%)")
    assert len(text.splitlines()) == 4
