"""Snapshots of kernel argument buffers: plans copies for the shim and writes what comes back.

For each launch of a function some rule wants, the shim sends the raw parameter bytes and
the allocation behind each pointer-sized value. The parts, from the bottom up:

- planned: what a plan holds (copies, pieces, the launch) and the MSG_PLAN payload;
- origin: producer or propagator, and which launch turned which buffer non-finite;
- records: the manifest record of one copy, and its file name;
- results: plans the shim repeats on its own, and the result ring their results come in;
- state: what the parts share (the lock, the manifest, each process's plans, the tallies);
- failures: copies not taken (a record and a warning once), and rules' notices;
- writer: the writer thread (.npy, PNG, manifest record), so PNG encoding never happens
  while the target waits;
- capture: module images and captures.jsonl, for replay;
- nan: the NaN/Inf policy (which buffers are scanned, producers, their follow-up copies);
- buffers: what a rule reads of one launch's arguments (geometry.py, extents.py);
- select: which functions and launches rules take (skip/count/every);
- place: where copies go in the process's staging file, whole or streamed in pieces;
- plan: the copies of one launch, from the rules that take it (and what a rule would read
  of a launch, planning nothing: --inject checks a launch with it);
- collect: what comes back once the shim reports the copies done;
- repeat: plans the shim may repeat, and launches made with them;
- coordinator: `Snapshots`, the one object the session talks to.

Nothing here imports the package itself: each module imports only those above it in
this list.
"""
