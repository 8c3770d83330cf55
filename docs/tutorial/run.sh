#!/usr/bin/env bash
# The README's tutorial, run for real. Each step runs its commands exactly as README.md shows
# them and writes what a terminal would show (the command after "$ ", then its stdout and
# stderr together) to OUT/NN-name.txt; the pictures the README shows are copied to OUT too.
#
#   pip install . && make -C samples      # on a machine with an NVIDIA GPU and nvcc (and
#                                         # PyTorch, for step 08)
#   bash docs/tutorial/run.sh OUT
#   python3 docs/tutorial/fill_readme.py OUT
#
# fill_readme.py puts each OUT/NN-name.txt into README.md, in the block after its
# `<!-- tutorial:NN-name -->` marker, and the pictures into docs/tutorial/img/; a test
# (tests/test_tutorial.py) checks that the markers and the steps below correspond one to one.
#
# The commands run in a scratch directory ($TUTORIAL_WORK, default /tmp/cudump-tutorial) that
# holds links to samples/, rules/ and docs/, so that run directories are numbered from
# cudump-out/1 as in a fresh checkout; it is removed at the end. Every command runs under
# `timeout -k 5 60`; a command whose exit status is not the one expected, whose output holds a
# traceback, or a step that leaves more than 256 MiB in the scratch directory, is reported on
# stderr, the other steps still run, and the script exits 1. Exit status 2: it could not start.
set -u -o pipefail

if [ $# -ne 1 ]; then
    echo "usage: bash docs/tutorial/run.sh OUT" >&2
    exit 2
fi
mkdir -p "$1" || exit 2
OUT=$(cd "$1" && pwd) || exit 2
ROOT=$(cd "$(dirname "$0")/../.." && pwd) || exit 2
WORK=${TUTORIAL_WORK:-/tmp/cudump-tutorial}
LIMIT_S=60
MAX_WORK_KIB=$((256 * 1024))
MAX_OUT_KIB=$((10 * 1024))

die() {
    echo "run.sh: $*" >&2
    exit 2
}

command -v cudump >/dev/null || die "no cudump on PATH (pip install . first)"
for program in zed_camera nan_source threads; do
    [ -x "$ROOT/samples/build/$program" ] \
        || die "samples/build/$program is missing: run 'make -C samples' first"
done
if [ -e "$WORK" ]; then
    [ -f "$WORK/.cudump-tutorial" ] \
        || die "$WORK exists and is not a scratch directory of this script: remove it, or set TUTORIAL_WORK"
    rm -rf "$WORK" || die "cannot remove $WORK"
fi
mkdir -p "$WORK" && touch "$WORK/.cudump-tutorial" || die "cannot create $WORK"
trap 'rm -rf "$WORK"' EXIT
for link in samples rules docs; do
    ln -s "$ROOT/$link" "$WORK/$link" || die "cannot link $link into $WORK"
done
rm -f "$OUT"/[0-9][0-9]-*.txt "$OUT"/[0-9][0-9]-*.png "$OUT"/[0-9][0-9]-*.json

FAILED=()
STEP=""
TRANSCRIPT=""

fail() {
    echo "run.sh: step $STEP: $*" >&2
    case " ${FAILED[*]} " in
        *" $STEP "*) ;;
        *) FAILED+=("$STEP") ;;
    esac
}

# step NN-name: the transcript that the following commands go into.
step() {
    STEP=$1
    TRANSCRIPT="$OUT/$STEP.txt"
    : >"$TRANSCRIPT"
    echo "== $STEP" >&2
}

# run STATUS 'COMMAND': runs COMMAND (as a shell line, in the scratch directory) and expects
# exit status STATUS.
run() {
    local expected=$1 line=$2 status start
    printf '$ %s\n' "$line" >>"$TRANSCRIPT"
    start=$(wc -c <"$TRANSCRIPT")
    (cd "$WORK" && timeout -k 5 "$LIMIT_S" bash -c "$line" </dev/null) >>"$TRANSCRIPT" 2>&1
    status=$?
    if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
        fail "'$line' ran past ${LIMIT_S}s"
    elif [ "$status" -ne "$expected" ]; then
        fail "'$line' exited with status $status, expected $expected"
    elif tail -c +"$((start + 1))" "$TRANSCRIPT" | grep -qE 'Traceback|internal error'; then
        fail "'$line' printed a traceback or an internal error"
    else
        return 0
    fi
    tail -n 20 "$TRANSCRIPT" | sed 's/^/    /' >&2
    return 1
}

# expect_run N: the step's cudump run wrote to cudump-out/N (the README names it so).
expect_run() {
    grep -q "^cudump: writing to cudump-out/$1\$" "$TRANSCRIPT" \
        || fail "its run did not go to cudump-out/$1 (the README says it does)"
}

# picture 'GLOB' NAME: copies the one file GLOB matches (in the scratch directory) to OUT/NAME.
picture() {
    local matches
    matches=$(cd "$WORK" && compgen -G "$1")
    if [ -z "$matches" ] || [ "$(printf '%s\n' "$matches" | wc -l)" -ne 1 ]; then
        fail "expected one file matching $1, found: ${matches:-none}"
        return 1
    fi
    cp "$WORK/$matches" "$OUT/$2" || fail "cannot copy $matches to $OUT/$2"
}

# The scratch directory stays bounded whatever a step did.
check_size() {
    local kib
    kib=$(du -sk "$WORK" | cut -f1)
    [ "$kib" -le "$MAX_WORK_KIB" ] || fail "left $kib KiB in $WORK (at most $MAX_WORK_KIB)"
}

step 01-snapshot
run 0 "cudump --rule rules/zed.yaml --max-bytes 64M samples/build/zed_camera 2" \
    && expect_run 1
picture 'cudump-out/1/000002-*-FrP0k5607tPV-arg0-before.png' 01-arg0-before.png
picture 'cudump-out/1/000002-*-FrP0k5607tPV-arg2-after.png' 01-arg2-after.png
picture 'cudump-out/1/000002-*-FrP0k5607tPV-arg3-after.png' 01-arg3-after.png
check_size

step 02-ls-show
run 0 "cudump ls cudump-out/1"
run 0 "cudump show cudump-out/1 --kernel FrP0k5607tPV --arg 2 --phase after --occurrence 2 --png frame1-left.png"
picture frame1-left.png 02-frame1-left.png

step 03-break
run 0 "cudump --break 'device::FrP0k5607tPV*' --batch docs/tutorial/zed-break.txt samples/build/zed_camera 1" \
    && expect_run 2
check_size

step 04-checknan
run 0 "cudump --check-nan samples/build/nan_source" && expect_run 3
check_size

step 05-stats
run 0 "cudump stats cudump-out/3"

step 06-bisect
run 1 "cudump bisect --rule rules/zed.yaml --env-b ZED_GAIN_FROM=1:1.5 --html bisect.html -- samples/build/zed_camera 3"
# The report's first section is the first divergent launch's left image (arg 2): its phase
# 0 is "before", 1 "after"; "diff" is the heatmap of |A - B|.
picture 'bisect-img/00000-1-a.png' 06-left-a.png
picture 'bisect-img/00000-1-b.png' 06-left-b.png
picture 'bisect-img/00000-1-diff.png' 06-left-diff.png
check_size

step 07-timeline
run 0 "cudump --timeline threads.json samples/build/threads 4" && expect_run 4
run 0 "python3 docs/tutorial/timeline_png.py threads.json threads.png"
picture threads.json 07-timeline.json
picture threads.png 07-timeline.png
check_size

step 08-layers
run 0 "cudump --check-nan --layers python3 samples/torch_layers_nan.py 2>&1 | grep -e '^cudump: writing' -e produced" \
    && expect_run 5
run 0 "cudump stats --by layer cudump-out/5"
check_size

out_kib=$(du -sk "$OUT" | cut -f1)
if [ "$out_kib" -gt "$MAX_OUT_KIB" ]; then
    STEP=all
    fail "$OUT holds $out_kib KiB (at most $MAX_OUT_KIB)"
fi
if [ ${#FAILED[@]} -gt 0 ]; then
    echo "run.sh: FAILED: ${FAILED[*]} (transcripts in $OUT)" >&2
    exit 1
fi
echo "run.sh: all steps done; transcripts and pictures in $OUT ($out_kib KiB)" >&2
