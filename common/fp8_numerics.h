// FP8 statistics records (job.proto's Fp8Numerics; README "Watching FP8"),
// the rules the coordinator and the CLI share: how the ranks' parts of a
// statistics step add up into one record, the warning thresholds with their
// defaults, which tensors pass them, what a tensor is called in a message,
// and the order "worst first" means.
#ifndef TESSERA_COMMON_FP8_NUMERICS_H_
#define TESSERA_COMMON_FP8_NUMERICS_H_

#include <string>
#include <vector>

#include "google/protobuf/repeated_field.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// Fp8Recipe's thresholds, 0 meaning the default (0.001 and 0.01; job.proto
// says why).
double SaturationWarnFraction(const v1::Fp8Recipe& recipe);
double UnderflowWarnFraction(const v1::Fp8Recipe& recipe);

// Adds one rank's part of a statistics step (StepResult.fp8_stats) into
// `record`: counts and elements add up, amax and scale take the largest.
// A tensor is matched by block, linear and role.
void AddRankNumerics(const google::protobuf::RepeatedPtrField<v1::Fp8TensorStats>& rank,
                     v1::Fp8Numerics& record);
// Once every rank is in: each tensor's saturated and underflow fractions.
void SetFractions(v1::Fp8Numerics& record);

// "block 3 gate_up input", "block 0 down weight", "block 1 qkv gradient".
std::string Fp8TensorName(const v1::Fp8TensorStats& tensor);

// The record's tensors, worst first: by saturated fraction, then underflow
// fraction (both descending), then block, linear and role; at most `top`
// (0: all).
std::vector<v1::Fp8TensorStats> WorstFp8Tensors(const v1::Fp8Numerics& record, int top);

// Maximum saturated and underflow fractions over the record's tensors.
double WorstSaturation(const v1::Fp8Numerics& record);
double WorstUnderflow(const v1::Fp8Numerics& record);

}  // namespace tessera

#endif  // TESSERA_COMMON_FP8_NUMERICS_H_
