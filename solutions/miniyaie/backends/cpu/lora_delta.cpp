// The LoRA deltas of one projection (or one merged group: q/k/v, gate/up) for a whole step, in one call.
//
// A step's rows come grouped by adapter slot (chapter 11's Segments: segment g is rows
// order[starts[g] .. starts[g] + lengths[g]), all of slot slots[g]). For a row i of slot s and each
// member j of the group, y_j[i] += scaling[s] * (x[i] A_j[s]^T) B_j[s]^T. The members' A lie side by
// side along the rank (A [slots, members * R, in]), so the shrink of all members is one pass over
// the group's A; member j's expand reads its R columns of the shrunk rows and its own B [out_j, R].
//
// Why C++: the deltas are few multiply-adds (rank 16: about 4 M a row for SmolLM2's 30 layers),
// but torch does them as two small matmuls per adapter per projection, and on a CPU the fixed cost
// of those thousands of calls, not the arithmetic, was the step's LoRA time. Here one call does every
// adapter of the step, reading each adapter's A and B once, however many rows it has.
//
// Two passes, each split over the threads (OpenMP):
//   shrink  items (segment, KB rank rows of A): t[p, k] = scaling[s] * sum_i x[order[p], i] A[s, k, i],
//           KB rows of A against RT rows of x at a time, the sums in registers (cpu_vector.h's vec);
//   expand  items (member, segment, OB output columns): the block of B [OB, R] turned to [R, OB] in a
//           small buffer, then y[order[p], o .. o + OB) += sum_k t[p, k] Bt[k] for the segment's rows.
// The order of the additions differs from torch's: equal up to rounding.
#include <cstdint>
#include <vector>

#include "cpu_vector.h"

using cpu_vector::W;
using cpu_vector::vec;

namespace {

constexpr int KB = 4;                                    // rank rows of A a shrink item sums together
constexpr int RT = cpu_vector::REGISTERS >= 32 ? 4 : 2;  // rows of x with them: RT * KB sums in registers
constexpr int OB = 4 * W;                                // output columns an expand item adds

inline vec broadcast(float v) { return vec{} + v; }

// t[r * t_stride + k] = scale * sum_i x_r[i] * a_k[i] for R rows (pointers xs) and KB rows of A (pointers as).
template <int R>
void shrink_tile(const float* const* xs, const float* const* as, int64_t in, float scale, float* t, int64_t t_stride,
                 int kn) {
  vec acc[R][KB] = {};
  const int64_t whole = in - in % W;
  for (int64_t i = 0; i < whole; i += W) {
    vec av[KB];
    for (int k = 0; k < KB; ++k) av[k] = cpu_vector::load(as[k] + i);
    for (int r = 0; r < R; ++r) {
      const vec xv = cpu_vector::load(xs[r] + i);
      for (int k = 0; k < KB; ++k) acc[r][k] += xv * av[k];
    }
  }
  for (int r = 0; r < R; ++r) {
    const vec sums = cpu_vector::sum_four(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    for (int k = 0; k < kn; ++k) {
      float s = sums[k];
      for (int64_t i = whole; i < in; ++i) s += xs[r][i] * as[k][i];
      t[r * t_stride + k] = scale * s;
    }
  }
}

static_assert(KB == 4, "shrink_tile sums its KB accumulators with sum_four");

// y[o] += sum_k t[k] * bt[k * OB + o] for o < count (bt: a block of B turned, R rows of OB).
inline void expand_row(const float* t, const float* bt, int64_t rank, float* y, int64_t count) {
  vec acc[OB / W] = {};
  for (int64_t k = 0; k < rank; ++k) {
    const vec tk = broadcast(t[k]);
    for (int c = 0; c < OB / W; ++c) acc[c] += tk * cpu_vector::load(bt + k * OB + c * W);
  }
  if (count == OB) {
    for (int c = 0; c < OB / W; ++c) cpu_vector::store(y + c * W, cpu_vector::load(y + c * W) + acc[c]);
  } else {
    float sums[OB];
    for (int c = 0; c < OB / W; ++c) cpu_vector::store(sums + c * W, acc[c]);
    for (int64_t o = 0; o < count; ++o) y[o] += sums[o];
  }
}

// The same for rank a multiple of W, straight from B [count, rank] (rows b_row_stride apart) with no turned
// copy: four outputs' products summed across their lanes at once (sum_four). Costs more per row than
// expand_row, but a segment of few rows does not pay for turning the block.
inline void expand_dots(const float* t, const float* b, int64_t b_row_stride, int64_t rank, float* y, int64_t count) {
  int64_t o = 0;
  for (; o + 4 <= count; o += 4) {
    vec acc[4] = {};
    for (int64_t k = 0; k < rank; k += W) {
      const vec tk = cpu_vector::load(t + k);
      for (int c = 0; c < 4; ++c) acc[c] += tk * cpu_vector::load(b + (o + c) * b_row_stride + k);
    }
    const vec sums = cpu_vector::sum_four(acc[0], acc[1], acc[2], acc[3]);
    for (int c = 0; c < 4; ++c) y[o + c] += sums[c];
  }
  for (; o < count; ++o) {
    vec acc = {};
    for (int64_t k = 0; k < rank; k += W) acc += cpu_vector::load(t + k) * cpu_vector::load(b + o * b_row_stride + k);
    y[o] += cpu_vector::sum_lanes(acc);
  }
}

#ifndef DOT_ROWS
#define DOT_ROWS 2
#endif
constexpr int64_t FEW_ROWS = DOT_ROWS;  // segments of up to this many rows expand by expand_dots (rank a multiple of W)

// One member's output: its B, where it is, and its y.
struct Member {
  const float* b;
  int64_t b_slot_stride, b_row_stride, out;
  float* y;
  int64_t y_stride;
};

}  // namespace

extern "C" {

// x [rows, in] (rows x_stride apart); a: the group's A, slot s's rank row k at a + s * a_slot_stride +
// k * a_row_stride, members * rank rows; scaling [slots]; `members` (6 int64 each): B's address, its
// slot and row strides (B [out, rank], k contiguous), out, y's address and row stride (y [rows, out]).
void lora_delta(const float* x, int64_t x_stride, int64_t in, const int64_t* order, const int64_t* starts,
                const int64_t* lengths, const int64_t* slots, int64_t segments, const float* a, int64_t a_slot_stride,
                int64_t a_row_stride, int64_t rank, const float* scaling, const int64_t* members, int64_t num_members,
                int threads) {
  std::vector<Member> group(num_members);
  std::vector<int64_t> blocks_before(num_members + 1, 0);  // expand items per segment, member by member
  for (int64_t j = 0; j < num_members; ++j) {
    const int64_t* m = members + 6 * j;
    group[j] = {reinterpret_cast<const float*>(m[0]), m[1], m[2], m[3], reinterpret_cast<float*>(m[4]), m[5]};
    blocks_before[j + 1] = blocks_before[j] + (m[3] + OB - 1) / OB;
  }
  const int64_t ranks = rank * num_members, chunks = (ranks + KB - 1) / KB;
  int64_t rows = 0;
  for (int64_t g = 0; g < segments; ++g) rows += lengths[g];
  std::vector<float> t(rows * ranks);  // the shrunk rows, in the order of `order`
  const int64_t shrink_items = segments * chunks, expand_items = segments * blocks_before[num_members];

#pragma omp parallel num_threads(threads)
  {
#pragma omp for schedule(static, 1)
    for (int64_t item = 0; item < shrink_items; ++item) {
      const int64_t g = item / chunks, k0 = (item % chunks) * KB;
      const int kn = ranks - k0 < KB ? int(ranks - k0) : KB;
      const float* a_slot = a + slots[g] * a_slot_stride;
      const float* as[KB];
      for (int k = 0; k < KB; ++k) as[k] = a_slot + (k0 + (k < kn ? k : 0)) * a_row_stride;  // past the end: row k0 again
      const float scale = scaling[slots[g]];
      for (int64_t p = starts[g], end = starts[g] + lengths[g]; p < end; p += RT) {
        const float* xs[RT];
        const int n = end - p < RT ? int(end - p) : RT;
        for (int r = 0; r < RT; ++r) xs[r] = x + order[p + (r < n ? r : 0)] * x_stride;
        float* tp = t.data() + p * ranks + k0;
        switch (n) {
          case 1: shrink_tile<1>(xs, as, in, scale, tp, ranks, kn); break;
          case 2: shrink_tile<2>(xs, as, in, scale, tp, ranks, kn); break;
          case 3: shrink_tile<(3 < RT ? 3 : RT)>(xs, as, in, scale, tp, ranks, kn); break;  // (never with RT 2)
          default: shrink_tile<RT>(xs, as, in, scale, tp, ranks, kn);
        }
      }
    }
    // the implied barrier: every shrunk row is written before any expand reads it
    std::vector<float> bt(rank * OB, 0.f);
#pragma omp for schedule(static, 1)
    for (int64_t item = 0; item < expand_items; ++item) {
      const int64_t g = item / blocks_before[num_members], block = item % blocks_before[num_members];
      int64_t j = 0;
      while (block >= blocks_before[j + 1]) ++j;
      const Member& m = group[j];
      const int64_t o0 = (block - blocks_before[j]) * OB, count = m.out - o0 < OB ? m.out - o0 : OB;
      const float* b = m.b + slots[g] * m.b_slot_stride + o0 * m.b_row_stride;
      if (rank % W == 0 && lengths[g] <= FEW_ROWS) {
        for (int64_t p = starts[g], end = starts[g] + lengths[g]; p < end; ++p)
          expand_dots(t.data() + p * ranks + j * rank, b, m.b_row_stride, rank, m.y + order[p] * m.y_stride + o0, count);
        continue;
      }
      for (int64_t o = 0; o < count; ++o)
        for (int64_t k = 0; k < rank; ++k) bt[k * OB + o] = b[o * m.b_row_stride + k];
      for (int64_t p = starts[g], end = starts[g] + lengths[g]; p < end; ++p)
        expand_row(t.data() + p * ranks + j * rank, bt.data(), rank, m.y + order[p] * m.y_stride + o0, count);
    }
  }
}

}  // extern "C"
