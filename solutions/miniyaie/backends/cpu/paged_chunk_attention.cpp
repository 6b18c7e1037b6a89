// Attention of prefill and extend chunks over the paged cache, in place (CPU, float32 arithmetic over a
// float32 or bfloat16 cache: the copy into the scratch tiles widens bfloat16).
//
// A chunk is `query_len` new tokens of one sequence whose K/V (cached prefix and the chunk
// itself) are already in the cache: query i sits at position p = seq_len - query_len + i and
// sees keys 0..p. For every (sequence, KV head) pair the keys are first copied once out of the
// block table into a scratch tile layout: K transposed in tiles of T keys ([tile][dim][T], T the
// floats of one vector register, cpu_vector.h), so that the T scores of a query against a tile
// are one vector per dimension step, and V row by row. Then the pair's query rows (its `group`
// heads folded in, as in the batched torch backend) are scored against the tiles, take a
// softmax over their whole score rows and sum the values, each row only up to its own
// position: a causal chunk does half the work of SDPA with a mask, which computes every key.
//
// Layouts (all contiguous): q, out [num_rows, num_heads, head_dim]; k_cache, v_cache
// [num_slots, num_kv_heads, head_dim] with slot = block * block_size + offset; block_tables
// [num_seqs, table_width] int64; first_rows, query_lens, seq_lens [num_seqs] int64.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu_vector.h"

namespace {

using cpu_vector::load;
using cpu_vector::max_lane;
using cpu_vector::store;
using cpu_vector::vec;

constexpr int T = cpu_vector::W;  // keys per tile: one vector of scores (16 with AVX-512, 8 with AVX2)
constexpr int R = 4;   // query rows scored together (each tile of K is loaded once for them)
constexpr int B = 32;  // query rows of one work item (R-row groups sharing the K and V spans in cache)
constexpr int NT = cpu_vector::fit(R, 4);  // tiles scored together: R x NT accumulators in registers

template <typename E>  // the pool's element type: float, or bfloat16 (widened to float here)
struct Pair {
  const E* k_head;  // k_cache + kv_head * head_dim: add slot * slot_stride for a key
  const E* v_head;
  const int64_t* table;
  int64_t len, block_size, slot_stride;
};

// One step of a T x T transpose: the off-diagonal blocks of size H of rows i and i + H swap.
// After the steps H = T/2, ..., 2, 1, row d holds what column d held.
template <int H>
inline void swap_blocks(vec* rows) {
  using cpu_vector::ivec;
  constexpr ivec lanes = cpu_vector::LANES;  // of a; T + l is b's lane l
  constexpr ivec first = (lanes & H) ? lanes + (T - H) : lanes;  // a[l], or b[l - H] where l & H is set
  constexpr ivec second = (lanes & H) ? lanes + T : lanes + H;   // a[l + H], or b[l]
  for (int i = 0; i < T; ++i)
    if (!(i & H)) {
      const vec a = rows[i], b = rows[i + H];
      rows[i] = __builtin_shuffle(a, b, first);
      rows[i + H] = __builtin_shuffle(a, b, second);
    }
}

// Kt[tile][d][j] = K[tile * T + j][d] (zero past len), T keys by T dimensions at a time through
// registers; Vp[t][d] = V[t][d].
template <typename E>
void pack(const Pair<E>& p, int64_t head_dim, float* kt, float* vp) {
  const vec zero = {};
  for (int64_t start = 0; start < p.len; start += T) {
    const E* k[T];
    for (int j = 0; j < T; ++j) {
      const int64_t t = start + j;
      if (t >= p.len) {
        k[j] = nullptr;
        continue;
      }
      const int64_t slot = p.table[t / p.block_size] * p.block_size + t % p.block_size;
      k[j] = p.k_head + slot * p.slot_stride;
      for (int64_t d = 0; d < head_dim; d += T) store(vp + t * head_dim + d, load(p.v_head + slot * p.slot_stride + d));
    }
    float* tile = kt + start * head_dim;
    for (int64_t d = 0; d < head_dim; d += T) {
      vec rows[T];
      for (int j = 0; j < T; ++j) rows[j] = k[j] ? load(k[j] + d) : zero;
      if constexpr (T > 8) swap_blocks<8>(rows);
      if constexpr (T > 4) swap_blocks<4>(rows);
      swap_blocks<2>(rows);
      swap_blocks<1>(rows);
      for (int i = 0; i < T; ++i) store(tile + (d + i) * T, rows[i]);
    }
  }
}

// sums[r][c0*T .. (c0+CC)*T) = sum over keys t < until of weights[r][t] * V[t], for R rows: R x CC
// accumulators in registers, each V vector loaded once for R rows.
template <int D, int CC>
inline void sum_values(const float* const* weights, const float* vp, int c0, int64_t until, float* sums) {
  vec acc[R][CC] = {};
  for (int64_t t = 0; t < until; ++t) {
    vec v[CC];
    for (int c = 0; c < CC; ++c) {
      v[c] = load(vp + t * D + (c0 + c) * T);
      cpu_vector::keep_in_register(v[c]);  // loaded once, not once per row (cpu_vector.h)
    }
    for (int r = 0; r < R; ++r) {
      const float w = weights[r][t];
      for (int c = 0; c < CC; ++c) acc[r][c] += w * v[c];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < CC; ++c) store(sums + r * D + (c0 + c) * T, acc[r][c]);
}

// Scores of R rows against N tiles of K (N * T keys): R x N accumulators, so each K
// vector is loaded once for R rows and each query value once for N tiles.
template <int D, int N>
inline void score_block(const float* const* q, const float* tile, float scale, float* out, int64_t stride) {
  vec acc[R][N] = {};
  for (int d = 0; d < D; ++d) {
    vec k[N];
    for (int n = 0; n < N; ++n) {
      k[n] = load(tile + n * D * T + d * T);
      cpu_vector::keep_in_register(k[n]);  // loaded once, not once per row (cpu_vector.h)
    }
    for (int r = 0; r < R; ++r) {
      const float x = q[r][d];
      for (int n = 0; n < N; ++n) acc[r][n] += x * k[n];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) store(out + r * stride + n * T, acc[r][n] * scale);
}

template <int D>
inline void score_tiles(const float* const* q, const float* tile, int tiles, float scale, float* out, int64_t stride) {
  for (; tiles >= NT; tiles -= NT, tile += NT * D * T, out += NT * T) score_block<D, NT>(q, tile, scale, out, stride);
  if (NT > 3 && tiles == 3) score_block<D, 3>(q, tile, scale, out, stride);
  if (NT > 2 && tiles == 2) score_block<D, 2>(q, tile, scale, out, stride);
  if (NT > 1 && tiles == 1) score_block<D, 1>(q, tile, scale, out, stride);
}

// Up to B rows of one pair, in groups of R: each row's query, output and last visible key.
// Pass 1 scores R rows against NT tiles of the transposed K at a time (score_block), walking
// the keys in spans of 64 whose K (16 or 32 KB) stays in the core's first-level cache while
// every group of rows uses it. The softmax then runs over each row's whole score row, with
// vector loads for its maximum. Pass 2 (sum_values) adds each V row, loaded once per R rows,
// to R x CC sums held in registers. `scores`: B rows of `stride` floats; `sums`: B rows of D floats.
template <int D>
void attend_rows(const float* const* queries, float* const* outs, const int64_t* last, int n, const float* kt,
                 const float* vp, float scale, float* scores, int64_t stride, float* sums) {
  constexpr int C = D / T, SPAN = 64;  // keys per span of pass 1
  constexpr float hidden = -1e30f;  // not -inf: the library is built with -ffast-math, which assumes no infinities
  const int groups = (n + R - 1) / R;
  int64_t until = 0;
  for (int r = 0; r < n; ++r) until = std::max(until, last[r] + 1);
  for (int64_t span = 0; span < until; span += SPAN) {
    for (int gr = 0; gr < groups; ++gr) {
      const float* const* q = queries + gr * R;
      int64_t group_until = 0;
      for (int r = 0; r < R; ++r) group_until = std::max(group_until, last[gr * R + r] + 1);
      const int64_t stop = std::min(span + SPAN, group_until);
      if (stop > span) score_tiles<D>(q, kt + span * D, int((stop - span + T - 1) / T), scale, scores + gr * R * stride + span, stride);
    }
  }
  float total[B];
  const int64_t width = (until + T - 1) / T * T;
  for (int r = 0; r < groups * R; ++r) {
    float* row = scores + r * stride;
    const int64_t visible = r < n ? last[r] + 1 : 0;
    for (int64_t t = visible; t < width; ++t) row[t] = hidden;  // after the row's position: weight 0
    vec top = load(row);
    for (int64_t t = T; t < width; t += T) {
      const vec x = load(row + t);
      top = x > top ? x : top;
    }
    const float row_max = max_lane(top);
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t t = 0; t < visible; ++t) {
      row[t] = std::exp(row[t] - row_max);
      sum += row[t];
    }
    for (int64_t t = visible; t < width; ++t) row[t] = 0.f;  // exp of `hidden` would take expf's slow path
    total[r] = sum;
  }
  for (int gr = 0; gr < groups; ++gr) {
    int64_t group_until = 0;
    for (int r = 0; r < R; ++r) group_until = std::max(group_until, last[gr * R + r] + 1);
    const float* weights[R];
    for (int r = 0; r < R; ++r) weights[r] = scores + (gr * R + r) * stride;
    constexpr int CC = cpu_vector::fit(R, C < 4 ? C : 4);  // R x CC sums in registers
    for (int c0 = 0; c0 < C; c0 += CC) sum_values<D, CC>(weights, vp, c0, group_until, sums + gr * R * D);
  }
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < C; ++c) store(outs[r] + c * T, load(sums + r * D + c * T) / total[r]);
}

template <typename E>
void chunk_all(
    const float* q, const E* k_cache, const E* v_cache, const int64_t* block_tables, int64_t table_width,
    const int64_t* first_rows, const int64_t* query_lens, const int64_t* seq_lens, int64_t num_seqs,
    int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, int64_t block_size, float scale, float* out,
    int num_threads) {
  const int64_t group = num_heads / num_kv_heads, pairs = num_seqs * num_kv_heads;
  std::vector<int64_t> kt_at(pairs + 1, 0), vp_at(pairs + 1, 0), work_at(pairs + 1, 0);
  for (int64_t pair = 0; pair < pairs; ++pair) {
    const int64_t s = pair / num_kv_heads, len = seq_lens[s];
    kt_at[pair + 1] = kt_at[pair] + (len + T - 1) / T * head_dim * T;
    vp_at[pair + 1] = vp_at[pair] + len * head_dim;
    work_at[pair + 1] = work_at[pair] + (query_lens[s] * group + B - 1) / B;
  }
  // Kept from call to call (per calling thread): a few MB allocated afresh each layer would be
  // new pages each time, which the kernel must fault in and zero.
  thread_local std::vector<float> kt_buffer, vp_buffer;
  if (kt_buffer.size() < size_t(kt_at[pairs])) kt_buffer.resize(kt_at[pairs]);
  if (vp_buffer.size() < size_t(vp_at[pairs])) vp_buffer.resize(vp_at[pairs]);
  float* const kt = kt_buffer.data();
  float* const vp = vp_buffer.data();
  int64_t longest = 0;
  for (int64_t s = 0; s < num_seqs; ++s) longest = std::max(longest, seq_lens[s]);
  const int64_t stride = (longest + T - 1) / T * T;
#pragma omp parallel num_threads(num_threads)
  {
    std::vector<float> scores(B * stride), sums(B * head_dim);  // per thread
#pragma omp for schedule(dynamic, 1)
    for (int64_t pair = 0; pair < pairs; ++pair) {
      const int64_t s = pair / num_kv_heads, kv_head = pair % num_kv_heads;
      const Pair<E> p{k_cache + kv_head * head_dim, v_cache + kv_head * head_dim, block_tables + s * table_width,
                   seq_lens[s], block_size, num_kv_heads * head_dim};
      pack(p, head_dim, kt + kt_at[pair], vp + vp_at[pair]);
    }
    // Work item: B consecutive rows (query position major, head minor) of one pair. Later rows
    // see more keys, so items go out longest first.
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = work_at[pairs] - 1; item >= 0; --item) {
      const int64_t pair = std::upper_bound(work_at.begin(), work_at.end(), item) - work_at.begin() - 1;
      const int64_t s = pair / num_kv_heads, kv_head = pair % num_kv_heads;
      const int64_t rows = query_lens[s] * group, first = (item - work_at[pair]) * B;
      const float* queries[B] = {};
      float* outs[B] = {};
      int64_t last[B] = {};
      int n = 0;
      for (int64_t row = first; row < std::min(rows, first + B); ++row, ++n) {
        const int64_t i = row / group, head = kv_head * group + row % group;
        const int64_t at = ((first_rows[s] + i) * num_heads + head) * head_dim;
        queries[n] = q + at, outs[n] = out + at;
        last[n] = seq_lens[s] - query_lens[s] + i;
      }
      for (int r = n; r < B; ++r) queries[r] = queries[0], outs[r] = outs[0], last[r] = -1;
      const float* kt_pair = kt + kt_at[pair];
      const float* vp_pair = vp + vp_at[pair];
      if (head_dim == 64) attend_rows<64>(queries, outs, last, n, kt_pair, vp_pair, scale, scores.data(), stride, sums.data());
      else attend_rows<128>(queries, outs, last, n, kt_pair, vp_pair, scale, scores.data(), stride, sums.data());
    }
  }
}

}  // namespace

// cache_type: the pool's element type, 0 float32, 1 bfloat16. Returns 1 (nothing written) for a head size
// other than 64 and 128: the caller attends such chunks another way.
extern "C" int paged_chunk_attention(
    const float* q, const void* k_cache, const void* v_cache, const int64_t* block_tables, int64_t table_width,
    const int64_t* first_rows, const int64_t* query_lens, const int64_t* seq_lens, int64_t num_seqs,
    int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, int64_t block_size, float scale, float* out,
    int num_threads, int cache_type) {
  if (head_dim != 64 && head_dim != 128) return 1;
  using cpu_vector::bf16;
  const auto run = [&](auto* k, auto* v) { chunk_all(q, k, v, block_tables, table_width, first_rows, query_lens, seq_lens,
                                                     num_seqs, num_heads, num_kv_heads, head_dim, block_size, scale, out, num_threads); };
  cache_type == 1 ? run(static_cast<const bf16*>(k_cache), static_cast<const bf16*>(v_cache))
                  : run(static_cast<const float*>(k_cache), static_cast<const float*>(v_cache));
  return 0;
}
