// Rows of 8-bit activations times weight blocks on AVX512-VNNI, for the -a8 schemes: every step on CPUs without
// AMX, the one-row steps on CPUs with it.
//
// The 8-bit loop (quant_a8.cpp) lays a block of one column along a vector: 32 codes times 32 bytes of x,
// summed into lanes that must then be added across, converted and scaled for each row, column and
// block. At a decode step's one row that is cheap next to reading the weights; at 20 rows and more it
// bounds the multiply. Here the vector runs across columns instead: lane c holds 4 codes of column c, so
// one vpdpbusd multiplies 16 columns by the same 4 bytes of x (a broadcast) and its 16 int32 sums are
// already the 16 columns' sums; a block of 32 codes is 8 of them, then one conversion and one scaling
// for 16 columns. That is the order AMX's tiles read too, so the weights are laid out once, at load, by
// quant_a8_lay_out_tiles (quant_a8_amx.cpp: 512 bytes per 16 columns and block, two 4-bit blocks in the
// low and high nibbles, 16 halves of scales and of minimums a block); laying them out on every call was
// as long as the multiply itself at a decode step of 20 rows (2-core AMD EPYC, 2026-11-29).
//
// What it computes is what the 8-bit loop computes (quant_a8.cpp's formulas, the same int32 sums per block),
// up to the order of the float additions. 4-bit codes are unsigned, so they go on vpdpbusd's unsigned side
// and x on its signed side. 8-bit codes are signed, so x goes on the unsigned side as xq + 128 (its sign bit
// flipped), and 128 times the block's codes' sum (one more vpdpbusd per vector, shared by all rows) comes off.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512F__)
#define HAS_VNNI_PANELS 1
#include <immintrin.h>
#else
#define HAS_VNNI_PANELS 0
#endif

extern "C" {
void quantize_activations_q8(const float* x, int64_t M, int64_t K, int8_t* xq, float* dx, float* xs,
                             int threads);  // quant_a8.cpp
int64_t quant_a8_tile_bytes(int64_t N, int64_t K, int bits);  // quant_a8_amx.cpp: the layout's size
}

namespace {

constexpr int64_t B = 32;    // codes per block
constexpr int64_t ROWS = 8;  // rows a micro-kernel call takes

#if HAS_VNNI_PANELS
inline __m512i word(const int8_t* p) {  // 4 bytes of x in every lane
  int32_t w;
  std::memcpy(&w, p, 4);
  return _mm512_set1_epi32(w);
}

// Where a row's 16 sums of one block go: d * dx times the int32 sums, plus m * xs for 4-bit blocks.
template <int R>
inline void scale_block(const __m512i acc[R], const float* dx, const float* xs, int64_t blocks, int64_t b,
                        const uint16_t* d, const uint16_t* m, __m512 out[R]) {
  const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + b * 16)));
  const __m512 mv = m ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + b * 16))) : _mm512_setzero_ps();
  for (int r = 0; r < R; ++r) {
    out[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r]), _mm512_mul_ps(dv, _mm512_set1_ps(dx[r * blocks + b])), out[r]);
    if (m) out[r] = _mm512_fmadd_ps(mv, _mm512_set1_ps(xs[r * blocks + b]), out[r]);
  }
}

// y[r, 16 t .. 16 t + 16] for R rows of x (xq, or xq + 128 for 8-bit codes) against column tile t: `tile` its
// codes, d and m its scales and minimums (m null for 8-bit codes).
template <int R>
void multiply_tile(const int8_t* x, const float* dx, const float* xs, int64_t K, int bits, const uint8_t* tile,
                   const uint16_t* d, const uint16_t* m, int64_t n0, int64_t N, float* y) {
  const int64_t blocks = K / B;
  const __m512i nibble = _mm512_set1_epi8(15), bias = _mm512_set1_epi8(char(0x80));
  __m512 out[R];
  for (int r = 0; r < R; ++r) out[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; b += bits == 4 ? 2 : 1) {
    const uint8_t* unit = tile + (bits == 4 ? b / 2 : b) * 512;  // 8 vectors: codes 4i .. 4i + 3 of 16 columns
    __m512i acc[R], next[R];  // 4-bit: block b in the low nibbles, b + 1 in the high ones
    for (int r = 0; r < R; ++r) acc[r] = next[r] = _mm512_setzero_si512();
    if (bits == 4) {
      const bool pair = b + 1 < blocks;
      for (int i = 0; i < 8; ++i) {
        const __m512i v = _mm512_loadu_si512(unit + 64 * i);
        const __m512i low = _mm512_and_si512(v, nibble), high = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
        for (int r = 0; r < R; ++r) {
          acc[r] = _mm512_dpbusd_epi32(acc[r], low, word(x + r * K + b * B + 4 * i));
          if (pair) next[r] = _mm512_dpbusd_epi32(next[r], high, word(x + r * K + (b + 1) * B + 4 * i));
        }
      }
      scale_block<R>(acc, dx, xs, blocks, b, d, m, out);
      if (pair) scale_block<R>(next, dx, xs, blocks, b + 1, d, m, out);
    } else {
      __m512i sums = _mm512_setzero_si512();  // 128 * the codes' sum, per column
      for (int i = 0; i < 8; ++i) {
        const __m512i v = _mm512_loadu_si512(unit + 64 * i);
        sums = _mm512_dpbusd_epi32(sums, bias, v);
        for (int r = 0; r < R; ++r) acc[r] = _mm512_dpbusd_epi32(acc[r], word(x + r * K + b * B + 4 * i), v);
      }
      for (int r = 0; r < R; ++r) acc[r] = _mm512_sub_epi32(acc[r], sums);
      scale_block<R>(acc, dx, xs, blocks, b, d, nullptr, out);
    }
  }
  const __mmask16 live = __mmask16((1u << std::min<int64_t>(16, N - n0)) - 1);
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(y + r * N + n0, live, out[r]);
}

template <int R>
void rows_of(const int8_t* x, const float* dx, const float* xs, int64_t rows, int64_t K, int bits, const uint8_t* tile,
             const uint16_t* d, const uint16_t* m, int64_t n0, int64_t N, float* y) {
  if (rows == R) return multiply_tile<R>(x, dx, xs, K, bits, tile, d, m, n0, N, y);
  if constexpr (R > 1) rows_of<R - 1>(x, dx, xs, rows, K, bits, tile, d, m, n0, N, y);
}
#endif

}  // namespace

extern "C" {

int quant_a8_panels_ready() { return HAS_VNNI_PANELS; }

// y [M, N] = x [M, K] rounded to 8 bits per block of 32 (quantize_activations_q8) times weights laid out by
// quant_a8_lay_out_tiles (tiles, d and m; m null for 8-bit codes). Call only where quant_a8_panels_ready().
void quant_matmul_a8_panels(const float* x, int64_t M, int64_t K, const uint8_t* tiles, int bits, const uint16_t* d,
                            const uint16_t* m, int64_t N, float* y, int threads) {
#if HAS_VNNI_PANELS
  thread_local std::vector<int8_t> xq_buffer;
  thread_local std::vector<float> dx_buffer, xs_buffer;
  const int64_t blocks = K / B, per_tile = quant_a8_tile_bytes(16, K, bits);  // one tile of 16 columns
  if (int64_t(xq_buffer.size()) < M * K) xq_buffer.resize(M * K);
  if (int64_t(dx_buffer.size()) < M * blocks) dx_buffer.resize(M * blocks), xs_buffer.resize(M * blocks);
  int8_t* xq = xq_buffer.data();  // this thread's buffers: the team reads them through these pointers
  float *dx = dx_buffer.data(), *xs = xs_buffer.data();
  quantize_activations_q8(x, M, K, xq, dx, xs, threads);
  if (bits == 8)
    for (int64_t i = 0; i < M * K; ++i) xq[i] = int8_t(uint8_t(xq[i]) ^ 0x80);  // xq + 128, read as unsigned
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < (N + 15) / 16; ++t)
    for (int64_t r = 0; r < M; r += ROWS)
      rows_of<ROWS>(xq + r * K, dx + r * blocks, xs + r * blocks, std::min<int64_t>(ROWS, M - r), K, bits,
                    tiles + t * per_tile, d + t * blocks * 16, bits == 4 ? m + t * blocks * 16 : nullptr, t * 16, N,
                    y + r * N);
#endif
}

}  // extern "C"
