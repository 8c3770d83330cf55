/*
 * Loads a module every way the driver offers, each image of another kind, and
 * launches one kernel from each: a fat binary from a heap buffer freed right
 * after the load, a cubin (ELF) through cuModuleLoadDataEx, the runtime's
 * wrapper around a fat binary through cuModuleLoadFatBinary, a PTX file
 * through cuModuleLoad, and a cubin in a heap buffer through cuLibraryLoadData.
 * Each image is followed by bytes that are not part of it, and each is also
 * written to image-<kind>.bin, so that a test can check that cudump kept
 * exactly the image's bytes.
 */
#include "progcommon.h"

#define N 256

static void put_u16(unsigned char *p, uint16_t v) { memcpy(p, &v, sizeof v); }
static void put_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, sizeof v); }
static void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, sizeof v); }

static void save(const char *name, const void *data, size_t n)
{
    FILE *f = fopen(name, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", name);
        exit(1);
    }
    fclose(f);
}

/* A fat binary header (magic, version, header size, payload size) and its payload. */
static size_t make_fatbin(unsigned char *p, unsigned char fill, size_t payload)
{
    put_u32(p, 0xBA55ED50u);
    put_u16(p + 4, 1);
    put_u16(p + 6, 16);
    put_u64(p + 8, payload);
    memset(p + 16, fill, payload);
    return 16 + payload;
}

/* A 64-bit ELF file: header, one section of `data` bytes, then the section header
 * table (a null section and that one), which ends the file. */
static size_t make_elf(unsigned char *p, unsigned char fill, size_t data)
{
    memset(p, 0, 64);
    memcpy(p, "\177ELF", 4);
    p[4] = 2;                           /* ELFCLASS64 */
    p[5] = 1;                           /* little endian */
    p[6] = 1;
    put_u64(p + 0x28, 64 + data);       /* e_shoff */
    put_u16(p + 0x34, 64);              /* e_ehsize */
    put_u16(p + 0x3A, 64);              /* e_shentsize */
    put_u16(p + 0x3C, 2);               /* e_shnum */
    memset(p + 64, fill, data);
    unsigned char *sh = p + 64 + data;
    memset(sh, 0, 128);
    put_u32(sh + 64 + 4, 1);            /* SHT_PROGBITS */
    put_u64(sh + 64 + 0x18, 64);        /* sh_offset */
    put_u64(sh + 64 + 0x20, data);      /* sh_size */
    return 64 + data + 128;
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate_v4(&ctx, NULL, 0, dev));

    /* Static storage: an image inside the program stays where it is. */
    static unsigned char elf[1024], wrapped[512];
    unsigned char *fat = malloc(1024), *lib = malloc(1024);
    if (!fat || !lib)
        return 1;

    CUmodule m_fat, m_elf, m_wrap, m_ptx;
    size_t n = make_fatbin(fat, 0xAB, 300);
    memset(fat + n, 0xEE, 64);
    save("image-fatbin.bin", fat, n);
    CHECK(cuModuleLoadData(&m_fat, fat));
    memset(fat, 0, 1024); /* the loader's buffer is gone: cudump must have its own copy */
    free(fat);

    n = make_elf(elf, 0xCD, 200);
    memset(elf + n, 0xEE, 64);
    save("image-cubin.bin", elf, n);
    CHECK(cuModuleLoadDataEx(&m_elf, elf, 0, NULL, NULL));

    n = make_fatbin(wrapped, 0x5A, 100);
    save("image-wrapped.bin", wrapped, n);
    struct {
        int magic, version;
        const void *data;
        void *filename_or_fatbins;
    } wrapper = {0x466243B1, 1, wrapped, NULL};
    CHECK(cuModuleLoadFatBinary(&m_wrap, &wrapper));

    const char ptx[] = "//\n// a PTX file\n.version 8.0\n.target sm_90\n";
    save("image-ptx.ptx", ptx, strlen(ptx));
    CHECK(cuModuleLoad(&m_ptx, "image-ptx.ptx"));

    n = make_elf(lib, 0x77, 40);
    save("image-library.bin", lib, n);
    CUlibrary library;
    CHECK(cuLibraryLoadData(&library, lib, NULL, NULL, 0, NULL, NULL, 0));
    free(lib);

    CUfunction vec_add, scale, fill, empty, add3;
    CUkernel add3_kernel;
    CHECK(cuModuleGetFunction(&vec_add, m_fat, "_Z6vecAddPKfS0_Pfi"));
    CHECK(cuModuleGetFunction(&scale, m_elf, "scale"));
    CHECK(cuModuleGetFunction(&fill, m_wrap, "_Z4fillIiEvPT_S0_i"));
    CHECK(cuModuleGetFunction(&empty, m_ptx, "_Z5emptyv"));
    CHECK(cuLibraryGetKernel(&add3_kernel, library, "_Z4add3St5arrayIPfLm3EEi"));
    CHECK(cuKernelGetFunction(&add3, add3_kernel));

    static float a[N], b[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = 1.0f;
    }
    CUdeviceptr da, db, dc, di;
    CHECK(cuMemAlloc_v2(&da, sizeof a));
    CHECK(cuMemAlloc_v2(&db, sizeof b));
    CHECK(cuMemAlloc_v2(&dc, sizeof a));
    CHECK(cuMemAlloc_v2(&di, N * sizeof(int)));
    CHECK(cuMemcpyHtoD_v2(da, a, sizeof a));
    CHECK(cuMemcpyHtoD_v2(db, b, sizeof b));
    int count = N, seven = 7;
    float half = 0.5f;
    void *p_add[] = {&da, &db, &dc, &count};
    void *p_scale[] = {&dc, &half, &count};
    void *p_fill[] = {&di, &seven, &count};
    CHECK(cuLaunchKernel(vec_add, 1, 1, 1, N, 1, 1, 0, NULL, p_add, NULL));
    CHECK(cuLaunchKernel(scale, 1, 1, 1, N, 1, 1, 0, NULL, p_scale, NULL));
    CHECK(cuLaunchKernel(fill, 1, 1, 1, N, 1, 1, 0, NULL, p_fill, NULL));
    CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    struct {
        CUdeviceptr p[3];
    } three = {{da, db, dc}};
    void *p_add3[] = {&three, &count};
    CHECK(cuLaunchKernel(add3, 1, 1, 1, N, 1, 1, 0, NULL, p_add3, NULL));
    CHECK(cuCtxSynchronize());
    printf("modules loaded 5 ways, 5 launches\n");
    return 0;
}
