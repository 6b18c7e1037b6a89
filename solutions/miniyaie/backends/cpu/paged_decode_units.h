// The decode kernel's work units and their walk over the paged cache's blocks
// (paged_decode_attention.cpp; T is the pool's element type: float or bfloat16).
#pragma once

#include <algorithm>
#include <cstdint>

namespace {

// One sequence of a work unit: its query and output rows, block table, length and scratch.
struct Seq {
  const float* query;    // the row's first query head
  float* out;            // the row's first output head
  const int64_t* table;  // its block table
  int64_t len;           // keys to attend
  float* scores;         // [(h1 - h0) * G][len]
  float* sums;           // [(h1 - h0) * G][D]
  float* total;          // [(h1 - h0) * G]
};

// One work unit: KV heads [h0, h1) of a few sequences, each KV head with the `group` query heads
// that share it. The sequences of a unit usually begin with the same blocks (a prefix they share
// in the cache, paged_attention.py groups them): the unit walks its sequences block by block,
// so a shared block is read from memory by the first sequence and found in the core's cache by
// the others.
template <typename T>
struct Unit {
  const T* k_cache;  // the pool: key t of head h is at (slot(t) * num_kv_heads + h) * head_dim
  const T* v_cache;
  const Seq* seqs;
  int64_t num_seqs, block_size, slot_stride, head_dim, group, h0, h1;
  float scale;
};

// Asks the memory for block b's rows of heads [h0, h1) of `seq` (all heads: the block's whole
// stretch of the pool): a sequence's blocks lie anywhere in the pool, where no prefetcher can guess them.
template <typename T>
inline void prefetch_block(const Unit<T>& u, const Seq& seq, const T* pool, int64_t b, int64_t start) {
  const int64_t n = std::min(u.block_size, seq.len - start), bytes = (u.h1 - u.h0) * u.head_dim * sizeof(T);
  const char* row = reinterpret_cast<const char*>(pool + (seq.table[b] * u.block_size * u.slot_stride + u.h0 * u.head_dim));
  for (int64_t i = 0; i < n; ++i, row += u.slot_stride * sizeof(T))
    for (int64_t byte = 0; byte < bytes; byte += 64) __builtin_prefetch(row + byte);
}

// Calls visit(seq, start, n, rows) for each block of each sequence of the unit: block 0 of every
// sequence, then block 1, ...; keys start .. start+n-1, `rows` pointing at the block's first slot
// in `pool` (k or v). Fetches the next blocks meanwhile, a block the sequence before also has once.
template <typename T, typename Visit>
inline void for_each_block(const Unit<T>& u, const T* pool, Visit visit) {
  int64_t longest = 0;
  for (int64_t i = 0; i < u.num_seqs; ++i) longest = std::max(longest, u.seqs[i].len);
  for (int64_t start = 0, b = 0; start < longest; start += u.block_size, ++b) {
    const int64_t next = start + u.block_size;
    for (int64_t i = 0; i < u.num_seqs; ++i) {
      const Seq& seq = u.seqs[i];
      const bool shared = i > 0 && u.seqs[i - 1].len > next && u.seqs[i - 1].table[b + 1] == seq.table[b + 1];
      if (next < seq.len && !shared) prefetch_block(u, seq, pool, b + 1, next);
    }
    for (int64_t i = 0; i < u.num_seqs; ++i) {
      const Seq& seq = u.seqs[i];
      if (start < seq.len) visit(seq, start, std::min(u.block_size, seq.len - start), pool + seq.table[b] * u.block_size * u.slot_stride);
    }
  }
}

}  // namespace
