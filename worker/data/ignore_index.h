// The target value the fused loss skips. Batch sources write it where no
// loss should be taken: padding, prompt tokens, and under
// data.document_masking the target that would predict a document's first
// token from the document before it (worker/data/document_window.h).
#ifndef TESSERA_WORKER_DATA_IGNORE_INDEX_H_
#define TESSERA_WORKER_DATA_IGNORE_INDEX_H_

#include <cstdint>

namespace tessera {

inline constexpr int32_t kIgnoreIndex = -100;

}  // namespace tessera

#endif  // TESSERA_WORKER_DATA_IGNORE_INDEX_H_
