// Many rows of 8-bit activations times weight blocks on AMX (Intel's tile unit), for the -a8 schemes.
//
// quant_a8.cpp's VNNI loop pays a conversion and a multiply-add per 64 byte products, to apply each block's
// scales: at many rows that is no faster than float32 multiply-adds. One AMX instruction (tdpbsud) multiplies
// a 16-row tile of x by a 16-column tile of weight codes over one block of 32: 8192 byte products into 16 x 16
// int32 sums, which are then scaled once each (d * dx, plus m * xs for 4-bit blocks) into float32 sums.
// The weights' codes are laid out as the tile unit reads them (four consecutive codes of one column side by
// side, 16 columns a row) once per column tile and call, and used for every row tile.
// Needs the kernel to be built with AMX (g++ -march=native on a CPU that has it) and Linux to grant the
// process the tile state (arch_prctl); quant_a8_amx_ready() says whether both hold.
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

void configure_tiles() {  // tile 0: sums 16 x 16 int32; 1: x 16 rows x 32 bytes; 2: codes 8 rows x 64 bytes
  TileConfig config;
  config.rows[0] = 16, config.colsb[0] = 64;
  config.rows[1] = 16, config.colsb[1] = 32;
  config.rows[2] = 8, config.colsb[2] = 64;
  _tile_loadconfig(&config);
}

// The codes of columns n0 .. n0 + 16 (fewer at the end: zeros) block by block, as tile 2 reads them:
// row k of a block holds codes 4k .. 4k + 3 of each of the 16 columns in turn. And each block's scales and
// minimums of the 16 columns, as floats.
void lay_out(const void* codes, int bits, const uint16_t* scales, const uint16_t* mins, int64_t n0, int64_t cols,
             int64_t K, int64_t G, uint8_t* tiles, float* d, float* m) {
  const int64_t blocks = K / B, groups = K / G;
  std::memset(tiles, 0, blocks * 512);
  std::memset(d, 0, blocks * 16 * sizeof(float));
  std::memset(m, 0, blocks * 16 * sizeof(float));
  const __m256i rows = _mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112);  // dword k of a column: tile row k
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t n = n0 + c, g = n * groups + b * B / G;
      __m256i column;  // the block's 32 codes in order
      if (bits == 4) {
        const __m128i p = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(codes) + n * (K / 2) + b * (B / 2)));
        column = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(p, 4), _mm_set1_epi8(15)), _mm_and_si128(p, _mm_set1_epi8(15)));
        m[b * 16 + c] = quant_blocks::half_to_float(mins[g]);
      } else {
        column = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const int8_t*>(codes) + n * K + b * B));
      }
      d[b * 16 + c] = quant_blocks::half_to_float(scales[g]);
      _mm256_i32scatter_epi32(reinterpret_cast<int*>(tiles + b * 512) + c, rows, column, 4);
    }
}
#endif

}  // namespace

extern "C" {

int quant_a8_amx_ready() {
#if HAS_AMX
  static const bool ready = request_tiles();
  return ready ? 1 : 0;
#else
  return 0;
#endif
}

// y [M, N] from quantize_activations_q8's xq, dx, xs of rows_padded >= M rows (a multiple of 16, the rows
// past M zeros) and weight blocks as quant_matmul_a8 takes them. Call only where quant_a8_amx_ready().
void quant_matmul_a8_amx(const int8_t* xq, const float* dx, const float* xs, int64_t M, int64_t rows_padded, int64_t K,
                         const void* codes, int bits, const uint16_t* scales, const uint16_t* mins, int64_t N, int64_t G,
                         float* y, int threads) {
#if HAS_AMX
  const int64_t blocks = K / B;
#pragma omp parallel num_threads(threads)
  {
    configure_tiles();
    std::vector<uint8_t> tiles(blocks * 512);
    std::vector<float> d(blocks * 16), m(blocks * 16);
    alignas(64) int32_t sums[16][16];
#pragma omp for schedule(static)
    for (int64_t n0 = 0; n0 < N; n0 += 16) {
      const int64_t cols = N - n0 < 16 ? N - n0 : 16;
      lay_out(codes, bits, scales, mins, n0, cols, K, G, tiles.data(), d.data(), m.data());
      const __mmask16 live = __mmask16((1u << cols) - 1);
      for (int64_t r0 = 0; r0 < rows_padded; r0 += 16) {
        __m512 acc[16];
        for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
        for (int64_t b = 0; b < blocks; ++b) {
          _tile_zero(0);
          _tile_loadd(1, xq + r0 * K + b * B, K);
          _tile_loadd(2, tiles.data() + b * 512, 64);
          if (bits == 4) {
            _tile_dpbsud(0, 1, 2);  // signed x, unsigned 4-bit codes
          } else {
            _tile_dpbssd(0, 1, 2);
          }
          _tile_stored(0, sums, 64);
          const __m512 dv = _mm512_loadu_ps(d.data() + b * 16), mv = _mm512_loadu_ps(m.data() + b * 16);
          for (int i = 0; i < 16; ++i) {
            const __m512 scaled = _mm512_mul_ps(dv, _mm512_set1_ps(dx[(r0 + i) * blocks + b]));
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[i])), scaled, acc[i]);
            if (bits == 4) acc[i] = _mm512_fmadd_ps(mv, _mm512_set1_ps(xs[(r0 + i) * blocks + b]), acc[i]);
          }
        }
        for (int i = 0; i < 16 && r0 + i < M; ++i) _mm512_mask_storeu_ps(y + (r0 + i) * N + n0, live, acc[i]);
      }
    }
    _tile_release();
  }
#endif
}

}  // extern "C"
