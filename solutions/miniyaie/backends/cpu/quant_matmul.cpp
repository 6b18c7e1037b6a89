// y[M, N] = x[M, K] @ W^T with W kept in its quantized blocks, dequantized in registers (chapter 10).
//
// A block ("group") of G weights of one output row shares a float16 scale d and, for 4-bit codes, a minimum m:
//   4-bit: w = d * q + m, q in 0..15, two codes a byte: byte j of a group holds code j in its low
//          nibble and code j + G/2 in its high one (GGUF's Q4_1 order, so a Q4_1 file's bytes are used as
//          they are); a symmetric format is the same with m = -8 d.
//   8-bit: w = d * q, q a signed byte (GGUF's Q8_0 with G = 32; one group per row for int8 per channel).
// The sum of a group is taken over the codes and the scale applied once to it, in float32:
//   sum_k w_k x_k = sum_groups (d * sum_j q_j x_j + m * sum_j x_j),
// which is the float32 product with the dequantized weights up to the order of the additions. A decode
// step reads each weight once, so the bytes it reads (4.5 to 5 bits a weight, not 32) decide its time.
//
// Rows of x go through in tiles of ROWS, so that one decode of a group serves every row of the tile.
// With AVX-512 one row of 4-bit blocks takes another road: each block's 16 possible weights are
// computed once into a register and every code is looked up in it (q4_columns_one_row_lookup).
// Reading a block (float16s, codes as floats, a row decoded whole) is quant_blocks.h's job.
#include <cstdint>
#include <vector>

#include "cpu_vector.h"
#include "quant_blocks.h"  // includes immintrin.h where the CPU has AVX

using cpu_vector::W;
using cpu_vector::vec;
using cpu_vector::ivec;
using namespace quant_blocks;

namespace {

constexpr int ROWS = 4;

// One output column n for R rows of x (R known when compiled: the accumulators stay in registers).
template <int R>
void q4_column(const float* x, int64_t K, const uint8_t* row, const uint16_t* scales, const uint16_t* mins,
               const float* xsum, int64_t groups, int64_t G, int64_t N, float* y) {
  const int64_t half = G / 2;
  vec acc[R] = {};
  float from_mins[R] = {};
  for (int64_t g = 0; g < groups; ++g) {
    vec sum[R] = {};
    for (int64_t j = 0; j < half; j += W) {
      const vec low = nibbles(row + g * half + j, false), high = nibbles(row + g * half + j, true);
      for (int r = 0; r < R; ++r) {
        const float* xr = x + r * K + g * G;
        sum[r] += low * cpu_vector::load(xr + j) + high * cpu_vector::load(xr + half + j);
      }
    }
    const float d = half_to_float(scales[g]), m = half_to_float(mins[g]);
    for (int r = 0; r < R; ++r) {
      acc[r] += d * sum[r];
      from_mins[r] += m * xsum[r * groups + g];
    }
  }
  for (int r = 0; r < R; ++r) y[r * N] = cpu_vector::sum_lanes(acc[r]) + from_mins[r];
}

// One row of x against C output columns at once: a decode step's shape. C independent accumulators keep
// the multiply-adds from waiting on each other (one column alone is a chain of dependent adds).
template <int C>
void q4_columns_one_row(const float* x, int64_t K, const uint8_t* rows, const uint16_t* scales, const uint16_t* mins,
                        const float* xsum, int64_t groups, int64_t G, float* y) {
  const int64_t half = G / 2;
  vec acc[C] = {};
  float from_mins[C] = {};
  for (int64_t g = 0; g < groups; ++g) {
    vec sum[C] = {};
    for (int64_t j = 0; j < half; j += W) {
      const vec xl = cpu_vector::load(x + g * G + j), xh = cpu_vector::load(x + g * G + half + j);
      for (int c = 0; c < C; ++c) {
        const uint8_t* b = rows + c * (K / 2) + g * half + j;
        sum[c] += nibbles(b, false) * xl + nibbles(b, true) * xh;
      }
    }
    for (int c = 0; c < C; ++c) {
      acc[c] += half_to_float(scales[c * groups + g]) * sum[c];
      from_mins[c] += half_to_float(mins[c * groups + g]) * xsum[g];
    }
  }
  for (int c = 0; c < C; ++c) y[c] = cpu_vector::sum_lanes(acc[c]) + from_mins[c];
}

#if defined(__AVX512F__) && !defined(MINIYAIE_VECTOR_FLOATS)
// With AVX-512 a block's 16 possible weights d * q + m fit one register: a lookup by each lane's low
// four bits (vpermps) turns codes into weights in one instruction, where converting each code to a
// float and scaling the sum took four, and the minimums' term disappears. The kernel is bound by its
// instructions, not by the bytes it reads: one core went from 3.5-4 to about 9 GB/s of blocks.
template <int C>
void q4_columns_one_row_lookup(const float* x, int64_t K, const uint8_t* rows, const uint16_t* scales,
                               const uint16_t* mins, int64_t groups, int64_t G, float* y) {
  const int64_t half = G / 2;
  const __m512 codes_0_to_15 = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512 low_acc[C], high_acc[C];
  for (int c = 0; c < C; ++c) low_acc[c] = high_acc[c] = _mm512_setzero_ps();
  float d[C][CHUNK], m[C][CHUNK];
  for (int64_t g0 = 0; g0 < groups; g0 += CHUNK) {
    const int64_t chunk = groups - g0 < CHUNK ? groups - g0 : CHUNK;
    for (int c = 0; c < C; ++c) {
      widen_halves(scales + c * groups + g0, chunk, d[c]);
      widen_halves(mins + c * groups + g0, chunk, m[c]);
    }
    for (int64_t i = 0; i < chunk; ++i) {
      const int64_t g = g0 + i;
      __m512 weights[C];
      for (int c = 0; c < C; ++c)
        weights[c] = _mm512_fmadd_ps(codes_0_to_15, _mm512_set1_ps(d[c][i]), _mm512_set1_ps(m[c][i]));
      for (int64_t j = 0; j < half; j += 16) {
        const __m512 xl = _mm512_loadu_ps(x + g * G + j), xh = _mm512_loadu_ps(x + g * G + half + j);
        for (int c = 0; c < C; ++c) {
          const __m512i b = _mm512_cvtepu8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows + c * (K / 2) + g * half + j)));
          low_acc[c] = _mm512_fmadd_ps(_mm512_permutexvar_ps(b, weights[c]), xl, low_acc[c]);
          high_acc[c] = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), weights[c]), xh, high_acc[c]);
        }
      }
    }
  }
  for (int c = 0; c < C; ++c) y[c] = _mm512_reduce_add_ps(_mm512_add_ps(low_acc[c], high_acc[c]));
}
#endif

template <int C>
void q8_columns_one_row(const float* x, int64_t K, const int8_t* rows, const uint16_t* scales, int64_t groups, int64_t G,
                        float* y) {
  vec acc[C] = {};
  float d[C][CHUNK];
  for (int64_t g0 = 0; g0 < groups; g0 += CHUNK) {
    const int64_t chunk = groups - g0 < CHUNK ? groups - g0 : CHUNK;
    for (int c = 0; c < C; ++c) widen_halves(scales + c * groups + g0, chunk, d[c]);
    for (int64_t i = 0; i < chunk; ++i) {
      const int64_t g = g0 + i;
      vec sum[C] = {};
      for (int64_t j = 0; j < G; j += W) {
        const vec xv = cpu_vector::load(x + g * G + j);
        for (int c = 0; c < C; ++c) sum[c] += signed_bytes(rows + c * K + g * G + j) * xv;
      }
      for (int c = 0; c < C; ++c) acc[c] += d[c][i] * sum[c];
    }
  }
  for (int c = 0; c < C; ++c) y[c] = cpu_vector::sum_lanes(acc[c]);
}

template <int R>
void q8_column(const float* x, int64_t K, const int8_t* row, const uint16_t* scales, int64_t groups, int64_t G,
               int64_t N, float* y) {
  vec acc[R] = {};
  for (int64_t g = 0; g < groups; ++g) {
    vec sum[R] = {};
    for (int64_t j = 0; j < G; j += W) {
      const vec q = signed_bytes(row + g * G + j);
      for (int r = 0; r < R; ++r) sum[r] += q * cpu_vector::load(x + r * K + g * G + j);
    }
    const float d = half_to_float(scales[g]);
    for (int r = 0; r < R; ++r) acc[r] += d * sum[r];
  }
  for (int r = 0; r < R; ++r) y[r * N] = cpu_vector::sum_lanes(acc[r]);
}


// y[r, c] for R rows of x and C decoded weight rows: R * C accumulators in registers, so each load of x
// or of the weights feeds several multiply-adds (the loop is bound by the FMA units, not by loads).
template <int R, int C>
void rows_times_decoded(const float* x, int64_t K, const float* w, float* y, int64_t N) {
  vec acc[R][C] = {};
  for (int64_t k = 0; k < K; k += W) {
    vec wv[C];
    for (int c = 0; c < C; ++c) wv[c] = cpu_vector::load(w + c * K + k);
    for (int r = 0; r < R; ++r) {
      const vec xv = cpu_vector::load(x + r * K + k);
      for (int c = 0; c < C; ++c) acc[r][c] += xv * wv[c];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[r * N + c] = cpu_vector::sum_lanes(acc[r][c]);
}

}  // namespace

extern "C" {

// 4-bit codes [N, K / 2] bytes, scales and mins [N, K / G] float16s; G a multiple of 2 W.
void quant_matmul_q4(const float* x, int64_t M, int64_t K, const uint8_t* codes, const uint16_t* scales,
                     const uint16_t* mins, int64_t N, int64_t G, float* y, int threads) {
  const int64_t groups = K / G;
#if defined(__AVX512F__) && !defined(MINIYAIE_VECTOR_FLOATS)
  if (M == 1 && N % 4 == 0) {  // the lookup holds the minimums: no sums of x needed
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t n = 0; n < N; n += 4)
      q4_columns_one_row_lookup<4>(x, K, codes + n * (K / 2), scales + n * groups, mins + n * groups, groups, G, y + n);
    return;
  }
#endif
  const std::vector<float> xsum = group_sums(x, M, K, G);
  if (M == 1 && N % 4 == 0) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t n = 0; n < N; n += 4)
      q4_columns_one_row<4>(x, K, codes + n * (K / 2), scales + n * groups, mins + n * groups, xsum.data(), groups, G, y + n);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const uint8_t* row = codes + n * (K / 2);
    const uint16_t *d = scales + n * groups, *m = mins + n * groups;
    for (int64_t r0 = 0; r0 < M; r0 += ROWS) {
      const float* xr = x + r0 * K;
      const float* s = xsum.data() + r0 * groups;
      switch (M - r0 < ROWS ? M - r0 : ROWS) {
        case 1: q4_column<1>(xr, K, row, d, m, s, groups, G, N, y + r0 * N + n); break;
        case 2: q4_column<2>(xr, K, row, d, m, s, groups, G, N, y + r0 * N + n); break;
        case 3: q4_column<3>(xr, K, row, d, m, s, groups, G, N, y + r0 * N + n); break;
        default: q4_column<4>(xr, K, row, d, m, s, groups, G, N, y + r0 * N + n);
      }
    }
  }
}

// 8-bit codes [N, K] signed bytes, scales [N, K / G] float16s; G a multiple of W.
void quant_matmul_q8(const float* x, int64_t M, int64_t K, const int8_t* codes, const uint16_t* scales, int64_t N,
                     int64_t G, float* y, int threads) {
  const int64_t groups = K / G;
  if (M == 1 && N % 4 == 0) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t n = 0; n < N; n += 4) q8_columns_one_row<4>(x, K, codes + n * K, scales + n * groups, groups, G, y + n);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int8_t* row = codes + n * K;
    const uint16_t* d = scales + n * groups;
    for (int64_t r0 = 0; r0 < M; r0 += ROWS) {
      const float* xr = x + r0 * K;
      switch (M - r0 < ROWS ? M - r0 : ROWS) {
        case 1: q8_column<1>(xr, K, row, d, groups, G, N, y + r0 * N + n); break;
        case 2: q8_column<2>(xr, K, row, d, groups, G, N, y + r0 * N + n); break;
        case 3: q8_column<3>(xr, K, row, d, groups, G, N, y + r0 * N + n); break;
        default: q8_column<4>(xr, K, row, d, groups, G, N, y + r0 * N + n);
      }
    }
  }
}

// Many rows (a prefill chunk, a batch of decodes): each weight row is decoded once into float32, in
// groups of COLS rows kept in a per-thread buffer, and multiplied by every row of x from registers.
// The weights are read once per step as blocks; the float32 copy never leaves the cache.
void quant_matmul_rows(const float* x, int64_t M, int64_t K, const void* codes, int bits, const uint16_t* scales,
                       const uint16_t* mins, int64_t N, int64_t G, float* y, int threads) {
  constexpr int COLS = 4, TILE = 4;
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> decoded(COLS * K);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n += COLS) {
      const int cols = N - n < COLS ? int(N - n) : COLS;
      for (int c = 0; c < cols; ++c) decode_row(codes, bits, scales, mins, n + c, K, G, decoded.data() + c * K);
      for (int64_t r = 0; r < M; r += TILE) {
        const int rows = M - r < TILE ? int(M - r) : TILE;
        const float *xr = x + r * K, *w = decoded.data();
        float* yr = y + r * N + n;
        if (cols == COLS) {
          switch (rows) {
            case 1: rows_times_decoded<1, COLS>(xr, K, w, yr, N); break;
            case 2: rows_times_decoded<2, COLS>(xr, K, w, yr, N); break;
            case 3: rows_times_decoded<3, COLS>(xr, K, w, yr, N); break;
            default: rows_times_decoded<TILE, COLS>(xr, K, w, yr, N);
          }
        } else {
          for (int c = 0; c < cols; ++c)
            for (int i = 0; i < rows; ++i) rows_times_decoded<1, 1>(xr + i * K, K, w + c * K, yr + i * N + c, N);
        }
      }
    }
  }
}

// The float32 weights [N, K] of 4-bit or 8-bit blocks (mins null for 8-bit): for steps with many rows,
// where a float32 matmul library beats decoding every group once per tile of rows.
void dequantize_blocks(const void* codes, int bits, const uint16_t* scales, const uint16_t* mins, int64_t N, int64_t K,
                       int64_t G, float* w, int threads) {
  const int64_t groups = K / G, half = G / 2;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < groups; ++g) {
      const float d = half_to_float(scales[n * groups + g]);
      float* out = w + n * K + g * G;
      if (bits == 4) {
        const uint8_t* b = static_cast<const uint8_t*>(codes) + n * (K / 2) + g * half;
        const float m = half_to_float(mins[n * groups + g]);
        for (int64_t j = 0; j < half; ++j) {
          out[j] = d * float(b[j] & 15) + m;
          out[half + j] = d * float(b[j] >> 4) + m;
        }
      } else {
        const int8_t* q = static_cast<const int8_t*>(codes) + n * K + g * G;
        for (int64_t j = 0; j < G; ++j) out[j] = d * float(q[j]);
      }
    }
}

}  // extern "C"
