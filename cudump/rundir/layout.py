"""The run directory's layout: the names of the files and folders cudump writes in it.

Snapshot files (`<launch>-<pid>-...npy`, `.png`) are named per launch by the snapshot
planner; everything with a fixed name is here.
"""

from __future__ import annotations

MANIFEST_FILE = "manifest.jsonl"   # one record per snapshot, digest, scan (rundir.manifest)
SUMMARY_FILE = "summary.json"      # the run's counts, written at its end (rundir.summary)
TRACE_FILE = "trace.jsonl"         # --trace: one record per launch (policy.trace)
CAPTURES_FILE = "captures.jsonl"   # one record per launch captured for replay (rundir.captures)
MODULES_DIR = "modules"            # module images of captured launches (policy.snapshot.capture)
FLIGHT_FILE = "flight.jsonl"       # --flight: each process's last launches (rundir.flight)
DIGESTS_FILE = "digests.bin"       # repeated launches' digests, in bulk (rundir.digest_batches)
OUTPUTS_FILE = "outputs.jsonl"     # --module-outputs: what each module returned (rundir.outputs)
XLA_DIR = "xla"                    # --layers: XLA's dump of the modules it compiles (rundir.xla)
LOCK_FILE = ".cudump-run.lock"     # held by the run writing the directory (rundir.ownership)

# The files that make a directory a run's: --out refuses a directory that holds any of them.
RUN_FILES = (MANIFEST_FILE, SUMMARY_FILE, TRACE_FILE, CAPTURES_FILE, FLIGHT_FILE, DIGESTS_FILE,
             OUTPUTS_FILE)
# What `cudump stats` reads, in the order it names them.
STATS_FILES = (SUMMARY_FILE, TRACE_FILE, MANIFEST_FILE)
