// World-size-independent parameter init (see param_init.h).
#include "worker/model/param_init.h"

#include <cmath>

#include "common/splitmix.h"

namespace tessera {

float InitNormal(uint64_t seed, uint64_t param_index, uint64_t element) {
  const uint64_t h = HashWords(seed, 0x1417, param_index, element);
  const uint64_t h2 = SplitMix64(h);
  // Two uniforms in (0, 1].
  const double u1 = (static_cast<double>(h >> 11) + 1.0) / 9007199254740992.0;
  const double u2 = static_cast<double>(h2 >> 11) / 9007199254740992.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

void FillInit(float* out, int64_t count, uint64_t seed, uint64_t param_index, int64_t first,
              float std, float constant) {
  for (int64_t i = 0; i < count; ++i) {
    out[i] = std == 0.f ? constant
                        : std * InitNormal(seed, param_index, static_cast<uint64_t>(first + i));
  }
}

}  // namespace tessera
