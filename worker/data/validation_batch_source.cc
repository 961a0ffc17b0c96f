// Sequential, sharded reads of the validation token file (see
// validation_batch_source.h).
#include "worker/data/validation_batch_source.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "formats/token_file.h"
#include "worker/data/document_window.h"
#include "worker/data/source_sequences.h"

namespace tessera {
namespace {

class ValidationBatchSource : public BatchSource {
 public:
  ValidationBatchSource(const v1::JobSpec& spec, int rank, int world_size,
                        std::unique_ptr<TokenFile> file)
      : document_masking_(spec.data().document_masking()),
        seq_len_(spec.model().seq_len()),
        micro_batch_(spec.data().micro_batch_size()),
        rank_(rank),
        world_(world_size),
        file_(std::move(file)),
        // Each sequence needs one token past its end for its last target.
        sequences_((file_->size() - 1) / seq_len_) {}

  absl::Status ReadBatch(int64_t batch, absl::Span<int32_t> inputs, absl::Span<int32_t> targets,
                         absl::Span<int32_t> doc_starts) override {
    RETURN_IF_ERROR(CheckReadBatchArgs(micro_batch_, seq_len_, inputs, targets, doc_starts,
                                       "batch", batch));
    for (int j = 0; j < micro_batch_; ++j) {
      const int64_t global = (batch * world_ + rank_) * micro_batch_ + j;
      const int64_t offset = (global % sequences_) * seq_len_;
      const size_t row = static_cast<size_t>(j) * seq_len_;
      // Under masking the file has an index: checked at open.
      ReadSequence(*file_, offset, document_masking_, inputs.subspan(row, seq_len_),
                   targets.subspan(row, seq_len_),
                   doc_starts.empty() ? doc_starts : doc_starts.subspan(row, seq_len_));
    }
    return absl::OkStatus();
  }

 private:
  bool document_masking_;
  int seq_len_;
  int micro_batch_;
  int rank_;
  int world_;
  std::unique_ptr<TokenFile> file_;
  int64_t sequences_;
};

// A validation source: whole, non-overlapping sequences, front to back.
class SourceValidationBatchSource : public BatchSource {
 public:
  SourceValidationBatchSource(const v1::JobSpec& spec, int rank, int world_size,
                              std::unique_ptr<SourceSequences> source)
      : seq_len_(spec.model().seq_len()),
        micro_batch_(spec.data().micro_batch_size()),
        rank_(rank),
        world_(world_size),
        source_(std::move(source)) {}

  absl::Status ReadBatch(int64_t batch, absl::Span<int32_t> inputs, absl::Span<int32_t> targets,
                         absl::Span<int32_t> doc_starts) override {
    RETURN_IF_ERROR(CheckReadBatchArgs(micro_batch_, seq_len_, inputs, targets, doc_starts,
                                       "batch", batch));
    for (int j = 0; j < micro_batch_; ++j) {
      const int64_t global = (batch * world_ + rank_) * micro_batch_ + j;
      const size_t row = static_cast<size_t>(j) * seq_len_;
      source_->Read(global % source_->count(), inputs.subspan(row, seq_len_),
                    targets.subspan(row, seq_len_),
                    doc_starts.empty() ? doc_starts : doc_starts.subspan(row, seq_len_));
    }
    return absl::OkStatus();
  }

 private:
  int seq_len_;
  int micro_batch_;
  int rank_;
  int world_;
  std::unique_ptr<SourceSequences> source_;
};

}  // namespace

absl::StatusOr<std::vector<ValidationSet>> OpenValidationSets(const v1::JobSpec& spec, int rank,
                                                              int world_size) {
  std::vector<ValidationSet> sets;
  const v1::ValidationConfig& v = spec.data().validation();
  if (v.sources().empty()) {
    absl::StatusOr<std::unique_ptr<BatchSource>> single =
        OpenValidationBatchSource(spec, rank, world_size);
    if (!single.ok()) return single.status();
    sets.push_back({"", std::move(*single)});
    return sets;
  }
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " does not lie in a world of ", world_size));
  }
  if (spec.model().seq_len() < 1 || spec.data().micro_batch_size() < 1) {
    return absl::InvalidArgumentError(
        "model.seq_len and data.micro_batch_size: must be >= 1 (validate the spec first)");
  }
  for (int i = 0; i < v.sources_size(); ++i) {
    absl::StatusOr<std::unique_ptr<SourceSequences>> source = SourceSequences::Open(
        absl::StrCat("data.validation.sources[", i, "]"), v.sources(i).path(),
        spec.model().seq_len(), spec.model().vocab_size(), spec.data().document_masking());
    if (!source.ok()) return source.status();
    sets.push_back({v.sources(i).path(),
                    std::make_unique<SourceValidationBatchSource>(spec, rank, world_size,
                                                                  std::move(*source))});
  }
  return sets;
}

absl::StatusOr<std::unique_ptr<BatchSource>> OpenValidationBatchSource(const v1::JobSpec& spec,
                                                                       int rank, int world_size) {
  if (!spec.data().has_validation()) {
    return absl::FailedPreconditionError("data.validation: not set");
  }
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " does not lie in a world of ", world_size));
  }
  if (spec.model().seq_len() < 1 || spec.data().micro_batch_size() < 1) {
    return absl::InvalidArgumentError(
        "model.seq_len and data.micro_batch_size: must be >= 1 (validate the spec first)");
  }
  const std::string& path = spec.data().validation().token_file();
  absl::StatusOr<std::unique_ptr<TokenFile>> file = TokenFile::Open(path);
  if (!file.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.validation.token_file: ", file.status().message()));
  }
  if (spec.data().document_masking() && !(*file)->has_document_index()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.document_masking: data.validation.token_file ", path,
        " records no document starts (write it with `tessera data text`, version 3)"));
  }
  if (static_cast<int64_t>((*file)->max_token()) >= spec.model().vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.validation.token_file: ", path, " holds token id ", (*file)->max_token(),
        ", which does not fit model.vocab_size ", spec.model().vocab_size()));
  }
  if ((*file)->size() < static_cast<int64_t>(spec.model().seq_len()) + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.validation.token_file: ", path, " holds ", (*file)->size(),
        " tokens, which cannot fill one sequence of ", spec.model().seq_len(), " + 1"));
  }
  return std::unique_ptr<BatchSource>(
      new ValidationBatchSource(spec, rank, world_size, std::move(*file)));
}

}  // namespace tessera
