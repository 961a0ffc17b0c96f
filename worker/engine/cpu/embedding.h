// Token embedding for the CPU engine: the forward gathers rows of the table;
// the backward scatter-adds gradient rows into an fp32 table gradient in
// token order (deterministic).
#ifndef TESSERA_WORKER_ENGINE_CPU_EMBEDDING_H_
#define TESSERA_WORKER_ENGINE_CPU_EMBEDDING_H_

#include "absl/status/status.h"
#include "worker/ops/tensor.h"

namespace tessera {
namespace cpu {

absl::Status EmbeddingForward(const TensorDesc& ids, const TensorDesc& table, const TensorDesc& out);
absl::Status EmbeddingBackward(const TensorDesc& ids, const TensorDesc& grad_out,
                               const TensorDesc& grad_table);

}  // namespace cpu
}  // namespace tessera

#endif  // TESSERA_WORKER_ENGINE_CPU_EMBEDDING_H_
