"""Kept plans made again once a launch shows a buffer beginning inside one of their guessed
extents (policy/snapshot/replan.py): on the stand-in driver end to end, and the two parts
alone."""

from __future__ import annotations

import numpy as np
from records import manifest, summary

from cudump.kernels.geometry import CopyPlan
from cudump.policy.snapshot.planned import PlannedCopy
from cudump.policy.snapshot.replan import MAX_BUMPS, MAX_REPLANS, GuessedExtents, Replanner
from cudump.wire.digest import digest, digest_hex

N = 1024


def test_a_buffer_shown_later_cuts_the_kept_plans_made_before(fake, cudump_run, tmp_path):
    """arena: a, b and c are 1,024 floats each in one allocation; square(a, b) then square(b,
    c), four times. The first launch cannot know that c begins where b ends, so b runs to
    the allocation's end there; the second shows it. From the next launch on, every digest
    is of 4 KB, the plans are kept again, and each digest is that of the buffer's bytes."""
    for mode in ("--digest", "--check-nan"):
        ran = cudump_run([str(fake.programs["arena"]), "4"], mode, run_dir=tmp_path / mode)
        assert ran.returncode == 0, ran.stderr
        assert "sum " in ran.stdout
        if mode == "--check-nan":
            assert summary(ran.run_dir)["repeated_launches"] >= 4
            continue
        records = manifest(ran.run_dir)
        sizes = {(r["launch"], r["arg"], r["phase"]): r["bytes"] for r in records}
        assert sizes[(1, 1, "before")] == 2 * N * 4       # b, as far as launch 1 could tell
        assert {size for (launch, _, _), size in sizes.items() if launch >= 2} == {N * 4}
        assert {launch for launch, _, _ in sizes} == set(range(1, 9))
        assert summary(ran.run_dir)["repeated_launches"] >= 4
        # The host knows what is in each buffer: a = 0.5 + j/2N, b = a², c = b².
        a = (0.5 + np.arange(N, dtype=np.float32) / (2 * N)).astype(np.float32)
        b = a * a
        c = b * b
        want = {(1, 0): a, (1, 1): b, (2, 0): b, (2, 1): c}
        for r in records:
            if r["launch"] >= 3 and r["phase"] == "after":
                first = 1 if r["launch"] % 2 else 2
                assert r["digest"] == digest_hex(digest(want[(first, r["arg"])].tobytes(),
                                                        r["row_bytes"])), r


def copy(address: int, nbytes: int, extent: str | None) -> PlannedCopy:
    plan = CopyPlan(arg=0, address=address, width_bytes=nbytes, height=1, pitch=nbytes,
                    dtype="float32", shape=(nbytes // 4,), type_text="float*")
    return PlannedCopy(plan, "after", 0, None, lambda: None, extent=extent)  # type: ignore[arg-type]


def test_only_starts_strictly_inside_a_guessed_extent_cut_it():
    extents = GuessedExtents()
    extents.keep([copy(0x1000, 0x1000, "allocation-rest"), copy(0x4000, 0x800, "to-next-buffer"),
                  copy(0x8000, 0x1000, None), copy(0x10000, 0x100, "capped")])
    assert len(extents) == 3                      # an exact extent (a rule's count) is not kept
    assert not extents.cut_by([0x1000, 0x2000, 0x3000, 0x4800, 0x8800, 0x10100])
    assert extents.cut_by([0x1004])
    assert extents.cut_by([0x9000, 0x47fc])
    assert extents.cut_by([0x10001])
    extents.clear()
    assert not extents.cut_by([0x1004]) and len(extents) == 0


def test_replans_are_bounded_and_clear_every_process():
    """While nothing is repeated (a first forward, planned launch by launch) a replan costs
    nothing and is not counted, up to MAX_BUMPS; after repeated launches, MAX_REPLANS."""
    bumps: list[int] = []
    one, other = GuessedExtents(), GuessedExtents()
    replanner = Replanner(lambda: bumps.append(1) or len(bumps), lambda: [one, other])

    def turn(repeated: bool) -> bool:
        one.keep([copy(0x1000, 0x1000, "allocation-rest")])
        other.keep([copy(0x9000, 0x1000, "allocation-rest")])
        if repeated:
            replanner.repeating()
        assert not replanner.learnt(one, [0x3000])          # outside: nothing
        done = replanner.learnt(one, [0x1800])
        assert (len(one), len(other)) == ((0, 0) if done else (1, 1))
        return done

    assert all(turn(repeated=False) for _ in range(40))
    assert replanner.replans == 0 and len(bumps) == 40
    assert all(turn(repeated=True) for _ in range(MAX_REPLANS))
    assert not turn(repeated=True)
    assert not turn(repeated=False)     # launches were repeated since the last bump: no more
    assert replanner.replans == MAX_REPLANS and len(bumps) == 40 + MAX_REPLANS
    bumps.clear()
    replanner = Replanner(lambda: bumps.append(1) or len(bumps), lambda: [one, other])
    while len(bumps) < MAX_BUMPS:
        assert turn(repeated=False)
    assert not turn(repeated=False)                           # MAX_BUMPS in all
    idle = Replanner(None, lambda: [one])                     # nothing to bump
    assert not idle.learnt(one, [0x1800])
