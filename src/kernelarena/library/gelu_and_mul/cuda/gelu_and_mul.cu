// gelu_and_mul and gelu_tanh_and_mul in CUDA C++: out[r, :] = gelu(x[r, :d]) * x[r, d:], in
// float32, rounded once. FlashInfer's names: ``run`` is the exact GELU, ``run_tanh`` its tanh
// approximation.
//
// The element-wise row kernel of library/_shared/rows_elementwise.cuh (scale's layout, reading the
// gate and up halves of each row) with the GELUs of library/_shared/gated_activation.cuh: the tanh
// form as g / (1 + e^(-2 z)) (one __expf, one __fdividef), the exact one as g Phi(g) with Phi from
// a branch-free erfc (erff's two branches diverge within a warp and left the kernel issue-bound).
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>

#include "_shared/gated_activation.cuh"

void run(tvm::ffi::TensorView x, tvm::ffi::TensorView out) { run_rows_elementwise(x, out, GeluErf{}); }

void run_tanh(tvm::ffi::TensorView x, tvm::ffi::TensorView out) { run_rows_elementwise(x, out, GeluTanh{}); }

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run_tanh, run_tanh);
