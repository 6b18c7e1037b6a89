// Decode attention that reads K and V where they lie in the paged cache (CPU, float32).
//
// One query token per sequence. For every (sequence, KV head) pair, the `group` query heads
// that share that KV head are scored against the sequence's keys in one pass over its blocks,
// then the softmax weights sum its values in a second pass. Nothing is gathered or copied: a
// key's row is found through the block table, and each K or V row is read once per pair and
// used for all `group` heads. Pairs run in parallel on OpenMP threads (torch's own runtime:
// the library links libgomp, which torch has already loaded).
//
// Layouts (all contiguous):
//   q, out        [num_rows, num_heads, head_dim]   the step's packed queries / outputs
//   k_cache, v    [num_slots, num_kv_heads, head_dim]; slot = block * block_size + offset
//   block_tables  [num_seqs, table_width]            int64
//   rows          [num_seqs]  the row of q (and out) holding each sequence's query
//   seq_lens      [num_seqs]  keys to attend, the query's own included
//
// The common shapes (head_dim 64 or 128, up to 8 query heads per KV head) are compiled with
// both sizes known, so a pair's queries and running sums stay in vector registers; `vec` is
// 16 floats (one AVX-512 register, or two AVX2 ones: the compiler splits it).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int W = 16;
typedef float vec __attribute__((vector_size(W * sizeof(float))));

inline vec load(const float* p) {
  vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline float sum_lanes(vec v) {
  float s = 0.f;
  for (int i = 0; i < W; ++i) s += v[i];
  return s;
}

struct Pair {
  const float* query;     // the group's first query head
  const float* k_head;    // k_cache + kv_head * head_dim: add slot * slot_stride for a key
  const float* v_head;
  const int64_t* table;   // the sequence's block table
  int64_t len, block_size, slot_stride, head_dim;
  float scale;
  float* out;             // the group's first output head
};

// Asks the memory for the rows of the sequence's block `b` (one head's row of each slot): the
// blocks of a sequence lie anywhere in the pool, where no hardware prefetcher can guess them.
// Fetching the next block while this one is used made the kernel a quarter faster.
inline void prefetch_block(const Pair& p, const float* head, int64_t b, int64_t start) {
  const int64_t n = std::min(p.block_size, p.len - start);
  const char* row = reinterpret_cast<const char*>(head + p.table[b] * p.block_size * p.slot_stride);
  for (int64_t i = 0; i < n; ++i, row += p.slot_stride * sizeof(float))
    for (int64_t byte = 0; byte < p.head_dim * int64_t(sizeof(float)); byte += 64) __builtin_prefetch(row + byte);
}

// Calls visit(t, row) for the sequence's keys t = 0 .. len-1 in order, `row` being key t's
// row of `head` (k or v), block by block (no division per key).
template <typename Visit>
inline void for_each_key(const Pair& p, const float* head, Visit visit) {
  for (int64_t start = 0, b = 0; start < p.len; start += p.block_size, ++b) {
    if (start + p.block_size < p.len) prefetch_block(p, head, b + 1, start + p.block_size);
    const float* row = head + p.table[b] * p.block_size * p.slot_stride;
    const int64_t n = std::min(p.block_size, p.len - start);
    for (int64_t i = 0; i < n; ++i, row += p.slot_stride) visit(start + i, row);
  }
}

// exp(s - max) of each head's scores, in place; returns nothing, fills total[h] with their sums.
void softmax_unnormalised(float* scores, int64_t len, int group, float* total) {
  for (int h = 0; h < group; ++h) {
    float* s = scores + h * len;
    float top = s[0], sum = 0.f;
#pragma omp simd reduction(max : top)
    for (int64_t t = 0; t < len; ++t) top = std::max(top, s[t]);
#pragma omp simd reduction(+ : sum)
    for (int64_t t = 0; t < len; ++t) {
      s[t] = std::exp(s[t] - top);
      sum += s[t];
    }
    total[h] = sum;
  }
}

template <int D, int G>
void attend(const Pair& p, float* scores) {
  constexpr int C = D / W;
  vec q[G][C];
  for (int h = 0; h < G; ++h)
    for (int c = 0; c < C; ++c) q[h][c] = load(p.query + h * D + c * W);
  for_each_key(p, p.k_head, [&](int64_t t, const float* key) {  // pass 1: scores[h][t] = scale * q_h . k_t
    vec k[C];
    for (int c = 0; c < C; ++c) k[c] = load(key + c * W);
    for (int h = 0; h < G; ++h) {
      vec acc = q[h][0] * k[0];
      for (int c = 1; c < C; ++c) acc += q[h][c] * k[c];
      scores[h * p.len + t] = sum_lanes(acc) * p.scale;
    }
  });
  float total[G];
  softmax_unnormalised(scores, p.len, G, total);
  vec acc[G][C] = {};
  for_each_key(p, p.v_head, [&](int64_t t, const float* value) {  // pass 2: acc[h] = sum_t weight[h][t] * v_t
    vec v[C];
    for (int c = 0; c < C; ++c) v[c] = load(value + c * W);
    for (int h = 0; h < G; ++h) {
      const float w = scores[h * p.len + t];
      for (int c = 0; c < C; ++c) acc[h][c] += w * v[c];
    }
  });
  for (int h = 0; h < G; ++h)
    for (int c = 0; c < C; ++c) {
      const vec o = acc[h][c] / total[h];
      std::memcpy(p.out + h * D + c * W, &o, sizeof o);
    }
}

// Any other shape: the same two passes with the sizes only known at run time.
void attend_any(const Pair& p, int64_t group, int64_t head_dim, float* scores) {
  for_each_key(p, p.k_head, [&](int64_t t, const float* key) {
    for (int64_t h = 0; h < group; ++h) {
      float dot = 0.f;
      for (int64_t d = 0; d < head_dim; ++d) dot += p.query[h * head_dim + d] * key[d];
      scores[h * p.len + t] = dot * p.scale;
    }
  });
  std::vector<float> total(group), acc(group * head_dim, 0.f);
  softmax_unnormalised(scores, p.len, int(group), total.data());
  for_each_key(p, p.v_head, [&](int64_t t, const float* value) {
    for (int64_t h = 0; h < group; ++h)
      for (int64_t d = 0; d < head_dim; ++d) acc[h * head_dim + d] += scores[h * p.len + t] * value[d];
  });
  for (int64_t h = 0; h < group; ++h)
    for (int64_t d = 0; d < head_dim; ++d) p.out[h * head_dim + d] = acc[h * head_dim + d] / total[h];
}

template <int D>
bool attend_fixed_dim(const Pair& p, int64_t group, float* scores) {
  switch (group) {
    case 1: attend<D, 1>(p, scores); return true;
    case 2: attend<D, 2>(p, scores); return true;
    case 3: attend<D, 3>(p, scores); return true;
    case 4: attend<D, 4>(p, scores); return true;
    case 5: attend<D, 5>(p, scores); return true;
    case 6: attend<D, 6>(p, scores); return true;
    case 7: attend<D, 7>(p, scores); return true;
    case 8: attend<D, 8>(p, scores); return true;
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
#pragma omp parallel num_threads(num_threads)
  {
    std::vector<float> scores;  // per thread, reused across pairs
#pragma omp for schedule(dynamic, 1)
    for (int64_t pair = 0; pair < num_seqs * num_kv_heads; ++pair) {
      const int64_t seq = pair / num_kv_heads, kv_head = pair % num_kv_heads;
      const int64_t first_head = (rows[seq] * num_heads + kv_head * group) * head_dim;
      const Pair p{q + first_head, k_cache + kv_head * head_dim, v_cache + kv_head * head_dim,
                   block_tables + seq * table_width, seq_lens[seq], block_size, num_kv_heads * head_dim,
                   head_dim, scale, out + first_head};
      scores.resize(group * p.len);
      const bool done = head_dim == 64    ? attend_fixed_dim<64>(p, group, scores.data())
                        : head_dim == 128 ? attend_fixed_dim<128>(p, group, scores.data())
                                          : false;
      if (!done) attend_any(p, group, head_dim, scores.data());
    }
  }
}
