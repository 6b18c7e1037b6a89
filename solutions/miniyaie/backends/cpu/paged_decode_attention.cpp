// Decode attention that reads K and V where they lie in the paged cache (CPU; float32 arithmetic over a
// float32 or bfloat16 cache, the pool's element type T).
//
// One query token per sequence. For every KV head, the `group` query heads that share it are
// scored against the sequence's keys in one pass over its blocks, then the softmax weights sum
// its values in a second pass. Nothing is gathered or copied: a key's row is found through the
// block table, and each K or V row is read once and used for all `group` heads. A work unit is
// a group of sequences that begin with the same blocks (a prefix they share in the cache; the
// caller makes the groups), walked block by block: a shared block is read from memory by the
// group's first sequence and found in the core's cache by the others. With all its KV heads in
// one unit, each block of 16 slots is one contiguous stretch of the pool, read front to back;
// when there are too few groups to keep every thread busy, a unit is one (group, KV head) pair.
// Units run in parallel on OpenMP threads (torch's own runtime, which the library shares).
//
// Layouts (all contiguous):
//   q, out        [num_rows, num_heads, head_dim]   the step's packed queries / outputs
//   k_cache, v    [num_slots, num_kv_heads, head_dim]; slot = block * block_size + offset
//   block_tables  [num_seqs, table_width]            int64
//   rows          [num_seqs]  the row of q (and out) holding each sequence's query
//   seq_lens      [num_seqs]  keys to attend, the query's own included
//   group_starts  [num_groups + 1]  sequences group_starts[i] .. group_starts[i+1]-1 make group i
//
// The common shapes (head_dim 64 or 128, up to 8 query heads per KV head) are compiled with
// both sizes known, so running sums stay in vector registers: four keys against up to three
// heads at once in the first pass, a head's rows times a slice of its width in the second.
// `vec` is one register of the machine (cpu_vector.h: 16 floats with AVX-512, 8 with AVX2).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu_vector.h"
#include "paged_decode_bf16.h"
#include "paged_decode_units.h"

namespace {

using cpu_vector::load;
using cpu_vector::sum_lanes;
using cpu_vector::vec;
using cpu_vector::W;

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
// ANCHOR: score_four
template <int D, int NG, typename T>
inline void score_four(const float* query, const T* key, int64_t stride, float* out, int64_t len, float scale) {
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
// ANCHOR_END: score_four

// Both passes walk the blocks in order and, within a block, the unit's heads: with all heads in
// one unit, each block's K (then V) is one contiguous stretch of memory read front to back.
template <int D, int G, typename T>
void attend(const Unit<T>& u) {
  constexpr int C = D / W;
  const int64_t heads = u.h1 - u.h0;
  // Pass 2 holds G x CB sums in registers (the head's G rows times CB of its C vectors) and a
  // key's G weights, and walks the block's values once per CB columns, each vector loaded once.
  constexpr int CB = cpu_vector::fit_rows(G, C);
  // A bfloat16 cache is read 2W elements at a time where the vectors pair up (paged_decode_bf16.h).
  constexpr bool SPLIT = std::is_same_v<T, bf16> && C % 2 == 0 && CB % 2 == 0;
  // Heads per score_four call: each holds 4 sums and 1 query vector (2 split) in registers, beside 1 key vector (2).
  constexpr int GB = SPLIT ? std::min(G, (cpu_vector::REGISTERS - 2) / 6) : std::min(G, (cpu_vector::REGISTERS - 1) / 5);
  thread_local std::vector<float> split;  // SPLIT: the unit's queries, split_row's order
  if constexpr (SPLIT) {
    split.resize(u.num_seqs * heads * G * D);
    for (int64_t i = 0; i < u.num_seqs; ++i)
      for (int64_t r = 0; r < heads * G; ++r) split_row<D>(u.seqs[i].query + (u.h0 * G + r) * D, split.data() + (i * heads * G + r) * D);
  }
  for_each_block(u, u.k_cache, [&](const Seq& seq, int64_t start, int64_t n, const T* block) {  // scores = scale * q . k
    for (int64_t h = u.h0; h < u.h1; ++h) {
      const float* query = seq.query + h * G * D;
      float* s = seq.scores + (h - u.h0) * G * seq.len + start;
      const T* keys = block + h * D;
      int64_t i = 0;
      if constexpr (SPLIT) {
        const float* halves = split.data() + ((&seq - u.seqs) * heads + h - u.h0) * G * D;
        for (; i + 4 <= n; i += 4) {
          int g = 0;
          for (; g + GB <= G; g += GB) score_four_split<D, GB>(halves + g * D, keys + i * u.slot_stride, u.slot_stride, s + g * seq.len + i, seq.len, u.scale);
          if constexpr (G % GB != 0) score_four_split<D, G % GB>(halves + g * D, keys + i * u.slot_stride, u.slot_stride, s + g * seq.len + i, seq.len, u.scale);
        }
      }
      for (; i + 4 <= n; i += 4) {
        int g = 0;
        for (; g + GB <= G; g += GB) score_four<D, GB>(query + g * D, keys + i * u.slot_stride, u.slot_stride, s + g * seq.len + i, seq.len, u.scale);
        if constexpr (G % GB != 0) score_four<D, G % GB>(query + g * D, keys + i * u.slot_stride, u.slot_stride, s + g * seq.len + i, seq.len, u.scale);
      }
      for (; i < n; ++i)  // the block's last keys (fewer than 4), one at a time
        for (int g = 0; g < G; ++g) {
          vec acc = load(query + g * D) * load(keys + i * u.slot_stride);
          for (int c = 1; c < C; ++c) acc += load(query + g * D + c * W) * load(keys + i * u.slot_stride + c * W);
          s[g * seq.len + i] = sum_lanes(acc) * u.scale;
        }
    }
  });
  for (int64_t i = 0; i < u.num_seqs; ++i) {
    const Seq& seq = u.seqs[i];
    softmax_unnormalised(seq.scores, seq.len, heads * G, seq.total);
    std::memset(seq.sums, 0, sizeof(float) * heads * G * D);
  }
  for_each_block(u, u.v_cache, [&](const Seq& seq, int64_t start, int64_t n, const T* block) {  // sums += weight * v
    for (int64_t h = u.h0; h < u.h1; ++h) {
      const float* w = seq.scores + (h - u.h0) * G * seq.len + start;
      for (int c0 = 0; c0 < C; c0 += CB) {
        float* sum = seq.sums + (h - u.h0) * G * D + c0 * W;
        vec acc[G][CB];
        for (int g = 0; g < G; ++g)
          for (int c = 0; c < CB; ++c) acc[g][c] = load(sum + g * D + c * W);
        const T* value = block + h * D + c0 * W;
        for (int64_t i = 0; i < n; ++i, value += u.slot_stride) {
          vec weight[G];
          for (int g = 0; g < G; ++g) weight[g] = vec{} + w[g * seq.len + i];
          if constexpr (SPLIT) {  // the sums split as the queries are: vectors c, c + 1 of 2W elements
            for (int c = 0; c < CB; c += 2) {
              vec even, odd;
              split_halves(value + c * W, even, odd);
              cpu_vector::keep_in_register(even), cpu_vector::keep_in_register(odd);
              for (int g = 0; g < G; ++g) acc[g][c] += weight[g] * even, acc[g][c + 1] += weight[g] * odd;
            }
          } else {
            for (int c = 0; c < CB; ++c) {
              vec v = load(value + c * W);
              cpu_vector::keep_in_register(v);
              for (int g = 0; g < G; ++g) acc[g][c] += weight[g] * v;
            }
          }
        }
        for (int g = 0; g < G; ++g)
          for (int c = 0; c < CB; ++c) cpu_vector::store(sum + g * D + c * W, acc[g][c]);
      }
    }
  });
  for (int64_t i = 0; i < u.num_seqs; ++i) {
    const Seq& seq = u.seqs[i];
    for (int64_t r = 0; r < heads * G; ++r)
      if constexpr (SPLIT) {
        join_row<D>(seq.sums + r * D, seq.total[r], seq.out + (u.h0 * G + r) * D);
      } else {
        for (int c = 0; c < C; ++c)
          cpu_vector::store(seq.out + (u.h0 * G + r) * D + c * W, load(seq.sums + r * D + c * W) / seq.total[r]);
      }
  }
}

// Any other shape: the same two passes with the sizes only known at run time.
template <typename T>
void attend_any(const Unit<T>& u) {
  using cpu_vector::to_float;
  const int64_t G = u.group, D = u.head_dim, heads = u.h1 - u.h0;
  for_each_block(u, u.k_cache, [&](const Seq& seq, int64_t start, int64_t n, const T* block) {
    for (int64_t h = u.h0; h < u.h1; ++h)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t g = 0; g < G; ++g) {
          float dot = 0.f;
          for (int64_t d = 0; d < D; ++d) dot += seq.query[(h * G + g) * D + d] * to_float(block[i * u.slot_stride + h * D + d]);
          seq.scores[((h - u.h0) * G + g) * seq.len + start + i] = dot * u.scale;
        }
  });
  for (int64_t i = 0; i < u.num_seqs; ++i) {
    softmax_unnormalised(u.seqs[i].scores, u.seqs[i].len, heads * G, u.seqs[i].total);
    std::fill(u.seqs[i].sums, u.seqs[i].sums + heads * G * D, 0.f);
  }
  for_each_block(u, u.v_cache, [&](const Seq& seq, int64_t start, int64_t n, const T* block) {
    for (int64_t h = u.h0; h < u.h1; ++h)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t g = 0; g < G; ++g)
          for (int64_t d = 0; d < D; ++d)
            seq.sums[((h - u.h0) * G + g) * D + d] += seq.scores[((h - u.h0) * G + g) * seq.len + start + i] * to_float(block[i * u.slot_stride + h * D + d]);
  });
  for (int64_t i = 0; i < u.num_seqs; ++i) {
    const Seq& seq = u.seqs[i];
    for (int64_t r = 0; r < heads * G; ++r)
      for (int64_t d = 0; d < D; ++d) seq.out[(u.h0 * G + r) * D + d] = seq.sums[r * D + d] / seq.total[r];
  }
}

template <int D, typename T>
bool attend_fixed_dim(const Unit<T>& u) {
  switch (u.group) {
    case 1: attend<D, 1>(u); return true;
    case 2: attend<D, 2>(u); return true;
    case 3: attend<D, 3>(u); return true;
    case 4: attend<D, 4>(u); return true;
    case 5: attend<D, 5>(u); return true;
    case 6: attend<D, 6>(u); return true;
    case 7: attend<D, 7>(u); return true;
    case 8: attend<D, 8>(u); return true;
  }
  return false;
}

template <typename T>
void decode_all(
    const float* q, const T* k_cache, const T* v_cache, const int64_t* block_tables,
    int64_t table_width, const int64_t* rows, const int64_t* seq_lens, int64_t num_seqs,
    const int64_t* group_starts, int64_t num_groups, int64_t num_heads, int64_t num_kv_heads,
    int64_t head_dim, int64_t block_size, float scale, float* out, int num_threads) {
  const int64_t group = num_heads / num_kv_heads;
  // A unit per group of sequences when there are enough to share out; with few, a unit per
  // (group, KV head), so that every thread has work.
  const int64_t heads_per_unit = num_groups >= 2 * num_threads ? num_kv_heads : 1;
  const int64_t units_per_group = (num_kv_heads + heads_per_unit - 1) / heads_per_unit;
#pragma omp parallel num_threads(num_threads)
  {
    std::vector<float> scores, sums, total;  // per thread
    std::vector<Seq> seqs;
#pragma omp for schedule(dynamic, 1)
    for (int64_t unit = 0; unit < num_groups * units_per_group; ++unit) {
      const int64_t first = group_starts[unit / units_per_group], last = group_starts[unit / units_per_group + 1];
      const int64_t h0 = unit % units_per_group * heads_per_unit, h1 = std::min(num_kv_heads, h0 + heads_per_unit);
      const int64_t rows_per_seq = (h1 - h0) * group;
      int64_t keys = 0;
      for (int64_t s = first; s < last; ++s) keys += seq_lens[s];
      scores.resize(rows_per_seq * keys), sums.resize((last - first) * rows_per_seq * head_dim), total.resize((last - first) * rows_per_seq);
      seqs.clear();
      for (int64_t s = first, at = 0; s < last; at += rows_per_seq * seq_lens[s], ++s) {
        const int64_t row = rows[s] * num_heads * head_dim, i = s - first;
        seqs.push_back(Seq{q + row, out + row, block_tables + s * table_width, seq_lens[s], scores.data() + at,
                           sums.data() + i * rows_per_seq * head_dim, total.data() + i * rows_per_seq});
      }
      const Unit<T> u{k_cache, v_cache, seqs.data(), last - first, block_size, num_kv_heads * head_dim, head_dim, group, h0, h1, scale};
      const bool done = head_dim == 64 ? attend_fixed_dim<64>(u) : head_dim == 128 ? attend_fixed_dim<128>(u) : false;
      if (!done) attend_any(u);
    }
  }
}

}  // namespace

// The pool's element type: 0 float32, 1 bfloat16 (a K/V cache kept narrower; see kernels.py).
extern "C" void paged_decode_attention(
    const float* q, const void* k_cache, const void* v_cache, const int64_t* block_tables,
    int64_t table_width, const int64_t* rows, const int64_t* seq_lens, int64_t num_seqs,
    const int64_t* group_starts, int64_t num_groups, int64_t num_heads, int64_t num_kv_heads,
    int64_t head_dim, int64_t block_size, float scale, float* out, int num_threads, int cache_type) {
  using cpu_vector::bf16;
  const auto run = [&](auto* k, auto* v) { decode_all(q, k, v, block_tables, table_width, rows, seq_lens, num_seqs, group_starts,
                                                      num_groups, num_heads, num_kv_heads, head_dim, block_size, scale, out, num_threads); };
  cache_type == 1 ? run(static_cast<const bf16*>(k_cache), static_cast<const bf16*>(v_cache))
                  : run(static_cast<const float*>(k_cache), static_cast<const float*>(v_cache));
}
