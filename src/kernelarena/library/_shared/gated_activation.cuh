// The gated activations' math for CUDA (silu_and_mul, gelu_and_mul, gelu_tanh_and_mul): an
// operator of rows_elementwise.cuh over the gate and up halves of each row, act(gate) * up in
// float32.
// - silu(g) = g / (1 + e^-g) with __expf (ex2.approx of g log2 e) and __fdividef (one reciprocal
//   and a multiply): below 3e-6 relative error for |g| <= 20, far below the fp32 tolerance of 1e-5.
//   Where e^-g overflows (g < -88) the quotient is g * rcp(inf) = -0, the limit.
// - tanh GELU: 0.5 g (1 + tanh(z)) = g * sigmoid(2 z) = g / (1 + e^(-2 z)), z = sqrt(2/pi) (g +
//   0.044715 g^3): one __expf and one __fdividef, as SiLU, about 3e-6 relative error
//   (tanh.approx.f32 would be 2^-11, too coarse for fp16 and fp32). Where e^(-2 z) overflows (g
//   below about -10) the quotient is g * rcp(inf) = -0, the limit; above +10 it is g / 1.
// - exact GELU: g Phi(g), Phi the normal CDF from erfc without branches (normal_cdf below, the
//   Triton solution's formula and fit: Phi within 2.3e-7 absolute, 1.2e-6 relative for g > -3).
//   erff's two polynomial branches diverge within a warp, and with bf16 data the erff kernel was
//   limited by issue, not memory: 87% of the copy bandwidth at 32768x8192 on an H200.
#pragma once

#include <cuda_runtime.h>

#include "_shared/rows_elementwise.cuh"

namespace {

struct Silu {
  static constexpr const char* kName = "silu_and_mul";
  static constexpr int kInputs = 2;
  __device__ __forceinline__ float operator()(float g, float up) const {
    return __fdividef(g, 1.0f + __expf(-g)) * up;
  }
};

struct GeluTanh {
  static constexpr const char* kName = "gelu_tanh_and_mul";
  static constexpr int kInputs = 2;
  __device__ __forceinline__ float operator()(float g, float up) const {
    constexpr float kLinear = 1.5957691216057308f;   // 2 sqrt(2/pi)
    constexpr float kCubic = 0.071354816272785f;     // 2 sqrt(2/pi) 0.044715
    const float two_z = g * fmaf(kCubic, g * g, kLinear);
    return __fdividef(g, 1.0f + __expf(-two_z)) * up;
  }
};

// Phi(g) = erfc(-g / sqrt 2) / 2: for z = |g| / sqrt 2, erfc(z) = t 2^(P(t) - z^2 log2 e) with
// t = 1 / (1 + z / 2) and P of degree 9 (relative error of erfc under 1.1e-7 in exact arithmetic);
// Phi = erfc / 2 for g < 0 and 1 - erfc / 2 otherwise. One division, one exp2, ten FMAs.
__device__ __forceinline__ float normal_cdf(float g) {
  const float z = fabsf(g) * 0.70710678118654752f;
  const float t = __fdividef(1.0f, fmaf(0.5f, z, 1.0f));  // 0 for z = inf: erfc 0, the limit
  float p = fmaf(0.24346851f, t, -1.1733749f);
  p = fmaf(p, t, 2.1254525f);
  p = fmaf(p, t, -1.6174033f);
  p = fmaf(p, t, 0.39147764f);
  p = fmaf(p, t, -0.26540717f);
  p = fmaf(p, t, 0.13905863f);
  p = fmaf(p, t, 0.5397484f);
  p = fmaf(p, t, 1.4427277f);
  p = fmaf(p, t, -1.8257482f);
  const float half_erfc = 0.5f * t * exp2f(fmaf(-z * z, 1.4426950408889634f, p));
  return g < 0.0f ? half_erfc : 1.0f - half_erfc;
}

struct GeluErf {
  static constexpr const char* kName = "gelu_and_mul";
  static constexpr int kInputs = 2;
  __device__ __forceinline__ float operator()(float g, float up) const { return g * normal_cdf(g) * up; }
};

}  // namespace
