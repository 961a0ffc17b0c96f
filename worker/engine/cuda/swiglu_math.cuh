// The SwiGLU formulas in fp32, shared by the SwiGLU kernels (swiglu.cu) and
// the SwiGLU kernels that write FP8 directly (swiglu_quantize.cu), so both
// evaluate the same expressions and round the same values. They mirror the
// CPU reference (worker/engine/cpu/swiglu.h): out = silu(g) * u; backward
// d_g = dy * u * s * (1 + g * (1 - s)), d_u = dy * silu(g) = dy * g * s.
#ifndef TESSERA_WORKER_ENGINE_CUDA_SWIGLU_MATH_CUH_
#define TESSERA_WORKER_ENGINE_CUDA_SWIGLU_MATH_CUH_

namespace tessera {
namespace cuda {

__device__ __forceinline__ float SiluTimes(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__device__ __forceinline__ void SwiGluGrads(float d, float g, float u, float* d_g, float* d_u) {
  const float sig = 1.0f / (1.0f + expf(-g));
  *d_g = d * u * sig * (1.0f + g * (1.0f - sig));
  *d_u = d * g * sig;
}

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_SWIGLU_MATH_CUH_
