// linear_act through cuBLASLt: out = act(x @ weight^T + bias) with the bias and the activation in
// cuBLASLt's epilogue (GELU_BIAS, the tanh form of GELU; RELU_BIAS; BIAS), applied to the fp32
// accumulator before the one rounding to fp16/bf16: the activation costs no pass over out.
//
// cuBLASLt is opened at run time (dlopen), not linked. The CUDA toolkits that build this have no
// libcublas (CI's /usr/local/cuda/lib64 has none), while every process that calls it has torch, and
// torch's CUDA 13 wheels load libcublasLt.so.13 from the nvidia-cublas package
// (site-packages/nvidia/cu13/lib) when torch initializes: dlopen by soname finds that copy.
// KERNELARENA_CUBLASLT=/path/to/libcublasLt.so.N overrides the search. The few declarations used
// are written below with the values of cublasLt.h (checked against nvidia-cublas 13.10's header:
// every value, the struct layouts and the function signatures; cuBLASLt keeps them stable).
//
// Layout: cuBLASLt is column-major. Row-major out [m, n] is column-major D [n, m] = W' x', where
// the row-major weight [n, k] is column-major [k, n] used transposed (TRANSA = T) and row-major x
// [m, k] is column-major [k, m] (TRANSB = N); the bias runs along D's rows, one per feature.
//
// Per process and device: one handle and one 32 MiB workspace, made on first use; per shape,
// dtype, epilogue and alignment: one matmul descriptor, three layouts and the heuristic's algorithm,
// cached, so a call costs one attribute write and the launch.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <library_types.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

namespace {

// ---- the part of cublasLt.h used here -----------------------------------------------------------
namespace lt {
using Status = int;  // cublasStatus_t
using Handle = void*;
using MatmulDesc = void*;
using Layout = void*;
using Preference = void*;
struct Algo {
  uint64_t data[8];
};
struct HeuristicResult {
  Algo algo;
  size_t workspace_size;
  Status state;
  float waves_count;
  int reserved[4];
};
static_assert(sizeof(HeuristicResult) == 96, "cublasLtMatmulHeuristicResult_t is 96 bytes");

constexpr Status kSuccess = 0;
constexpr int kComputeF32 = 68;  // CUBLAS_COMPUTE_32F
constexpr int32_t kOpN = 0;
constexpr int32_t kOpT = 1;
// cublasLtMatmulDescAttributes_t
constexpr int kDescTransA = 3;
constexpr int kDescTransB = 4;
constexpr int kDescEpilogue = 7;
constexpr int kDescBiasPointer = 8;
constexpr int kDescBiasDataType = 26;
// cublasLtMatmulPreferenceAttributes_t
constexpr int kPrefMaxWorkspaceBytes = 1;
constexpr int kPrefReductionSchemeMask = 3;
constexpr int kPrefMinAlignmentA = 5;
constexpr int kPrefMinAlignmentB = 6;
constexpr int kPrefMinAlignmentC = 7;
constexpr int kPrefMinAlignmentD = 8;
// cublasLtReductionScheme_t: split-K partial sums kept in the compute type (fp32). The other
// schemes (INPLACE, OUTPUT_TYPE) round them to the output type; algorithms without split-K pass.
constexpr uint32_t kReductionComputeType = 2;
// cublasLtEpilogue_t
constexpr uint32_t kEpilogueBias = 4;
constexpr uint32_t kEpilogueReluBias = 2 | 4;
constexpr uint32_t kEpilogueGeluBias = 32 | 4;

struct Api {
  Status (*create)(Handle*);
  Status (*desc_create)(MatmulDesc*, int compute_type, int scale_type);
  Status (*desc_set)(MatmulDesc, int attribute, const void* value, size_t size);
  Status (*layout_create)(Layout*, int type, uint64_t rows, uint64_t cols, int64_t ld);
  Status (*preference_create)(Preference*);
  Status (*preference_set)(Preference, int attribute, const void* value, size_t size);
  Status (*preference_destroy)(Preference);
  Status (*heuristic)(Handle, MatmulDesc, Layout a, Layout b, Layout c, Layout d, Preference,
                      int requested, HeuristicResult* results, int* returned);
  Status (*matmul)(Handle, MatmulDesc, const void* alpha, const void* a, Layout, const void* b,
                   Layout, const void* beta, const void* c, Layout, void* d, Layout, const Algo*,
                   void* workspace, size_t workspace_bytes, cudaStream_t);
  std::string error;  // empty when every symbol was found
};

void* open_library() {
  if (const char* path = std::getenv("KERNELARENA_CUBLASLT")) {
    if (void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL)) return handle;
  }
  const char* names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"};
  for (const char* name : names) {  // the copy torch has loaded, if any
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) return handle;
  }
  for (const char* name : names) {  // else whatever the loader's search path finds
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return handle;
  }
  // Else next to the CUDA runtime this process uses: pip wheels put both in nvidia/cu13/lib.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudaGetDevice), &info) != 0 && info.dli_fname != nullptr) {
    std::string folder(info.dli_fname);
    folder = folder.substr(0, folder.find_last_of('/') + 1);
    for (const char* name : names) {
      if (void* handle = dlopen((folder + name).c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    }
  }
  return nullptr;
}

template <typename Fn>
void bind(void* library, const char* symbol, Fn* slot, std::string* error) {
  *slot = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (*slot == nullptr && error->empty()) *error = std::string("missing symbol ") + symbol;
}

Api load_api() {
  Api api{};
  void* library = open_library();
  if (library == nullptr) {
    api.error = "libcublasLt.so.13 is not loaded and not on the loader's path (import torch with "
                "CUDA first, or set KERNELARENA_CUBLASLT to the library's path)";
    return api;
  }
  bind(library, "cublasLtCreate", &api.create, &api.error);
  bind(library, "cublasLtMatmulDescCreate", &api.desc_create, &api.error);
  bind(library, "cublasLtMatmulDescSetAttribute", &api.desc_set, &api.error);
  bind(library, "cublasLtMatrixLayoutCreate", &api.layout_create, &api.error);
  bind(library, "cublasLtMatmulPreferenceCreate", &api.preference_create, &api.error);
  bind(library, "cublasLtMatmulPreferenceSetAttribute", &api.preference_set, &api.error);
  bind(library, "cublasLtMatmulPreferenceDestroy", &api.preference_destroy, &api.error);
  bind(library, "cublasLtMatmulAlgoGetHeuristic", &api.heuristic, &api.error);
  bind(library, "cublasLtMatmul", &api.matmul, &api.error);
  return api;
}

const Api& api() {
  static const Api loaded = load_api();  // thread-safe one-time initialization
  TVM_FFI_ICHECK(loaded.error.empty()) << "linear_act (cuBLASLt): " << loaded.error;
  return loaded;
}
}  // namespace lt

#define LT_CHECK(call)                                                                     \
  do {                                                                                     \
    const lt::Status status_ = (call);                                                     \
    TVM_FFI_ICHECK(status_ == lt::kSuccess) << "linear_act (cuBLASLt): " #call " returned " \
                                            << status_;                                    \
  } while (0)

// cuBLAS's recommended workspace on Hopper.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr int kMaxDevices = 64;

struct DeviceState {
  lt::Handle handle = nullptr;
  void* workspace = nullptr;
};

// All fields 64-bit: no padding, so bytewise equality and hashing are exact.
struct PlanKey {
  int64_t device, dtype, epilogue, m, n, k, ld_x, ld_w, ld_out;
  int64_t align_x, align_w, align_out, align_bias;
  bool operator==(const PlanKey& o) const { return std::memcmp(this, &o, sizeof(PlanKey)) == 0; }
};
static_assert(sizeof(PlanKey) == 13 * sizeof(int64_t), "PlanKey has no padding");

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const {
    const auto* bytes = reinterpret_cast<const unsigned char*>(&key);
    uint64_t hash = 1469598103934665603ull;  // FNV-1a
    for (size_t i = 0; i < sizeof(PlanKey); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
    return static_cast<size_t>(hash);
  }
};

struct Plan {
  lt::MatmulDesc desc = nullptr;
  lt::Layout weight = nullptr, x = nullptr, out = nullptr;
  lt::Algo algo{};
};

std::mutex g_mutex;  // guards the states, the plans, and a plan's bias pointer until launch
DeviceState g_devices[kMaxDevices];
std::unordered_map<PlanKey, Plan, PlanKeyHash> g_plans;

// Largest power of two (up to 256, cuBLASLt's default assumption) dividing the address.
uint32_t alignment(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align >>= 1;
  return align;
}

DeviceState& device_state(int device) {
  DeviceState& state = g_devices[device];
  if (state.handle == nullptr) {
    LT_CHECK(lt::api().create(&state.handle));
    const cudaError_t status = cudaMalloc(&state.workspace, kWorkspaceBytes);
    TVM_FFI_ICHECK(status == cudaSuccess)
        << "linear_act (cuBLASLt): workspace cudaMalloc failed: " << cudaGetErrorString(status);
  }
  return state;
}

Plan make_plan(const PlanKey& key, lt::Handle handle, const void* bias) {
  const lt::Api& api = lt::api();
  Plan plan;
  LT_CHECK(api.desc_create(&plan.desc, lt::kComputeF32, CUDA_R_32F));
  LT_CHECK(api.desc_set(plan.desc, lt::kDescTransA, &lt::kOpT, sizeof(int32_t)));
  LT_CHECK(api.desc_set(plan.desc, lt::kDescTransB, &lt::kOpN, sizeof(int32_t)));
  const uint32_t epilogue = static_cast<uint32_t>(key.epilogue);
  LT_CHECK(api.desc_set(plan.desc, lt::kDescEpilogue, &epilogue, sizeof(epilogue)));
  const int32_t bias_type = static_cast<int32_t>(key.dtype);
  LT_CHECK(api.desc_set(plan.desc, lt::kDescBiasDataType, &bias_type, sizeof(int32_t)));
  // The heuristic reads the bias pointer's alignment from the descriptor.
  LT_CHECK(api.desc_set(plan.desc, lt::kDescBiasPointer, &bias, sizeof(bias)));
  LT_CHECK(api.layout_create(&plan.weight, bias_type, key.k, key.n, key.ld_w));
  LT_CHECK(api.layout_create(&plan.x, bias_type, key.k, key.m, key.ld_x));
  LT_CHECK(api.layout_create(&plan.out, bias_type, key.n, key.m, key.ld_out));

  lt::Preference preference = nullptr;
  LT_CHECK(api.preference_create(&preference));
  const uint64_t workspace_bytes = kWorkspaceBytes;
  LT_CHECK(api.preference_set(preference, lt::kPrefMaxWorkspaceBytes, &workspace_bytes,
                              sizeof(workspace_bytes)));
  LT_CHECK(api.preference_set(preference, lt::kPrefReductionSchemeMask, &lt::kReductionComputeType,
                              sizeof(uint32_t)));
  const uint32_t align_w = static_cast<uint32_t>(key.align_w);
  const uint32_t align_x = static_cast<uint32_t>(key.align_x);
  const uint32_t align_out = static_cast<uint32_t>(key.align_out);
  LT_CHECK(api.preference_set(preference, lt::kPrefMinAlignmentA, &align_w, sizeof(uint32_t)));
  LT_CHECK(api.preference_set(preference, lt::kPrefMinAlignmentB, &align_x, sizeof(uint32_t)));
  LT_CHECK(api.preference_set(preference, lt::kPrefMinAlignmentC, &align_out, sizeof(uint32_t)));
  LT_CHECK(api.preference_set(preference, lt::kPrefMinAlignmentD, &align_out, sizeof(uint32_t)));
  lt::HeuristicResult result{};
  int returned = 0;
  const lt::Status status = api.heuristic(handle, plan.desc, plan.weight, plan.x, plan.out,
                                          plan.out, preference, 1, &result, &returned);
  api.preference_destroy(preference);
  TVM_FFI_ICHECK(status == lt::kSuccess && returned > 0 && result.state == lt::kSuccess)
      << "linear_act (cuBLASLt): no algorithm for m=" << key.m << " n=" << key.n << " k=" << key.k
      << " epilogue=" << key.epilogue << " (status " << status << ", " << returned << " found)";
  plan.algo = result.algo;
  return plan;
}

// Makes `device` current for the call (handles, workspace and launch belong to it), then restores.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    TVM_FFI_ICHECK(cudaGetDevice(&previous_) == cudaSuccess);
    if (previous_ != device) TVM_FFI_ICHECK(cudaSetDevice(device) == cudaSuccess);
    changed_ = previous_ != device;
  }
  ~DeviceGuard() {
    if (changed_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool changed_ = false;
};

const void* address(const tvm::ffi::TensorView& t) {
  return static_cast<const char*>(t.data_ptr()) + t.byte_offset();
}

void linear_act(tvm::ffi::TensorView x, tvm::ffi::TensorView weight, tvm::ffi::TensorView bias,
                tvm::ffi::TensorView out, uint32_t epilogue) {
  TVM_FFI_ICHECK(x.ndim() == 2 && weight.ndim() == 2 && bias.ndim() == 1 && out.ndim() == 2)
      << "linear_act: x [m, k], weight [n, k], bias [n], out [m, n]";
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  TVM_FFI_ICHECK(weight.size(1) == k && bias.size(0) == n && out.size(0) == m && out.size(1) == n)
      << "linear_act: shapes do not match (x [" << m << ", " << k << "], weight ["
      << weight.size(0) << ", " << weight.size(1) << "], bias [" << bias.size(0) << "], out ["
      << out.size(0) << ", " << out.size(1) << "])";
  const DLDataType dtype = x.dtype();
  const bool half = dtype.code == kDLFloat && dtype.bits == 16 && dtype.lanes == 1;
  const bool bfloat = dtype.code == kDLBfloat && dtype.bits == 16 && dtype.lanes == 1;
  TVM_FFI_ICHECK(half || bfloat) << "linear_act (cuBLASLt): x must be float16 or bfloat16";
  for (const tvm::ffi::TensorView* t : {&weight, &bias, &out}) {
    const DLDataType other = t->dtype();
    TVM_FFI_ICHECK(other.code == dtype.code && other.bits == dtype.bits && other.lanes == 1)
        << "linear_act: x, weight, bias and out must share one dtype";
  }
  TVM_FFI_ICHECK(x.device().device_type == kDLCUDA && weight.device().device_type == kDLCUDA &&
                 bias.device().device_type == kDLCUDA && out.device().device_type == kDLCUDA)
      << "linear_act (cuBLASLt): tensors must be on a CUDA device";
  if (m == 0 || n == 0) return;
  TVM_FFI_ICHECK(k > 0) << "linear_act (cuBLASLt): k = 0 is not supported";
  TVM_FFI_ICHECK(x.stride(1) == 1 && weight.stride(1) == 1 && out.stride(1) == 1 &&
                 (n == 1 || bias.stride(0) == 1))
      << "linear_act (cuBLASLt): the last dimension of every tensor must be contiguous";
  // A single row's stride is never used: give cuBLASLt the packed one (ld == rows), which also
  // keeps clear of "leading dimension much larger than rows" on one-column matrices.
  const int64_t ld_x = m == 1 ? k : x.stride(0);
  const int64_t ld_w = n == 1 ? k : weight.stride(0);
  const int64_t ld_out = m == 1 ? n : out.stride(0);
  TVM_FFI_ICHECK(ld_x >= k && ld_w >= k && ld_out >= n)
      << "linear_act (cuBLASLt): rows must not overlap (row strides " << ld_x << ", " << ld_w
      << ", " << ld_out << ")";

  const int device = x.device().device_id;
  TVM_FFI_ICHECK(device >= 0 && device < kMaxDevices) << "linear_act: device id " << device;
  const DeviceGuard guard(device);
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, device));

  const void* bias_pointer = address(bias);
  const PlanKey key{device, half ? CUDA_R_16F : CUDA_R_16BF, epilogue, m, n, k, ld_x, ld_w, ld_out,
                    alignment(address(x)), alignment(address(weight)), alignment(address(out)),
                    alignment(bias_pointer)};
  lt::Status status;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    DeviceState& state = device_state(device);
    auto found = g_plans.find(key);
    if (found == g_plans.end()) {
      found = g_plans.emplace(key, make_plan(key, state.handle, bias_pointer)).first;
    }
    const Plan& plan = found->second;
    const lt::Api& api = lt::api();
    LT_CHECK(api.desc_set(plan.desc, lt::kDescBiasPointer, &bias_pointer, sizeof(bias_pointer)));
    const float alpha = 1.0f, beta = 0.0f;
    void* out_pointer = const_cast<void*>(address(out));
    status = api.matmul(state.handle, plan.desc, &alpha, address(weight), plan.weight, address(x),
                        plan.x, &beta, out_pointer, plan.out, out_pointer, plan.out, &plan.algo,
                        state.workspace, kWorkspaceBytes, stream);
  }
  TVM_FFI_ICHECK(status == lt::kSuccess) << "linear_act (cuBLASLt): cublasLtMatmul returned " << status;
  const cudaError_t launch = cudaGetLastError();
  TVM_FFI_ICHECK(launch == cudaSuccess)
      << "linear_act (cuBLASLt): launch failed: " << cudaGetErrorString(launch);
}

}  // namespace

void run_gelu_tanh(tvm::ffi::TensorView x, tvm::ffi::TensorView weight, tvm::ffi::TensorView bias,
                   tvm::ffi::TensorView out) {
  linear_act(x, weight, bias, out, lt::kEpilogueGeluBias);
}

void run_relu(tvm::ffi::TensorView x, tvm::ffi::TensorView weight, tvm::ffi::TensorView bias,
              tvm::ffi::TensorView out) {
  linear_act(x, weight, bias, out, lt::kEpilogueReluBias);
}

void run_none(tvm::ffi::TensorView x, tvm::ffi::TensorView weight, tvm::ffi::TensorView bias,
              tvm::ffi::TensorView out) {
  linear_act(x, weight, bias, out, lt::kEpilogueBias);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run_gelu_tanh, run_gelu_tanh);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run_relu, run_relu);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run_none, run_none);
