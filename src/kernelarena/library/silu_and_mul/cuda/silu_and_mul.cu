// silu_and_mul in CUDA C++: out[r, :] = silu(x[r, :d]) * x[r, d:], in float32, rounded once.
//
// The element-wise row kernel of library/_shared/rows_elementwise.cuh (scale's layout, reading the
// gate and up halves of each row) with the SiLU of library/_shared/gated_activation.cuh: __expf
// and __fdividef, below 3e-6 relative error for |g| <= 20.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>

#include "_shared/gated_activation.cuh"

void run(tvm::ffi::TensorView x, tvm::ffi::TensorView out) { run_rows_elementwise(x, out, Silu{}); }

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
