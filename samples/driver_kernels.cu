// Kernels for driver_ptx.c, compiled to PTX at build time (nvcc -ptx) and
// loaded with cuModuleLoadData. C++ linkage on purpose: the driver sees the
// mangled names, which is what a debugger has to demangle.

__global__ void vecAdd(const float* a, const float* b, float* c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

// A pitched 2-D buffer: rows are `pitch` bytes apart, `width` floats wide.
__global__ void scale2d(float* img, unsigned long pitch, int width, int height, float s)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) {
        float* row = (float*)((char*)img + (unsigned long)y * pitch);
        row[x] *= s;
    }
}
