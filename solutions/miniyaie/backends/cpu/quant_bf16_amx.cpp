// Many rows of activations (a prefill chunk) times weight blocks on AMX's bfloat16 unit, for the -a8 schemes.
//
// The 8-bit tiles (quant_a8_amx.cpp) multiply one block of 32 at a time: every block has its own scales, so
// each 16 x 16 tile of int32 sums is stored and scaled before the next block. At a prefill chunk's hundreds of
// rows that chain, not the multiplies, bounds them: gate/up at 512 rows took 6.7 ms there against 1.8 ms for a
// bfloat16 matmul through oneDNN on the same core (2-core Xeon, 2026-11-29). Here the scales are applied to the
// weights instead, once per call: each tile of 16 columns has its blocks dequantized (d * code + m, rounded
// to bfloat16) into the order tdpbf16ps reads, and float32 tiles then sum a row's whole width with no store
// until the end. Every row of the chunk reuses the dequantized tile, so its cost fades as rows grow; at a
// decode step's few rows it would not, and the 8-bit paths keep those (quant_a8_dispatch.cpp).
//
// What it computes differs from the 8-bit tiles' rounding: x is rounded to bfloat16 (8 significant bits,
// finer than 8-bit steps per block) and so is each dequantized weight; sums are float32.
// Reads the codes as quant_a8_lay_out_tiles laid them out (16 columns x 32 codes a block, four consecutive
// codes of a column together; 4-bit codes two blocks to the 512 bytes).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AMX_BF16__) && defined(__AMX_TILE__) && defined(__AVX512BF16__) && defined(__linux__)
#define HAS_AMX_BF16 1
#include <immintrin.h>
#else
#define HAS_AMX_BF16 0
#endif

namespace {

constexpr int64_t B = 32;              // codes per block: one tile multiply's depth in bfloat16
constexpr int64_t TILE_BYTES = 1024;   // a block of one column tile in bfloat16: 16 pair rows x 64 bytes
constexpr int64_t PANEL = 8;           // column tiles a work item dequantizes (even: they go in pairs)
constexpr int64_t STRETCH = 128;       // rows a work item takes (a multiple of 32: pairs of row tiles)

int64_t codes_per_column_tile(int64_t K, int bits) { return (bits == 4 ? (K / B + 1) / 2 : K / B) * 512; }

#if HAS_AMX_BF16
struct TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-3: float32 sums of 2 row tiles x 2 column tiles (16 x 16 each); 4, 5: x, 16 rows x 32 bfloat16;
// 6, 7: weights, 16 rows of pairs x 16 columns.
void configure_tiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) config.rows[t] = 16, config.colsb[t] = 64;
  _tile_loadconfig(&config);
}

// One column tile's blocks, laid out for the 8-bit tiles (a block: 8 rows of 64 bytes, row r holding codes
// 4r .. 4r+3 of each of 16 columns), as bfloat16 d * code + m in the pair order tdpbf16ps reads (a block:
// 16 rows of 64 bytes, row j holding codes 2j, 2j+1 of each column): out, blocks * TILE_BYTES.
void dequantize_column_tile(const uint8_t* codes, int bits, const uint16_t* d, const uint16_t* m, int64_t blocks,
                            uint8_t* out) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t b = 0; b < blocks; ++b) {
    const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + b * 16)));
    const __m512 mv = bits == 4 ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + b * 16)))
                                : _mm512_setzero_ps();
    __m512 scale[4], low[4];  // 16 codes = 4 columns x 4: column 4i + lane / 4
    for (int i = 0; i < 4; ++i) {
      const __m512i column = _mm512_add_epi32(_mm512_set1_epi32(4 * i), _mm512_srli_epi32(
          _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 2));
      scale[i] = _mm512_permutexvar_ps(column, dv), low[i] = _mm512_permutexvar_ps(column, mv);
    }
    const uint8_t* block = codes + (bits == 4 ? (b / 2) * 512 : b * 512);
    for (int r = 0; r < 8; ++r) {
      __m512i raw = _mm512_loadu_si512(block + r * 64);
      if (bits == 4) raw = _mm512_and_si512(b % 2 ? _mm512_srli_epi16(raw, 4) : raw, _mm512_set1_epi8(15));
      __m512 w[4];
#define MINIYAIE_WIDEN(i)                                                                        \
  {                                                                                              \
    const __m128i part = _mm512_extracti32x4_epi32(raw, i);                                      \
    const __m512i ints = bits == 4 ? _mm512_cvtepu8_epi32(part) : _mm512_cvtepi8_epi32(part);    \
    w[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ints), scale[i], low[i]);                          \
  }
      MINIYAIE_WIDEN(0) MINIYAIE_WIDEN(1) MINIYAIE_WIDEN(2) MINIYAIE_WIDEN(3)
#undef MINIYAIE_WIDEN
      // Each 32-bit word is a pair of one column: column c's pairs (codes 4r, 4r+1) and (4r+2, 4r+3) side by side.
      const __m512i left = (__m512i)_mm512_cvtne2ps_pbh(w[1], w[0]), right = (__m512i)_mm512_cvtne2ps_pbh(w[3], w[2]);
      _mm512_storeu_si512(out + b * TILE_BYTES + (2 * r) * 64, _mm512_permutex2var_epi32(left, even, right));
      _mm512_storeu_si512(out + b * TILE_BYTES + (2 * r + 1) * 64, _mm512_permutex2var_epi32(left, odd, right));
    }
  }
}

// x [M, K] float32 -> bfloat16 in the order the tiles read it: for each tile of 16 rows, each block of 32 as
// 1 KB (16 rows x 32), so that a tile load reads one stretch; rows past M zero.
void round_rows(const float* x, int64_t M, int64_t rows, int64_t K, uint16_t* out, int threads) {
  const int64_t blocks = K / B;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      uint16_t* to = out + ((r / 16) * blocks + b) * 512 + (r % 16) * 32;
      if (r >= M) {
        std::memset(to, 0, 64);
        continue;
      }
      const float* from = x + r * K + b * B;
      _mm512_storeu_si512(to, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(from + 16), _mm512_loadu_ps(from)));
    }
}

// y's rows r0 .. r0 + 16 and columns c0 .. c0 + 16 (those that exist) from a 16 x 16 float32 tile.
void store_tile(int tile, int64_t r0, int64_t c0, int64_t M, int64_t N, float* y) {
  alignas(64) float sums[16][16];
  switch (tile) {  // the tile register is part of the instruction
    case 0: _tile_stored(0, sums, 64); break;
    case 1: _tile_stored(1, sums, 64); break;
    case 2: _tile_stored(2, sums, 64); break;
    default: _tile_stored(3, sums, 64); break;
  }
  if (r0 >= M || c0 >= N) return;
  const __mmask16 cols = __mmask16((1u << std::min<int64_t>(16, N - c0)) - 1);
  for (int64_t i = 0; i < std::min<int64_t>(16, M - r0); ++i) _mm512_mask_storeu_ps(y + (r0 + i) * N + c0, cols, _mm512_load_ps(sums[i]));
}
#endif

}  // namespace

extern "C" {

int quant_a8_amx_ready();  // quant_a8_amx.cpp: the process has the tile state

int quant_bf16_amx_ready() {
#if HAS_AMX_BF16
  return quant_a8_amx_ready();
#else
  return 0;
#endif
}

// y [M, N] = x [M, K] times the weights quant_a8_lay_out_tiles laid out, both rounded to bfloat16, summed in
// float32. Call only where quant_bf16_amx_ready().
void quant_matmul_bf16_tiles(const float* x, int64_t M, int64_t K, const uint8_t* tiles, int bits, const uint16_t* d,
                             const uint16_t* m, int64_t N, float* y, int threads) {
#if HAS_AMX_BF16
  if (!quant_bf16_amx_ready()) return;
  const int64_t blocks = K / B, rows = (M + 31) / 32 * 32, column_tiles = (N + 15) / 16;
  const int64_t per_tile = codes_per_column_tile(K, bits);
  thread_local std::vector<uint16_t> xb;
  if (int64_t(xb.size()) < rows * K) xb.resize(rows * K);
  round_rows(x, M, rows, K, xb.data(), threads);
  const uint16_t* x_rounded = xb.data();  // xb is this thread's: the team reads it through this pointer
  // Work items: a panel of column tiles (dequantized once per thread and panel) by a stretch of rows. Within one,
  // each pair of row tiles meets every pair of column tiles: its x stays in the core's cache meanwhile.
  const int64_t panels = (column_tiles + PANEL - 1) / PANEL, stretches = (rows + STRETCH - 1) / STRETCH;
#pragma omp parallel num_threads(threads)
  {
    configure_tiles();
    std::vector<uint8_t> weights(PANEL * blocks * TILE_BYTES);  // past N: zeros
    int64_t held = -1;                                          // the panel `weights` holds
#pragma omp for schedule(static)
    for (int64_t item = 0; item < panels * stretches; ++item) {
      const int64_t panel = item / stretches, first_row = item % stretches * STRETCH;
      if (panel != held) {
        for (int64_t i = 0; i < PANEL; ++i) {
          const int64_t t = panel * PANEL + i;
          uint8_t* out = weights.data() + i * blocks * TILE_BYTES;
          if (t < column_tiles) {
            dequantize_column_tile(tiles + t * per_tile, bits, d + t * blocks * 16, bits == 4 ? m + t * blocks * 16 : nullptr, blocks, out);
          } else {
            std::memset(out, 0, blocks * TILE_BYTES);
          }
        }
        held = panel;
      }
      for (int64_t r0 = first_row; r0 < std::min(rows, first_row + STRETCH); r0 += 32) {
        const uint16_t *top = x_rounded + (r0 / 16) * blocks * 512, *bottom = top + blocks * 512;
        for (int64_t i = 0; i < PANEL && panel * PANEL + i < column_tiles; i += 2) {
          const uint8_t *left = weights.data() + i * blocks * TILE_BYTES, *right = left + blocks * TILE_BYTES;
          _tile_zero(0);
          _tile_zero(1);
          _tile_zero(2);
          _tile_zero(3);
          for (int64_t b = 0; b < blocks; ++b) {
            _tile_loadd(4, top + b * 512, 64);
            _tile_loadd(5, bottom + b * 512, 64);
            _tile_loadd(6, left + b * TILE_BYTES, 64);
            _tile_loadd(7, right + b * TILE_BYTES, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
          }
          const int64_t c0 = (panel * PANEL + i) * 16;
          store_tile(0, r0, c0, M, N, y), store_tile(1, r0, c0 + 16, M, N, y);
          store_tile(2, r0 + 16, c0, M, N, y), store_tile(3, r0 + 16, c0 + 16, M, N, y);
        }
      }
    }
    _tile_release();
  }
#endif
}

}  // extern "C"
