// Writes a 1-D float32 array as a .npy file (format version 1.0), so that a
// test can compare what a program computed with what a snapshot recorded.
#ifndef SAMPLES_NPY_H
#define SAMPLES_NPY_H

#include <cstdio>
#include <cstring>
#include <string>

inline bool write_npy_f32(const std::string& path, const float* data, size_t count)
{
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                         std::to_string(count) + ",), }";
    // The magic (6), version (2) and length (2) plus the header, padded with
    // spaces and ended by a newline, must fill a multiple of 64 bytes.
    size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header.push_back('\n');
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f)
        return false;
    const unsigned char preamble[] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                      (unsigned char)(header.size() & 0xff),
                                      (unsigned char)(header.size() >> 8)};
    bool ok = std::fwrite(preamble, 1, sizeof preamble, f) == sizeof preamble &&
              std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
              std::fwrite(data, sizeof(float), count, f) == count;
    return std::fclose(f) == 0 && ok;
}

#endif
