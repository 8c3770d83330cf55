// The ZED kernel alone, as PTX: make builds zed_kernels.ptx from it and, with one pixel
// of the output changed, zed_poke.ptx. tests/gpu/test_gpu_replay.py gives them to
// `cudump replay --ptx` to run against a launch captured from zed_camera.
#include "zed_kernels.cuh"

template __global__ void device::FrP0k5607tPV<sl::YUV_FULL_RANGE>(uchar4*, int, device::uchar8*,
                                                                  device::uchar8*, int, int,
                                                                  int, float);
