// Decode attention that reads K and V where they lie in the paged cache (CPU, float32).
//
// One query token per sequence. For every (sequence, KV head) pair, the `group` query heads
// that share that KV head are scored against the sequence's keys in one pass over its blocks,
// then the softmax weights sum its values in a second pass. Nothing is gathered or copied: a
// key's row is found through the block table, and each K or V row is read once per pair and
// used for all `group` heads. Pairs run in parallel on OpenMP threads (torch's own runtime:
// miniyaie/model/cpu_kernels.py links against the libgomp that torch loaded).
//
// Layouts (all contiguous):
//   q, out        [num_rows, num_heads, head_dim]   the step's packed queries / outputs
//   k_cache, v    [num_slots, num_kv_heads, head_dim]; slot = block * block_size + offset
//   block_tables  [num_seqs, table_width]            int64
//   rows          [num_seqs]  the row of q (and out) holding each sequence's query
//   seq_lens      [num_seqs]  keys to attend, the query's own included
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

extern "C" void paged_decode_attention(
    const float* q, const float* k_cache, const float* v_cache, const int64_t* block_tables,
    int64_t table_width, const int64_t* rows, const int64_t* seq_lens, int64_t num_seqs,
    int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, int64_t block_size, float scale,
    float* out, int num_threads) {
  const int64_t group = num_heads / num_kv_heads;
  const int64_t slot_stride = num_kv_heads * head_dim;  // floats from one slot to the next
#pragma omp parallel num_threads(num_threads)
  {
    std::vector<float> scores, acc(group * head_dim);  // per thread, reused across pairs
#pragma omp for schedule(dynamic, 1)
    for (int64_t pair = 0; pair < num_seqs * num_kv_heads; ++pair) {
      const int64_t seq = pair / num_kv_heads, kv_head = pair % num_kv_heads;
      const int64_t len = seq_lens[seq];
      const int64_t* table = block_tables + seq * table_width;
      const float* query = q + (rows[seq] * num_heads + kv_head * group) * head_dim;
      scores.resize(group * len);

      // Pass 1: scores[h][t] = scale * q_h . k_t, block by block.
      for (int64_t start = 0; start < len; start += block_size) {
        const int64_t n = std::min(block_size, len - start);
        const float* keys = k_cache + (table[start / block_size] * block_size * num_kv_heads + kv_head) * head_dim;
        for (int64_t i = 0; i < n; ++i) {
          const float* key = keys + i * slot_stride;
          for (int64_t h = 0; h < group; ++h) {
            const float* qh = query + h * head_dim;
            float dot = 0.f;
#pragma omp simd reduction(+ : dot)
            for (int64_t d = 0; d < head_dim; ++d) dot += qh[d] * key[d];
            scores[h * len + start + i] = dot * scale;
          }
        }
      }
      // Softmax per head, kept unnormalised: the sum divides the output once at the end.
      std::vector<float> total(group);
      for (int64_t h = 0; h < group; ++h) {
        float* s = scores.data() + h * len;
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
      // Pass 2: acc[h] = sum_t p[h][t] * v_t.
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t start = 0; start < len; start += block_size) {
        const int64_t n = std::min(block_size, len - start);
        const float* values = v_cache + (table[start / block_size] * block_size * num_kv_heads + kv_head) * head_dim;
        for (int64_t i = 0; i < n; ++i) {
          const float* value = values + i * slot_stride;
          for (int64_t h = 0; h < group; ++h) {
            const float p = scores[h * len + start + i];
            float* a = acc.data() + h * head_dim;
#pragma omp simd
            for (int64_t d = 0; d < head_dim; ++d) a[d] += p * value[d];
          }
        }
      }
      float* o = out + (rows[seq] * num_heads + kv_head * group) * head_dim;
      for (int64_t h = 0; h < group; ++h)
        for (int64_t d = 0; d < head_dim; ++d) o[h * head_dim + d] = acc[h * head_dim + d] / total[h];
    }
  }
}
