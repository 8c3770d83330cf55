"""Comparing buffers: metrics of two arrays, and two runs aligned snapshot by snapshot.

Semantics (stated once, used by `cudump diff` and the HTML report):
- An element differs when |a - b| > atol + rtol * |b| (numpy.isclose). The defaults are
  atol = rtol = 0: any change counts.
- NaN against NaN is equal, as are infinities of the same sign; NaN or Inf against anything
  else differs. Such elements are counted in `nonfinite_mismatch` and left out of the largest
  difference, the mean absolute difference and the RMSE, which are over the elements where
  |a - b| is finite.
- PSNR = 10 log10(peak^2 / MSE) with peak the dtype's maximum for integers and the finite data
  range of A for floats; inf when MSE is 0, None when the peak is 0.
- Integers of up to 16 bits are compared exactly in integer arithmetic; wider integers and
  floats in float64 (integers beyond 2**53 lose precision there).
- Empty arrays of the same shape and dtype are equal (0 elements, nothing differs).
- In runs, a snapshot that the program's run could not capture on either side, for the same
  reason (device addresses aside), is "not captured on either side": reported, not counted
  as a difference and not as trouble. Captured on one side only, or for different reasons,
  it cannot be compared (trouble).
- Digests (`cudump --digest`, `format: digest`): two digest records compare by digest, byte
  count and geometry. Without a tolerance that is exact. With one, digests that differ are
  "close" when both records carry a sum of |x| of the same type and the sums are within the
  tolerance (by_digest.py); records without sums stay exact. A digest against an .npy
  compares by digesting the array's bytes the way the digest was taken (cudump.wire.digest,
  rows of the digest's `row_bytes`).
- A run diff names its first divergent launch: launches in order (processes in the order
  they first appear in A's manifest, each one's launches in sequence), the first with a pair
  whose buffers differ, and how many launches before it matched.

Work is done in chunks of about a million elements, whose temporaries stay in cache and are
reused (one set per thread); a stretch whose bytes are identical costs one comparison.
Integers of up to 16 bits never leave integer arithmetic: |a - b| is max - min in the
unsigned type of their width, sums are added in place, half onto half, while the type holds
them, and only what is left is widened; a chunk where every element differs is counted
without a mask. Pairs of a run are compared `jobs` at a time, in worker processes when there
is much to compare (see parallel_kind), on threads otherwise.

Runs whose records name scopes compare scope by scope (by_scope.py states how; the scope
occurrences and their outputs: scope_tree.py).

Modules: metrics (Tolerance, Metrics), arrays (compare_arrays), chunks (the chunk arithmetic),
align (PairResult, align), by_digest (digest pairs), compare (compare_pair), parallel
(compare_pairs), runs (RunDiff, diff_runs, the first divergent launch), scope_tree (a run's scope
occurrences and their outputs), by_scope (ScopeDiff, align_scopes, the first differing
scope).
"""
