"""The launcher's trials (shim/handtune.c): whether cudump's kernel is handed to the launcher
thread is tried both ways, stretch by stretch, and the faster way kept. Driven here by a clock
of its own: each launch takes the time the test gives the way it was made, so the choice is
the test's to predict, with no timing of this machine in it."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def constant(name: str) -> int:
    return int(re.search(rf"{name} = (\d+)", (ROOT / "shim" / "handtune.h").read_text()).group(1))


WARMUP, TRIAL, KEEP = (constant("HANDTUNE_WARMUP"), constant("HANDTUNE_TRIAL"),
                       constant("HANDTUNE_KEEP"))

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include "handtune.h"

static uint64_t clock_ns;
static uint64_t now(void) { return clock_ns; }

/* argv: stretches, then per stretch "ON_NS,OFF_NS" (the time a launch takes either way)
 * given as a list that repeats its last entry. Prints the way of each stretch (1: on),
 * then the trials and those won. */
int main(int argc, char **argv)
{
    struct handtune t = {0};
    int stretches = atoi(argv[1]);
    for (int s = 0; s < stretches; s++) {
        const char *spec = argv[2 + (s < argc - 3 ? s : argc - 3)];
        unsigned long long on_ns, off_ns;
        sscanf(spec, "%llu,%llu", &on_ns, &off_ns);
        int way = -1;
        for (int i = 0; i < HANDTUNE_STRETCH; i++) {
            int on = handtune_hand_off(&t, now);
            if (way < 0)
                way = on;
            else if (way != on)
                return 3;   /* a stretch is made one way */
            clock_ns += on ? on_ns : off_ns;
        }
        printf("%d", way);
    }
    printf("\n%llu %llu\n", (unsigned long long)t.trials, (unsigned long long)t.won);
    return 0;
}
"""


@dataclass(frozen=True)
class Tuned:
    ways: str       # one character a stretch: 1 where the launcher made its launches
    trials: int
    won: int


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("handtune")
    src, exe = tmp / "harness.c", tmp / "harness"
    src.write_text(HARNESS)
    subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'shim'}",
                    str(src), str(ROOT / "shim" / "handtune.c"), "-o", str(exe)], check=True)
    return exe


def tune(harness: Path, stretches: int, *specs: tuple[int, int]) -> Tuned:
    """`stretches` after the warm-up, each launch taking (launcher on, off) ns as `specs`
    says, stretch by stretch (the last repeats); the warm-up's launches take 50 us either
    way. The warm-up's stretches must be the launcher's, and are left out of `ways`."""
    args = [str(harness), str(WARMUP + stretches), *(["50000,50000"] * WARMUP),
            *(f"{a},{b}" for a, b in specs)]
    ran = subprocess.run(args, capture_output=True, text=True)
    assert ran.returncode == 0, "a stretch was made both ways"
    ways, counts = ran.stdout.split("\n")[:2]
    assert ways[:WARMUP] == "1" * WARMUP
    trials, won = map(int, counts.split())
    return Tuned(ways[WARMUP:], trials, won)


TRIAL_WAYS = "100110"


def test_a_faster_launcher_is_kept_after_its_trial(harness: Path) -> None:
    tuned = tune(harness, TRIAL + KEEP, (8_000, 12_000))
    assert tuned.ways == TRIAL_WAYS + "1" * KEEP
    assert (tuned.trials, tuned.won) == (1, 1)


def test_a_slower_launcher_is_set_aside_after_its_trial(harness: Path) -> None:
    tuned = tune(harness, TRIAL + KEEP, (12_000, 8_000))
    assert tuned.ways == TRIAL_WAYS + "0" * KEEP
    assert (tuned.trials, tuned.won) == (1, 0)


def test_the_warm_up_decides_nothing(harness: Path) -> None:
    """The program's first stretches are the launcher's, however slow or fast."""
    args = [str(harness), str(WARMUP + TRIAL + 1), *(["1000,900000"] * WARMUP), "12000,8000"]
    ran = subprocess.run(args, capture_output=True, text=True, check=True)
    assert ran.stdout.split("\n")[0] == "1" * WARMUP + TRIAL_WAYS + "0"


def test_a_launcher_no_faster_by_the_margin_is_set_aside(harness: Path) -> None:
    """It costs a core: 2% faster is not enough."""
    assert tune(harness, TRIAL + 1, (9_800, 10_000)).ways == TRIAL_WAYS + "0"
    assert tune(harness, TRIAL + 1, (9_600, 10_000)).ways == TRIAL_WAYS + "1"


def test_a_stretch_slowed_by_something_else_does_not_decide(harness: Path) -> None:
    """The program stops for a while during the launcher's first stretch of the trial (a
    pause of its own): each way is judged by its fastest stretch."""
    tuned = tune(harness, TRIAL + 1, (200_000, 12_000), (8_000, 12_000))
    assert tuned.ways == TRIAL_WAYS + "1"


def test_the_trial_is_made_again_and_follows_the_host(harness: Path) -> None:
    """After KEEP stretches a new trial: the host got slower with the launcher meanwhile."""
    specs = [(8_000, 12_000)] * (TRIAL + KEEP) + [(12_000, 8_000)]
    tuned = tune(harness, 2 * (TRIAL + KEEP), *specs)
    assert tuned.ways == (TRIAL_WAYS + "1" * KEEP) + (TRIAL_WAYS + "0" * KEEP)
    assert (tuned.trials, tuned.won) == (2, 1)
