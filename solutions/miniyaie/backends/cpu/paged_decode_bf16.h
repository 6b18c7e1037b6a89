// A bfloat16 K/V cache read 2W elements at a time (paged_decode_attention.cpp's attend, T = bf16).
//
// Widening a bfloat16 is a shift (cpu_vector.h), but widening W of them then costs a narrow load, a widening
// move and a shift, and a decode step's first pass over a bfloat16 cache ran no faster from the core's cache
// than over float32 from memory. Read as W 32-bit words instead, 2W bfloat16s give two vectors of floats with
// one operation each: word << 16 holds the even elements, word & 0xffff0000 the odd ones. So each query row
// is split the same way once (per 2W: its even elements, then its odd ones), dot products sum even with even
// and odd with odd, and the value pass keeps its sums split, put back in order as the unit writes its output.
#pragma once

#include <cstdint>
#include <cstring>

#include "cpu_vector.h"

namespace {

using cpu_vector::bf16;
using cpu_vector::load;
using cpu_vector::vec;
using cpu_vector::W;

// 2W bfloat16s at p -> their even and odd elements as floats.
inline void split_halves(const bf16* p, vec& even, vec& odd) {
  cpu_vector::words w;
  std::memcpy(&w, p, sizeof w);
  even = (vec)(w << 16);
  odd = (vec)(w & 0xffff0000u);
}

// A row of D floats, per 2W: its even elements, then its odd ones.
template <int D>
inline void split_row(const float* row, float* out) {
  for (int c = 0; c < D; c += 2 * W)
    for (int i = 0; i < W; ++i) out[c + i] = row[c + 2 * i], out[c + W + i] = row[c + 2 * i + 1];
}

// The inverse of split_row, each element divided by `total` on the way.
template <int D>
inline void join_row(const float* split, float total, float* out) {
  for (int c = 0; c < D; c += 2 * W)
    for (int i = 0; i < W; ++i) out[c + 2 * i] = split[c + i] / total, out[c + 2 * i + 1] = split[c + W + i] / total;
}

// score_four over a bfloat16 cache, the NG queries split by split_row: out[g * len + j] = scale * q_g . k_j.
template <int D, int NG>
inline void score_four_split(const float* query, const bf16* key, int64_t stride, float* out, int64_t len, float scale) {
  vec acc[NG][4] = {};
  for (int c = 0; c < D; c += 2 * W) {
    vec even[NG], odd[NG];
    for (int g = 0; g < NG; ++g) {
      even[g] = load(query + g * D + c), odd[g] = load(query + g * D + c + W);
      cpu_vector::keep_in_register(even[g]), cpu_vector::keep_in_register(odd[g]);
    }
    for (int j = 0; j < 4; ++j) {
      vec ke, ko;
      split_halves(key + j * stride + c, ke, ko);
      cpu_vector::keep_in_register(ke), cpu_vector::keep_in_register(ko);
      for (int g = 0; g < NG; ++g) acc[g][j] += even[g] * ke + odd[g] * ko;
    }
  }
  for (int g = 0; g < NG; ++g) {
    const vec sums = cpu_vector::sum_four(acc[g][0], acc[g][1], acc[g][2], acc[g][3]) * scale;
    std::memcpy(out + g * len, &sums, 4 * sizeof(float));
  }
}

}  // namespace
