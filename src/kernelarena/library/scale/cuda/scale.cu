// scale in CUDA C++: out[r, c] = x[r, c] * factor, computed in float32 and rounded once.
//
// Memory-bound, so the kernel's job is to keep HBM busy: the element-wise row kernel of
// library/_shared/rows_elementwise.cuh (16-byte streaming loads, kUnroll accesses in flight a
// thread, blocks of (threads across a row) x (rows), 64-bit offsets), with the factor as its
// operator.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>

#include "_shared/rows_elementwise.cuh"

namespace {

struct Scale {
  static constexpr const char* kName = "scale";
  static constexpr int kInputs = 1;
  float factor;
  __device__ __forceinline__ float operator()(float v) const { return v * factor; }
};

}  // namespace

void run(tvm::ffi::TensorView x, double factor, tvm::ffi::TensorView out) {
  run_rows_elementwise(x, out, Scale{static_cast<float>(factor)});
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
