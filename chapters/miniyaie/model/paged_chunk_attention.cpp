// Attention of prefill and extend chunks over the paged cache, in place (CPU, float32).
//
// A chunk is `query_len` new tokens of one sequence whose K/V (cached prefix and the chunk
// itself) are already in the cache: query i sits at position p = seq_len - query_len + i and
// sees keys 0..p. For every (sequence, KV head) pair the keys are first copied once out of the
// block table into a scratch tile layout: K transposed in tiles of 16 keys ([tile][dim][16]),
// so that the 16 scores of a query against a tile are one vector per dimension step, and V
// row by row. Then the pair's query rows (its `group` heads folded in, as in the batched torch
// backend) are scored against the tiles, take a softmax over their whole score rows and sum
// the values, each row only up to its own position: a causal chunk does half the work of
// SDPA with a mask, which computes every key.
//
// Layouts (all contiguous): q, out [num_rows, num_heads, head_dim]; k_cache, v_cache
// [num_slots, num_kv_heads, head_dim] with slot = block * block_size + offset; block_tables
// [num_seqs, table_width] int64; first_rows, query_lens, seq_lens [num_seqs] int64.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int T = 16;  // keys per tile: one vector of scores
constexpr int R = 4;   // query rows scored together (each tile of K is loaded once for them)
constexpr int B = 32;  // query rows of one work item (R-row groups sharing the K and V spans in cache)
typedef float vec __attribute__((vector_size(T * sizeof(float))));

struct Pair {
  const float* k_head;  // k_cache + kv_head * head_dim: add slot * slot_stride for a key
  const float* v_head;
  const int64_t* table;
  int64_t len, block_size, slot_stride;
};

// Kt[tile][d][j] = K[tile * T + j][d] (zero past len); Vp[t][d] = V[t][d].
void pack(const Pair& p, int64_t head_dim, float* kt, float* vp) {
  const int64_t tiles = (p.len + T - 1) / T;
  float* last_tile = kt + (tiles - 1) * head_dim * T;
  std::memset(last_tile, 0, sizeof(float) * head_dim * T);  // its keys past len: finite, and hidden later
  for (int64_t t = 0; t < p.len; ++t) {
    const int64_t slot = p.table[t / p.block_size] * p.block_size + t % p.block_size;
    const float* k = p.k_head + slot * p.slot_stride;
    float* column = kt + (t / T) * head_dim * T + t % T;
    for (int64_t d = 0; d < head_dim; ++d) column[d * T] = k[d];
    std::memcpy(vp + t * head_dim, p.v_head + slot * p.slot_stride, sizeof(float) * head_dim);
  }
}

// Up to B rows of one pair, in groups of R: each row's query, output and last visible key.
// Pass 1 scores the rows against the transposed K, tile by tile, R rows at a time (a tile is
// loaded once for R rows); the softmax then runs over each row's whole score row; pass 2 adds
// each V row, loaded once per R rows, to their sums. Both passes walk the keys in spans of
// S keys and, within a span, all the rows: the span's 16 KB of K or V stay in the core's
// first-level cache while every row uses them. `scores`: B rows of `stride` floats; `sums`:
// B rows of D floats.
template <int D>
void attend_rows(const float* const* queries, float* const* outs, const int64_t* last, int n, const float* kt,
                 const float* vp, float scale, float* scores, int64_t stride, float* sums) {
  constexpr int C = D / T, SPAN = 4096 / D;  // keys per span: 16 KB of K (or V)
  constexpr float hidden = -1e30f;  // not -inf: the library is built with -ffast-math, which assumes no infinities
  const int groups = (n + R - 1) / R;
  int64_t until = 0;
  for (int r = 0; r < n; ++r) until = std::max(until, last[r] + 1);
  for (int64_t span = 0; span < until; span += SPAN) {
    for (int gr = 0; gr < groups; ++gr) {
      const float* const* q = queries + gr * R;
      int64_t group_until = 0;
      for (int r = 0; r < R; ++r) group_until = std::max(group_until, last[gr * R + r] + 1);
      for (int64_t start = span; start < std::min(span + SPAN, group_until); start += T) {
        const float* tile = kt + start * D;  // tile start / T begins at (start / T) * D * T
        vec even[R] = {}, odd[R] = {};  // two sums per row: eight independent chains keep both FMA units busy
        for (int d = 0; d < D; d += 2) {
          vec k0, k1;
          std::memcpy(&k0, tile + d * T, sizeof k0);
          std::memcpy(&k1, tile + (d + 1) * T, sizeof k1);
          for (int r = 0; r < R; ++r) {  // padding rows read row 0: never used
            even[r] += q[r][d] * k0;
            odd[r] += q[r][d + 1] * k1;
          }
        }
        for (int r = 0; r < R; ++r) {
          const vec x = (even[r] + odd[r]) * scale;
          std::memcpy(scores + (gr * R + r) * stride + start, &x, sizeof x);
        }
      }
    }
  }
  float total[B];
  for (int r = 0; r < groups * R; ++r) {
    float* row = scores + r * stride;
    const int64_t visible = r < n ? last[r] + 1 : 0, width = (until + T - 1) / T * T;
    for (int64_t t = visible; t < width; ++t) row[t] = hidden;  // after the row's position: weight 0
    float top = hidden, sum = 0.f;
#pragma omp simd reduction(max : top)
    for (int64_t t = 0; t < visible; ++t) top = std::max(top, row[t]);
#pragma omp simd reduction(+ : sum)
    for (int64_t t = 0; t < width; ++t) {
      row[t] = std::exp(row[t] - top);
      sum += row[t];
    }
    total[r] = sum;
  }
  std::memset(sums, 0, sizeof(float) * groups * R * D);
  for (int64_t span = 0; span < until; span += SPAN) {
    for (int gr = 0; gr < groups; ++gr) {
      int64_t group_until = 0;
      for (int r = 0; r < R; ++r) group_until = std::max(group_until, last[gr * R + r] + 1);
      const int64_t stop = std::min(span + SPAN, group_until);
      if (stop <= span) continue;
      vec acc[R][C];
      std::memcpy(acc, sums + gr * R * D, sizeof acc);
      for (int64_t t = span; t < stop; ++t) {
        vec v[C];
        std::memcpy(v, vp + t * D, sizeof v);
        for (int r = 0; r < R; ++r) {
          const float weight = scores[(gr * R + r) * stride + t];
          for (int c = 0; c < C; ++c) acc[r][c] += weight * v[c];
        }
      }
      std::memcpy(sums + gr * R * D, acc, sizeof acc);
    }
  }
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < C; ++c) {
      vec o;
      std::memcpy(&o, sums + r * D + c * T, sizeof o);
      o /= total[r];
      std::memcpy(outs[r] + c * T, &o, sizeof o);
    }
}

}  // namespace

extern "C" int paged_chunk_attention(
    const float* q, const float* k_cache, const float* v_cache, const int64_t* block_tables, int64_t table_width,
    const int64_t* first_rows, const int64_t* query_lens, const int64_t* seq_lens, int64_t num_seqs,
    int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, int64_t block_size, float scale, float* out,
    int num_threads) {
  if (head_dim != 64 && head_dim != 128) return 1;  // the caller attends such chunks another way
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
      const Pair p{k_cache + kv_head * head_dim, v_cache + kv_head * head_dim, block_tables + s * table_width,
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
  return 0;
}
