// A valid JobSpec small enough that the coordinator's tests (with in-memory
// workers) never think about it: d_model 32, one layer, the synthetic COPY
// task, no checkpoint. Tests change what they are about on a copy.
#ifndef TESSERA_SERVER_TINY_JOB_SPEC_FOR_TEST_H_
#define TESSERA_SERVER_TINY_JOB_SPEC_FOR_TEST_H_

#include "proto/tessera/v1/job.pb.h"

namespace tessera {

v1::JobSpec TinyJobSpec(int world_size, int steps);

}  // namespace tessera

#endif  // TESSERA_SERVER_TINY_JOB_SPEC_FOR_TEST_H_
