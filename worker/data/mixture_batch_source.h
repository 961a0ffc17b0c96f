// Training batches from a weighted mixture of sources (DataConfig.sources).
//
// The job has one global order of sequence slots: slot k of step s is
// k = s x G + r x micro_batch_size + j for sequence j of rank r, where G =
// world_size x micro_batch_size is the global batch, so each step's ranks
// take disjoint, consecutive slots, as the single-file sampler splits them.
// Slot k goes to the source and ordinal that common/data_mixture.h's cycle
// gives it (smooth weighted round robin over the weights' quotas); the
// source's ordinal o is sequence o mod N of epoch floor(o / N), N being the
// source's whole sequences (worker/data/source_sequences.h), and that
// epoch visits its sequences in the order of a permutation keyed by (seed,
// source index, epoch) (worker/data/sequence_permutation.h). So within an
// epoch of a source no sequence repeats and none is skipped, and a source
// that runs out begins its next epoch in a new order while the others go on.
//
// Everything is a pure function of (seed, sources, seq_len, G, step, rank):
// no state carries between steps, so a job resumed at step N (the
// checkpoint's data position is the step) reads exactly what the unbroken
// job read from step N on, at any world size with the same G.
#ifndef TESSERA_WORKER_DATA_MIXTURE_BATCH_SOURCE_H_
#define TESSERA_WORKER_DATA_MIXTURE_BATCH_SOURCE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/tessera/v1/job.pb.h"
#include "worker/data/batch_source.h"

namespace tessera {

// Opens data.sources for one rank. With a non-empty `trace_path`, every
// ReadBatch appends one line per sequence to that file:
//   step S rank R slot K source I epoch E sequence Q file PATH offset O
// (for checking the data order from outside the worker). INVALID_ARGUMENT
// naming data.sources[i] when a source cannot serve the spec.
absl::StatusOr<std::unique_ptr<BatchSource>> OpenMixtureBatchSource(const v1::JobSpec& spec,
                                                                    int rank, int world_size,
                                                                    const std::string& trace_path);

}  // namespace tessera

#endif  // TESSERA_WORKER_DATA_MIXTURE_BATCH_SOURCE_H_
