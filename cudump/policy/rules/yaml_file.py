"""Rule files: which kernels to snapshot, when, and how to read their buffers.

Format (YAML). A file holds `rules:` and a list of rules; a bare list of
rules, or a single rule mapping, is accepted too::

    rules:
      - name: zed-stereo                 # optional; defaults to the kernel pattern
        kernel: "device::FrP0k5607tPV*"  # required, see below
        scope: "layer3.*"                # optional: only launches made inside a scope
        match: demangled                 # demangled (default) | mangled | base
        skip: 0                          # leave out the first N matching launches
        every: 1                         # then take every N-th one ...
        count: 10                        # ... at most N of them (default: no limit)
        args: [0, 2, 3]                  # argument indexes, or `pointers` (the default)
        when: both                       # before | after | both (default)
        format: both                     # npy | png | both (default) | digest | check-nan
        overrides:                       # per argument index: how to read its buffer
          2: {dtype: uint8, channels: 4, width: arg5, height: arg6, pitch: arg4}
          7: {dtype: float32, count: "arg5 * arg6", range: [0, 1]}

`kernel` is a kernel pattern (cudump.kernels.pattern, the one matcher rules,
breakpoints and `cudump ls/show/diff --kernel` share): a glob, where `*` is any
run of characters, `?` one character, and every other character stands for
itself (brackets too, since C++ names hold them). With `match: demangled` it
must match, as a whole, one of the forms of the demangled name: the full name
(`void ns::k<int>(float*)`), the name without its return type
(`ns::k<int>(float*)`), without its parameters (`ns::k<int>`) or the bare
function name (`k`); so `ns::k*`, `ns::k<int>` and `k` all name that kernel,
and a plain word names kernels of that name, not every name containing it
(write `*word*` for that). `match: base` matches only the bare function name
(no namespaces, template arguments or parameters, as Nsight Compute's base
names); `match: mangled` only the symbol (`_Z1kPf`). `re:<regex>` is a Python
regular expression searched anywhere in the full name, with and without the
return type (`re:FrP0k` matches any name containing FrP0k; `re:^device::`
matches `void device::k(int)`); a regular expression that repeats a group that
itself repeats (`(a+)+`), which can take exponential time, is refused, and so is
one with more repetitions that can match the same text than two unbounded ones
and a choice (`.*.*.*`, whose time is a high power of the name's length; see
cudump.kernels.pattern).

`scope` (beside `kernel`, or instead of it: then every kernel) is a glob, shell-style
and case-sensitive, over the names of the scopes open on the launching thread (NVTX
ranges, PyTorch module paths such as `layer3.0.conv1`, JAX operations) and the launch's
source line (`train.py:57`): the rule takes only launches one of which it matches, and
counts only those for skip, every and count. `kernel: "scope:GLOB"` says the same.

`action: snapshot` (the default) copies the buffers as described below, to a
file per format named in `format` that can hold the data: `npy` (any data) and
`png` (image-like data), the formats cudump.rundir.formats registers; `both`
(the default) names all of them.
`format: digest` copies nothing: cudump's own kernel computes a 64-bit content
hash of each buffer on the GPU (cudump.wire.digest), and the manifest records it;
`cudump diff` of two digest runs names the first launch that differs.
`format: check-nan` scans the floating-point buffers (float, double, half,
bfloat16) before and after each launch on the GPU and reports the launches
that leave NaN or Inf in a buffer that had none (as `--check-nan`).
`action: break` makes the interactive prompt stop at the launches the rule
selects (`skip`, `every` and `count` apply); it takes no snapshots, so it has
no `args`, `when`, `format` or `overrides`.

Launches are counted per rule and per process, from 1, among the launches the
rule's pattern matches. `when` and `format` also take lists (`[before, after]`).

`overrides` settings: `dtype` is a numpy name (uint8, int16, float32, ...),
bfloat16 (kept as its uint16 bits) or a C/CUDA element type (uchar4, float2,
unsigned short, __half ...); a vector
type sets `channels` too. `channels`, `width` (elements per row), `height`
(rows), `pitch` (bytes from one row to the next) and `count` (elements of a
1-D buffer) are numbers or expressions over the launch's argument values
(`arg4`, `arg5 * 2`, `(arg1 + 255) // 256 * 256`, `min(arg5, 1920)`; see
cudump.kernels.expr). `range: [low, high]` is the value range PNGs of float data are
rendered with. An override replaces the element type of the signature: a
`dtype` without `channels` means one channel. `field: N` takes the pointer at
byte N (0, 8, 16, ...) inside an argument passed by value as a struct.

Everything that can be checked before the program runs is: `skip`, `every` and
`count` must fit the shim's counters (below 2**64, 2**32 and 2**64 - 1); a geometry value
that is a constant (`width: -3`, `count: 0`, `height: "1/0"`, `pitch: 2.5`) must
be a whole number >= 1 (and below 2**48); a `range` must be two finite numbers,
low < high; `field` lies inside the largest kernel parameter block. Expressions
over argN are checked per launch, and a launch whose values do not fit gets a
manifest record with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from cudump.errors import RuleError
from cudump.policy.rules.rule import Rule
from cudump.policy.rules.validation import RuleReader, rule_error


def load_rules(paths: Sequence[Path]) -> list[Rule]:
    """Load and check rule files, in order. Raises RuleError on the first problem."""
    rules: list[Rule] = []
    for path in paths:
        rules.extend(_load_file(Path(path)))
    return rules


def _load_file(path: Path) -> list[Rule]:
    where = str(path)
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_RULE_FILE_BYTES + 1)     # a FIFO or /dev/zero ends too
        if len(data) > MAX_RULE_FILE_BYTES:
            raise RuleError(where, None, None, f"larger than {MAX_RULE_FILE_BYTES >> 20} MiB; a "
                            "rule file needs a few kilobytes (is this the right file?)")
        # As a text-mode read gives it: universal newlines.
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except FileNotFoundError:
        raise RuleError(where, None, None, "no such rule file") from None
    except IsADirectoryError:
        raise RuleError(where, None, None, "is a directory, not a rule file") from None
    except UnicodeDecodeError:
        raise RuleError(where, None, None, "not UTF-8 text") from None
    except OSError as err:
        raise RuleError(where, None, None, f"cannot read: {err.strerror}") from None
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as err:     # a control character, refused up front
        line = text.count("\n", 0, max(err.position, 0)) + 1
        raise rule_error(where, line, None, f"YAML syntax error: character "
                          f"#x{err.character:04x}: {err.reason}") from None
    try:
        root = loader.get_single_node()
        return RuleReader(where, path, loader).file(root)
    except _TooDeep as err:
        raise rule_error(where, err.mark.line + 1, None, str(err)) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = err.problem or err.context or "malformed"
        raise rule_error(where, line, None, f"YAML syntax error: {problem} "
                          "(check indentation and quoting)") from None
    except yaml.YAMLError as err:
        raise rule_error(where, None, None, f"YAML syntax error: {err}") from None
    except RecursionError:
        # The composer recurses once per level of nesting.
        raise rule_error(where, getattr(loader, "line", -1) + 1, None,
                          "nested too deeply; a rule file needs only a few levels") from None
    finally:
        loader.dispose()


MAX_YAML_DEPTH = 64          # a rule file needs about 6 levels
# Checked before parsing: PyYAML takes minutes and gigabytes over a file of tens of megabytes.
MAX_RULE_FILE_BYTES = 1 << 20


class _TooDeep(yaml.YAMLError):
    def __init__(self, mark: yaml.Mark) -> None:
        super().__init__(f"nested too deeply (more than {MAX_YAML_DEPTH} levels); a rule file "
                         "needs only a few")
        self.mark = mark


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses deep nesting early: PyYAML scans `[[[[...` in quadratic time
    and composes nested nodes recursively."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.depth = 0

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:  # noqa: N803 - PyYAML's
        if self.flow_level >= MAX_YAML_DEPTH:
            raise _TooDeep(self.get_mark())
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self.depth += 1
        try:
            if self.depth > MAX_YAML_DEPTH:
                raise _TooDeep(self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1
