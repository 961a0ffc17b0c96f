// The reader / encoders / in-order hand-off of TokenizeCorpus (see
// corpus_tokenizer.h). At most a few chunks per thread are in flight
// (read, being encoded, or encoded and waiting for their turn), so memory
// stays bounded however far the slowest chunk lags.
#include "client/corpus_tokenizer.h"

#include <sched.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

// Text read but not yet encoded. `status` not OK marks where reading failed.
struct TextChunk {
  int64_t sequence = 0;
  absl::Status status;
  EncodedChunk header;  // everything but the ids and line ends
  int64_t first_line_number = 1;
  std::string text;
};

struct EncodeResult {
  absl::Status status;
  EncodedChunk chunk;
};

// Where to cut `buffer` (which starts at a line start) into a chunk of whole
// lines, or 0 to read more first. `at_end`: nothing more to read.
size_t ChunkCut(const std::string& buffer, int64_t chunk_bytes, bool at_end) {
  if (at_end && static_cast<int64_t>(buffer.size()) <= chunk_bytes) return buffer.size();
  if (static_cast<int64_t>(buffer.size()) < chunk_bytes) return 0;
  const size_t last = buffer.rfind('\n', chunk_bytes - 1);
  if (last != std::string::npos) return last + 1;
  // One line longer than a chunk: it ends at its newline, or kMaxLineBytes.
  const size_t end = buffer.find('\n', chunk_bytes);
  if (end != std::string::npos && static_cast<int64_t>(end) < kMaxLineBytes) return end + 1;
  if (static_cast<int64_t>(buffer.size()) >= kMaxLineBytes) return kMaxLineBytes;
  return at_end ? buffer.size() : 0;
}

class Pipeline {
 public:
  Pipeline(const std::vector<TextInput>& inputs, const LineEncoder& encoder,
           const CorpusTokenizerOptions& options)
      : inputs_(inputs),
        encoder_(encoder),
        options_(options),
        max_in_flight_(2 * std::max(1, options.threads) + 2) {}

  absl::Status Run(EncodedChunkSink* sink) {
    std::thread reader([this] { ReadAll(); });
    std::vector<std::thread> workers;
    for (int i = 0; i < std::max(1, options_.threads); ++i) {
      workers.emplace_back([this] { EncodeAll(); });
    }
    absl::Status status = HandOff(sink);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    changed_.notify_all();
    reader.join();
    for (std::thread& w : workers) w.join();
    return status;
  }

 private:
  // Waits for room, then queues a chunk for the encoders. False when stopping.
  bool Queue(TextChunk chunk) {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [this] { return stopping_ || in_flight_ < max_in_flight_; });
    if (stopping_) return false;
    chunk.sequence = next_read_++;
    ++in_flight_;
    to_encode_.push_back(std::move(chunk));
    changed_.notify_all();
    return true;
  }

  void ReadAll() {
    int64_t disk_before = 0;  // stored bytes of the inputs already read
    for (int64_t i = options_.start.input; i < static_cast<int64_t>(inputs_.size()); ++i) {
      if (absl::Status s = ReadInput(i, &disk_before); !s.ok()) {
        TextChunk failed;
        failed.status = s;
        Queue(std::move(failed));
        break;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    reading_done_ = true;
    changed_.notify_all();
  }

  absl::Status ReadInput(int64_t index, int64_t* disk_before) {
    const TextInput& input = inputs_[index];
    absl::StatusOr<std::unique_ptr<TextInputReader>> reader = TextInputReader::Open(input);
    if (!reader.ok()) return reader.status();
    const int64_t chunk_bytes = std::min(options_.chunk_bytes, kMaxLineBytes);
    int64_t offset = 0;
    int64_t line_number = 1;
    std::string buffer;
    bool at_end = false;
    // Resuming inside this input: skip whole lines up to the start offset.
    const int64_t skip = index == options_.start.input ? options_.start.offset : 0;
    while (offset < skip) {
      buffer.clear();
      absl::StatusOr<int64_t> n = (*reader)->Read(std::min<int64_t>(skip - offset, 1 << 20), &buffer);
      if (!n.ok()) return n.status();
      if (*n == 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            input.path, ": shorter than when this output was started (", offset,
            " bytes, expected at least ", skip, "); has the input changed?"));
      }
      line_number += std::count(buffer.begin(), buffer.end(), '\n');
      offset += *n;
    }
    buffer.clear();
    bool first = true;
    for (;;) {
      size_t cut = ChunkCut(buffer, chunk_bytes, at_end);
      while (cut == 0 && !at_end) {
        const int64_t want = std::max<int64_t>(chunk_bytes - static_cast<int64_t>(buffer.size()),
                                               1 << 16);
        absl::StatusOr<int64_t> n = (*reader)->Read(want, &buffer);
        if (!n.ok()) return n.status();
        at_end = *n == 0;
        cut = ChunkCut(buffer, chunk_bytes, at_end);
      }
      if (cut == 0 && !first) break;  // nothing left (an empty input still gets one chunk)
      TextChunk chunk;
      chunk.header.input = index;
      chunk.header.start_offset = offset;
      chunk.header.starts_input = offset == 0;
      chunk.header.ends_input = at_end && cut == buffer.size();
      chunk.header.disk_bytes_done = *disk_before + (*reader)->disk_bytes_read();
      chunk.first_line_number = line_number;
      chunk.text = buffer.substr(0, cut);
      buffer.erase(0, cut);
      offset += cut;
      line_number += std::count(chunk.text.begin(), chunk.text.end(), '\n');
      const bool last = chunk.header.ends_input;
      if (!Queue(std::move(chunk))) return absl::CancelledError("stopped");
      first = false;
      if (last) break;
    }
    *disk_before += input.disk_bytes > 0 ? input.disk_bytes : (*reader)->disk_bytes_read();
    return absl::OkStatus();
  }

  void EncodeAll() {
    for (;;) {
      TextChunk chunk;
      {
        std::unique_lock<std::mutex> lock(mu_);
        changed_.wait(lock, [this] { return stopping_ || !to_encode_.empty() || reading_done_; });
        if (stopping_ || (to_encode_.empty() && reading_done_)) return;
        chunk = std::move(to_encode_.front());
        to_encode_.pop_front();
      }
      EncodeResult result;
      result.status = chunk.status;
      result.chunk = std::move(chunk.header);
      if (result.status.ok()) result.status = Encode(chunk, &result.chunk);
      std::lock_guard<std::mutex> lock(mu_);
      encoded_[chunk.sequence] = std::move(result);
      changed_.notify_all();
    }
  }

  absl::Status Encode(const TextChunk& chunk, EncodedChunk* out) const {
    absl::string_view text = chunk.text;
    int64_t line_number = chunk.first_line_number;
    size_t start = 0;
    out->ids.reserve(text.size() / 3);
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      end = end == absl::string_view::npos ? text.size() : end + 1;
      if (absl::Status s = encoder_.EncodeLine(text.substr(start, end - start), &out->ids);
          !s.ok()) {
        return absl::Status(s.code(), absl::StrCat(inputs_[chunk.header.input].path, ":",
                                                   line_number, ": ", s.message()));
      }
      out->line_token_ends.push_back(static_cast<int64_t>(out->ids.size()));
      out->line_byte_ends.push_back(static_cast<int64_t>(end));
      out->line_blank.push_back(IsBlankLine(text.substr(start, end - start)));
      start = end;
      ++line_number;
    }
    return absl::OkStatus();
  }

  // Hands the encoded chunks to the sink in sequence order.
  absl::Status HandOff(EncodedChunkSink* sink) {
    for (int64_t next = 0;; ++next) {
      EncodeResult result;
      {
        std::unique_lock<std::mutex> lock(mu_);
        changed_.wait(lock, [&] {
          return encoded_.count(next) > 0 || (reading_done_ && next >= next_read_);
        });
        auto it = encoded_.find(next);
        if (it == encoded_.end()) return absl::OkStatus();  // all read and handed off
        result = std::move(it->second);
        encoded_.erase(it);
        --in_flight_;
        changed_.notify_all();
      }
      if (!result.status.ok()) return result.status;
      if (absl::Status s = sink->Add(result.chunk); !s.ok()) return s;
    }
  }

  const std::vector<TextInput>& inputs_;
  const LineEncoder& encoder_;
  const CorpusTokenizerOptions options_;
  const int max_in_flight_;

  std::mutex mu_;
  std::condition_variable changed_;
  bool stopping_ = false;
  bool reading_done_ = false;
  int64_t next_read_ = 0;  // sequence number of the next chunk read
  int in_flight_ = 0;      // chunks read and not yet handed off
  std::deque<TextChunk> to_encode_;
  std::map<int64_t, EncodeResult> encoded_;
};

}  // namespace

absl::Status ByteLineEncoder::EncodeLine(absl::string_view line, std::vector<uint32_t>* ids) const {
  for (char c : line) ids->push_back(static_cast<uint8_t>(c));
  return absl::OkStatus();
}

absl::Status TokenizeCorpus(const std::vector<TextInput>& inputs, const LineEncoder& encoder,
                            const CorpusTokenizerOptions& options, EncodedChunkSink* sink) {
  Pipeline pipeline(inputs, encoder, options);
  return pipeline.Run(sink);
}

int AvailableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace tessera
