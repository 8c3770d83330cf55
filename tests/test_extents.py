"""Where a buffer given only by a pointer ends (cudump/kernels/extents.py)."""
from cudump.kernels import extents
from cudump.kernels.extents import KnownStarts, cut_at_next
from cudump.kernels.geometry import Allocation, CopyPlan

SEG = Allocation(base=0x10000, size=0x1000, kind="linear")
OTHER = Allocation(base=0x20000, size=0x1000, kind="linear")


def plan(address: int, count: int, itemsize: int = 4) -> CopyPlan:
    return CopyPlan(arg=0, address=address, width_bytes=count * itemsize, height=1,
                    pitch=count * itemsize, dtype="float32" if itemsize == 4 else "uint8",
                    shape=(count,), type_text=None)


def test_the_next_start_is_the_first_past_the_address_in_the_same_allocation():
    starts = KnownStarts()
    starts.learn([(0x10400, SEG), (0x10100, SEG), (0x20010, OTHER), (0x10100, SEG)])
    assert starts.count == 3   # a start seen twice is kept once
    assert starts.next_after(0x10000, SEG) == 0x10100
    assert starts.next_after(0x10100, SEG) == 0x10400
    assert starts.next_after(0x10400, SEG) is None
    assert starts.next_after(0x20000, OTHER) == 0x20010
    # the same place with another size is another allocation
    assert starts.next_after(0x10000, Allocation(0x10000, 0x2000, "linear")) is None


def test_a_plan_is_cut_in_whole_elements_and_only_inside_it():
    whole = plan(0x10000, 0x400)
    cut = cut_at_next(whole, 0x10102)
    assert cut.shape == (0x40,) and cut.width_bytes == 0x100 and cut.pitch == 0x100
    assert cut_at_next(whole, None) is whole
    assert cut_at_next(whole, 0x10000) is whole           # not past its start
    assert cut_at_next(whole, 0x11000) is whole           # at its end: nothing to cut
    assert cut_at_next(whole, 0x10002) is whole           # less than one element
    rows = CopyPlan(arg=0, address=0x10000, width_bytes=16, height=4, pitch=32,
                    dtype="uint8", shape=(4, 16), type_text=None)
    assert cut_at_next(rows, 0x10010) is rows             # 2-D plans keep their geometry


def test_starts_are_bounded(monkeypatch):
    monkeypatch.setattr(extents, "MAX_STARTS", 3)
    starts = KnownStarts()
    starts.learn([(0x10000 + 16 * k, SEG) for k in range(10)])
    assert starts.count == 3
    assert starts.next_after(0x10020, SEG) is None


def test_a_freed_allocation_forgets_its_starts():
    """Memory made again at the same place and size holds other buffers."""
    known = KnownStarts()
    known.learn([(0x10000, SEG), (0x10100, SEG), (0x20010, OTHER)])
    assert known.next_after(0x10000, SEG) == 0x10100 and known.count == 3
    known.forget(SEG)
    assert known.next_after(0x10000, SEG) is None and known.count == 1
    assert known.next_after(0x20000, OTHER) == 0x20010   # another allocation keeps its own
    known.forget(SEG)   # twice: nothing left to forget
    assert known.count == 1


def test_a_guess_into_an_arena_is_bounded_and_a_whole_allocation_is_not():
    """JAX's arena: one allocation of most of the GPU, every buffer a pointer into it. The
    rest of the arena is no extent; a plain allocation pointed at from its start is."""
    arena = Allocation(base=1 << 40, size=100 << 30, kind="linear")
    inside = plan(arena.base + 4096, (arena.size - 4096) // 4)
    capped = extents.cap_guess(inside, arena)
    assert capped.nbytes == extents.GUESS_LIMIT and capped.shape == (extents.GUESS_LIMIT // 4,)
    at_start = plan(arena.base, arena.size // 4)
    assert extents.cap_guess(at_start, arena).nbytes == extents.GUESS_LIMIT
    plain = Allocation(base=1 << 40, size=1 << 30, kind="linear")
    whole = plan(plain.base, plain.size // 4)
    assert extents.cap_guess(whole, plain) is whole
    small = plan(plain.base + 64, 1000)
    assert extents.cap_guess(small, plain) is small
