/*
 * The controller's native loop for `cudump diff` (libcudumpdiff.so, loaded
 * by cudump/analysis/native_diff.py; it is not part of the shim and is never preloaded).
 *
 * One pass over a chunk of two 8-bit images: |a - b| per element, and from it
 * everything cudump.analysis.diff's small-integer path computes in numpy with about ten
 * passes: how many elements differ by more than `limit`, per channel, the
 * pixels with any channel differing, the sums of |a - b| and of its squares
 * (exact), and the largest |a - b| with its first index. cudump/analysis/diff/chunks.py keeps
 * the numpy path for everything else, and the tests check one against the
 * other.
 *
 * Channels are 1, 2 or 4 (so a 16-byte block holds whole pixels: lane j is
 * channel j % channels) and the chunk starts at a pixel. Signed bytes are
 * compared with their sign bit flipped, which keeps |a - b|.
 */
#include <stddef.h>
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

struct absdiff_totals {
    uint64_t differing;          /* elements with |a - b| > limit */
    uint64_t per_channel[4];
    uint64_t pixels;             /* pixels with a channel that differs (channels > 1) */
    uint64_t sum_abs;
    uint64_t sum_sq;
    uint64_t max_abs;
    uint64_t max_at;             /* first index of max_abs; set only if max_abs > `above` */
};

static inline unsigned absdiff(uint8_t x, uint8_t y)
{
    return x > y ? (unsigned)(x - y) : (unsigned)(y - x);
}

/* Element by element: the tail of a chunk, and machines without SSE2. */
static void scalar(const uint8_t *a, const uint8_t *b, uint64_t from, uint64_t n,
                   unsigned channels, uint8_t flip, unsigned limit, struct absdiff_totals *t)
{
    for (uint64_t p = from; p < n; p += channels) {
        unsigned any = 0;
        for (unsigned ch = 0; ch < channels; ch++) { /* n is whole pixels */
            unsigned d = absdiff(a[p + ch] ^ flip, b[p + ch] ^ flip);
            unsigned differs = d > limit;
            t->sum_abs += d;
            t->sum_sq += d * d;
            t->max_abs = d > t->max_abs ? d : t->max_abs;
            t->per_channel[ch] += differs;
            any |= differs;
        }
        t->pixels += any;
    }
}

#ifdef __SSE2__
#include <emmintrin.h>

/* Blocks between flushes of the 8-bit lane counters (they hold up to 255). */
enum { FLUSH = 255 };

static uint64_t vector(const uint8_t *a, const uint8_t *b, uint64_t blocks, unsigned channels,
                       uint8_t flip, unsigned limit, struct absdiff_totals *t)
{
    const __m128i zero = _mm_setzero_si128(), ones = _mm_set1_epi8(-1);
    const __m128i vflip = _mm_set1_epi8((char)flip), vlimit = _mm_set1_epi8((char)limit);
    __m128i sad = zero, vmax = zero;
    uint64_t same_lanes[16] = {0}, pixels_same = 0;
    for (uint64_t done = 0; done < blocks;) {
        uint64_t run = blocks - done < FLUSH ? blocks - done : FLUSH;
        /* per run: lanes counting elements (8 bits) and pixels (16 or 32 bits) that are
         * the same, and sums of squares (32 bits) */
        __m128i same8 = zero, same_pixels = zero, sq32 = zero;
        for (uint64_t k = 0; k < run; k++, done++) {
            __m128i x = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(a + 16 * done)), vflip);
            __m128i y = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(b + 16 * done)), vflip);
            __m128i d = _mm_sub_epi8(_mm_max_epu8(x, y), _mm_min_epu8(x, y));
            sad = _mm_add_epi64(sad, _mm_sad_epu8(d, zero));
            vmax = _mm_max_epu8(vmax, d);
            __m128i lo = _mm_unpacklo_epi8(d, zero), hi = _mm_unpackhi_epi8(d, zero);
            /* each 32-bit lane gains at most 4 * 255^2 a block: FLUSH blocks fit */
            sq32 = _mm_add_epi32(sq32, _mm_add_epi32(_mm_madd_epi16(lo, lo),
                                                     _mm_madd_epi16(hi, hi)));
            /* d <= limit exactly where d - limit saturates to 0 */
            __m128i same = _mm_cmpeq_epi8(_mm_subs_epu8(d, vlimit), zero);
            same8 = _mm_sub_epi8(same8, same);
            __m128i differs = _mm_andnot_si128(same, ones);
            if (channels == 4)
                same_pixels = _mm_sub_epi32(same_pixels, _mm_cmpeq_epi32(differs, zero));
            else if (channels == 2)
                same_pixels = _mm_sub_epi16(same_pixels, _mm_cmpeq_epi16(differs, zero));
        }
        if (channels == 4) {
            uint32_t lanes32[4];
            _mm_storeu_si128((__m128i *)lanes32, same_pixels);
            for (int j = 0; j < 4; j++)
                pixels_same += lanes32[j];
        } else if (channels == 2) {
            uint16_t lanes16[8];
            _mm_storeu_si128((__m128i *)lanes16, same_pixels);
            for (int j = 0; j < 8; j++)
                pixels_same += lanes16[j];
        }
        uint8_t lanes[16];
        _mm_storeu_si128((__m128i *)lanes, same8);
        for (int j = 0; j < 16; j++)
            same_lanes[j] += lanes[j];
        uint32_t squares[4];
        _mm_storeu_si128((__m128i *)squares, sq32);
        for (int j = 0; j < 4; j++)
            t->sum_sq += squares[j];
    }
    uint64_t sums[2];
    _mm_storeu_si128((__m128i *)sums, sad);
    t->sum_abs += sums[0] + sums[1];
    uint8_t maxes[16];
    _mm_storeu_si128((__m128i *)maxes, vmax);
    for (int j = 0; j < 16; j++)
        t->max_abs = maxes[j] > t->max_abs ? maxes[j] : t->max_abs;
    for (int j = 0; j < 16; j++)
        t->per_channel[j % channels] += blocks - same_lanes[j];
    if (channels > 1)
        t->pixels += blocks * (16 / channels) - pixels_same;
    return blocks * 16;
}
#endif

/* Fills *t for n elements; the index of the largest |a - b| is looked for
 * only if it exceeds `above` (the largest of the chunks before). Returns 0,
 * or -1 for data it does not take (cudump/analysis/diff/chunks.py then uses numpy). */
EXPORT int cudump_absdiff_u8(const uint8_t *a, const uint8_t *b, uint64_t n, unsigned channels,
                             int is_signed, unsigned limit, uint64_t above,
                             struct absdiff_totals *t)
{
    if (!(channels == 1 || channels == 2 || channels == 4) || n % channels)
        return -1;
    *t = (struct absdiff_totals){0};
    uint8_t flip = is_signed ? 0x80 : 0;
    limit = limit > 255 ? 255 : limit;
    uint64_t from = 0;
#ifdef __SSE2__
    from = vector(a, b, n / 16, channels, flip, limit, t);
#endif
    scalar(a, b, from, n, channels, flip, limit, t);
    for (unsigned ch = 0; ch < channels; ch++)
        t->differing += t->per_channel[ch];
    if (channels == 1)
        t->pixels = 0;
    if (t->max_abs > above) {
        for (uint64_t i = 0; i < n; i++) {
            if (absdiff(a[i] ^ flip, b[i] ^ flip) == t->max_abs) {
                t->max_at = i;
                break;
            }
        }
    }
    return 0;
}
