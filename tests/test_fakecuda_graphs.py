"""The stand-in driver's CUDA graphs: the graphs test program, and the graph API through ctypes
(node listing, parameters read back, clones, executable graphs), without the shim."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from fakecuda_build import FakeCuda
from forked import isolated

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")

SUCCESS = 0
INVALID_VALUE = 1
INVALID_HANDLE = 400
CAPTURE_UNSUPPORTED = 900
CAPTURE_INVALIDATED = 901
UPDATE_FAILURE = 910
PER_THREAD = 2

KERNEL, MEMCPY, MEMSET, GRAPH, EMPTY = 0, 1, 2, 4, 5
HOST, DEVICE = 1, 2

SCALE = b"scale"
VECADD = b"_Z6vecAddPKfS0_Pfi"
FRP0K = b"_ZN6device12FrP0k5607tPVILN2sl14YUV_CONVENTIONE2EEEvP6uchar4iPNS_6uchar8ES6_iiif"
EMPTY_KERNEL = b"_Z5emptyv"

vp = ctypes.c_void_p


class KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2."""

    _fields_ = [("func", vp), ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
                ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint),
                ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("kernelParams", ctypes.POINTER(vp)),
                ("extra", ctypes.POINTER(vp)), ("kern", vp), ("ctx", vp)]


class Memcpy3D(ctypes.Structure):
    """CUDA_MEMCPY3D."""

    _fields_ = [
        ("srcXInBytes", ctypes.c_size_t), ("srcY", ctypes.c_size_t), ("srcZ", ctypes.c_size_t),
        ("srcLOD", ctypes.c_size_t), ("srcMemoryType", ctypes.c_int), ("srcHost", vp),
        ("srcDevice", ctypes.c_uint64), ("srcArray", vp), ("reserved0", vp),
        ("srcPitch", ctypes.c_size_t), ("srcHeight", ctypes.c_size_t),
        ("dstXInBytes", ctypes.c_size_t), ("dstY", ctypes.c_size_t), ("dstZ", ctypes.c_size_t),
        ("dstLOD", ctypes.c_size_t), ("dstMemoryType", ctypes.c_int), ("dstHost", vp),
        ("dstDevice", ctypes.c_uint64), ("dstArray", vp), ("reserved1", vp),
        ("dstPitch", ctypes.c_size_t), ("dstHeight", ctypes.c_size_t),
        ("WidthInBytes", ctypes.c_size_t), ("Height", ctypes.c_size_t), ("Depth", ctypes.c_size_t),
    ]


class MemsetParams(ctypes.Structure):
    """CUDA_MEMSET_NODE_PARAMS."""

    _fields_ = [("dst", ctypes.c_uint64), ("pitch", ctypes.c_size_t), ("value", ctypes.c_uint),
                ("elementSize", ctypes.c_uint), ("width", ctypes.c_size_t),
                ("height", ctypes.c_size_t)]


class UpdateResultInfo(ctypes.Structure):
    """CUgraphExecUpdateResultInfo."""

    _fields_ = [("result", ctypes.c_int), ("errorNode", vp), ("errorFromNode", vp)]


# x86-64 offsets of the CUDA 13 cuda.h structures, which the ctypes mirrors above and
# tests/fakecuda/fakecuda.h must both have.
KERNEL_NODE_PARAMS_OFFSETS = {
    "func": 0, "gridDimX": 8, "gridDimY": 12, "gridDimZ": 16, "blockDimX": 20, "blockDimY": 24,
    "blockDimZ": 28, "sharedMemBytes": 32, "kernelParams": 40, "extra": 48, "kern": 56, "ctx": 64,
}
MEMCPY3D_OFFSETS = {
    "srcXInBytes": 0, "srcY": 8, "srcZ": 16, "srcLOD": 24, "srcMemoryType": 32, "srcHost": 40,
    "srcDevice": 48, "srcArray": 56, "reserved0": 64, "srcPitch": 72, "srcHeight": 80,
    "dstXInBytes": 88, "dstY": 96, "dstZ": 104, "dstLOD": 112, "dstMemoryType": 120,
    "dstHost": 128, "dstDevice": 136, "dstArray": 144, "reserved1": 152, "dstPitch": 160,
    "dstHeight": 168, "WidthInBytes": 176, "Height": 184, "Depth": 192,
}
MEMSET_OFFSETS = {"dst": 0, "pitch": 8, "value": 16, "elementSize": 20, "width": 24, "height": 32}
SIZES = {"kernel_v2": 72, "kernel_v1": 56, "memcpy3d": 200, "memset": 40, "edge": 8,
         "update_info": 24}


class Driver:
    """The stand-in loaded with a current context and the built-in kernels."""

    def __init__(self, fake: FakeCuda) -> None:
        self.lib = lib = ctypes.CDLL(str(fake.library))
        assert lib.cuInit(0) == SUCCESS
        self.ctx = vp()
        assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), 0) == SUCCESS
        assert lib.cuCtxSetCurrent(self.ctx) == SUCCESS
        module = vp()
        assert lib.cuModuleLoadData(ctypes.byref(module), b"image") == SUCCESS
        self.func = {}
        for name in (SCALE, VECADD, FRP0K, EMPTY_KERNEL):
            f = vp()
            assert lib.cuModuleGetFunction(ctypes.byref(f), module, name) == SUCCESS
            self.func[name] = f.value
        library = vp()
        assert lib.cuLibraryLoadData(ctypes.byref(library), b"image", None, None, 0, None, None,
                                     0) == SUCCESS
        kern = vp()
        assert lib.cuLibraryGetKernel(ctypes.byref(kern), library, SCALE) == SUCCESS
        self.scale_kernel = kern.value
        self.stream = vp()
        assert lib.cuStreamCreate(ctypes.byref(self.stream), 0) == SUCCESS

    def alloc(self, nbytes: int) -> int:
        p = ctypes.c_uint64()
        assert self.lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(nbytes)) == SUCCESS
        return p.value

    def graph(self) -> vp:
        g = vp()
        assert self.lib.cuGraphCreate(ctypes.byref(g), 0) == SUCCESS
        return g

    def nodes(self, graph: vp) -> list[int]:
        n = ctypes.c_size_t()
        assert self.lib.cuGraphGetNodes(graph, None, ctypes.byref(n)) == SUCCESS
        arr = (vp * n.value)()
        assert self.lib.cuGraphGetNodes(graph, arr, ctypes.byref(n)) == SUCCESS
        return list(arr[: n.value])

    def node_type(self, node: int) -> int:
        t = ctypes.c_int(-1)
        assert self.lib.cuGraphNodeGetType(vp(node), ctypes.byref(t)) == SUCCESS
        return t.value

    def edges(self, graph: vp) -> list[tuple[int, int]]:
        n = ctypes.c_size_t()
        assert self.lib.cuGraphGetEdges_v2(graph, None, None, None, ctypes.byref(n)) == SUCCESS
        src, dst = (vp * n.value)(), (vp * n.value)()
        assert self.lib.cuGraphGetEdges_v2(graph, src, dst, None, ctypes.byref(n)) == SUCCESS
        return list(zip(src[: n.value], dst[: n.value], strict=True))

    def get_params(self, node: int) -> KernelNodeParams:
        p = KernelNodeParams()
        assert self.lib.cuGraphKernelNodeGetParams_v2(vp(node), ctypes.byref(p)) == SUCCESS
        return p

    def add_kernel(self, graph: vp, params: KernelNodeParams, deps: list[int] = ()) -> int:
        node = vp()
        dep_arr = (vp * max(1, len(deps)))(*deps)
        r = self.lib.cuGraphAddKernelNode_v2(ctypes.byref(node), graph, dep_arr,
                                             ctypes.c_size_t(len(deps)), ctypes.byref(params))
        assert r == SUCCESS, r
        return node.value

    def instantiate(self, graph: vp) -> vp:
        exec_ = vp()
        assert self.lib.cuGraphInstantiateWithFlags(ctypes.byref(exec_), graph,
                                                    ctypes.c_ulonglong(0)) == SUCCESS
        return exec_

    def floats(self, dev: int, n: int) -> list[float]:
        out = (ctypes.c_float * n)()
        assert self.lib.cuMemcpyDtoH_v2(out, ctypes.c_uint64(dev), ctypes.c_size_t(4 * n)) == 0
        return list(out)


_ALIVE: list[object] = []  # every Args of a test process, which is short-lived


class Args:
    """A kernelParams array. Its values stay alive as long as the (forked) test process, since
    a KernelNodeParams holds only the array's address."""

    def __init__(self, *values: ctypes._SimpleCData) -> None:
        _ALIVE.append(self)
        self.values = values
        self.array = (vp * len(values))(*(ctypes.cast(ctypes.byref(v), vp) for v in values))

    @property
    def pointer(self):
        return ctypes.cast(self.array, ctypes.POINTER(vp))


def kernel_params(func: int | None, args: Args | None, grid: int = 4, block: int = 64,
                  kern: int | None = None) -> KernelNodeParams:
    return KernelNodeParams(func=func, gridDimX=grid, gridDimY=1, gridDimZ=1, blockDimX=block,
                            blockDimY=1, blockDimZ=1, sharedMemBytes=0,
                            kernelParams=args.pointer if args else None, kern=kern)


def scale_args(dev: int, factor: float, n: int = 256) -> Args:
    return Args(ctypes.c_uint64(dev), ctypes.c_float(factor), ctypes.c_int(n))


def value_at(pointer: int, ctype) -> object:
    return ctype.from_address(pointer).value


# ---------------------------------------------------------------- the program


def test_graphs_program(fake: FakeCuda, bare_run) -> None:
    done = bare_run([str(fake.programs["graphs"])])
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    expected = [
        "capture: nodes 2 edges 1 roots 1 types kernel,kernel",
        "capture: node 0 scale scale=2 n=256",
        "capture: replays 10 x[1]=2047 x[255]=261120",
        "explicit: nodes 4 roots 2 edges 3 types kernel,graph,memset,memcpy",
        "explicit: child nodes 2 edges 1 types memcpy,kernel",
        "explicit: clone nodes 3 edges 2, original nodes 4 edges 3",
        "setparams: replay 1 scale 1.5 q[0]=1.5 q[255]=1.5",
        "setparams: replay 2 scale 2.5 q[0]=2.5 q[255]=2.5",
        "setparams: replay 3 scale 3.5 q[0]=3.5 q[255]=3.5",
        "setparams: graph node scale 1, executable graph still 3.5",
        "update: set params by update graph's node -> 1, by instantiated graph's -> 0",
        "update: other topology -> 910 result 2",
        "tograph: nodes 2 types memset,kernel r[0]=28",
        "tograph: graph launch in capture -> 900, end capture -> 901",
        "device: replays 2 q[0]=4",
        "verified graphs",
        "launches scale=20 vecAdd=13 graph=20",
        "allocs 9 bytes 8448",
    ]
    for line in expected:
        assert line in lines, done.stdout

    # explicit: z = 3 * in + 1 with in[i] = i % 17 - 4; w is the 8x8 block of z (16 floats a
    # row) from column 4, row 2.
    z = [3 * ((i % 17) - 4) + 1 for i in range(256)]
    w = [z[(2 + r) * 16 + 4 + c] for r in range(8) for c in range(8)]
    assert (f"explicit: launches 2 z[0]={z[0]} z[20]={z[20]} sum {sum(z)} "
            f"w[0]={w[0]} w[9]={w[9]} sum {sum(w)}") in lines

    # update: ten replays of x = 2x + y (y = i % 5), then one of x = x/2 + (i % 3 + 0.5).
    x = [float(i) for i in range(256)]
    for _ in range(10):
        x = [2 * v + (i % 5) for i, v in enumerate(x)]
    x = [v / 2 + (i % 3) + 0.5 for i, v in enumerate(x)]
    assert f"update: result 0 x[1]={x[1]:g} x[255]={x[255]:g}" in lines


# ---------------------------------------------------------------- layouts


def test_ctypes_mirrors_have_cuda13_layouts() -> None:
    for struct, offsets, size in ((KernelNodeParams, KERNEL_NODE_PARAMS_OFFSETS, "kernel_v2"),
                                  (MemsetParams, MEMSET_OFFSETS, "memset")):
        assert {name: getattr(struct, name).offset for name in offsets} == offsets
        assert ctypes.sizeof(struct) == SIZES[size]
    assert {name: getattr(Memcpy3D, name).offset for name, _ in Memcpy3D._fields_} == (
        MEMCPY3D_OFFSETS)
    assert ctypes.sizeof(Memcpy3D) == SIZES["memcpy3d"]
    assert ctypes.sizeof(UpdateResultInfo) == SIZES["update_info"]


LAYOUT_PROBE = r"""
#include <stddef.h>
#include <stdio.h>
#include HEADER
#define OFF(t, f) printf("%s.%s %zu\n", #t, #f, offsetof(t, f))
#define SIZE(t) printf("sizeof %s %zu\n", #t, sizeof(t))
#define VALUE(x) printf("%s %lld\n", #x, (long long)(x))
int main(void)
{
    FIELDS
    return 0;
}
"""


def _probe(tmp_path: Path, tag: str, header: str, fields: str, includes: list[str]) -> list[str]:
    source = tmp_path / f"{tag}.c"
    source.write_text(LAYOUT_PROBE.replace("HEADER", header).replace("FIELDS", fields))
    binary = tmp_path / tag
    subprocess.run(["cc", "-std=c11", *includes, str(source), "-o", str(binary)], check=True)
    out = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout
    return out.splitlines()


def _fields(names: dict[str, str], constants: dict[str, str]) -> str:
    lines = []
    for key, fields in (("KNP", KERNEL_NODE_PARAMS_OFFSETS), ("M3D", MEMCPY3D_OFFSETS),
                        ("MSP", MEMSET_OFFSETS)):
        lines += [f"OFF({names[key]}, {f});" for f in fields]
        lines.append(f"SIZE({names[key]});")
    lines += [f"OFF({names['KNP1']}, {f});" for f in ("func", "kernelParams", "extra")]
    lines += [f"SIZE({names[k]});" for k in ("KNP1", "EDGE", "INFO")]
    lines += [f"OFF({names['INFO']}, {f});" for f in ("result", "errorNode", "errorFromNode")]
    lines += [f"OFF({names['EDGE']}, {f});" for f in ("from_port", "to_port", "type", "reserved")]
    lines += [f"VALUE({c});" for c in constants.values()]
    return "\n    ".join(lines)


OWN = {"KNP": "CUDA_KERNEL_NODE_PARAMS", "KNP1": "struct fc_kernel_node_params_v1",
       "M3D": "CUDA_MEMCPY3D", "MSP": "struct fc_memset_node_params",
       "EDGE": "struct fc_graph_edge_data", "INFO": "struct fc_graph_exec_update_result_info"}
REAL = {"KNP": "CUDA_KERNEL_NODE_PARAMS", "KNP1": "CUDA_KERNEL_NODE_PARAMS_v1",
        "M3D": "CUDA_MEMCPY3D", "MSP": "CUDA_MEMSET_NODE_PARAMS", "EDGE": "CUgraphEdgeData",
        "INFO": "CUgraphExecUpdateResultInfo"}
CONSTANTS = {  # own name -> cuda.h name
    "FC_GRAPH_NODE_TYPE_KERNEL": "CU_GRAPH_NODE_TYPE_KERNEL",
    "FC_GRAPH_NODE_TYPE_MEMCPY": "CU_GRAPH_NODE_TYPE_MEMCPY",
    "FC_GRAPH_NODE_TYPE_MEMSET": "CU_GRAPH_NODE_TYPE_MEMSET",
    "FC_GRAPH_NODE_TYPE_HOST": "CU_GRAPH_NODE_TYPE_HOST",
    "FC_GRAPH_NODE_TYPE_GRAPH": "CU_GRAPH_NODE_TYPE_GRAPH",
    "FC_GRAPH_NODE_TYPE_EMPTY": "CU_GRAPH_NODE_TYPE_EMPTY",
    "FC_GRAPH_EXEC_UPDATE_SUCCESS": "CU_GRAPH_EXEC_UPDATE_SUCCESS",
    "FC_GRAPH_EXEC_UPDATE_ERROR": "CU_GRAPH_EXEC_UPDATE_ERROR",
    "FC_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED": "CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED",
    "FC_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED": "CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED",
    "FC_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED": "CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED",
    "FC_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED":
        "CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED",
    "FC_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED": "CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED",
    "FC_ERROR_LOSSY_QUERY": "CUDA_ERROR_LOSSY_QUERY",
    "FC_ERROR_GRAPH_EXEC_UPDATE_FAILURE": "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
    "(long long)FC_LAUNCH_PARAM_END": "CU_LAUNCH_PARAM_END_AS_INT",
    "(long long)FC_LAUNCH_PARAM_BUFFER_POINTER": "CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT",
    "(long long)FC_LAUNCH_PARAM_BUFFER_SIZE": "CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT",
}
FAKE_INCLUDES = [f"-I{Path(__file__).parent / 'fakecuda'}",
                 f"-I{Path(__file__).parent.parent / 'shim'}"]
CUDA_H = Path("/usr/local/cuda/include/cuda.h")


def _values(lines: list[str]) -> list[str]:
    """Probe output without the names, which differ between the two headers."""
    return [line.rsplit(" ", 1)[1] for line in lines]


def test_own_graph_structs_have_cuda13_layouts(tmp_path: Path) -> None:
    own = _probe(tmp_path, "own", '"fakecuda.h"', _fields(OWN, {k: k for k in CONSTANTS}),
                 FAKE_INCLUDES)
    got = dict(line.rsplit(" ", 1) for line in own)
    for fields, key in ((KERNEL_NODE_PARAMS_OFFSETS, "KNP"), (MEMCPY3D_OFFSETS, "M3D"),
                        (MEMSET_OFFSETS, "MSP")):
        assert {f: int(got[f"{OWN[key]}.{f}"]) for f in fields} == fields
    assert int(got[f"sizeof {OWN['KNP']}"]) == SIZES["kernel_v2"]
    assert int(got[f"sizeof {OWN['KNP1']}"]) == SIZES["kernel_v1"]
    assert int(got[f"sizeof {OWN['M3D']}"]) == SIZES["memcpy3d"]
    assert int(got[f"sizeof {OWN['MSP']}"]) == SIZES["memset"]
    assert int(got[f"sizeof {OWN['EDGE']}"]) == SIZES["edge"]
    assert int(got[f"sizeof {OWN['INFO']}"]) == SIZES["update_info"]


@pytest.mark.skipif(not CUDA_H.exists(), reason="needs the real cuda.h to compare with")
def test_own_graph_declarations_match_cuda_h(tmp_path: Path) -> None:
    own = _probe(tmp_path, "own", '"fakecuda.h"', _fields(OWN, {k: k for k in CONSTANTS}),
                 FAKE_INCLUDES)
    real = _probe(tmp_path, "real", "<cuda.h>",
                  _fields(REAL, CONSTANTS), [f"-I{CUDA_H.parent}"])
    assert _values(own) == _values(real)
    assert len(own) == len(real) > 50


# ---------------------------------------------------------------- cuGetProcAddress


@pytest.mark.parametrize(
    ("symbol", "version", "flags", "variant"),
    [
        ("cuGraphAddKernelNode", 11080, 0, "cuGraphAddKernelNode"),
        ("cuGraphAddKernelNode", 12000, 0, "cuGraphAddKernelNode_v2"),
        ("cuGraphKernelNodeGetParams", 12000, PER_THREAD, "cuGraphKernelNodeGetParams_v2"),
        ("cuGraphKernelNodeSetParams", 13000, 0, "cuGraphKernelNodeSetParams_v2"),
        ("cuGraphExecKernelNodeSetParams", 10010, 0, "cuGraphExecKernelNodeSetParams"),
        ("cuGraphExecKernelNodeSetParams", 12000, 0, "cuGraphExecKernelNodeSetParams_v2"),
        # What a CUDA 13.0 driver answers: never cuGraphInstantiateWithFlags.
        ("cuGraphInstantiate", 10000, 0, "cuGraphInstantiate"),
        ("cuGraphInstantiate", 11040, 0, "cuGraphInstantiate_v2"),
        ("cuGraphInstantiate", 13000, 0, "cuGraphInstantiate_v2"),
        ("cuGraphInstantiateWithFlags", 11040, 0, "cuGraphInstantiateWithFlags"),
        ("cuGraphGetEdges", 12020, 0, "cuGraphGetEdges"),
        ("cuGraphGetEdges", 12030, 0, "cuGraphGetEdges_v2"),
        ("cuGraphNodeGetDependencies", 12030, 0, "cuGraphNodeGetDependencies_v2"),
        ("cuGraphAddDependencies", 12030, 0, "cuGraphAddDependencies_v2"),
        ("cuGraphAddDependencies", 10000, 0, "cuGraphAddDependencies"),
        ("cuGraphExecUpdate", 11080, 0, "cuGraphExecUpdate"),
        ("cuGraphExecUpdate", 12000, 0, "cuGraphExecUpdate_v2"),
        ("cuGraphGetNodes", 10000, 0, "cuGraphGetNodes"),
        ("cuGraphAddChildGraphNode", 13000, 0, "cuGraphAddChildGraphNode"),
        ("cuGraphLaunch", 12000, PER_THREAD, "cuGraphLaunch_ptsz"),
        ("cuStreamBeginCaptureToGraph", 12030, 0, "cuStreamBeginCaptureToGraph"),
        ("cuStreamBeginCaptureToGraph", 12030, PER_THREAD, "cuStreamBeginCaptureToGraph_ptsz"),
        ("cuStreamGetCaptureInfo", 10010, 0, "cuStreamGetCaptureInfo"),
        ("cuStreamGetCaptureInfo", 11030, PER_THREAD, "cuStreamGetCaptureInfo_v2_ptsz"),
        ("cuStreamGetCaptureInfo", 12030, 0, "cuStreamGetCaptureInfo_v3"),
        ("cuMemsetD32Async", 7000, PER_THREAD, "cuMemsetD32Async_ptsz"),
    ],
)
@isolated
def test_graph_entry_points_by_version(fake: FakeCuda, symbol: str, version: int, flags: int,
                                       variant: str) -> None:
    lib = ctypes.CDLL(str(fake.library))
    fn, status = vp(1), ctypes.c_int(-1)
    r = lib.cuGetProcAddress_v2(symbol.encode(), ctypes.byref(fn), ctypes.c_int(version),
                                ctypes.c_uint64(flags), ctypes.byref(status))
    assert (r, status.value) == (SUCCESS, 0)
    assert fn.value == ctypes.cast(getattr(lib, variant), vp).value


@isolated
def test_graph_entry_points_need_their_version(fake: FakeCuda) -> None:
    lib = ctypes.CDLL(str(fake.library))
    fn, status = vp(1), ctypes.c_int(-1)
    r = lib.cuGetProcAddress_v2(b"cuStreamBeginCaptureToGraph", ctypes.byref(fn),
                                ctypes.c_int(12020), ctypes.c_uint64(0), ctypes.byref(status))
    assert (r, fn.value, status.value) == (500, None, 2)


# ---------------------------------------------------------------- capture


@isolated
def test_capture_records_a_chain_of_nodes_in_submission_order(fake: FakeCuda) -> None:
    d = Driver(fake)
    lib = d.lib
    n = 256
    dx, dy = d.alloc(4 * n), d.alloc(4 * n)
    host = (ctypes.c_float * n)(*range(n))
    ones = (ctypes.c_float * n)(*([1.0] * n))
    assert lib.cuMemcpyHtoD_v2(ctypes.c_uint64(dx), ones, ctypes.c_size_t(4 * n)) == SUCCESS
    assert lib.cuStreamBeginCapture_v2(d.stream, 0) == SUCCESS
    s = scale_args(dx, 2.5)
    assert lib.cuLaunchKernel(vp(d.func[SCALE]), 4, 1, 1, 64, 1, 1, 16, d.stream, s.pointer,
                              None) == SUCCESS
    assert lib.cuMemcpyHtoDAsync_v2(ctypes.c_uint64(dy), host, ctypes.c_size_t(4 * n),
                                    d.stream) == SUCCESS
    v = Args(ctypes.c_uint64(dx), ctypes.c_uint64(dy), ctypes.c_uint64(dx), ctypes.c_int(n))
    assert lib.cuLaunchKernel(vp(d.scale_kernel), 1, 1, 1, 1, 1, 1, 0, d.stream, s.pointer,
                              None) == SUCCESS
    assert lib.cuLaunchKernel(vp(d.func[VECADD]), 4, 1, 1, 64, 1, 1, 0, d.stream, v.pointer,
                              None) == SUCCESS
    one = 0x3F800000  # 1.0f
    assert lib.cuMemsetD32Async(ctypes.c_uint64(dx), ctypes.c_uint(one), ctypes.c_size_t(3),
                                d.stream) == SUCCESS
    status, capture_id, graph = ctypes.c_int(), ctypes.c_uint64(), vp()
    deps, edges, ndeps = ctypes.POINTER(vp)(), vp(), ctypes.c_size_t()
    assert lib.cuStreamGetCaptureInfo_v3(d.stream, ctypes.byref(status), ctypes.byref(capture_id),
                                         ctypes.byref(graph), ctypes.byref(deps),
                                         ctypes.byref(edges), ctypes.byref(ndeps)) == SUCCESS
    assert (status.value, ndeps.value) == (1, 1) and capture_id.value > 0 and edges.value
    last = deps[0]
    ended = vp()
    assert lib.cuStreamEndCapture(d.stream, ctypes.byref(ended)) == SUCCESS
    assert ended.value == graph.value

    nodes = d.nodes(ended)
    assert [d.node_type(x) for x in nodes] == [KERNEL, MEMCPY, KERNEL, KERNEL, MEMSET]
    assert nodes[-1] == last
    assert d.edges(ended) == list(zip(nodes, nodes[1:], strict=False))
    # Nothing ran during the capture.
    assert d.floats(dx, 2) == [1.0, 1.0]

    p = d.get_params(nodes[0])
    assert (p.func, p.kern, p.ctx, p.sharedMemBytes) == (d.func[SCALE], None, d.ctx.value, 16)
    assert not p.extra
    assert value_at(p.kernelParams[0], ctypes.c_uint64) == dx
    assert value_at(p.kernelParams[1], ctypes.c_float) == 2.5
    assert value_at(p.kernelParams[2], ctypes.c_int) == n
    # A launch by CUkernel reads back the kernel and the function it runs.
    by_kernel = d.get_params(nodes[2])
    assert (by_kernel.kern, by_kernel.func) == (d.scale_kernel, d.func[SCALE])

    copy = Memcpy3D()
    assert lib.cuGraphMemcpyNodeGetParams(vp(nodes[1]), ctypes.byref(copy)) == SUCCESS
    assert (copy.srcMemoryType, copy.srcHost, copy.dstMemoryType, copy.dstDevice) == (
        HOST, ctypes.addressof(host), DEVICE, dy)
    assert (copy.WidthInBytes, copy.Height, copy.Depth, copy.srcPitch, copy.dstPitch) == (
        4 * n, 1, 1, 0, 0)
    mset = MemsetParams()
    assert lib.cuGraphMemsetNodeGetParams(vp(nodes[4]), ctypes.byref(mset)) == SUCCESS
    assert (mset.dst, mset.value, mset.elementSize, mset.width, mset.height) == (dx, one, 4, 3, 1)

    exec_ = d.instantiate(ended)
    assert lib.cuGraphLaunch(exec_, d.stream) == SUCCESS
    x = d.floats(dx, n)
    assert x[:3] == [1.0, 1.0, 1.0]
    assert x[3:] == [2.5 + i for i in range(3, n)]


@isolated
def test_unsafe_calls_during_capture_still_invalidate_it(fake: FakeCuda) -> None:
    d = Driver(fake)
    lib = d.lib
    g = d.graph()
    assert lib.cuGraphAddEmptyNode(ctypes.byref(vp()), g, None, ctypes.c_size_t(0)) == SUCCESS
    assert lib.cuStreamBeginCapture_v2(d.stream, 0) == SUCCESS
    # Building graphs is allowed during a capture; instantiating one is not.
    other = d.graph()
    exec_ = vp()
    assert lib.cuGraphInstantiateWithFlags(ctypes.byref(exec_), g, ctypes.c_ulonglong(0)) == (
        CAPTURE_UNSUPPORTED)
    ended = vp(1)
    assert lib.cuStreamEndCapture(d.stream, ctypes.byref(ended)) == CAPTURE_INVALIDATED
    assert ended.value is None
    assert lib.cuGraphDestroy(other) == SUCCESS
    # In relaxed mode, instantiation during a capture is fine.
    assert lib.cuStreamBeginCapture_v2(d.stream, 2) == SUCCESS
    assert lib.cuGraphInstantiateWithFlags(ctypes.byref(exec_), g, ctypes.c_ulonglong(0)) == 0
    assert lib.cuStreamEndCapture(d.stream, ctypes.byref(ended)) == SUCCESS
    assert d.nodes(ended) == []


@isolated
def test_invalidated_capture_into_a_graph_loses_the_graph(fake: FakeCuda) -> None:
    d = Driver(fake)
    lib = d.lib
    g = d.graph()
    root = vp()
    assert lib.cuGraphAddEmptyNode(ctypes.byref(root), g, None, ctypes.c_size_t(0)) == SUCCESS
    dx = d.alloc(1024)
    elsewhere, foreign = d.graph(), vp()
    assert lib.cuGraphAddEmptyNode(ctypes.byref(foreign), elsewhere, None, ctypes.c_size_t(0)) == 0
    assert lib.cuStreamBeginCaptureToGraph(d.stream, g, ctypes.byref(foreign), None,
                                           ctypes.c_size_t(1), 0) == INVALID_VALUE
    assert lib.cuStreamBeginCaptureToGraph(d.stream, g, ctypes.byref(root), None,
                                           ctypes.c_size_t(1), 0) == SUCCESS
    s = scale_args(dx, 2.0)
    assert lib.cuLaunchKernel(vp(d.func[SCALE]), 4, 1, 1, 64, 1, 1, 0, d.stream, s.pointer,
                              None) == SUCCESS
    assert lib.cuStreamSynchronize(d.stream) == CAPTURE_UNSUPPORTED
    # Once invalidated, the capture reports its status only (a real driver's answer).
    status, capture_id, n = ctypes.c_int(), ctypes.c_uint64(77), ctypes.c_size_t(99)
    assert lib.cuStreamGetCaptureInfo_v3(d.stream, ctypes.byref(status), ctypes.byref(capture_id),
                                         None, None, None, ctypes.byref(n)) == SUCCESS
    assert (status.value, capture_id.value, n.value) == (2, 77, 99)
    ended = vp(1)
    assert lib.cuStreamEndCapture(d.stream, ctypes.byref(ended)) == CAPTURE_INVALIDATED
    assert ended.value is None
    # The graph captured into is gone, as with a real driver.
    assert lib.cuGraphGetNodes(g, None, ctypes.byref(n)) == INVALID_VALUE
    assert lib.cuGraphDestroy(g) == INVALID_HANDLE


# ---------------------------------------------------------------- explicit graphs


@isolated
def test_kernel_params_read_back_equal_params_given(fake: FakeCuda) -> None:
    d = Driver(fake)
    lib = d.lib
    g = d.graph()
    # FrP0k5607tPV: (uchar4*, int, uchar8*, uchar8*, int, int, int, float) at natural alignment.
    values = (ctypes.c_uint64(0x1000), ctypes.c_int(-7), ctypes.c_uint64(0x2000),
              ctypes.c_uint64(0x3000), ctypes.c_int(11), ctypes.c_int(12), ctypes.c_int(13),
              ctypes.c_float(0.75))
    args = Args(*values)
    node = d.add_kernel(g, kernel_params(d.func[FRP0K], args, grid=2, block=32))
    for v in values:  # the node holds copies
        v.value = 0
    p = d.get_params(node)
    assert (p.func, p.kern, p.ctx, p.gridDimX, p.blockDimX) == (
        d.func[FRP0K], None, d.ctx.value, 2, 32)
    got = [value_at(p.kernelParams[i], type(v)) for i, v in enumerate(values)]
    assert got == [0x1000, -7, 0x2000, 0x3000, 11, 12, 13, 0.75]
    # One block: the pointer array, then the values at the kernel's layout offsets.
    array = ctypes.cast(p.kernelParams, vp).value
    offsets = [0, 8, 16, 24, 32, 36, 40, 44]
    assert [p.kernelParams[i] - array for i in range(8)] == [8 * 8 + o for o in offsets]
    # Asked again, the same block.
    assert ctypes.cast(d.get_params(node).kernelParams, vp).value == array

    # The v1 form writes the v1 structure only.
    raw = (ctypes.c_ubyte * 80)(*([0xAB] * 80))
    assert lib.cuGraphKernelNodeGetParams(vp(node), raw) == SUCCESS
    assert ctypes.c_void_p.from_buffer(raw, 0).value == d.func[FRP0K]
    assert list(raw[56:80]) == [0xAB] * 24

    # The packed `extra` form gives the same node.
    packed = (ctypes.c_ubyte * 48)()
    for v, o in zip(values, offsets, strict=True):
        v.value = 5
        ctypes.memmove(ctypes.addressof(packed) + o, ctypes.byref(v), ctypes.sizeof(v))
    size = ctypes.c_size_t(48)
    extra = (vp * 5)(1, ctypes.addressof(packed), 2, ctypes.addressof(size), 0)
    by_extra = kernel_params(d.func[FRP0K], None)
    by_extra.extra = ctypes.cast(extra, ctypes.POINTER(vp))
    q = d.get_params(d.add_kernel(g, by_extra))
    assert not q.extra
    assert [value_at(q.kernelParams[i], type(v)) for i, v in enumerate(values)] == [5] * 8

    # By CUkernel: read back with the kernel and its function.
    s = scale_args(0x4000, 1.0)
    k = d.get_params(d.add_kernel(g, kernel_params(None, s, kern=d.scale_kernel)))
    assert (k.kern, k.func, k.ctx) == (d.scale_kernel, d.func[SCALE], d.ctx.value)
    # A CUkernel passed as func is refused, as by the real driver; so is neither.
    bad = kernel_params(d.scale_kernel, s)
    out = vp()
    assert lib.cuGraphAddKernelNode_v2(ctypes.byref(out), g, None, ctypes.c_size_t(0),
                                       ctypes.byref(bad)) == INVALID_HANDLE
    bad = kernel_params(None, s)
    assert lib.cuGraphAddKernelNode_v2(ctypes.byref(out), g, None, ctypes.c_size_t(0),
                                       ctypes.byref(bad)) == INVALID_VALUE

    # cuGraphKernelNodeSetParams replaces the values, in the same block.
    assert lib.cuGraphKernelNodeSetParams_v2(vp(node), ctypes.byref(
        kernel_params(d.func[FRP0K], Args(*values)))) == SUCCESS
    assert value_at(d.get_params(node).kernelParams[7], ctypes.c_float) == 5.0
    assert ctypes.cast(d.get_params(node).kernelParams, vp).value == array

    # An empty `extra` may come with kernelParams; a packed buffer may not.
    end_only = (vp * 1)(0)
    both = kernel_params(d.func[FRP0K], Args(*values))
    both.extra = ctypes.cast(end_only, ctypes.POINTER(vp))
    assert value_at(d.get_params(d.add_kernel(g, both)).kernelParams[1], ctypes.c_int) == 5
    both.extra = ctypes.cast(extra, ctypes.POINTER(vp))
    assert lib.cuGraphAddKernelNode_v2(ctypes.byref(out), g, None, ctypes.c_size_t(0),
                                       ctypes.byref(both)) == INVALID_VALUE

    # A kernel without parameters reads back no kernelParams.
    e = d.get_params(d.add_kernel(g, kernel_params(d.func[EMPTY_KERNEL], None)))
    assert not e.kernelParams and not e.extra


@isolated
def test_node_queries(fake: FakeCuda) -> None:
    d = Driver(fake)
    lib = d.lib
    g = d.graph()
    a, b, c = vp(), vp(), vp()
    assert lib.cuGraphAddEmptyNode(ctypes.byref(a), g, None, ctypes.c_size_t(0)) == SUCCESS
    assert lib.cuGraphAddEmptyNode(ctypes.byref(b), g, None, ctypes.c_size_t(0)) == SUCCESS
    deps = (vp * 2)(a, b)
    assert lib.cuGraphAddEmptyNode(ctypes.byref(c), g, deps, ctypes.c_size_t(2)) == SUCCESS
    dup = (vp * 2)(a, a)
    assert lib.cuGraphAddEmptyNode(ctypes.byref(vp()), g, dup, ctypes.c_size_t(2)) == (
        INVALID_VALUE)
    assert d.nodes(g) == [a.value, b.value, c.value]

    # A larger array: the rest NULL and the count written; a smaller one: truncated.
    arr = (vp * 5)(*([1] * 5))
    n = ctypes.c_size_t(5)
    assert lib.cuGraphGetNodes(g, arr, ctypes.byref(n)) == SUCCESS
    assert (n.value, list(arr)) == (3, [a.value, b.value, c.value, None, None])
    n = ctypes.c_size_t(1)
    assert lib.cuGraphGetNodes(g, arr, ctypes.byref(n)) == SUCCESS
    assert (n.value, arr[0]) == (1, a.value)

    roots = (vp * 3)()
    n = ctypes.c_size_t(3)
    assert lib.cuGraphGetRootNodes(g, roots, ctypes.byref(n)) == SUCCESS
    assert list(roots[: n.value]) == [a.value, b.value]
    assert d.edges(g) == [(a.value, c.value), (b.value, c.value)]
    out, n = (vp * 2)(), ctypes.c_size_t(2)
    assert lib.cuGraphNodeGetDependentNodes_v2(a, out, None, ctypes.byref(n)) == SUCCESS
    assert list(out[: n.value]) == [c.value]
    edge_data = (ctypes.c_ubyte * 16)(*([0xFF] * 16))
    n = ctypes.c_size_t(2)
    assert lib.cuGraphNodeGetDependencies_v2(c, out, edge_data, ctypes.byref(n)) == SUCCESS
    assert list(out) == [a.value, b.value] and list(edge_data) == [0] * 16

    # Edges: an existing one again, or one of another graph's node, is refused.
    assert lib.cuGraphAddDependencies_v2(g, ctypes.byref(a), ctypes.byref(c), None,
                                         ctypes.c_size_t(1)) == INVALID_VALUE
    h = d.graph()
    x = vp()
    assert lib.cuGraphAddEmptyNode(ctypes.byref(x), h, None, ctypes.c_size_t(0)) == SUCCESS
    assert lib.cuGraphAddDependencies(g, ctypes.byref(a), ctypes.byref(x),
                                      ctypes.c_size_t(1)) == INVALID_VALUE
    assert lib.cuGraphRemoveDependencies(g, ctypes.byref(b), ctypes.byref(c),
                                         ctypes.c_size_t(1)) == SUCCESS
    assert d.edges(g) == [(a.value, c.value)]

    # A cycle can be made, but not instantiated.
    assert lib.cuGraphAddDependencies(g, ctypes.byref(c), ctypes.byref(a),
                                      ctypes.c_size_t(1)) == SUCCESS
    exec_, err, log = vp(), vp(1), ctypes.create_string_buffer(64)
    assert lib.cuGraphInstantiateWithFlags(ctypes.byref(exec_), g, ctypes.c_ulonglong(0)) == (
        INVALID_VALUE)
    assert lib.cuGraphInstantiate_v2(ctypes.byref(exec_), g, ctypes.byref(err), log,
                                     ctypes.c_size_t(64)) == INVALID_VALUE
    assert log.value == b"graph contains a cycle"

    # Edges list by the node they leave, then the node they reach, whatever order they were
    # added in (what a real driver answers).
    h2 = d.graph()
    w = [vp() for _ in range(4)]
    for node in w:
        assert lib.cuGraphAddEmptyNode(ctypes.byref(node), h2, None, ctypes.c_size_t(0)) == 0
    src = (vp * 4)(w[2], w[0], w[1], w[0])
    dst = (vp * 4)(w[3], w[1], w[3], w[2])
    assert lib.cuGraphAddDependencies_v2(h2, src, dst, None, ctypes.c_size_t(4)) == SUCCESS
    index = {node.value: i for i, node in enumerate(w)}
    assert [(index[f], index[t]) for f, t in d.edges(h2)] == [(0, 1), (0, 2), (1, 3), (2, 3)]

    # Destroying a node takes its edges with it.
    assert lib.cuGraphDestroyNode(a) == SUCCESS
    assert d.nodes(g) == [b.value, c.value] and d.edges(g) == []


@isolated
def test_clone_is_independent(fake: FakeCuda) -> None:
    d = Driver(fake)
    lib = d.lib
    g = d.graph()
    dx = d.alloc(1024)
    s = scale_args(dx, 2.0)
    k1 = d.add_kernel(g, kernel_params(d.func[SCALE], s))
    k2 = d.add_kernel(g, kernel_params(d.func[SCALE], s), [k1])
    child = d.graph()
    d.add_kernel(child, kernel_params(d.func[SCALE], s))
    cg = vp()
    assert lib.cuGraphAddChildGraphNode(ctypes.byref(cg), g, ctypes.byref(vp(k2)),
                                        ctypes.c_size_t(1), child) == SUCCESS
    # The child graph node embeds a copy of child, and hands out that copy.
    d.add_kernel(child, kernel_params(d.func[SCALE], s))
    embedded = vp()
    assert lib.cuGraphChildGraphNodeGetGraph(cg, ctypes.byref(embedded)) == SUCCESS
    again = vp()
    assert lib.cuGraphChildGraphNodeGetGraph(cg, ctypes.byref(again)) == SUCCESS
    assert embedded.value == again.value != child.value
    assert len(d.nodes(embedded)) == 1 and len(d.nodes(child)) == 2
    assert lib.cuGraphDestroy(embedded) == INVALID_VALUE  # belongs to the node

    clone = vp()
    assert lib.cuGraphClone(ctypes.byref(clone), g) == SUCCESS
    cloned = d.nodes(clone)
    assert len(cloned) == 3 and not set(cloned) & set(d.nodes(g))
    assert [d.node_type(x) for x in cloned] == [KERNEL, KERNEL, GRAPH]
    assert d.edges(clone) == [(cloned[0], cloned[1]), (cloned[1], cloned[2])]
    found = vp()
    assert lib.cuGraphNodeFindInClone(ctypes.byref(found), vp(k2), clone) == SUCCESS
    assert found.value == cloned[1]
    # Parameters read back equal, and changing the clone leaves the original alone.
    assert value_at(d.get_params(cloned[0]).kernelParams[1], ctypes.c_float) == 2.0
    assert lib.cuGraphKernelNodeSetParams_v2(vp(cloned[0]), ctypes.byref(
        kernel_params(d.func[SCALE], scale_args(dx, 9.0)))) == SUCCESS
    assert lib.cuGraphDestroyNode(vp(cloned[1])) == SUCCESS
    assert value_at(d.get_params(k1).kernelParams[1], ctypes.c_float) == 2.0
    assert len(d.nodes(g)) == 3 and len(d.edges(g)) == 2
    # ...and destroying the original leaves the clone usable.
    assert lib.cuGraphDestroy(g) == SUCCESS
    assert lib.cuGraphDestroy(child) == SUCCESS
    assert len(d.nodes(clone)) == 2
    ones = (ctypes.c_float * 256)(*([1.0] * 256))
    assert lib.cuMemcpyHtoD_v2(ctypes.c_uint64(dx), ones, ctypes.c_size_t(1024)) == SUCCESS
    assert lib.cuGraphLaunch(d.instantiate(clone), d.stream) == SUCCESS
    assert d.floats(dx, 1) == [18.0]  # 9 (first node), then 2 (the child graph's)


@isolated
def test_memcpy_and_memset_nodes(fake: FakeCuda) -> None:
    d = Driver(fake)
    lib = d.lib
    g = d.graph()
    rows, cols, pitch = 4, 6, 32  # a 4 x 6-byte region, rows 32 bytes apart on the device
    host = (ctypes.c_ubyte * (rows * cols))(*range(1, rows * cols + 1))
    dev, back = d.alloc(rows * pitch), (ctypes.c_ubyte * (rows * cols))()
    mset = MemsetParams(dst=dev, pitch=0, value=0xEE, elementSize=1, width=rows * pitch, height=1)
    s = vp()
    assert lib.cuGraphAddMemsetNode(ctypes.byref(s), g, None, ctypes.c_size_t(0),
                                    ctypes.byref(mset), d.ctx) == SUCCESS
    up = Memcpy3D(srcMemoryType=HOST, srcHost=ctypes.addressof(host), dstMemoryType=DEVICE,
                  dstDevice=dev, dstXInBytes=2, dstPitch=pitch, WidthInBytes=cols, Height=rows,
                  Depth=1)
    u = vp()
    assert lib.cuGraphAddMemcpyNode(ctypes.byref(u), g, ctypes.byref(s), ctypes.c_size_t(1),
                                    ctypes.byref(up), d.ctx) == SUCCESS
    down = Memcpy3D(srcMemoryType=DEVICE, srcDevice=dev, srcXInBytes=2, srcPitch=pitch,
                    dstMemoryType=HOST, dstHost=ctypes.addressof(back), WidthInBytes=cols,
                    Height=rows, Depth=1)
    assert lib.cuGraphAddMemcpyNode(ctypes.byref(vp()), g, ctypes.byref(u), ctypes.c_size_t(1),
                                    ctypes.byref(down), d.ctx) == SUCCESS
    # A copy that leaves its allocation is refused when the node is added.
    past = Memcpy3D(srcMemoryType=DEVICE, srcDevice=dev, srcPitch=pitch, dstMemoryType=HOST,
                    dstHost=ctypes.addressof(back), WidthInBytes=cols, Height=rows + 1, Depth=1)
    assert lib.cuGraphAddMemcpyNode(ctypes.byref(vp()), g, None, ctypes.c_size_t(0),
                                    ctypes.byref(past), d.ctx) == INVALID_VALUE
    read = Memcpy3D()
    assert lib.cuGraphMemcpyNodeGetParams(u, ctypes.byref(read)) == SUCCESS
    assert [getattr(read, f) for f, _ in Memcpy3D._fields_] == [
        getattr(up, f) for f, _ in Memcpy3D._fields_]

    assert lib.cuGraphLaunch(d.instantiate(g), d.stream) == SUCCESS
    assert list(back) == list(host)
    whole = (ctypes.c_ubyte * (rows * pitch))()
    assert lib.cuMemcpyDtoH_v2(whole, ctypes.c_uint64(dev), ctypes.c_size_t(rows * pitch)) == 0
    assert whole[0:2] == [0xEE, 0xEE] and whole[2:8] == list(range(1, 7))
    assert whole[8:34] == [0xEE] * 26 and whole[34:40] == list(range(7, 13))


# ---------------------------------------------------------------- executable graphs


@isolated
def test_executable_graph_is_a_copy_named_by_the_original_nodes(fake: FakeCuda) -> None:
    d = Driver(fake)
    lib = d.lib
    dx = d.alloc(1024)
    g = d.graph()
    child = d.graph()
    inner = d.add_kernel(child, kernel_params(d.func[SCALE], scale_args(dx, 3.0)))
    cg = vp()
    assert lib.cuGraphAddChildGraphNode(ctypes.byref(cg), g, None, ctypes.c_size_t(0),
                                        child) == SUCCESS
    k = d.add_kernel(g, kernel_params(d.func[SCALE], scale_args(dx, 2.0)), [cg.value])
    exec_ = d.instantiate(g)

    def run() -> float:
        ones = (ctypes.c_float * 256)(*([1.0] * 256))
        assert lib.cuMemcpyHtoD_v2(ctypes.c_uint64(dx), ones, ctypes.c_size_t(1024)) == 0
        assert lib.cuGraphLaunch(exec_, d.stream) == SUCCESS
        return d.floats(dx, 1)[0]

    assert run() == 6.0
    # Changing or destroying the graph leaves the executable graph alone.
    assert lib.cuGraphKernelNodeSetParams_v2(vp(k), ctypes.byref(
        kernel_params(d.func[SCALE], scale_args(dx, 10.0)))) == SUCCESS
    assert run() == 6.0
    # The graph's node names its copy; nodes inside the child graph are found too.
    assert lib.cuGraphExecKernelNodeSetParams_v2(exec_, vp(k), ctypes.byref(
        kernel_params(d.func[SCALE], scale_args(dx, 5.0)))) == SUCCESS
    embedded = vp()
    assert lib.cuGraphChildGraphNodeGetGraph(cg, ctypes.byref(embedded)) == SUCCESS
    embedded_kernel = d.nodes(embedded)[0]
    assert lib.cuGraphExecKernelNodeSetParams(exec_, vp(embedded_kernel), ctypes.byref(
        kernel_params(d.func[SCALE], scale_args(dx, 7.0)))) == SUCCESS
    assert run() == 35.0
    # The child graph given to cuGraphAddChildGraphNode is not the embedded one.
    assert lib.cuGraphExecKernelNodeSetParams_v2(exec_, vp(inner), ctypes.byref(
        kernel_params(d.func[SCALE], scale_args(dx, 7.0)))) == INVALID_VALUE
    assert lib.cuGraphExecKernelNodeSetParams_v2(exec_, cg, ctypes.byref(
        kernel_params(d.func[SCALE], scale_args(dx, 7.0)))) == INVALID_VALUE

    # cuGraphExecUpdate: the same shape updates (the graph now scales by 10, the child by 3).
    info = UpdateResultInfo(result=-1)
    assert lib.cuGraphExecUpdate_v2(exec_, g, ctypes.byref(info)) == SUCCESS
    assert (info.result, info.errorNode, info.errorFromNode) == (0, None, None)
    assert run() == 30.0
    # A node of another type is refused and named; the executable graph stays as it was.
    other = d.graph()
    empty = vp()
    assert lib.cuGraphAddEmptyNode(ctypes.byref(empty), other, None, ctypes.c_size_t(0)) == 0
    d.add_kernel(other, kernel_params(d.func[SCALE], scale_args(dx, 4.0)), [empty.value])
    assert lib.cuGraphExecUpdate_v2(exec_, other, ctypes.byref(info)) == UPDATE_FAILURE
    assert (info.result, info.errorNode) == (3, empty.value)
    error_node, result = vp(), ctypes.c_int()
    assert lib.cuGraphExecUpdate(exec_, other, ctypes.byref(error_node),
                                 ctypes.byref(result)) == UPDATE_FAILURE
    assert (result.value, error_node.value) == (3, empty.value)
    assert run() == 30.0
    assert lib.cuGraphExecDestroy(exec_) == SUCCESS


def test_fakecuda_graph_sources_use_only_their_own_names() -> None:
    """fakecuda.h declares CUDA 13 graph types with fc_ names only, so that it keeps
    compiling beside a cudecl.h that grows."""
    header = (Path(__file__).parent / "fakecuda" / "fakecuda.h").read_text()
    typedefs = re.findall(r"typedef\s+struct\s+(\w+)\s*\{", header)
    assert typedefs == []
    assert "typedef struct CUgraphNode_st *CUgraphNode;" in header
