// y[M, N] = x[M, K] @ W^T with the activations rounded to 8 bits too (the opt-in "-a8" schemes, chapter 10).
//
// quant_matmul.cpp multiplies float32 activations by the weights' codes: exact (the float32 model's
// result up to the order of the additions), but every code becomes a float first. Here each row of x
// is cut into blocks of 32 and each block rounded to signed bytes with its own step (GGUF's Q8_1, as
// llama.cpp does for its CPU dot products):
//   dx = max|x| / 127,  xq = round(x / dx) in -127..127,  xs = dx * sum(xq)   (the block's sum).
// Then a block's dot product is a sum of byte products, exact in int32, scaled once:
//   4-bit (w = d q + m):  sum_j w_j x_j ~ d dx sum_j q_j xq_j + m xs
//   8-bit (w = d q):      sum_j w_j x_j ~ d dx sum_j q_j xq_j
// AVX512-VNNI's vpdpbusd does 64 byte products a instruction (unsigned by signed, summed by fours into
// 16 int32s): two blocks of 32 at once. Without it, AVX-VNNI or AVX2's maddubs do one block at a time.
// The 4-bit path needs G = 32 (a block of x is a block of weights); 8-bit blocks any multiple of 32.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "quant_blocks.h"  // half_to_float, widen_halves; immintrin.h where the CPU has AVX

using quant_blocks::half_to_float;

namespace {

constexpr int64_t B = 32;  // activations per block
constexpr int CH = 16;     // blocks whose scales are widened at once

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__) && !defined(MINIYAIE_A8_AVX2)
#define ISA 3
#elif defined(__AVXVNNI__) && !defined(MINIYAIE_A8_AVX2)
#define ISA 2
#elif defined(__AVX2__)
#define ISA 1  // MINIYAIE_A8_AVX2 (a -D flag) picks this one on any AVX2 CPU: how the tests reach it
#else
#define ISA 0
#endif

#if ISA > 0
// One block: the 32 byte products of unsigned u and signed s summed into 8 int32 lanes.
inline __m256i dot_block(__m256i u, __m256i s) {
#if ISA == 3
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#elif ISA == 2
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));  // |products| <= 2 * 15 * 127 or 2 * 127 * 127
#endif
}

// A 4-bit block's 16 bytes as its 32 codes in order (low nibbles are codes 0-15, high 16-31).
inline __m256i q4_block(const uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), f = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), f), _mm_and_si128(b, f));
}

// An 8-bit block times a block of x: |w| by x carrying w's sign (vpdpbusd wants one side unsigned).
inline __m256i q8_dot_block(const int8_t* w, const int8_t* x) {
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  return dot_block(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
}

inline float sum8(__m256i v) {
  const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i t = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  return float(_mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1))));
}
#endif

#if ISA == 3
// Two blocks at once: 32 bytes of 4-bit codes as 64 codes in order, [low 0, high 0, low 1, high 1] by
// 128-bit lanes (lanes 1 and 3 shifted right by 4 before the mask).
inline __m512i q4_two_blocks(const uint8_t* p) {
  const __m512i b = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512i shifts = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
  return _mm512_and_si512(_mm512_srlv_epi64(_mm512_shuffle_i64x2(b, b, 0x50), shifts), _mm512_set1_epi8(15));
}

inline __m512i q8_two_blocks(const int8_t* w, const int8_t* x, __m512i acc_zero) {
  const __m512i wv = _mm512_loadu_si512(w), xv = _mm512_loadu_si512(x);
  const __mmask64 negative = _mm512_movepi8_mask(wv);
  return _mm512_dpbusd_epi32(acc_zero, _mm512_abs_epi8(wv), _mm512_mask_sub_epi8(xv, negative, _mm512_setzero_si512(), xv));
}
#endif

// R rows of x against C weight rows; y[r * N + c]. Scales are taken CH blocks at a time: per column the
// weights' d (and m), per row the activations' dx (and xs), so the inner loop only looks them up.
template <int R, int C>
void tile(const int8_t* xq, const float* dx, const float* xs, int64_t K, const void* codes, int bits,
          const uint16_t* scales, const uint16_t* mins, int64_t G, int64_t n0, float* y, int64_t N) {
#if ISA > 0
  const int64_t blocks = K / B, groups = K / G;
  float acc[R][C] = {};
#if ISA == 3
  __m512 vacc[R][C], vmin[R][C];  // the blocks' products and the minimums' term
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) vacc[r][c] = vmin[r][c] = _mm512_setzero_ps();
#endif
  alignas(64) float d[C][CH], m[C][CH], s[R][C][CH];
  for (int64_t b0 = 0; b0 < blocks; b0 += CH) {
    const int n = int(blocks - b0 < CH ? blocks - b0 : CH);
#if ISA == 3
    if (G == B) {  // one scale (and minimum) a block of x: 16 widened and multiplied at once
      const __mmask16 live = __mmask16((1u << n) - 1);
      for (int c = 0; c < C; ++c) {
        const int64_t g = (n0 + c) * groups + b0;
        const __m512 dv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(live, scales + g));
        const __m512 mv = bits == 4 ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(live, mins + g)) : _mm512_setzero_ps();
        for (int r = 0; r < R; ++r) {
          _mm512_store_ps(s[r][c], _mm512_mul_ps(dv, _mm512_maskz_loadu_ps(live, dx + r * blocks + b0)));
          if (bits == 4) vmin[r][c] = _mm512_fmadd_ps(mv, _mm512_maskz_loadu_ps(live, xs + r * blocks + b0), vmin[r][c]);
        }
      }
    } else
#endif
    {
      for (int c = 0; c < C; ++c)
        for (int i = 0; i < n; ++i) {  // a weight group holds G / 32 blocks of x
          const int64_t g = (n0 + c) * groups + (b0 + i) * B / G;
          d[c][i] = half_to_float(scales[g]);
          m[c][i] = bits == 4 ? half_to_float(mins[g]) : 0.0f;
        }
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c)
          for (int i = 0; i < n; ++i) {
            s[r][c][i] = d[c][i] * dx[r * blocks + b0 + i];
            acc[r][c] += m[c][i] * xs[r * blocks + b0 + i];
          }
    }
    int i = 0;
#if ISA == 3
    // 4-bit, four blocks at once: 64 bytes of codes, their low nibbles by the first halves of four blocks of x
    // and their high nibbles by the second halves (x rearranged so), summed into 4 int32 lanes a block.
    const __m512i quad = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    const __m512i first_halves = _mm512_set_epi64(13, 12, 9, 8, 5, 4, 1, 0), second_halves = _mm512_set_epi64(15, 14, 11, 10, 7, 6, 3, 2);
    for (; bits == 4 && i + 4 <= n; i += 4) {
      const int64_t b = b0 + i;
      const __m512i idx = _mm512_add_epi32(quad, _mm512_set1_epi32(i));  // lanes 4j .. 4j + 3: block i + j
      __m512i low[C], high[C];
      for (int c = 0; c < C; ++c) {
        const __m512i w = _mm512_loadu_si512(static_cast<const uint8_t*>(codes) + (n0 + c) * (K / 2) + b * (B / 2));
        low[c] = _mm512_and_si512(w, _mm512_set1_epi8(15));
        high[c] = _mm512_and_si512(_mm512_srli_epi16(w, 4), _mm512_set1_epi8(15));
      }
      for (int r = 0; r < R; ++r) {
        const int8_t* xr = xq + r * K + b * B;
        const __m512i a = _mm512_loadu_si512(xr), z = _mm512_loadu_si512(xr + 64);
        const __m512i xl = _mm512_permutex2var_epi64(a, first_halves, z), xh = _mm512_permutex2var_epi64(a, second_halves, z);
        for (int c = 0; c < C; ++c) {
          const __m512i dot = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), low[c], xl), high[c], xh);
          vacc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(idx, _mm512_load_ps(s[r][c])), vacc[r][c]);
        }
      }
    }
    for (; i + 2 <= n; i += 2) {  // two blocks a vpdpbusd
      const int64_t b = b0 + i;
      const __m512i pair = _mm512_add_epi32(_mm512_set1_epi32(i), _mm512_set_epi64(0x100000001, 0x100000001, 0x100000001,
                                            0x100000001, 0, 0, 0, 0));  // lanes 0-7 pick block i, 8-15 block i + 1
      __m512i w[C];
      for (int c = 0; c < C; ++c)
        if (bits == 4) w[c] = q4_two_blocks(static_cast<const uint8_t*>(codes) + (n0 + c) * (K / 2) + b * (B / 2));
      for (int r = 0; r < R; ++r) {
        const int8_t* xr = xq + r * K + b * B;
        const __m512i xv = _mm512_loadu_si512(xr);
        for (int c = 0; c < C; ++c) {
          const __m512i dot = bits == 4 ? _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[c], xv)
                                        : q8_two_blocks(static_cast<const int8_t*>(codes) + (n0 + c) * K + b * B, xr,
                                                        _mm512_setzero_si512());
          vacc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(pair, _mm512_load_ps(s[r][c])),
                                       vacc[r][c]);
        }
      }
    }
#endif
    for (; i < n; ++i) {  // one block at a time
      const int64_t b = b0 + i;
      for (int c = 0; c < C; ++c) {
        const __m256i w = bits == 4 ? q4_block(static_cast<const uint8_t*>(codes) + (n0 + c) * (K / 2) + b * (B / 2))
                                    : _mm256_setzero_si256();
        for (int r = 0; r < R; ++r) {
          const int8_t* xr = xq + r * K + b * B;
          const __m256i dot = bits == 4 ? dot_block(w, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr)))
                                        : q8_dot_block(static_cast<const int8_t*>(codes) + (n0 + c) * K + b * B, xr);
          acc[r][c] += s[r][c][i] * sum8(dot);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
#if ISA == 3
      acc[r][c] += _mm512_reduce_add_ps(_mm512_add_ps(vacc[r][c], vmin[r][c]));
#endif
      y[r * N + n0 + c] = acc[r][c];
    }
#endif
}

}  // namespace

extern "C" {

// 3: AVX512-VNNI, 2: AVX-VNNI, 1: AVX2 (maddubs), 0: none (the -a8 schemes are refused).
int quant_a8_isa() { return ISA; }

// x [M, K] float32 -> xq [M, K] int8, dx and xs [M, K / 32] float32 (see the top of the file); K % 32 == 0.
void quantize_activations_q8(const float* x, int64_t M, int64_t K, int8_t* xq, float* dx, float* xs, int threads) {
  const int64_t blocks = K / B;
#pragma omp parallel for num_threads(threads) schedule(static) if (M > 8)
  for (int64_t r = 0; r < M; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      const float* v = x + r * K + b * B;
      int8_t* q = xq + r * K + b * B;
#if ISA == 3
      const __m512 lo = _mm512_loadu_ps(v), hi = _mm512_loadu_ps(v + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
      const float d = amax / 127.0f, inverse = d > 0.0f ? 1.0f / d : 0.0f;
      const __m512i qlo = _mm512_cvtps_epi32(_mm512_mul_ps(lo, _mm512_set1_ps(inverse)));  // to nearest, ties to even
      const __m512i qhi = _mm512_cvtps_epi32(_mm512_mul_ps(hi, _mm512_set1_ps(inverse)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(qlo));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(qhi));
      const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qlo, qhi));
#else
      float amax = 0.0f;
      for (int j = 0; j < B; ++j) amax = v[j] > amax ? v[j] : (-v[j] > amax ? -v[j] : amax);
      const float d = amax / 127.0f, inverse = d > 0.0f ? 1.0f / d : 0.0f;
      int sum = 0;
      for (int j = 0; j < B; ++j) {
        q[j] = int8_t(int(__builtin_nearbyintf(v[j] * inverse)));
        sum += q[j];
      }
#endif
      dx[r * blocks + b] = d;
      xs[r * blocks + b] = d * float(sum);
    }
}

// The product of quantized activations (quantize_activations_q8) and weight blocks: 4-bit codes
// [N, K / 2] with scales and mins [N, K / 32] (G = 32), or 8-bit codes [N, K] with scales [N, K / G]
// (mins null, G a multiple of 32). Tiles of 4 columns, and of 4 rows where there are several.
void quant_matmul_a8(const int8_t* xq, const float* dx, const float* xs, int64_t M, int64_t K, const void* codes, int bits,
                     const uint16_t* scales, const uint16_t* mins, int64_t N, int64_t G, float* y, int threads) {
  const int64_t blocks = K / B;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t n = 0; n < N; n += 4) {
    const bool four = N - n >= 4;
    for (int64_t r = 0; r < M; r += 4) {
      const int8_t* x = xq + r * K;
      const float *d = dx + r * blocks, *s = xs + r * blocks;
      float* out = y + r * N;
      const int rows = M - r < 4 ? int(M - r) : 4;
      if (four && rows == 4) {
        tile<4, 4>(x, d, s, K, codes, bits, scales, mins, G, n, out, N);
      } else if (four && rows == 1) {
        tile<1, 4>(x, d, s, K, codes, bits, scales, mins, G, n, out, N);
      } else {
        for (int64_t c = n; c < (four ? n + 4 : N); ++c)
          for (int i = 0; i < rows; ++i)
            tile<1, 1>(x + i * K, d + i * blocks, s + i * blocks, K, codes, bits, scales, mins, G, c, out + i * N, N);
      }
    }
  }
}

// Both in one call: float32 x [M, K] in, y [M, N] out (buffers kept per thread).
void quant_matmul_a8_float(const float* x, int64_t M, int64_t K, const void* codes, int bits, const uint16_t* scales,
                           const uint16_t* mins, int64_t N, int64_t G, float* y, int threads) {
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> dx, xs;
  if (int64_t(xq.size()) < M * K) xq.resize(M * K);
  if (int64_t(dx.size()) < M * (K / B)) dx.resize(M * (K / B)), xs.resize(M * (K / B));
  quantize_activations_q8(x, M, K, xq.data(), dx.data(), xs.data(), threads);
  quant_matmul_a8(xq.data(), dx.data(), xs.data(), M, K, codes, bits, scales, mins, N, G, y, threads);
}

}  // extern "C"
