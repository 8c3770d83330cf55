"""Transplants: one launch run on the inputs another run recorded for it, to confirm what
`cudump bisect` found. If a launch's outputs become the other run's once it is given the
other run's inputs, the difference came in through its inputs; if they still differ, the
launch itself (its code, its scalar parameters) makes it.

`cudump --inject RUN:LAUNCH PROGRAM` writes RUN's "before" snapshots of the launch into its
buffers while it is held (cudump.controller.inject), then compares what it leaves with RUN's
"after" snapshots; `cudump replay --inputs-from RUN` does the same to a captured launch
replayed alone.

Modules: donor (RUN:LAUNCH read and checked: the donor launch and its snapshots), outcome
(the comparison of the outputs, and the report lines).
"""
