// The mixture sampler (see mixture_batch_source.h).
#include "worker/data/mixture_batch_source.h"

#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/data_mixture.h"
#include "common/splitmix.h"
#include "common/status_macros.h"
#include "worker/data/sequence_permutation.h"
#include "worker/data/source_sequences.h"

namespace tessera {
namespace {

// Domain separation for the permutation keys (no other hash of the seed
// uses it).
constexpr uint64_t kEpochOrderTag = 0x5eb0c3e5;

class MixtureBatchSource : public BatchSource {
 public:
  MixtureBatchSource(const v1::JobSpec& spec, int rank, int world_size, MixtureSchedule schedule,
                     std::vector<std::unique_ptr<SourceSequences>> sources, std::FILE* trace)
      : seed_(spec.seed()),
        seq_len_(spec.model().seq_len()),
        micro_batch_(spec.data().micro_batch_size()),
        rank_(rank),
        world_(world_size),
        schedule_(std::move(schedule)),
        sources_(std::move(sources)),
        trace_(trace) {}

  ~MixtureBatchSource() override {
    if (trace_ != nullptr) std::fclose(trace_);
  }

  absl::Status ReadBatch(int64_t step, absl::Span<int32_t> inputs, absl::Span<int32_t> targets,
                         absl::Span<int32_t> doc_starts) override {
    RETURN_IF_ERROR(CheckReadBatchArgs(micro_batch_, seq_len_, inputs, targets, doc_starts,
                                       "step", step));
    for (int j = 0; j < micro_batch_; ++j) {
      const int64_t slot = (step * world_ + rank_) * micro_batch_ + j;
      const MixtureSchedule::Draw draw = schedule_.At(slot);
      const SourceSequences& source = *sources_[draw.source];
      const int64_t epoch = draw.ordinal / source.count();
      const SequencePermutation order(
          HashWords(seed_, kEpochOrderTag, static_cast<uint64_t>(draw.source),
                    static_cast<uint64_t>(epoch)),
          static_cast<uint64_t>(source.count()));
      const int64_t sequence =
          static_cast<int64_t>(order.At(static_cast<uint64_t>(draw.ordinal % source.count())));
      const size_t row = static_cast<size_t>(j) * seq_len_;
      source.Read(sequence, inputs.subspan(row, seq_len_), targets.subspan(row, seq_len_),
                  doc_starts.empty() ? doc_starts : doc_starts.subspan(row, seq_len_));
      if (trace_ != nullptr) {
        const SourceSequences::Location at = source.Locate(sequence);
        std::fprintf(trace_, "step %lld rank %d slot %lld source %d epoch %lld sequence %lld file %s offset %lld\n",
                     static_cast<long long>(step), rank_, static_cast<long long>(slot),
                     draw.source, static_cast<long long>(epoch), static_cast<long long>(sequence),
                     source.files()[at.file].c_str(), static_cast<long long>(at.offset));
      }
    }
    if (trace_ != nullptr) std::fflush(trace_);
    return absl::OkStatus();
  }

 private:
  uint64_t seed_;
  int seq_len_;
  int micro_batch_;
  int rank_;
  int world_;
  MixtureSchedule schedule_;
  std::vector<std::unique_ptr<SourceSequences>> sources_;
  std::FILE* trace_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BatchSource>> OpenMixtureBatchSource(const v1::JobSpec& spec,
                                                                    int rank, int world_size,
                                                                    const std::string& trace_path) {
  const v1::DataConfig& data = spec.data();
  std::vector<double> weights;
  std::vector<std::unique_ptr<SourceSequences>> sources;
  for (int i = 0; i < data.sources_size(); ++i) {
    weights.push_back(data.sources(i).weight());
    absl::StatusOr<std::unique_ptr<SourceSequences>> source =
        SourceSequences::Open(absl::StrCat("data.sources[", i, "]"), data.sources(i).path(),
                              spec.model().seq_len(), spec.model().vocab_size(),
                              data.document_masking());
    if (!source.ok()) return source.status();
    sources.push_back(std::move(*source));
  }
  absl::StatusOr<MixtureSchedule> schedule = MixtureSchedule::Create(weights, "data.sources");
  if (!schedule.ok()) return schedule.status();
  std::FILE* trace = nullptr;
  if (!trace_path.empty()) {
    trace = std::fopen(trace_path.c_str(), "a");
    if (trace == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("data trace ", trace_path, ": cannot be opened for appending"));
    }
  }
  return std::unique_ptr<BatchSource>(new MixtureBatchSource(
      spec, rank, world_size, std::move(*schedule), std::move(sources), trace));
}

}  // namespace tessera
