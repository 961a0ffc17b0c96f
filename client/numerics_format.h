// How the CLI prints FP8 statistics (README "Watching FP8"): the table of
// `tessera numerics ID`, worst tensors first (common/fp8_numerics.h), and
// the one-line summary `tessera watch` prints for each statistics record.
#ifndef TESSERA_CLIENT_NUMERICS_FORMAT_H_
#define TESSERA_CLIENT_NUMERICS_FORMAT_H_

#include <string>

#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// "FP8 statistics at step 40 (24 tensors; worst 10 first)" then one row per
// tensor: TENSOR, FORMAT, AMAX, SCALE, SATURATED, UNDERFLOW (fractions in
// percent). top: at most that many rows (0: all).
std::string FormatNumericsTable(const v1::Fp8Numerics& record, int top);

// The record with only its `top` worst tensors, worst first, for --json.
v1::Fp8Numerics WorstOnly(const v1::Fp8Numerics& record, int top);

// "[numerics] step 40: worst saturation 0.12% (block 3 down input), worst
// underflow 2.10% (block 0 qkv gradient), 24 tensors".
std::string NumericsLine(const v1::Fp8Numerics& record);

}  // namespace tessera

#endif  // TESSERA_CLIENT_NUMERICS_FORMAT_H_
