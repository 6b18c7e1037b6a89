// Which kernel multiplies a step of an -a8 layer (Int8ActivationLinear, decode_stack.cpp): the choice by the
// step's rows and the CPU, in one place. Thresholds are set from Python (weights/int8_activations.py says why
// each is what it is; the tests move them to reach every path).
#include <cstdint>

extern "C" {

void quant_matmul_a8_float(const float* x, int64_t M, int64_t K, const void* codes, int bits, const uint16_t* scales,
                           const uint16_t* mins, int64_t N, int64_t G, float* y, int threads);  // quant_a8.cpp

int quant_a8_amx_ready(), quant_bf16_amx_ready(), quant_a8_panels_ready();  // quant_a8_amx.cpp, quant_bf16_amx.cpp, quant_a8_panels.cpp
void quant_matmul_a8_tiles(const float* x, int64_t M, int64_t K, const uint8_t* tiles, int bits, const uint16_t* d,
                           const uint16_t* m, int64_t N, float* y, int threads);
void quant_matmul_bf16_tiles(const float* x, int64_t M, int64_t K, const uint8_t* tiles, int bits, const uint16_t* d,
                             const uint16_t* m, int64_t N, float* y, int threads);
void quant_matmul_a8_panels(const float* x, int64_t M, int64_t K, const uint8_t* tiles, int bits, const uint16_t* d,
                            const uint16_t* m, int64_t N, float* y, int threads);

static int64_t amx_rows = 2;    // steps with at least this many rows go to the tile unit, where the layer has tiles
static int64_t bf16_rows = 64;  // and with this many, to its bfloat16 multiplies (quant_bf16_amx.cpp says why)
void quant_a8_set_amx_rows(int64_t rows, int64_t bf16) { amx_rows = rows, bf16_rows = bf16; }
static int64_t panel_rows = 1;  // steps the tile unit does not take, from this many rows: the VNNI panels
void quant_a8_set_panel_rows(int64_t rows) { panel_rows = rows; }

// The layers' entry. Where the layer's weights were laid out in tiles (not null: quant_a8_lay_out_tiles, made
// where the CPU has AMX or AVX512-VNNI): with AMX, steps of bf16_rows rows or more (prefill chunks) on its bfloat16
// multiplies and of amx_rows or more on its 8-bit ones; the others (all steps without AMX) of panel_rows or more
// on AVX512-VNNI across the tiles' 16 columns. Else the 8-bit loop over the codes as stored.
void quant_matmul_a8_layer(const float* x, int64_t M, int64_t K, const void* codes, int bits, const uint16_t* scales,
                           const uint16_t* mins, int64_t N, int64_t G, const uint8_t* tiles, const uint16_t* tile_scales,
                           const uint16_t* tile_mins, float* y, int threads) {
  if (tiles && M >= bf16_rows && quant_bf16_amx_ready()) {
    quant_matmul_bf16_tiles(x, M, K, tiles, bits, tile_scales, tile_mins, N, y, threads);
  } else if (tiles && M >= amx_rows && quant_a8_amx_ready()) {
    quant_matmul_a8_tiles(x, M, K, tiles, bits, tile_scales, tile_mins, N, y, threads);
  } else if (tiles && M >= panel_rows && quant_a8_panels_ready()) {
    quant_matmul_a8_panels(x, M, K, tiles, bits, tile_scales, tile_mins, N, y, threads);
  } else {
    quant_matmul_a8_float(x, M, K, codes, bits, scales, mins, N, G, y, threads);
  }
}

}  // extern "C"
