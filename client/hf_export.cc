// See hf_export.h.
//
// safetensors: an 8-byte little-endian header length, a JSON header naming
// each tensor's dtype, shape and [begin, end) byte offsets into the data
// that follows (padded with spaces to a multiple of 8), then the data, each
// tensor row-major and little-endian, in the header's order.
#include "client/hf_export.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/checkpoint_layout.h"
#include "common/regular_file.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "formats/checkpoint_state.h"
#include "formats/hf_llama_layout.h"
#include "formats/spec_hash.h"
#include "formats/token_file.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

// One tensor of the export: rows [row0, row0 + rows) of a Tessera parameter.
struct Slice {
  std::string name;
  const FullParameter* source = nullptr;
  int64_t row0 = 0, rows = 0;
};

uint16_t RoundToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN, sign kept
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

// The checkpoint root and step `checkpoint` names.
absl::StatusOr<std::pair<std::string, int>> ResolveCheckpoint(const std::string& checkpoint) {
  std::string path(absl::StripSuffix(checkpoint, "/"));
  const size_t slash = path.rfind('/');
  const std::string last = slash == std::string::npos ? path : path.substr(slash + 1);
  if (std::optional<int64_t> step = ParseStepDirName(last); step.has_value()) {
    const std::string root = slash == std::string::npos ? "." : path.substr(0, slash);
    return std::make_pair(root, static_cast<int>(*step));
  }
  ASSIGN_OR_RETURN(const std::vector<int64_t> steps, ListCommittedSteps(path));
  if (steps.empty()) {
    return absl::NotFoundError(absl::StrCat(checkpoint, ": no committed checkpoint step"));
  }
  return std::make_pair(path, static_cast<int>(*std::max_element(steps.begin(), steps.end())));
}

// Writes `path` through a temporary name and a rename, so a reader never
// sees half a file; `write` streams the contents.
absl::Status WriteFile(const std::string& path,
                       const std::function<void(std::ofstream&)>& write) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    write(out);
    out.flush();
    if (!out.good()) {
      std::remove(tmp.c_str());
      return absl::InternalError(absl::StrCat(tmp, ": cannot write (disk full?)"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HfExportReport> ExportHuggingFace(const v1::JobSpec& spec,
                                                 const std::string& checkpoint,
                                                 HfExportDType dtype, const std::string& out_dir) {
  const v1::ModelConfig& m = spec.model();
  ASSIGN_OR_RETURN(const std::vector<HfLlamaParameter> layout, HfLlamaLayout(m));
  ASSIGN_OR_RETURN(const auto where, ResolveCheckpoint(checkpoint));
  const std::string& root = where.first;
  const int step = where.second;
  ASSIGN_OR_RETURN(const std::vector<FullParameter> params,
                   ReadFullParameters(root, step, &spec));

  // The Hugging Face tensors, each a row range of one Tessera parameter,
  // every shape checked against the spec.
  std::map<std::string, const FullParameter*> by_name;
  for (const FullParameter& p : params) by_name[p.name] = &p;
  if (by_name.size() != layout.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the checkpoint holds ", by_name.size(),
                                                   " parameters, the spec's model ",
                                                   layout.size()));
  }
  std::vector<Slice> slices;
  for (const HfLlamaParameter& p : layout) {
    auto it = by_name.find(p.tessera_name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(p.tessera_name, ": not in the checkpoint of step ", step));
    }
    if (it->second->rows != p.rows || it->second->cols != p.cols) {
      return absl::InvalidArgumentError(absl::StrCat(
          p.tessera_name, ": the checkpoint holds ", it->second->rows, " x ", it->second->cols,
          ", the spec's model ", p.rows, " x ", p.cols));
    }
    for (const HfLlamaTensor& t : p.tensors) slices.push_back({t.name, it->second, t.row0, t.rows});
  }

  const bool bf16 = dtype == HfExportDType::kBFloat16;
  const int64_t element_bytes = bf16 ? 2 : 4;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};
  int64_t offset = 0;
  HfExportReport report;
  report.step = step;
  for (const Slice& s : slices) {
    const int64_t cols = s.source->cols, bytes = s.rows * cols * element_bytes;
    // Norm weights are vectors in Hugging Face ([hidden]); the rest [out, in].
    nlohmann::json shape = cols == 1 ? nlohmann::json::array({s.rows})
                                     : nlohmann::json::array({s.rows, cols});
    header[s.name] = {{"dtype", bf16 ? "BF16" : "F32"},
                      {"shape", shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    report.parameters += s.rows * cols;
    ++report.tensors;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  report.file_bytes = 8 + static_cast<int64_t>(header_text.size()) + offset;
  // Streamed tensor by tensor: the master weights are the only full copy
  // of the model held in memory.
  auto write_safetensors = [&](std::ofstream& out) {
    const uint64_t header_size = header_text.size();
    char size_bytes[8];
    for (int i = 0; i < 8; ++i) size_bytes[i] = static_cast<char>((header_size >> (8 * i)) & 0xFF);
    out.write(size_bytes, 8);
    out.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));
    std::vector<char> buffer;
    for (const Slice& s : slices) {
      const float* values = s.source->values.data() + s.row0 * s.source->cols;
      const int64_t n = s.rows * s.source->cols;
      if (bf16) {
        buffer.resize(static_cast<size_t>(n) * 2);
        for (int64_t i = 0; i < n; ++i) {
          const uint16_t b = RoundToBf16(values[i]);
          buffer[2 * i] = static_cast<char>(b & 0xFF);
          buffer[2 * i + 1] = static_cast<char>(b >> 8);
        }
        out.write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      } else {
        out.write(reinterpret_cast<const char*>(values), static_cast<std::streamsize>(n) * 4);
      }
    }
  };

  nlohmann::ordered_json config = {{"architectures", {"LlamaForCausalLM"}},
                                    {"model_type", "llama"}};
  for (const HfLlamaConfigField& f : HfLlamaConfigFields(m)) {
    if (f.is_float) {
      config[f.key] = static_cast<float>(f.value);
    } else {
      config[f.key] = static_cast<int64_t>(f.value);
    }
  }
  // Newer transformers read RoPE's settings from rope_parameters, older
  // ones from rope_theta: both are written.
  config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", config["rope_theta"]}};
  config["hidden_act"] = "silu";
  config["max_position_embeddings"] = m.seq_len();
  config["attention_bias"] = false;
  config["mlp_bias"] = false;
  config["tie_word_embeddings"] = false;
  config["torch_dtype"] = bf16 ? "bfloat16" : "float32";
  config["tessera"] = {{"checkpoint", root}, {"step", step}};

  if (mkdir(out_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::InvalidArgumentError(absl::StrCat("--out ", out_dir, ": ", std::strerror(errno)));
  }
  RETURN_IF_ERROR(WriteFile(out_dir + "/model.safetensors", write_safetensors));
  const std::string config_text = config.dump(2) + "\n";
  RETURN_IF_ERROR(WriteFile(out_dir + "/config.json", [&](std::ofstream& out) {
    out.write(config_text.data(), static_cast<std::streamsize>(config_text.size()));
  }));
  return report;
}

absl::Status ExportTokenizer(const v1::JobSpec& spec, const std::string& tokenizer,
                             const std::string& out_dir) {
  if (spec.data().has_synthetic()) {
    return absl::FailedPreconditionError(
        "--tokenizer: the job trains on synthetic byte-level data, which no tokenizer made");
  }
  constexpr int64_t kMaxTokenizerBytes = int64_t{256} << 20;
  absl::StatusOr<std::string> model =
      ReadRegularFile(tokenizer, kMaxTokenizerBytes, Symlinks::kFollow);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat("--tokenizer: ", model.status().message()));
  }
  const std::string sha = Sha256Hex(*model);
  if (absl::StatusOr<TokenFileHeader> header = ReadTokenFileHeader(spec.data().token_file());
      header.ok() && header->tokenizer.recorded()) {
    const TokenizerInfo& made_by = header->tokenizer;
    if (made_by.kind != TokenizerKind::kSentencePiece || made_by.model_sha256 != sha) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--tokenizer: ", tokenizer, " (sha256 ", sha.substr(0, 12), "...) did not make the job's token file ",
          spec.data().token_file(), ", which records ", made_by.ToString()));
    }
  }
  return WriteFile(out_dir + "/tokenizer.model", [&](std::ofstream& out) {
    out.write(model->data(), static_cast<std::streamsize>(model->size()));
  });
}

}  // namespace tessera
