// One vector register of the machine the kernels are built for (g++ -march=native), as the
// attention kernels use it: `vec` holds W floats, and REGISTERS of them fit in the register file.
//
// Why it is not one fixed size: GCC's vector extensions take any width and split a vector
// wider than the machine's registers into pieces, but that splitting is poor. A 16-float
// vector on an AVX2 processor (two 8-float registers) came out as 128-bit moves through the
// stack for every multiply-add: on one AVX2 machine the decode kernel took 4.8 ms where the
// same source with 8-float vectors takes 0.8 ms (book/src/appendix_engineering_log.md, round seven).
// So the width is the machine's own, and the kernels size their blocks of accumulators from
// REGISTERS, so that they stay in registers on either.
//
// MINIYAIE_VECTOR_FLOATS (a -D flag) forces a width: the tests build both and compare them.
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>

namespace cpu_vector {

#if defined(__AVX512F__)
#define MINIYAIE_NATIVE_FLOATS 16  // one zmm register
#elif defined(__AVX__)
#define MINIYAIE_NATIVE_FLOATS 8  // one ymm register
#else
#define MINIYAIE_NATIVE_FLOATS 4  // SSE or NEON: 128 bits
#endif

#if defined(MINIYAIE_VECTOR_FLOATS)
constexpr int W = MINIYAIE_VECTOR_FLOATS;
#else
constexpr int W = MINIYAIE_NATIVE_FLOATS;
#endif

#if defined(__AVX512F__) || defined(__aarch64__)
constexpr int REGISTERS = 32;
#else
constexpr int REGISTERS = 16;
#endif

static_assert(W == 4 || W == 8 || W == 16, "a vector of 4, 8 or 16 floats");

typedef float vec __attribute__((vector_size(W * sizeof(float))));
typedef int ivec __attribute__((vector_size(W * sizeof(int))));

inline vec load(const float* p) {
  vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void store(float* p, vec v) { std::memcpy(p, &v, sizeof v); }

// A bfloat16 is the top half of a float32: widening one is a shift, no rounding (a K/V cache
// kept in bfloat16 is read through these; the arithmetic stays float32).
using bf16 = uint16_t;
typedef uint16_t halves __attribute__((vector_size(W * sizeof(uint16_t))));
typedef uint32_t words __attribute__((vector_size(W * sizeof(uint32_t))));

inline vec load(const bf16* p) {
  halves h;
  std::memcpy(&h, p, sizeof h);
  const words w = __builtin_convertvector(h, words) << 16;
  vec v;
  std::memcpy(&v, &w, sizeof v);
  return v;
}

inline float to_float(float x) { return x; }
inline float to_float(bf16 x) {
  const uint32_t w = uint32_t(x) << 16;
  float f;
  std::memcpy(&f, &w, sizeof f);
  return f;
}

inline float sum_lanes(vec v) {
  float s = 0.f;
  for (int i = 0; i < W; ++i) s += v[i];
  return s;
}

inline float max_lane(vec v) {
  float m = v[0];
  for (int i = 1; i < W; ++i) m = m > v[i] ? m : v[i];
  return m;
}

// 0, 1, ..., W - 1.
template <int... I>
constexpr ivec lane_numbers(std::integer_sequence<int, I...>) {
  return ivec{I...};
}
constexpr ivec LANES = lane_numbers(std::make_integer_sequence<int, W>{});

// Keeps `v` in a register for the code that uses it. GCC otherwise folds a load used several
// times into each instruction that uses it (a multiply-add with a memory operand), and on the
// AVX2 machine of round nine loads, not multiply-adds, then bounded the loop: the decode
// kernel's value pass ran at 3 multiply-adds per ns that way, 4.9 with each value loaded once.
// A vector wider than the machine's (a forced MINIYAIE_VECTOR_FLOATS) is not one register: left as is.
// ANCHOR: keep_in_register
inline void keep_in_register([[maybe_unused]] vec& v) {
#if !defined(MINIYAIE_VECTOR_FLOATS) || MINIYAIE_VECTOR_FLOATS <= MINIYAIE_NATIVE_FLOATS
#if defined(__AVX512F__)
  asm("" : "+v"(v));
#elif defined(__x86_64__) || defined(__i386__)
  asm("" : "+x"(v));
#elif defined(__aarch64__)
  asm("" : "+w"(v));
#endif
#endif
}
// ANCHOR_END: keep_in_register

// add_pairs' two shuffles: in each 4 lanes, lanes 0 and 2 (or 1 and 3, `odd`) of `a`, then of `b`.
template <bool odd, int... L>
constexpr ivec pairs_mask(std::integer_sequence<int, L...>) {
  return ivec{(L / 4 * 4 + L % 2 * 2 + odd + (L % 4 >= 2 ? W : 0))...};
}

// Within each 4 lanes: the sums of a's neighbouring lanes, then b's ([a0+a1, a2+a3, b0+b1,
// b2+b3]). Two shuffles (one shufps each on AVX2) and an add.
inline vec add_pairs(vec a, vec b) {
  constexpr auto lanes = std::make_integer_sequence<int, W>{};
  return __builtin_shuffle(a, b, pairs_mask<false>(lanes)) + __builtin_shuffle(a, b, pairs_mask<true>(lanes));
}

// The lane sums of four vectors, in lanes 0 to 3 (the other lanes hold nothing useful): a tree
// of shuffles and adds, where four separate sums would each take log2(W) dependent steps.
inline vec sum_four(vec a, vec b, vec c, vec d) {
  vec r = add_pairs(add_pairs(a, b), add_pairs(c, d));  // each 4 lanes: parts of the four sums
  for (int half = W / 2; half >= 4; half /= 2) r += __builtin_shuffle(r, LANES ^ half);  // fold them
  return r;
}

// How many accumulator vectors a loop can keep, at most `cap` and a power of two, when each
// `per` of them needs one more register for its operand (plus one for a broadcast value).
constexpr int fit(int per, int cap) {
  int n = 1;
  while (2 * n <= cap && 2 * n * (per + 1) + 1 <= REGISTERS) n *= 2;
  return n;
}

// How many of its C vectors a loop over G rows can keep at once (a power of two, at most C),
// when it also holds one weight per row and one operand: G * n + G + 1 registers.
constexpr int fit_rows(int G, int C) {
  int n = 1;
  while (2 * n <= C && G * 2 * n + G + 1 <= REGISTERS) n *= 2;
  return n;
}

}  // namespace cpu_vector
