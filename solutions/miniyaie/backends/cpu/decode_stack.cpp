// A decode step's layers in one call: what CUDA graphs do on a GPU (backends/cuda_graphs.py), for the CPU.
//
// At one request a decode step of SmolLM2 on its Q4_1 blocks spent about 13 ms a token in Python
// between its kernels (2-core Xeon, 2026-11-29): some 15 calls per layer (two norms, a merged q/k/v
// projection, two rotations, the K/V writes, attention, o, gate/up, SiLU, down, adds), each wrapped
// in module calls, shape checks and new tensors. The kernels themselves took about as long.
// This loop calls the same kernels (layer_ops.cpp, quant_matmul.cpp, quant_a8.cpp,
// paged_decode_attention.cpp) in the same order with the same arguments as the Python layers do
// (model/transformer.py on the cpu backend); decode_stack.py says when a step comes here. With LoRA
// adapters (chapter 11) each linear's deltas for the step's rows are added right after it, by the kernel
// the wrapped projections call (lora_delta.cpp); decode_stack_lora.py lays out what it reads.
#include <cstdint>
#include <cstring>
#include <vector>

extern "C" {
void add_rms_norm(const float* x, const float* residual, const float* weight, float eps, int64_t rows, int64_t hidden,
                  float* sum, float* out, int threads);
void rotary_in_place(float* x, const float* cos, const float* sin, int64_t rows, int64_t heads, int64_t head_dim,
                     int64_t row_stride, int threads);
void silu_mul_rows(const float* gate_up, int64_t rows, int64_t width, float* out, int threads);
void quant_matmul_q4(const float* x, int64_t M, int64_t K, const uint8_t* codes, const uint16_t* scales,
                     const uint16_t* mins, int64_t N, int64_t G, float* y, int threads);
void quant_matmul_q8(const float* x, int64_t M, int64_t K, const int8_t* codes, const uint16_t* scales, int64_t N,
                     int64_t G, float* y, int threads);
void quant_matmul_rows(const float* x, int64_t M, int64_t K, const void* codes, int bits, const uint16_t* scales,
                       const uint16_t* mins, int64_t N, int64_t G, float* y, int threads);
void quant_matmul_a8_layer(const float* x, int64_t M, int64_t K, const void* codes, int bits, const uint16_t* scales,
                           const uint16_t* mins, int64_t N, int64_t G, const uint8_t* tiles, const uint16_t* tile_scales,
                           const uint16_t* tile_mins, float* y, int threads);
void paged_decode_attention(const float* q, const void* k_cache, const void* v_cache, const int64_t* block_tables,
                            int64_t table_width, const int64_t* rows, const int64_t* seq_lens, int64_t num_seqs,
                            const int64_t* group_starts, int64_t num_groups, int64_t num_heads, int64_t num_kv_heads,
                            int64_t head_dim, int64_t block_size, float scale, float* out, int num_threads, int cache_type);
void lora_delta(const float* x, int64_t x_stride, int64_t in, const int64_t* order, const int64_t* starts,
                const int64_t* lengths, const int64_t* slots, int64_t segments, const float* a, int64_t a_slot_stride,
                int64_t a_row_stride, int64_t rank, const float* scaling, const int64_t* members, int64_t num_members,
                int threads);
}

namespace {

// A layer's row of the table decode_stack.py builds (int64s): the two norms' weights, four linears of
// LINEAR fields each (codes, bits, scales, mins or 0, out features, in features, group, bias or 0,
// 1 where the activations are rounded to 8 bits, then the codes, scales and mins laid out for AMX tiles or 0s),
// then the layer's K and V caches.
enum : int64_t { LINEAR = 12, INPUT_NORM = 0, POST_NORM, QKV, O = QKV + LINEAR, GATE_UP = O + LINEAR,
                 DOWN = GATE_UP + LINEAR, K_CACHE = DOWN + LINEAR, V_CACHE, FIELDS };

template <typename T>
T* at(const int64_t* row, int64_t field) { return reinterpret_cast<T*>(row[field]); }

// A layer's row of the LoRA table (decode_stack_lora.py), the four linears in the same order, LORA_LINEAR
// fields each: the adapters' A (address, slot and row strides), how many members the linear merges (q/k/v: 3,
// gate/up: 2, o and down: 1), then per member its B (address, slot and row strides, out features).
enum : int64_t { MAX_MEMBERS = 3, LORA_LINEAR = 4 + 4 * MAX_MEMBERS, LORA_FIELDS = 4 * LORA_LINEAR };
enum : int64_t { QKV_LORA, O_LORA, GATE_UP_LORA, DOWN_LORA };  // the four linears' places in a layer's LoRA row
// A step with LoRA rows passes (int64s) the table, the rank, the scalings and the step's segments (rows by slot).
enum : int64_t { STEP_TABLE, STEP_RANK, STEP_SCALING, STEP_ORDER, STEP_STARTS, STEP_LENGTHS, STEP_SLOTS, STEP_SEGMENTS };

// y [rows, width] += the LoRA deltas of x [rows, in] through linear `which` (QKV_LORA...) of layer l; its members side by
// side in y. The step's segments say which rows have an adapter, and which.
void add_lora(const int64_t* step, int64_t l, int64_t which, const float* x, int64_t in, float* y, int64_t width,
              int threads) {
  if (step == nullptr) return;  // no row of the step has an adapter
  const int64_t* f = at<const int64_t>(step, STEP_TABLE) + l * LORA_FIELDS + which * LORA_LINEAR;
  int64_t members[6 * MAX_MEMBERS], column = 0;  // as lora_delta reads them: B, its strides, out, y, y's stride
  for (int64_t j = 0; j < f[3]; ++j) {
    const int64_t* b = f + 4 + 4 * j;
    const int64_t member[6] = {b[0], b[1], b[2], b[3], reinterpret_cast<int64_t>(y + column), width};
    std::memcpy(members + 6 * j, member, sizeof(member));
    column += b[3];
  }
  lora_delta(x, in, in, at<const int64_t>(step, STEP_ORDER), at<const int64_t>(step, STEP_STARTS),
             at<const int64_t>(step, STEP_LENGTHS), at<const int64_t>(step, STEP_SLOTS), step[STEP_SEGMENTS],
             at<const float>(f, 0), f[1], f[2], step[STEP_RANK], at<const float>(step, STEP_SCALING), members, f[3], threads);
}

// y [M, N] = x [M, K] @ W^T (+ bias), the kernel QuantizedLinear (or Int8ActivationLinear) picks for M rows.
void linear(const int64_t* f, const float* x, int64_t M, float* y, int threads) {
  const void* codes = at<const void>(f, 0);
  const int bits = int(f[1]);
  const uint16_t *scales = at<const uint16_t>(f, 2), *mins = at<const uint16_t>(f, 3);
  const int64_t N = f[4], K = f[5], G = f[6];
  if (f[8]) {
    quant_matmul_a8_layer(x, M, K, codes, bits, scales, mins, N, G, at<const uint8_t>(f, 9), at<const uint16_t>(f, 10),
                          at<const uint16_t>(f, 11), y, threads);
  } else if (M > 1) {
    quant_matmul_rows(x, M, K, codes, bits, scales, mins, N, G, y, threads);
  } else if (bits == 4) {
    quant_matmul_q4(x, 1, K, static_cast<const uint8_t*>(codes), scales, mins, N, G, y, threads);
  } else {
    quant_matmul_q8(x, 1, K, static_cast<const int8_t*>(codes), scales, N, G, y, threads);
  }
  if (const float* bias = at<const float>(f, 7))
    for (int64_t r = 0; r < M; ++r)
      for (int64_t n = 0; n < N; ++n) y[r * N + n] += bias[n];
}

// torch's float -> bfloat16: to nearest, ties to even; NaN stays NaN.
uint16_t to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffff) > 0x7f800000) return 0x7fc0;  // a bit test: -ffast-math drops value != value
  return uint16_t((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

// Row r of `rows` (width floats, `stride` apart) into cache slot slots[r] (cache_type 0: float32, 1: bfloat16).
void write_cache(void* cache, int cache_type, const float* rows, int64_t stride, int64_t width, const int64_t* slots,
                 int64_t M) {
  for (int64_t r = 0; r < M; ++r) {
    const float* src = rows + r * stride;
    if (cache_type == 1) {
      uint16_t* dst = static_cast<uint16_t*>(cache) + slots[r] * width;
      for (int64_t i = 0; i < width; ++i) dst[i] = to_bf16(src[i]);
    } else {
      std::memcpy(static_cast<float*>(cache) + slots[r] * width, src, width * sizeof(float));
    }
  }
}

}  // namespace

extern "C" {

int decode_stack_fields() { return int(FIELDS); }
int decode_stack_lora_fields() { return int(LORA_FIELDS); }

// The residual stream x [M, hidden] of M decode rows through num_layers layers, in place (the final norm
// is the caller's). cos, sin [M, head_dim]; slots [M] where each row's K/V go; the attention arguments
// as paged_decode_attention takes them (rows, seq_lens, block tables, groups of the step's rows);
// lora: null, or the step's LoRA (STEP_* above).
void decode_stack(float* x, int64_t M, int64_t hidden, const int64_t* layers, int64_t num_layers, float eps,
                  const float* cos, const float* sin, const int64_t* slots, int64_t num_heads, int64_t num_kv_heads,
                  int64_t head_dim, const int64_t* block_tables, int64_t table_width, const int64_t* rows,
                  const int64_t* seq_lens, const int64_t* group_starts, int64_t num_groups, int64_t block_size,
                  float scale, int cache_type, int threads, const int64_t* lora) {
  const int64_t q_width = num_heads * head_dim, kv_width = num_kv_heads * head_dim;
  const int64_t qkv_width = q_width + 2 * kv_width;
  const int64_t intermediate = layers[GATE_UP + 4] / 2;
  thread_local std::vector<float> normed, qkv, q, attended, h, sum, gate_up, act, down;
  for (auto* buffer : {&normed, &h, &sum, &down}) buffer->resize(M * hidden);
  qkv.resize(M * qkv_width), q.resize(M * q_width), attended.resize(M * q_width);
  gate_up.resize(M * 2 * intermediate), act.resize(M * intermediate);
  for (int64_t l = 0; l < num_layers; ++l) {
    const int64_t* layer = layers + l * FIELDS;
    add_rms_norm(x, nullptr, at<const float>(layer, INPUT_NORM), eps, M, hidden, x, normed.data(), threads);
    linear(layer + QKV, normed.data(), M, qkv.data(), threads);
    add_lora(lora, l, QKV_LORA, normed.data(), hidden, qkv.data(), qkv_width, threads);
    rotary_in_place(qkv.data(), cos, sin, M, num_heads, head_dim, qkv_width, threads);
    rotary_in_place(qkv.data() + q_width, cos, sin, M, num_kv_heads, head_dim, qkv_width, threads);
    write_cache(at<void>(layer, K_CACHE), cache_type, qkv.data() + q_width, qkv_width, kv_width, slots, M);
    write_cache(at<void>(layer, V_CACHE), cache_type, qkv.data() + q_width + kv_width, qkv_width, kv_width, slots, M);
    for (int64_t r = 0; r < M; ++r) std::memcpy(q.data() + r * q_width, qkv.data() + r * qkv_width, q_width * sizeof(float));
    paged_decode_attention(q.data(), at<const void>(layer, K_CACHE), at<const void>(layer, V_CACHE), block_tables,
                           table_width, rows, seq_lens, M, group_starts, num_groups, num_heads, num_kv_heads, head_dim,
                           block_size, scale, attended.data(), threads, cache_type);
    linear(layer + O, attended.data(), M, h.data(), threads);
    add_lora(lora, l, O_LORA, attended.data(), q_width, h.data(), hidden, threads);
    add_rms_norm(h.data(), x, at<const float>(layer, POST_NORM), eps, M, hidden, sum.data(), normed.data(), threads);
    linear(layer + GATE_UP, normed.data(), M, gate_up.data(), threads);
    add_lora(lora, l, GATE_UP_LORA, normed.data(), hidden, gate_up.data(), 2 * intermediate, threads);
    silu_mul_rows(gate_up.data(), M, intermediate, act.data(), threads);
    linear(layer + DOWN, act.data(), M, down.data(), threads);
    add_lora(lora, l, DOWN_LORA, act.data(), intermediate, down.data(), hidden, threads);
    for (int64_t i = 0; i < M * hidden; ++i) x[i] = sum[i] + down[i];
  }
}

}  // extern "C"
