// What the kernels over weight blocks (quant_matmul.cpp) read a block with: its float16 scale and
// minimum as floats, and its 4- or 8-bit codes as a vector of floats.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX2__) || defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include "cpu_vector.h"

namespace quant_blocks {

using cpu_vector::W;
using cpu_vector::vec;

// A float16 (a block's scale or minimum, as GGUF stores them) as a float.
inline float half_to_float(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  const uint32_t sign = uint32_t(h & 0x8000) << 16, exponent = (h >> 10) & 31, mantissa = h & 1023;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float f = float(mantissa) * (1.0f / 16777216.0f);
    return sign ? -f : f;
  }
  const uint32_t bits = sign | (exponent == 31 ? 0x7f800000u | (mantissa << 13) : ((exponent + 112) << 23) | (mantissa << 13));
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

// W codes from W bytes (W = 8 or 16), as floats: 4-bit codes from the low or the high nibbles, 8-bit
// from signed bytes. With AVX-512 or AVX2 one widening instruction does what the vector extensions
// left to a loop over the lanes.
inline vec nibbles(const uint8_t* p, bool high) {
#if defined(__AVX512F__) && !defined(MINIYAIE_VECTOR_FLOATS)
  __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (high) b = _mm_srli_epi16(b, 4);
  b = _mm_and_si128(b, _mm_set1_epi8(15));
  return vec(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b)));
#elif defined(__AVX2__) && !defined(MINIYAIE_VECTOR_FLOATS)
  __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  if (high) b = _mm_srli_epi16(b, 4);
  b = _mm_and_si128(b, _mm_set1_epi8(15));
  return vec(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)));
#else
  vec v;
  for (int i = 0; i < W; ++i) v[i] = float(high ? p[i] >> 4 : p[i] & 15);
  return v;
#endif
}

inline vec signed_bytes(const int8_t* p) {
#if defined(__AVX512F__) && !defined(MINIYAIE_VECTOR_FLOATS)
  return vec(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))));
#elif defined(__AVX2__) && !defined(MINIYAIE_VECTOR_FLOATS)
  return vec(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))));
#else
  vec v;
  for (int i = 0; i < W; ++i) v[i] = float(p[i]);
  return v;
#endif
}

// The sum of x over each group of each row: [M, K / G], for the minimums' term.
inline std::vector<float> group_sums(const float* x, int64_t M, int64_t K, int64_t G) {
  std::vector<float> sums(M * (K / G));
  for (int64_t r = 0; r < M; ++r)
    for (int64_t g = 0; g < K / G; ++g) {
      vec s = {};
      for (int64_t j = 0; j < G; j += W) s += cpu_vector::load(x + r * K + g * G + j);
      sums[r * (K / G) + g] = cpu_vector::sum_lanes(s);
    }
  return sums;
}

// Float16s (blocks' scales or minimums) as floats, n at a time: 16 an instruction where the CPU has
// AVX-512 (the one-row kernels below widen a chunk of groups first instead of one float16 per block).
constexpr int64_t CHUNK = 64;  // groups widened at once, per column
inline void widen_halves(const uint16_t* h, int64_t n, float* out) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i))));
#endif
  for (; i < n; ++i) out[i] = half_to_float(h[i]);
}

// Row n of the weights as K float32s: decoded once per step and then used for every row of x, so the
// decoding is paid once however many rows the step has.
inline void decode_row(const void* codes, int bits, const uint16_t* scales, const uint16_t* mins, int64_t n, int64_t K,
                int64_t G, float* out) {
  const int64_t groups = K / G, half = G / 2;
  for (int64_t g = 0; g < groups; ++g) {
    const vec d = half_to_float(scales[n * groups + g]) + vec{};
    float* o = out + g * G;
    if (bits == 4) {
      const uint8_t* b = static_cast<const uint8_t*>(codes) + n * (K / 2) + g * half;
      const vec m = half_to_float(mins[n * groups + g]) + vec{};
      for (int64_t j = 0; j < half; j += W) {
        cpu_vector::store(o + j, d * nibbles(b + j, false) + m);
        cpu_vector::store(o + half + j, d * nibbles(b + j, true) + m);
      }
    } else {
      const int8_t* q = static_cast<const int8_t*>(codes) + n * K + g * G;
      for (int64_t j = 0; j < G; j += W) cpu_vector::store(o + j, d * signed_bytes(q + j));
    }
  }
}

}  // namespace quant_blocks
