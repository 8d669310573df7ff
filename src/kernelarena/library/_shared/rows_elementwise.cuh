// The library's element-wise CUDA kernels over rows (scale, the gated activations): one template,
// the math a parameter.
//
// out[r, c] = op(x[r, c]) (Op::kInputs == 1), or op(x[r, c], x[r, cols + c]) (kInputs == 2: the
// gate and up halves of a row of 2 cols), computed in float32 and rounded once.
// - 16-byte accesses when x, out, the width and the row strides allow it (checked on the host;
//   cols % kVec keeps the up half 16-byte aligned too), else one element per access. Each thread
//   loads kUnroll accesses of each input before it computes: 32 to 64 bytes in flight a thread.
// - Loads stream (ld.global.cs, evict first): x is read once. Stores keep the default policy since
//   out is the next kernel's input and may stay in the 50-60 MB L2 when it fits.
// - A block of 256 threads is (threads across a row) x (rows); grid.x tiles the columns and grid.y
//   the rows, looping when rows exceed gridDim.y's limit of 65535. Offsets are 64-bit: a million
//   rows of 16K elements is 2^34 elements.
#pragma once

#include <cuda_runtime.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>

#include <algorithm>
#include <cstdint>

#include "_shared/device.cuh"
#include "_shared/vector_io.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 2;
constexpr int64_t kMaxGridY = 65535;

template <typename Op, typename T, int kVec>
__global__ void __launch_bounds__(kThreads)
    rows_elementwise_kernel(const T* __restrict__ x, T* __restrict__ out, Op op, int64_t rows, int64_t cols,
                            int64_t x_stride, int64_t out_stride) {
  using P = Pack<T, kVec>;
  const int64_t packs_per_row = cols / kVec;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x * kUnroll + threadIdx.x;
  const int64_t row_step = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t row = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; row < rows;
       row += row_step) {
    const T* x_row = x + row * x_stride;
    const P* src = reinterpret_cast<const P*>(x_row);
    const P* up = reinterpret_cast<const P*>(x_row + cols);  // read only when kInputs == 2
    P* dst = reinterpret_cast<P*>(out + row * out_stride);
    P a[kUnroll], b[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int64_t i = first + static_cast<int64_t>(k) * blockDim.x;
      if (i < packs_per_row) {
        a[k] = load_streaming(src + i);
        if constexpr (Op::kInputs == 2) b[k] = load_streaming(up + i);
      }
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int64_t i = first + static_cast<int64_t>(k) * blockDim.x;
      if (i < packs_per_row) {
        P result;
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          if constexpr (Op::kInputs == 2) {
            result.v[e] = from_float<T>(op(to_float(a[k].v[e]), to_float(b[k].v[e])));
          } else {
            result.v[e] = from_float<T>(op(to_float(a[k].v[e])));
          }
        }
        dst[i] = result;
      }
    }
  }
}

struct Launch {
  dim3 grid;
  dim3 block;
};

// Threads across a row cover its packs kUnroll at a time; the rest of the block takes more rows.
// Shapes too small to give every SM two blocks get fewer rows per block, then narrower blocks.
inline Launch plan(int64_t rows, int64_t packs_per_row, int sms) {
  int64_t tx = 1;
  while (tx < kThreads && tx * kUnroll < packs_per_row) tx *= 2;
  int64_t ty = kThreads / tx;
  auto blocks = [&] { return ceil_div(packs_per_row, tx * kUnroll) * ceil_div(rows, ty); };
  while (ty > 1 && blocks() < 2 * sms) ty /= 2;
  while (tx > 32 && blocks() < 2 * sms) tx /= 2;
  const int64_t row_blocks = std::min(ceil_div(rows, ty), kMaxGridY);
  const int64_t col_blocks = ceil_div(packs_per_row, tx * kUnroll);
  return {dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(row_blocks)),
          dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty))};
}

template <typename Op, typename T>
void launch_rows_elementwise(tvm::ffi::TensorView x, tvm::ffi::TensorView out, const Op& op, cudaStream_t stream) {
  const T* x_ptr = data_of<T>(x);
  T* out_ptr = data_of<T>(out);
  const int64_t rows = out.size(0), cols = out.size(1);
  const int64_t x_stride = x.stride(0), out_stride = out.stride(0);
  constexpr int kVec = 16 / sizeof(T);
  const bool vectorized = aligned16(x_ptr) && aligned16(out_ptr) && cols % kVec == 0 &&
                          (rows == 1 || (x_stride % kVec == 0 && out_stride % kVec == 0));
  const int sms = multiprocessors(x.device().device_id);
  if (vectorized) {
    const Launch l = plan(rows, cols / kVec, sms);
    rows_elementwise_kernel<Op, T, kVec><<<l.grid, l.block, 0, stream>>>(x_ptr, out_ptr, op, rows, cols, x_stride,
                                                                        out_stride);
  } else {
    const Launch l = plan(rows, cols, sms);
    rows_elementwise_kernel<Op, T, 1><<<l.grid, l.block, 0, stream>>>(x_ptr, out_ptr, op, rows, cols, x_stride,
                                                                     out_stride);
  }
}

// The entry of an element-wise operator: x [rows, Op::kInputs * cols] and out [rows, cols] of one
// dtype, rows contiguous; errors name Op::kName.
template <typename Op>
void run_rows_elementwise(tvm::ffi::TensorView x, tvm::ffi::TensorView out, const Op& op) {
  const char* name = Op::kName;
  TVM_FFI_ICHECK(x.ndim() == 2 && out.ndim() == 2) << name << ": x and out must be 2-D";
  TVM_FFI_ICHECK(x.size(0) == out.size(0) && x.size(1) == Op::kInputs * out.size(1))
      << name << (Op::kInputs == 2 ? ": x must be [rows, 2 d] and out [rows, d]" : ": out must have the shape of x");
  TVM_FFI_ICHECK(x.dtype() == out.dtype()) << name << ": out must have the dtype of x";
  TVM_FFI_ICHECK(x.device().device_type == kDLCUDA && out.device().device_type == kDLCUDA)
      << name << ": x and out must be on a CUDA device";
  if (out.size(0) == 0 || out.size(1) == 0) return;
  TVM_FFI_ICHECK(x.stride(1) == 1 && out.stride(1) == 1) << name << ": the last dimension must be contiguous";
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(x.device().device_type, x.device().device_id));
  with_float_type(x.dtype(), name, [&](auto type) { launch_rows_elementwise<Op, decltype(type)>(x, out, op, stream); });
  check_launch(name);
}

}  // namespace
