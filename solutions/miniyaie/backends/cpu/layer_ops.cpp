// The element-wise layers of a decoder step on a CPU, each one pass over memory (float32).
//
// torch runs `x + residual`, RMSNorm, RoPE and SiLU-times-up as chains of small ops, each
// reading and writing a whole tensor (RMSNorm alone is six: add, pow, mean, add, rsqrt, two
// muls). These loops do each layer in one pass, row by row, rows shared out on OpenMP threads
// once there are enough of them to pay for waking the threads (`threads`: torch's count).
#include <cmath>
#include <cstdint>

namespace {
constexpr int64_t PARALLEL_ELEMENTS = 1 << 15;  // below this, one thread is faster
}

// sum = x + residual (or x where residual is null); out = weight * sum / sqrt(mean(sum^2) + eps).
// `sum` may be x itself, `out` may not alias either.
extern "C" void add_rms_norm(const float* x, const float* residual, const float* weight, float eps, int64_t rows,
                             int64_t hidden, float* sum, float* out, int threads) {
#pragma omp parallel for num_threads(threads) if (rows * hidden >= PARALLEL_ELEMENTS)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * hidden;
    float* sr = sum + r * hidden;
    float squares = 0.f;
    if (residual) {
      const float* rr = residual + r * hidden;
#pragma omp simd reduction(+ : squares)
      for (int64_t i = 0; i < hidden; ++i) {
        sr[i] = xr[i] + rr[i];
        squares += sr[i] * sr[i];
      }
    } else {
#pragma omp simd reduction(+ : squares)
      for (int64_t i = 0; i < hidden; ++i) squares += xr[i] * xr[i];
      sr = const_cast<float*>(xr);
    }
    const float inv = 1.f / std::sqrt(squares / float(hidden) + eps);
    float* o = out + r * hidden;
#pragma omp simd
    for (int64_t i = 0; i < hidden; ++i) o[i] = weight[i] * (sr[i] * inv);
  }
}

// Rotates, in place, every head of every row of x [rows, heads, head_dim] by its row's angles:
// dimension i pairs with i + head_dim/2 ("rotate half"); cos and sin are [rows, head_dim].
// Row r starts at x + r * row_stride: q and k may be slices of one merged q/k/v projection.
extern "C" void rotary_in_place(float* x, const float* cos, const float* sin, int64_t rows, int64_t heads,
                                int64_t head_dim, int64_t row_stride, int threads) {
  const int64_t half = head_dim / 2;
#pragma omp parallel for num_threads(threads) if (rows * heads * head_dim >= PARALLEL_ELEMENTS)
  for (int64_t r = 0; r < rows; ++r) {
    const float* c = cos + r * head_dim;
    const float* s = sin + r * head_dim;
    for (int64_t h = 0; h < heads; ++h) {
      float* a = x + r * row_stride + h * head_dim;
      float* b = a + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = a[i], x2 = b[i];
        a[i] = x1 * c[i] - x2 * s[i];
        b[i] = x2 * c[i + half] + x1 * s[i + half];
      }
    }
  }
}

// gate[i] = silu(gate[i]) * up[i], in place, over n elements.
extern "C" void silu_mul_in_place(float* gate, const float* up, int64_t n, int threads) {
#pragma omp parallel for simd num_threads(threads) if (n >= PARALLEL_ELEMENTS)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.f + std::exp(-g)) * up[i];
  }
}

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, width + i]: one row of the merged gate/up projection
// holds the gate's `width` features, then the up projection's.
extern "C" void silu_mul_rows(const float* gate_up, int64_t rows, int64_t width, float* out, int threads) {
#pragma omp parallel for num_threads(threads) if (rows * width >= PARALLEL_ELEMENTS)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate_up + r * 2 * width;
    const float* u = g + width;
    float* o = out + r * width;
#pragma omp simd
    for (int64_t i = 0; i < width; ++i) o[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
  }
}
