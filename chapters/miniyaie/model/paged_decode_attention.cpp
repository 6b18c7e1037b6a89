// Decode attention that reads K and V where they lie in the paged cache (CPU, float32).
//
// One query token per sequence. For every KV head, the `group` query heads that share it are
// scored against the sequence's keys in one pass over its blocks, then the softmax weights sum
// its values in a second pass. Nothing is gathered or copied: a key's row is found through the
// block table, and each K or V row is read once and used for all `group` heads. A work unit is
// a whole sequence (all its KV heads, so that each block of 16 slots is one contiguous stretch
// of the pool, read front to back) or, when there are too few sequences to keep every thread
// busy, one (sequence, KV head) pair. Units run in parallel on OpenMP threads (torch's own
// runtime, which the library shares).
//
// Layouts (all contiguous):
//   q, out        [num_rows, num_heads, head_dim]   the step's packed queries / outputs
//   k_cache, v    [num_slots, num_kv_heads, head_dim]; slot = block * block_size + offset
//   block_tables  [num_seqs, table_width]            int64
//   rows          [num_seqs]  the row of q (and out) holding each sequence's query
//   seq_lens      [num_seqs]  keys to attend, the query's own included
//
// The common shapes (head_dim 64 or 128, up to 8 query heads per KV head) are compiled with
// both sizes known, so running sums stay in vector registers: four keys against up to three
// heads at once in the first pass, a head's rows times a slice of its width in the second.
// `vec` is one register of the machine (cpu_vector.h: 16 floats with AVX-512, 8 with AVX2).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu_vector.h"

namespace {

using cpu_vector::load;
using cpu_vector::sum_lanes;
using cpu_vector::vec;
using cpu_vector::W;

// One work unit: a sequence's KV heads [h0, h1), each with the `group` query heads that share it.
struct Unit {
  const float* query;      // the row's first query head
  const float* k_cache;    // the pool: key t of head h is at (slot(t) * num_kv_heads + h) * head_dim
  const float* v_cache;
  const int64_t* table;    // the sequence's block table
  int64_t len, block_size, slot_stride, head_dim, group, h0, h1;
  float scale;
  float* out;              // the row's first output head
};

// Asks the memory for block b's rows of heads [h0, h1) (all heads: the block's whole stretch of
// the pool): a sequence's blocks lie anywhere in the pool, where no prefetcher can guess them.
inline void prefetch_block(const Unit& u, const float* pool, int64_t b, int64_t start) {
  const int64_t n = std::min(u.block_size, u.len - start), bytes = (u.h1 - u.h0) * u.head_dim * sizeof(float);
  const char* row = reinterpret_cast<const char*>(pool + (u.table[b] * u.block_size * u.slot_stride + u.h0 * u.head_dim));
  for (int64_t i = 0; i < n; ++i, row += u.slot_stride * sizeof(float))
    for (int64_t byte = 0; byte < bytes; byte += 64) __builtin_prefetch(row + byte);
}

// Calls visit(start, n, rows) for each block of the sequence, in order: keys start .. start+n-1,
// `rows` pointing at the block's first slot in `pool` (k or v). Fetches the next block meanwhile.
template <typename Visit>
inline void for_each_block(const Unit& u, const float* pool, Visit visit) {
  for (int64_t start = 0, b = 0; start < u.len; start += u.block_size, ++b) {
    if (start + u.block_size < u.len) prefetch_block(u, pool, b + 1, start + u.block_size);
    visit(start, std::min(u.block_size, u.len - start), pool + u.table[b] * u.block_size * u.slot_stride);
  }
}

// exp(s - max) of each of `rows` score rows, in place; fills total[r] with their sums.
void softmax_unnormalised(float* scores, int64_t len, int64_t rows, float* total) {
  for (int64_t r = 0; r < rows; ++r) {
    float* s = scores + r * len;
    vec most = {};
    most += s[0];
    int64_t t = 0;
    for (; t + W <= len; t += W) {  // in vectors: `omp simd reduction(max)` compiled to a scalar chain
      const vec x = load(s + t);
      most = x > most ? x : most;
    }
    float top = most[0], sum = 0.f;
    for (int i = 1; i < W; ++i) top = std::max(top, most[i]);
    for (; t < len; ++t) top = std::max(top, s[t]);
#pragma omp simd reduction(+ : sum)
    for (int64_t t = 0; t < len; ++t) {
      s[t] = std::exp(s[t] - top);
      sum += s[t];
    }
    total[r] = sum;
  }
}

// Scores four keys (rows `stride` floats apart) against NG query heads: out[g * len + j] =
// scale * q_g . k_j. The 4 x NG running products stay in registers, and each vector of a key or
// a query is loaded once and used NG or 4 times: loads, not multiply-adds, are what bounded the
// one-key-at-a-time loop on AVX2.
template <int D, int NG>
inline void score_four(const float* query, const float* key, int64_t stride, float* out, int64_t len, float scale) {
  constexpr int C = D / W;
  vec acc[NG][4] = {};
  for (int c = 0; c < C; ++c) {
    vec q[NG];
    for (int g = 0; g < NG; ++g) {
      q[g] = load(query + g * D + c * W);
      cpu_vector::keep_in_register(q[g]);
    }
    for (int j = 0; j < 4; ++j) {
      vec k = load(key + j * stride + c * W);
      cpu_vector::keep_in_register(k);
      for (int g = 0; g < NG; ++g) acc[g][j] += q[g] * k;
    }
  }
  for (int g = 0; g < NG; ++g) {
    const vec sums = cpu_vector::sum_four(acc[g][0], acc[g][1], acc[g][2], acc[g][3]) * scale;
    std::memcpy(out + g * len, &sums, 4 * sizeof(float));
  }
}

// Both passes walk the blocks in order and, within a block, the unit's heads: with all heads in
// one unit, each block's K (then V) is one contiguous stretch of memory read front to back.
// scores: [(h1 - h0) * G][len]; sums: [(h1 - h0) * G][D].
template <int D, int G>
void attend(const Unit& u, float* scores, float* sums, float* total) {
  constexpr int C = D / W;
  const int64_t heads = u.h1 - u.h0;
  // Heads per score_four call: each holds 4 sums and 1 query vector in registers, beside 1 key vector.
  constexpr int GB = std::min(G, (cpu_vector::REGISTERS - 1) / 5);
  for_each_block(u, u.k_cache, [&](int64_t start, int64_t n, const float* block) {  // scores = scale * q . k
    for (int64_t h = u.h0; h < u.h1; ++h) {
      const float* query = u.query + h * G * D;
      float* s = scores + (h - u.h0) * G * u.len + start;
      const float* keys = block + h * D;
      int64_t i = 0;
      for (; i + 4 <= n; i += 4) {
        int g = 0;
        for (; g + GB <= G; g += GB) score_four<D, GB>(query + g * D, keys + i * u.slot_stride, u.slot_stride, s + g * u.len + i, u.len, u.scale);
        if constexpr (G % GB != 0) score_four<D, G % GB>(query + g * D, keys + i * u.slot_stride, u.slot_stride, s + g * u.len + i, u.len, u.scale);
      }
      for (; i < n; ++i)  // the block's last keys (fewer than 4), one at a time
        for (int g = 0; g < G; ++g) {
          vec acc = load(query + g * D) * load(keys + i * u.slot_stride);
          for (int c = 1; c < C; ++c) acc += load(query + g * D + c * W) * load(keys + i * u.slot_stride + c * W);
          s[g * u.len + i] = sum_lanes(acc) * u.scale;
        }
    }
  });
  softmax_unnormalised(scores, u.len, heads * G, total);
  std::memset(sums, 0, sizeof(float) * heads * G * D);
  // Pass 2 holds G x CB sums in registers (the head's G rows times CB of its C vectors) and a
  // key's G weights, and walks the block's values once per CB columns, each vector loaded once.
  constexpr int CB = cpu_vector::fit_rows(G, C);
  for_each_block(u, u.v_cache, [&](int64_t start, int64_t n, const float* block) {  // sums += weight * v
    for (int64_t h = u.h0; h < u.h1; ++h) {
      const float* w = scores + (h - u.h0) * G * u.len + start;
      for (int c0 = 0; c0 < C; c0 += CB) {
        float* sum = sums + (h - u.h0) * G * D + c0 * W;
        vec acc[G][CB];
        for (int g = 0; g < G; ++g)
          for (int c = 0; c < CB; ++c) acc[g][c] = load(sum + g * D + c * W);
        const float* value = block + h * D + c0 * W;
        for (int64_t i = 0; i < n; ++i, value += u.slot_stride) {
          vec weight[G];
          for (int g = 0; g < G; ++g) weight[g] = vec{} + w[g * u.len + i];
          for (int c = 0; c < CB; ++c) {
            vec v = load(value + c * W);
            cpu_vector::keep_in_register(v);
            for (int g = 0; g < G; ++g) acc[g][c] += weight[g] * v;
          }
        }
        for (int g = 0; g < G; ++g)
          for (int c = 0; c < CB; ++c) cpu_vector::store(sum + g * D + c * W, acc[g][c]);
      }
    }
  });
  for (int64_t r = 0; r < heads * G; ++r)
    for (int c = 0; c < C; ++c) {
      cpu_vector::store(u.out + (u.h0 * G + r) * D + c * W, load(sums + r * D + c * W) / total[r]);
    }
}

// Any other shape: the same two passes with the sizes only known at run time.
void attend_any(const Unit& u, float* scores, float* sums, float* total) {
  const int64_t G = u.group, D = u.head_dim, heads = u.h1 - u.h0;
  for_each_block(u, u.k_cache, [&](int64_t start, int64_t n, const float* block) {
    for (int64_t h = u.h0; h < u.h1; ++h)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t g = 0; g < G; ++g) {
          float dot = 0.f;
          for (int64_t d = 0; d < D; ++d) dot += u.query[(h * G + g) * D + d] * block[i * u.slot_stride + h * D + d];
          scores[((h - u.h0) * G + g) * u.len + start + i] = dot * u.scale;
        }
  });
  softmax_unnormalised(scores, u.len, heads * G, total);
  std::fill(sums, sums + heads * G * D, 0.f);
  for_each_block(u, u.v_cache, [&](int64_t start, int64_t n, const float* block) {
    for (int64_t h = u.h0; h < u.h1; ++h)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t g = 0; g < G; ++g)
          for (int64_t d = 0; d < D; ++d)
            sums[((h - u.h0) * G + g) * D + d] += scores[((h - u.h0) * G + g) * u.len + start + i] * block[i * u.slot_stride + h * D + d];
  });
  for (int64_t r = 0; r < heads * G; ++r)
    for (int64_t d = 0; d < D; ++d) u.out[(u.h0 * G + r) * D + d] = sums[r * D + d] / total[r];
}

template <int D>
bool attend_fixed_dim(const Unit& u, float* scores, float* sums, float* total) {
  switch (u.group) {
    case 1: attend<D, 1>(u, scores, sums, total); return true;
    case 2: attend<D, 2>(u, scores, sums, total); return true;
    case 3: attend<D, 3>(u, scores, sums, total); return true;
    case 4: attend<D, 4>(u, scores, sums, total); return true;
    case 5: attend<D, 5>(u, scores, sums, total); return true;
    case 6: attend<D, 6>(u, scores, sums, total); return true;
    case 7: attend<D, 7>(u, scores, sums, total); return true;
    case 8: attend<D, 8>(u, scores, sums, total); return true;
  }
  return false;
}

}  // namespace

extern "C" void paged_decode_attention(
    const float* q, const float* k_cache, const float* v_cache, const int64_t* block_tables,
    int64_t table_width, const int64_t* rows, const int64_t* seq_lens, int64_t num_seqs,
    int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, int64_t block_size, float scale,
    float* out, int num_threads) {
  const int64_t group = num_heads / num_kv_heads;
  // A unit per sequence when there are enough to share out; with few, a unit per (sequence, KV
  // head), so that every thread has work.
  const int64_t heads_per_unit = num_seqs >= 2 * num_threads ? num_kv_heads : 1;
  const int64_t units_per_seq = (num_kv_heads + heads_per_unit - 1) / heads_per_unit;
#pragma omp parallel num_threads(num_threads)
  {
    std::vector<float> scores, sums(heads_per_unit * group * head_dim), total(heads_per_unit * group);  // per thread
#pragma omp for schedule(dynamic, 1)
    for (int64_t unit = 0; unit < num_seqs * units_per_seq; ++unit) {
      const int64_t seq = unit / units_per_seq, h0 = unit % units_per_seq * heads_per_unit;
      const int64_t row = rows[seq] * num_heads * head_dim;
      const Unit u{q + row, k_cache, v_cache, block_tables + seq * table_width, seq_lens[seq], block_size,
                   num_kv_heads * head_dim, head_dim, group, h0, std::min(num_kv_heads, h0 + heads_per_unit),
                   scale, out + row};
      scores.resize(heads_per_unit * group * u.len);
      const bool done = head_dim == 64    ? attend_fixed_dim<64>(u, scores.data(), sums.data(), total.data())
                        : head_dim == 128 ? attend_fixed_dim<128>(u, scores.data(), sums.data(), total.data())
                                          : false;
      if (!done) attend_any(u, scores.data(), sums.data(), total.data());
    }
  }
}
