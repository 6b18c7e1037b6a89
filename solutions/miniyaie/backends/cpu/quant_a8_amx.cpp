// Rows of 8-bit activations times weight blocks on AMX (Intel's tile unit), for the -a8 schemes.
//
// quant_a8.cpp's VNNI loop pays a conversion and a multiply-add per 64 byte products, to apply each block's
// scales: at many rows that is no faster than float32 multiply-adds. One AMX instruction (tdpbsud) multiplies
// a 16-row tile of x by a 16-column tile of weight codes over one block of 32: 8192 byte products into 16 x 16
// int32 sums, which are then scaled once each (d * dx, plus m * xs for 4-bit blocks) into float32 sums.
//
// The tile unit reads the weights in its own order (a tile row holds four consecutive codes of each of 16
// columns). Laying a tile out on every call was most of a decode step's call at 20 rows (2-core Xeon,
// 2026-11-29), so it is done once, at load: quant_a8_lay_out_tiles writes, for each tile of 16 columns and
// each block of 32, the 512 bytes the unit reads; 4-bit codes keep two blocks in those bytes (block 2p in the
// low nibbles, 2p + 1 in the high), so the copy is as small as the codes. Scales and minimums go alongside,
// 16 halves a block. Columns past N are zeros. Int8ActivationLinear (miniyaie/weights) keeps the copy.
// Needs the kernel built with AMX (g++ -march=native on a CPU that has it) and Linux to grant the process the
// tile state (arch_prctl); quant_a8_amx_ready() says whether both hold.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "quant_blocks.h"

#if defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(__AVX512F__) && defined(__linux__)
#define HAS_AMX 1
#include <sys/syscall.h>
#include <unistd.h>
#else
#define HAS_AMX 0
#endif

namespace {

constexpr int64_t B = 32;  // codes per block (one tile multiply)

int64_t bytes_per_column_tile(int64_t K, int bits) { return (bits == 4 ? (K / B + 1) / 2 : K / B) * 512; }

#if HAS_AMX
struct TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

bool request_tiles() {  // once per process: Linux hands out the 8 KB tile state on request only
  constexpr long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
  return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

// Two sets, so that one block's multiply can run while the previous block's sums are scaled:
// tiles 0 and 3: sums 16 x 16 int32; 1 and 4: x, 16 rows x 32 bytes; 2 and 5: codes, 8 rows x 64 bytes.
void configure_tiles() {
  TileConfig config;
  for (int set : {0, 3}) {
    config.rows[set] = 16, config.colsb[set] = 64;
    config.rows[set + 1] = 16, config.colsb[set + 1] = 32;
    config.rows[set + 2] = 8, config.colsb[set + 2] = 64;
  }
  _tile_loadconfig(&config);
}

// A column tile's 4-bit codes, two blocks a 512 bytes, as one block a 512 bytes (out: blocks * 512 bytes):
// unpacked once per column tile, then read by every tile of rows.
void unpack_pairs(const uint8_t* column_tile, int64_t blocks, uint8_t* out) {
  const __m512i low = _mm512_set1_epi8(15);
  for (int64_t b = 0; b < blocks; b += 2)
    for (int i = 0; i < 512; i += 64) {
      const __m512i v = _mm512_loadu_si512(column_tile + (b / 2) * 512 + i);
      _mm512_storeu_si512(out + b * 512 + i, _mm512_and_si512(v, low));
      if (b + 1 < blocks) _mm512_storeu_si512(out + (b + 1) * 512 + i, _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
    }
}

// What a row tile's loop reads: x rounded to bytes (rows padded to 16 with zeros), its steps and block sums,
// and one column tile's codes (512 bytes a block, 4-bit ones unpacked), scales and minimums.
struct Operands {
  const int8_t* xq;
  const float *dx, *xs;
  int64_t K, blocks;
  const uint8_t* codes;
  const uint16_t *d, *m;
  int bits;
};

// acc[i] += the scaled sums of block b for the n live rows of the tile (rows r0 .. r0 + n) from sums.
template <int FULL>
inline void scale_block(const Operands& o, const int32_t (*sums)[16], int64_t r0, int n, int64_t b, __m512* acc) {
  const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o.d + b * 16)));
  const __m512 mv = o.bits == 4 ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o.m + b * 16)))
                                : _mm512_setzero_ps();
  const int rows = FULL ? 16 : n;
  for (int i = 0; i < rows; ++i) {
    const int64_t r = r0 + i;
    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[i])),
                             _mm512_mul_ps(dv, _mm512_set1_ps(o.dx[r * o.blocks + b])), acc[i]);
    if (o.bits == 4) acc[i] = _mm512_fmadd_ps(mv, _mm512_set1_ps(o.xs[r * o.blocks + b]), acc[i]);
  }
}

// One tile of 16 rows (n of them live) by one column tile, over all blocks, two blocks at a time (tile sets
// 0-2 and 3-5). FULL: all 16 rows live, so the sums stay in registers.
template <int FULL>
void row_tile(const Operands& o, int64_t r0, int n, __m512* acc) {
  alignas(64) int32_t sums[2][16][16];
  const int8_t* x = o.xq + r0 * o.K;
  int64_t b = 0;
  for (; b + 2 <= o.blocks; b += 2) {
    _tile_zero(0);
    _tile_loadd(1, x + b * B, o.K);
    _tile_loadd(2, o.codes + b * 512, 64);
    _tile_zero(3);
    _tile_loadd(4, x + (b + 1) * B, o.K);
    _tile_loadd(5, o.codes + (b + 1) * 512, 64);
    if (o.bits == 4) {
      _tile_dpbsud(0, 1, 2);  // signed x, unsigned 4-bit codes
      _tile_dpbsud(3, 4, 5);
    } else {
      _tile_dpbssd(0, 1, 2);
      _tile_dpbssd(3, 4, 5);
    }
    _tile_stored(0, sums[0], 64);
    _tile_stored(3, sums[1], 64);
    scale_block<FULL>(o, sums[0], r0, n, b, acc);
    scale_block<FULL>(o, sums[1], r0, n, b + 1, acc);
  }
  if (b < o.blocks) {  // an odd block count's last block
    _tile_zero(0);
    _tile_loadd(1, x + b * B, o.K);
    _tile_loadd(2, o.codes + b * 512, 64);
    if (o.bits == 4) {
      _tile_dpbsud(0, 1, 2);
    } else {
      _tile_dpbssd(0, 1, 2);
    }
    _tile_stored(0, sums[0], 64);
    scale_block<FULL>(o, sums[0], r0, n, b, acc);
  }
}
#endif

}  // namespace

extern "C" {

void quantize_activations_q8(const float* x, int64_t M, int64_t K, int8_t* xq, float* dx, float* xs, int threads);  // quant_a8.cpp

int quant_a8_amx_ready() {
#if HAS_AMX
  static const bool ready = request_tiles();
  return ready ? 1 : 0;
#else
  return 0;
#endif
}

// The sizes quant_a8_lay_out_tiles writes: bytes of codes, and halves of scales (and of minimums).
int64_t quant_a8_tile_bytes(int64_t N, int64_t K, int bits) { return (N + 15) / 16 * bytes_per_column_tile(K, bits); }
int64_t quant_a8_tile_halves(int64_t N, int64_t K) { return (N + 15) / 16 * (K / B) * 16; }

// Codes [N, K / 2] (4-bit, G = 32) or [N, K] (8-bit, G a multiple of 32), scales and mins [N, K / G], as
// quant_matmul_a8 takes them -> tiles, d and m (m: 4-bit only) as quant_matmul_a8_tiles reads them.
void quant_a8_lay_out_tiles(const void* codes, int bits, const uint16_t* scales, const uint16_t* mins, int64_t N,
                            int64_t K, int64_t G, uint8_t* tiles, uint16_t* d, uint16_t* m) {
  const int64_t blocks = K / B, groups = K / G, per_tile = bytes_per_column_tile(K, bits);
  std::memset(tiles, 0, quant_a8_tile_bytes(N, K, bits));
  std::memset(d, 0, quant_a8_tile_halves(N, K) * 2);
  if (bits == 4) std::memset(m, 0, quant_a8_tile_halves(N, K) * 2);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = n / 16, c = n % 16;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t g = n * groups + b * B / G, half = (t * blocks + b) * 16 + c;
      d[half] = scales[g];
      if (bits == 4) m[half] = mins[g];
      for (int64_t q = 0; q < B; ++q) {  // code q of the block: tile row q / 4, byte q % 4 of column c
        const int64_t at = (q / 4) * 64 + c * 4 + q % 4;
        if (bits == 4) {
          const uint8_t byte = static_cast<const uint8_t*>(codes)[n * (K / 2) + b * (B / 2) + q % 16];
          const uint8_t code = q < 16 ? byte & 15 : byte >> 4;
          tiles[t * per_tile + (b / 2) * 512 + at] |= uint8_t(code << (4 * (b % 2)));
        } else {
          tiles[t * per_tile + b * 512 + at] = static_cast<const uint8_t*>(codes)[n * K + b * B + q];
        }
      }
    }
  }
}

// y [M, N] = float32 x [M, K], rounded to 8 bits per row and block as quant_matmul_a8_float rounds it, times
// weights laid out by quant_a8_lay_out_tiles. Call only where quant_a8_amx_ready().
void quant_matmul_a8_tiles(const float* x, int64_t M, int64_t K, const uint8_t* tiles, int bits, const uint16_t* d,
                           const uint16_t* m, int64_t N, float* y, int threads) {
#if HAS_AMX
  if (!quant_a8_amx_ready()) return;
  const int64_t blocks = K / B, rows = (M + 15) / 16 * 16, per_tile = bytes_per_column_tile(K, bits);
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> dx, xs;
  if (int64_t(xq.size()) < rows * K) xq.resize(rows * K);
  if (int64_t(dx.size()) < rows * blocks) dx.resize(rows * blocks), xs.resize(rows * blocks);
  quantize_activations_q8(x, M, K, xq.data(), dx.data(), xs.data(), threads);
  std::fill(xq.begin() + M * K, xq.begin() + rows * K, int8_t(0));  // the last tile's rows past M
  const Operands shared{xq.data(), dx.data(), xs.data(), K, blocks, nullptr, nullptr, nullptr, bits};
#pragma omp parallel num_threads(threads)
  {
    configure_tiles();
    std::vector<uint8_t> unpacked(bits == 4 ? blocks * 512 : 0);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < (N + 15) / 16; ++t) {
      Operands o = shared;
      if (bits == 4) unpack_pairs(tiles + t * per_tile, blocks, unpacked.data());
      o.codes = bits == 4 ? unpacked.data() : tiles + t * per_tile;
      o.d = d + t * blocks * 16, o.m = bits == 4 ? m + t * blocks * 16 : nullptr;
      const int64_t cols = std::min<int64_t>(16, N - t * 16);
      for (int64_t r0 = 0; r0 < M; r0 += 16) {
        const int n = int(std::min<int64_t>(16, M - r0));
        __m512 acc[16];
        for (auto& a : acc) a = _mm512_setzero_ps();
        if (n == 16) {
          row_tile<1>(o, r0, n, acc);
        } else {
          row_tile<0>(o, r0, n, acc);
        }
        for (int i = 0; i < n; ++i) _mm512_mask_storeu_ps(y + (r0 + i) * N + t * 16, __mmask16((1u << cols) - 1), acc[i]);
      }
    }
    _tile_release();
  }
#endif
}

}  // extern "C"
