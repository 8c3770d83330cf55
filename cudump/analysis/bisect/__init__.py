"""`cudump bisect`: from "the output changed" to this kernel, this argument, these elements.

Two sides, A and B (two programs, or one program in two environments), are each run four
times at most, as `cudump` subprocesses writing into one work directory:

1. `a-digest`, `b-digest`: a digest of every buffer of every launch (`cudump --digest`), or
   of the buffers the user's rules name (their rules with `format: digest`);
2. the two digest runs are diffed (cudump.analysis.diff): the first divergent launch, in A's launch
   order, and how many launches matched before it;
3. `a-snap`, `b-snap`: snapshots (.npy and .png) of that launch only, before and after:
   a rule matching its kernel's mangled name, `skip: occurrence - 1`, `count: 1` (the
   user's rules for that kernel, so narrowed, when rules were given);
4. the snapshots of that launch are diffed, and each differing buffer is shown with the
   diff's metrics and the elements that differ; `--html` writes the report.

Each side's re-run is checked against its own digest run at the divergent buffer: a side
whose bytes changed between its two runs is not deterministic, and a divergence that the
re-run does not show is reported as not reproduced (exit status 3). Where the work directory
is kept, bisect ends with the command that confirms it: B run again with A's inputs written
into that launch (`cudump --inject a-snap:LAUNCH`).

Runs whose records name scopes (modules, ranges) are aligned by scope instead (scopes.py,
cudump.analysis.diff.by_scope): step 2 names the first module whose outputs differ, step 3
snapshots its launches on each side (each side's own rules), step 4 shows its outputs.

Modules: sides (A and B from the command line), side_run (running a side under cudump),
rules (the user's rules as digests, and narrowed to one launch), target (the first divergent
launch), buffers (a differing buffer shown), confirm (the --inject command suggested),
options (BisectOptions, the work directory and the report's place), scopes (the first
module that differs, and rules for each side's launches inside it), steps (Bisect, the four
steps, and bisect), errors.
"""
