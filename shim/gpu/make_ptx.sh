#!/usr/bin/env bash
# Regenerates shim/tools_ptx.h from shim/gpu/tools.cu (needs nvcc; run on a
# machine with the CUDA toolkit and commit the result). One PTX targets
# compute_75 so that the driver can JIT it for every GPU CUDA 13 supports; the
# other compute_90, with the wait that lets the shim launch it with
# programmatic stream serialization on Hopper and later (shim/toollaunch.h).
set -eu
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
nvcc -ptx -arch=compute_75 -O3 -o "$tmp/tools.ptx" gpu/tools.cu
nvcc -ptx -arch=compute_90 -O3 -o "$tmp/tools_sm90.ptx" gpu/tools.cu
python3 gpu/embed_ptx.py "$tmp/tools.ptx" "$tmp/tools_sm90.ptx" tools_ptx.h
rm -rf "$tmp"
