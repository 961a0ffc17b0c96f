// The WARNING job events of an FP8 statistics record (README "Watching
// FP8"): one per tensor whose saturated fraction, or underflow fraction,
// is above the job's threshold (fp8.saturation_warn_fraction,
// fp8.underflow_warn_fraction), worst first, each with a one-line message
// naming the block and tensor, the fraction and the threshold. A record
// whose every tensor is past a threshold would otherwise bury the log, so
// at most kMaxFp8Warnings come from one record; the last one says how many
// more tensors passed.
//
// Under delayed scaling, step 0's activations and gradients are encoded
// with the initial scale 1, before any amax was recorded: many of their
// values underflow in every job, which says nothing about the job, so
// step 0 warns about weights only. Its record still shows every tensor.
#ifndef TESSERA_SERVER_FP8_NUMERICS_WARNING_H_
#define TESSERA_SERVER_FP8_NUMERICS_WARNING_H_

#include <vector>

#include "proto/tessera/v1/coordinator.pb.h"

namespace tessera {

inline constexpr int kMaxFp8Warnings = 8;

std::vector<v1::Fp8NumericsWarning> Fp8NumericsWarnings(const v1::Fp8Numerics& record,
                                                        const v1::Fp8Recipe& recipe);

}  // namespace tessera

#endif  // TESSERA_SERVER_FP8_NUMERICS_WARNING_H_
