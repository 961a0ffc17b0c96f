// Deterministic parameter initialisation that does not depend on the world
// size: element e of parameter p is a pure function of (seed, p, e), drawn
// as a normal variate through SplitMix64 and Box-Muller. Each rank fills
// only its own shard, and a 1-rank and an N-rank run start identical.
#ifndef TESSERA_WORKER_MODEL_PARAM_INIT_H_
#define TESSERA_WORKER_MODEL_PARAM_INIT_H_

#include <cstdint>

namespace tessera {

// A standard normal variate for (seed, param_index, element).
float InitNormal(uint64_t seed, uint64_t param_index, uint64_t element);

// The most threads FillInit spreads one parameter over (fewer on hosts with
// fewer cores, one below 4M elements): a node runs one worker per GPU.
inline constexpr int64_t kMaxInitThreads = 16;

// Fills out[0, count) with std * InitNormal(seed, param_index, first + i),
// or with `constant` when std == 0. Large fills run on several threads; the
// result does not depend on how many.
void FillInit(float* out, int64_t count, uint64_t seed, uint64_t param_index, int64_t first,
              float std, float constant);

}  // namespace tessera

#endif  // TESSERA_WORKER_MODEL_PARAM_INIT_H_
