// Many rows of activations times weight blocks on AVX512-BF16's dot products, for the -a8 schemes on CPUs
// without AMX (quant_bf16_amx.cpp is the same idea on the tile unit).
//
// The 8-bit loop (quant_a8.cpp) pays for every block of 32 of every row and column: its int32 sums are
// converted, scaled and added before the next block. At a decode step's one row that is cheap next to
// reading the weights; at 20 rows (a busy decode step) and at a prefill chunk's hundreds it bounds the
// multiply: gate/up at 20 rows took 0.84 ms there against 0.42 ms for oneDNN's bfloat16 matmul with the
// weights already in bfloat16, at 256 rows 10.6 ms against 4.4 (2-core AMD EPYC, one thread, 2026-11-29).
// Here the scales are applied to the weights instead, once per call: each panel of 32 columns is
// dequantized (d * code + m, rounded to bfloat16) into the order vdpbf16ps reads, and every row of the call
// is then multiplied by it with float32 sums and no scale in the loop. The dequantized panel is the
// price, paid once per call whatever the rows, so the dispatcher (quant_a8_dispatch.cpp) sends only steps of many
// rows here.
//
// What it computes: x rounded to bfloat16 (8 significant bits, finer than 8-bit steps per block) and each
// dequantized weight rounded to bfloat16; sums in float32. The codes are read as GGUF stores them
// (quant_a8.cpp's layout), so no second copy of the weights is kept.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define HAS_AVX512_BF16 1
#include <immintrin.h>
#else
#define HAS_AVX512_BF16 0
#endif

namespace {

constexpr int64_t B = 32;      // codes per block
constexpr int64_t COLUMNS = 32;  // a panel: two vectors of 16 float32 sums per row
constexpr int64_t ROWS = 8;    // rows a micro-kernel call takes: 16 sums in registers, 2 weight vectors

#if HAS_AVX512_BF16
// 16 vectors of 16 32-bit words, transposed in place: word j of vector c goes to word c of vector j.
void transpose16(__m512i v[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    v[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    v[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    v[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    v[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {  // 128-bit lanes: now vector 4a + b holds rows a, a+4, a+8, a+12 of lane b's 4 x 4
    t[i] = _mm512_shuffle_i32x4(v[i], v[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(v[i], v[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_i32x4(v[i + 8], v[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(v[i + 8], v[i + 12], 0xdd);
  }
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    v[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
    v[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
    v[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
  }
}

// One column's block of 32 weights, dequantized and rounded: 32 bfloat16 in code order (word j = codes 2j, 2j+1).
__m512i dequantize_block(const void* codes, int bits, int64_t K, int64_t n, int64_t b, float d, float m) {
  __m512i low, high;  // codes 0-15 and 16-31 as int32
  if (bits == 4) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(codes) + n * (K / 2) + b * (B / 2)));
    low = _mm512_cvtepu8_epi32(_mm_and_si128(raw, _mm_set1_epi8(15)));
    high = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(15)));
  } else {
    const int8_t* p = static_cast<const int8_t*>(codes) + n * K + b * B;
    low = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    high = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
  }
  const __m512 dv = _mm512_set1_ps(d), mv = _mm512_set1_ps(m);
  return (__m512i)_mm512_cvtne2ps_pbh(_mm512_fmadd_ps(_mm512_cvtepi32_ps(high), dv, mv),
                                      _mm512_fmadd_ps(_mm512_cvtepi32_ps(low), dv, mv));
}

// Columns n0 .. n0 + 32 (zeros past N) as K / 2 rows of 64 words: row p holds codes 2p, 2p+1 of each column.
void dequantize_panel(const void* codes, int bits, const uint16_t* scales, const uint16_t* mins, int64_t K, int64_t N,
                      int64_t G, int64_t n0, uint32_t* panel) {
  const int64_t groups = K / G;
  for (int64_t half = 0; half < COLUMNS / 16; ++half)
    for (int64_t b = 0; b < K / B; ++b) {
      __m512i v[16];
      for (int c = 0; c < 16; ++c) {
        const int64_t n = n0 + half * 16 + c, g = n * groups + b * B / G;
        v[c] = n < N ? dequantize_block(codes, bits, K, n, b, _cvtsh_ss(scales[g]), bits == 4 ? _cvtsh_ss(mins[g]) : 0.0f)
                     : _mm512_setzero_si512();
      }
      transpose16(v);  // v[j]: pair j of the block, for each of the 16 columns
      for (int j = 0; j < 16; ++j) _mm512_storeu_si512(panel + (b * 16 + j) * COLUMNS + half * 16, v[j]);
    }
}

// y[r, n0 .. n0 + 32] for R rows of x (bfloat16 pairs as words, K / 2 a row) against a dequantized panel.
template <int R>
void multiply_panel(const uint32_t* x, int64_t K, const uint32_t* panel, int64_t n0, int64_t N, float* y) {
  __m512 left[R], right[R];
  for (int r = 0; r < R; ++r) left[r] = right[r] = _mm512_setzero_ps();
  for (int64_t p = 0; p < K / 2; ++p) {
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(panel + p * COLUMNS), w1 = (__m512bh)_mm512_loadu_si512(panel + p * COLUMNS + 16);
    for (int r = 0; r < R; ++r) {
      const __m512bh pair = (__m512bh)_mm512_set1_epi32(int(x[r * (K / 2) + p]));
      left[r] = _mm512_dpbf16_ps(left[r], pair, w0);
      right[r] = _mm512_dpbf16_ps(right[r], pair, w1);
    }
  }
  const int64_t live = std::min<int64_t>(COLUMNS, N - n0);
  const __mmask16 first = __mmask16((1u << std::min<int64_t>(16, live)) - 1);
  const __mmask16 second = live > 16 ? __mmask16((1u << (live - 16)) - 1) : 0;
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(y + r * N + n0, first, left[r]);
    _mm512_mask_storeu_ps(y + r * N + n0 + 16, second, right[r]);
  }
}

template <int R>
void rows_of(const uint32_t* x, int64_t rows, int64_t K, const uint32_t* panel, int64_t n0, int64_t N, float* y) {
  if (rows == R) return multiply_panel<R>(x, K, panel, n0, N, y);
  if constexpr (R > 1) rows_of<R - 1>(x, rows, K, panel, n0, N, y);
}
#endif

}  // namespace

extern "C" {

int quant_bf16_avx512_ready() { return HAS_AVX512_BF16; }

// y [M, N] = x [M, K] times weight blocks as quant_matmul_a8 reads them (4-bit codes [N, K / 2] with scales and
// mins [N, K / 32]; 8-bit codes [N, K] with scales [N, K / G]), both rounded to bfloat16, summed in float32.
// Call only where quant_bf16_avx512_ready().
void quant_matmul_bf16_avx512(const float* x, int64_t M, int64_t K, const void* codes, int bits, const uint16_t* scales,
                              const uint16_t* mins, int64_t N, int64_t G, float* y, int threads) {
#if HAS_AVX512_BF16
  thread_local std::vector<uint32_t> xb;  // x as bfloat16 pairs
  if (int64_t(xb.size()) < M * K / 2) xb.resize(M * K / 2);
  uint32_t* pairs = xb.data();  // xb is this thread's: the team reads it through this pointer
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < M; ++r)
    for (int64_t k = 0; k < K; k += 32)
      _mm512_storeu_si512(pairs + (r * K + k) / 2,
                          (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + r * K + k + 16), _mm512_loadu_ps(x + r * K + k)));
  const int64_t panels = (N + COLUMNS - 1) / COLUMNS;
#pragma omp parallel num_threads(threads)
  {
    std::vector<uint32_t> panel(K / 2 * COLUMNS);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < panels; ++i) {
      dequantize_panel(codes, bits, scales, mins, K, N, G, i * COLUMNS, panel.data());
      for (int64_t r = 0; r < M; r += ROWS)
        rows_of<ROWS>(pairs + r * K / 2, std::min<int64_t>(ROWS, M - r), K, panel.data(), i * COLUMNS, N, y + r * N);
    }
  }
#endif
}

}  // extern "C"
