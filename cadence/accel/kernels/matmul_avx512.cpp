// cadence_native::mm: float32 `a @ b (+ bias)` on the CPU with AVX-512, for the mid-sized
// multiplies of small networks (256 rows by 64 x 64: PPO's layers).
//
// Why: PyTorch multiplies float32 matrices with MKL, which takes its AVX2 code on AMD
// processors; a 256 x 64 by 64 x 64 multiply then runs at about 100 GFLOP/s on one Zen 5
// core. oneDNN runs AVX-512 there but costs about 10 us per call, as much as the
// multiply. This kernel has neither cost: about 8.5 us (250 GFLOP/s) for that shape.
//
// The scheme is the textbook register-blocked one. C is computed in column panels of up
// to 64 (four 16-float vectors); each panel in row blocks of R rows whose R x 64 sums stay
// in registers while k runs: per k, one row of B (four loads) and R broadcasts of A feed
// 4R fused multiply-adds. B must have unit column stride (it is copied into that layout
// otherwise: a transposed weight, 16 KB at 64 x 64); A may have any strides, since only
// its scalars are read, which serves both `x @ w.T` and the backward's `g.T @ x`.
// Built at first use by cadence/accel/native.py, only on CPUs with AVX-512.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <immintrin.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>

namespace {

constexpr int64_t kPanel = 64;     // columns per panel: four vectors of 16 floats
constexpr int64_t kRowChunk = 48;  // the unit of a thread's share of the rows

struct Operands {
  const float* a;
  int64_t a_row_stride, a_col_stride;
  const float* b;  // unit column stride
  int64_t b_row_stride;
  float* c;  // contiguous rows
  int64_t c_row_stride;
  const float* bias;  // contiguous, or null
  int64_t k;
};

// C[rows R, panel columns] = A[rows, :] @ B[:, panel] (+ bias[panel]); `last` masks the
// columns of the panel's last vector that exist.
template <int R, int V>
inline void block(const Operands& p, int64_t row, int64_t col, __mmask16 last) {
  __m512 sum[R][V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) {
    const __mmask16 mask = v == V - 1 ? last : __mmask16(0xFFFF);
    const __m512 start =
        p.bias ? _mm512_maskz_loadu_ps(mask, p.bias + col + 16 * v) : _mm512_setzero_ps();
#pragma GCC unroll 24
    for (int r = 0; r < R; ++r) sum[r][v] = start;
  }
  const float* a = p.a + row * p.a_row_stride;
  const float* b = p.b + col;
  for (int64_t k = 0; k < p.k; ++k) {
    __m512 b_row[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const __mmask16 mask = v == V - 1 ? last : __mmask16(0xFFFF);
      b_row[v] = _mm512_maskz_loadu_ps(mask, b + k * p.b_row_stride + 16 * v);
    }
    const float* a_col = a + k * p.a_col_stride;
#pragma GCC unroll 24
    for (int r = 0; r < R; ++r) {
      const __m512 a_rk = _mm512_set1_ps(a_col[r * p.a_row_stride]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) sum[r][v] = _mm512_fmadd_ps(a_rk, b_row[v], sum[r][v]);
    }
  }
  float* c = p.c + row * p.c_row_stride + col;
#pragma GCC unroll 24
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const __mmask16 mask = v == V - 1 ? last : __mmask16(0xFFFF);
      _mm512_mask_storeu_ps(c + r * p.c_row_stride + 16 * v, mask, sum[r][v]);
    }
  }
}

// Rows [begin, end) of one panel of V vectors: blocks of as many rows as the 32 vector
// registers hold sums for (R x V of them, plus V for B's row and one broadcast), then 4s
// and 1s.
template <int V>
void panel(const Operands& p, int64_t begin, int64_t end, int64_t col, __mmask16 last) {
  constexpr int R = V == 1 ? 24 : V == 2 ? 12 : V == 3 ? 8 : 6;
  int64_t row = begin;
  for (; row + R <= end; row += R) block<R, V>(p, row, col, last);
  for (; row + 4 <= end; row += 4) block<4, V>(p, row, col, last);
  for (; row < end; ++row) block<1, V>(p, row, col, last);
}

void multiply_rows(const Operands& p, int64_t begin, int64_t end, int64_t columns) {
  for (int64_t col = 0; col < columns; col += kPanel) {
    const int64_t width = std::min(kPanel, columns - col);
    const int vectors = static_cast<int>((width + 15) / 16);
    const int tail = static_cast<int>(width - 16 * (vectors - 1));
    const __mmask16 last = static_cast<__mmask16>((1u << tail) - 1);
    switch (vectors) {
      case 1: panel<1>(p, begin, end, col, last); break;
      case 2: panel<2>(p, begin, end, col, last); break;
      case 3: panel<3>(p, begin, end, col, last); break;
      default: panel<4>(p, begin, end, col, last); break;
    }
  }
}

// `b` copied into unit column stride, e.g. a transposed weight (`w.T`), in 16 x 16 tiles
// that keep both sides in the L1 cache (ATen's copy takes 4 us at 64 x 64).
at::Tensor columns_contiguous(const at::Tensor& b) {
  const int64_t rows = b.size(0), columns = b.size(1);
  const int64_t row_stride = b.stride(0), col_stride = b.stride(1);
  at::Tensor out = at::empty({rows, columns}, b.options());
  const float* src = b.const_data_ptr<float>();
  float* dst = out.mutable_data_ptr<float>();
  constexpr int64_t kTile = 16;
  for (int64_t c0 = 0; c0 < columns; c0 += kTile) {
    const int64_t c1 = std::min(columns, c0 + kTile);
    for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
      const int64_t r1 = std::min(rows, r0 + kTile);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) dst[r * columns + c] = src[r * row_stride + c * col_stride];
    }
  }
  return out;
}

at::Tensor mm(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "cadence_native::mm takes 2-D a and b, got ",
              a.dim(), "-D and ", b.dim(), "-D");
  TORCH_CHECK(a.size(1) == b.size(0), "cadence_native::mm: a is ", a.sizes(), ", b is ",
              b.sizes(), " (a's columns must equal b's rows)");
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat,
              "cadence_native::mm multiplies float32 only");
  TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu(), "cadence_native::mm is CPU only");
  const int64_t rows = a.size(0), inner = a.size(1), columns = b.size(1);
  at::Tensor bias_rows;
  if (bias.has_value()) {
    TORCH_CHECK(bias->numel() == columns && bias->scalar_type() == at::kFloat &&
                    bias->device().is_cpu(),
                "cadence_native::mm: bias must be a CPU float32 tensor of ", columns,
                " elements");
    bias_rows = bias->contiguous();
  }
  if (inner == 0 || rows == 0 || columns == 0) {
    at::Tensor c = at::zeros({rows, columns}, a.options());
    return bias.has_value() ? c.add_(bias_rows.view({1, columns})) : c;
  }
  at::Tensor b_rows = b.stride(1) == 1 ? b : columns_contiguous(b);
  at::Tensor c = at::empty({rows, columns}, a.options());
  const Operands p{a.const_data_ptr<float>(),
                   a.stride(0),
                   a.stride(1),
                   b_rows.const_data_ptr<float>(),
                   b_rows.stride(0),
                   c.mutable_data_ptr<float>(),
                   columns,
                   bias.has_value() ? bias_rows.const_data_ptr<float>() : nullptr,
                   inner};
  // Threads split the rows in chunks of at least 2^17 multiply-adds.
  const int64_t chunk_macs = kRowChunk * inner * columns;
  const int64_t grain = kRowChunk * std::max<int64_t>(1, (int64_t{1} << 17) / chunk_macs);
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    multiply_rows(p, begin, end, columns);
  });
  return c;
}

at::Tensor call_mm(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& bias) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("cadence_native::mm", "")
                       .typed<decltype(mm)>();
  return op.call(a, b, bias);
}

// The backward in C++: a Python one (torch.library.register_autograd) costs more per eager
// call than the kernel saves at 64 x 64. Compiled graphs trace it into the same op.
class Multiply : public torch::autograd::Function<Multiply> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& a,
                            const at::Tensor& b, const std::optional<at::Tensor>& bias) {
    at::AutoDispatchBelowADInplaceOrView below;
    ctx->save_for_backward({a, b});
    // Without a bias the function has two inputs: needs_input_grad(2) would be out of range.
    ctx->saved_data["bias"] = bias.has_value();
    return call_mm(a, b, bias);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& a = saved[0];
    const at::Tensor& b = saved[1];
    const at::Tensor& grad = grads[0];
    at::Tensor grad_a, grad_b, grad_bias;
    if (ctx->needs_input_grad(0)) grad_a = call_mm(grad, b.t(), std::nullopt);
    if (ctx->needs_input_grad(1)) {
      // A weight's transpose (`w.T`) gets its gradient in the weight's own layout.
      const bool transposed = b.stride(0) == 1 && b.stride(1) != 1;
      grad_b = transposed ? call_mm(grad.t(), a, std::nullopt).t()
                          : call_mm(a.t(), grad, std::nullopt);
    }
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2)) grad_bias = grad.sum(0);
    return {grad_a, grad_b, grad_bias};
  }
};

at::Tensor mm_autograd(const at::Tensor& a, const at::Tensor& b,
                       const std::optional<at::Tensor>& bias) {
  return Multiply::apply(a, b, bias);
}

}  // namespace

TORCH_LIBRARY(cadence_native, m) {
  m.def("mm(Tensor a, Tensor b, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(cadence_native, CPU, m) { m.impl("mm", &mm); }

TORCH_LIBRARY_IMPL(cadence_native, Autograd, m) { m.impl("mm", &mm_autograd); }
