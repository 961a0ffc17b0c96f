// Test-only inputs for the attention GPU tests (attention_test.cc for
// Tessera's kernels, cudnn_attention_test.cc for cuDNN's): one causal
// attention forward + backward's tensors, fresh random inputs and poisoned
// outputs, and the body that runs them through the Ops interface, so both
// implementations are held to the CPU reference on the same terms.
#ifndef TESSERA_WORKER_ENGINE_CUDA_ATTENTION_TEST_INPUTS_H_
#define TESSERA_WORKER_ENGINE_CUDA_ATTENTION_TEST_INPUTS_H_

#include <cstdint>
#include <vector>

#include "worker/engine/cuda/engine_harness_for_test.h"

namespace tessera {
namespace testing {

// {qkv [B, S, nh + 2 nkv, hd] bf16 (values in [-2, 2)), out [B, S, nh, hd]
// bf16 (poisoned), lse [B, nh, S] fp32 (poisoned), grad_out [B, S, nh, hd]
// bf16, grad_qkv like qkv (poisoned)}.
inline std::vector<HostTensor> AttentionTensors(int b, int s, int nh, int nkv, int hd,
                                                uint32_t seed) {
  return {RandomTensor(DType::kBFloat16, Shape{b, s, nh + 2 * nkv, hd}, seed, 2.f),
          Poisoned(DType::kBFloat16, Shape{b, s, nh, hd}),
          Poisoned(DType::kFloat32, Shape{b, nh, s}),
          RandomTensor(DType::kBFloat16, Shape{b, s, nh, hd}, seed + 1),
          Poisoned(DType::kBFloat16, Shape{b, s, nh + 2 * nkv, hd})};
}

// Whole-sequence attention forward, then its backward, over AttentionTensors.
inline Body ForwardBackward(int nkv) {
  return [nkv](Ops& ops, std::vector<TensorDesc>& d) {
    absl::Status st = ops.AttentionForward(d[0], nkv, Ops::WholeSequences(), d[1], d[2], nullptr);
    if (st.ok()) {
      st = ops.AttentionBackward(d[3], d[0], nkv, Ops::WholeSequences(), d[1], d[2], d[4],
                                 nullptr);
    }
    return st;
  };
}

}  // namespace testing
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CUDA_ATTENTION_TEST_INPUTS_H_
