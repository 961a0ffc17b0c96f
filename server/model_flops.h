// Model FLOPs utilisation (MFU), the figure users compare training runtimes
// by: the FLOPs the model needs per trained token, over the dense bf16
// tensor-core peak of the GPUs that trained it.
//
// FLOPs per token count each matrix product once, as the model defines it
// (6 per weight: forward, and the two backward products), and causal
// attention's two products over the average (seq + 1) / 2 visible keys.
// Work a runtime does beyond the model (activation recomputation, the
// attention backward's recomputed S) does not count, so runtimes compare
// fairly.
#ifndef TESSERA_SERVER_MODEL_FLOPS_H_
#define TESSERA_SERVER_MODEL_FLOPS_H_

#include <string>

#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// Training FLOPs (forward + backward) per token of `model`.
double TrainingFlopsPerToken(const v1::ModelConfig& model);

// Dense bf16 tensor-core peak of the GPU named `device_name` (as CUDA
// reports it, e.g. "NVIDIA H100 80GB HBM3"), in FLOP/s; 0 for devices
// without a known peak (CPUs, unlisted GPUs), which then get no MFU.
double PeakBf16FlopsPerSecond(const std::string& device_name);

}  // namespace tessera

#endif  // TESSERA_SERVER_MODEL_FLOPS_H_
