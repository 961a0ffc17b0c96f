// Writing token files and shard directories (see token_output.h).
#include "client/token_output.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

constexpr char kManifestFormat[] = "tessera-token-shards";
constexpr int kManifestVersion = 2;  // 2: document starts and their resume state

std::string ShardName(int64_t index) { return absl::StrFormat("shard-%06d.tok", index); }

bool IsShardName(const std::string& name) {
  return absl::StartsWith(name, "shard-") && absl::EndsWith(name, ".tok");
}

// Files an interrupted write leaves: the token file writer's and ours
// (".tmp."), and the manifest's (".manifest.json.tmp-PID").
bool IsUnfinishedName(const std::string& name) {
  return absl::StrContains(name, ".tmp.") ||
         absl::StartsWith(name, absl::StrCat(kShardManifestName, ".tmp"));
}

absl::Status Errno(const std::string& action, const std::string& path) {
  return absl::InternalError(absl::StrCat(action, " ", path, ": ", std::strerror(errno)));
}

absl::Status FsyncPath(const std::string& path, bool directory) {
  const int fd = open(path.c_str(), (directory ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  const bool ok = fsync(fd) == 0;
  close(fd);
  return ok ? absl::OkStatus() : Errno("cannot fsync", path);
}

absl::StatusOr<std::vector<std::string>> ListNames(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return Errno("cannot list", dir);
  while (dirent* entry = readdir(d)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Errno("cannot read", path);
  std::string text;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0) text.append(buffer, n);
  std::fclose(f);
  return text;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenOutputWriter>> TokenOutputWriter::Create(
    const TokenOutputOptions& options, const std::vector<TextInput>& inputs,
    const TokenizerInfo& tokenizer) {
  if (options.directory && options.shard_tokens <= 0) {
    return absl::InvalidArgumentError("--shard-tokens must be positive");
  }
  std::unique_ptr<TokenOutputWriter> writer(new TokenOutputWriter(options, inputs, tokenizer));
  if (options.directory) RETURN_IF_ERROR(writer->PrepareDirectory());
  return writer;
}

TokenOutputWriter::TokenOutputWriter(TokenOutputOptions options,
                                     const std::vector<TextInput>& inputs,
                                     TokenizerInfo tokenizer)
    : options_(std::move(options)),
      inputs_(inputs),
      tokenizer_(std::move(tokenizer)),
      documents_(options_.documents) {}

absl::Status TokenOutputWriter::PrepareDirectory() {
  const std::string& dir = options_.path;
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Errno("cannot create", dir);
  struct stat info;
  if (stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, ": not a directory (sharded output needs a directory)"));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> names, ListNames(dir));
  bool has_manifest = false;
  std::vector<std::string> ours;
  for (const std::string& name : names) {
    if (name == kShardManifestName) {
      has_manifest = true;
    } else if (IsShardName(name) || IsUnfinishedName(name)) {
      ours.push_back(name);
    } else {
      return absl::FailedPreconditionError(absl::StrCat(
          dir, ": holds ", name, ", which is not tokenizer output; give an empty or new directory"));
    }
  }
  if (!has_manifest && ours.empty()) return absl::OkStatus();  // a fresh directory

  std::string manifest_text;
  if (has_manifest) {
    ASSIGN_OR_RETURN(manifest_text, ReadSmallFile(absl::StrCat(dir, "/", kShardManifestName)));
  }
  if (!options_.resume && !options_.restart) {
    bool complete = false;
    if (has_manifest) {
      const nlohmann::json manifest = nlohmann::json::parse(manifest_text, nullptr, false);
      complete = manifest.is_object() && manifest.value("complete", false);
    }
    return absl::FailedPreconditionError(absl::StrCat(
        dir, complete ? ": already holds finished token output"
                      : ": holds unfinished token output from an interrupted run",
        "; give --resume to continue it, or --restart to delete it and start again"));
  }
  if (options_.resume && has_manifest) RETURN_IF_ERROR(LoadManifest(manifest_text));
  // What to delete: everything of ours for --restart; for --resume the
  // unfinished files and any shard the manifest does not list yet.
  for (const std::string& name : ours) {
    bool keep = false;
    if (!options_.restart && IsShardName(name)) {
      for (const Shard& shard : shards_) keep = keep || shard.name == name;
    }
    if (keep) continue;
    const std::string path = absl::StrCat(dir, "/", name);
    if (unlink(path.c_str()) != 0) return Errno("cannot delete", path);
  }
  if (options_.restart && has_manifest) {
    const std::string path = absl::StrCat(dir, "/", kShardManifestName);
    if (unlink(path.c_str()) != 0) return Errno("cannot delete", path);
  }
  for (const Shard& shard : shards_) {
    if (access(absl::StrCat(dir, "/", shard.name).c_str(), R_OK) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir, ": the manifest lists ", shard.name, ", which is missing; give --restart"));
    }
  }
  return FsyncPath(dir, /*directory=*/true);
}

absl::Status TokenOutputWriter::LoadManifest(const std::string& text) {
  const std::string& dir = options_.path;
  const nlohmann::json manifest = nlohmann::json::parse(text, nullptr, false);
  auto refuse = [&](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, ": cannot resume: ", why, "; give --restart to start again"));
  };
  if (!manifest.is_object() || manifest.value("format", "") != kManifestFormat ||
      manifest.value("version", 0) != kManifestVersion) {
    return refuse(absl::StrCat(kShardManifestName, " is not a manifest this version reads"));
  }
  try {
    if (manifest.at("tokenizer").at("sha256").get<std::string>() != tokenizer_.model_sha256 ||
        manifest.at("tokenizer").at("vocab_size").get<uint32_t>() != tokenizer_.vocab_size ||
        manifest.at("tokenizer").at("kind").get<uint32_t>() !=
            static_cast<uint32_t>(tokenizer_.kind)) {
      return refuse("it was made with another tokenizer");
    }
    if (manifest.at("documents").get<std::string>() != TextDocumentsName(options_.documents)) {
      return refuse(absl::StrCat("it was made with --documents ",
                                 manifest.at("documents").get<std::string>()));
    }
    if (manifest.at("shard_tokens").get<int64_t>() != options_.shard_tokens) {
      return refuse(absl::StrCat("it was made with --shard-tokens ",
                                 manifest.at("shard_tokens").get<int64_t>()));
    }
    const nlohmann::json& inputs = manifest.at("inputs");
    if (inputs.size() != inputs_.size()) {
      return refuse(absl::StrCat("it was made from ", inputs.size(), " inputs, not ",
                                 inputs_.size()));
    }
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (inputs[i].at("path").get<std::string>() != inputs_[i].path ||
          inputs[i].at("bytes").get<int64_t>() != inputs_[i].disk_bytes) {
        return refuse(absl::StrCat("input ", i + 1, " was ", inputs[i].at("path").get<std::string>(),
                                   " of ", inputs[i].at("bytes").get<int64_t>(), " bytes, now ",
                                   inputs_[i].path, " of ", inputs_[i].disk_bytes));
      }
    }
    for (const nlohmann::json& s : manifest.at("shards")) {
      Shard shard;
      shard.name = s.at("name").get<std::string>();
      shard.tokens = s.at("tokens").get<int64_t>();
      shard.text_bytes = s.at("text_bytes").get<int64_t>();
      shard.documents = s.at("documents").get<int64_t>();
      shard.continues_document = s.at("continues_document").get<bool>();
      shard.end = {s.at("end_input").get<int64_t>(), s.at("end_offset").get<int64_t>()};
      const nlohmann::json& state = s.at("end_document_state");
      shard.end_documents.starts_document = state.at("starts_document").get<bool>();
      shard.end_documents.after_blank = state.at("after_blank").get<bool>();
      shard.end_documents.has_text = state.at("has_text").get<bool>();
      documents_.Restore(shard.end_documents);
      documents_count_ += shard.documents - (shard.continues_document ? 1 : 0);
      tokens_ += shard.tokens;
      text_bytes_ += shard.text_bytes;
      position_ = shard.end;
      shards_.push_back(std::move(shard));
    }
    complete_ = manifest.at("complete").get<bool>();
  } catch (const nlohmann::json::exception& e) {
    return refuse(absl::StrCat(kShardManifestName, " is malformed (", e.what(), ")"));
  }
  resumed_shards_ = shards();
  return absl::OkStatus();
}

absl::Status TokenOutputWriter::Add(const EncodedChunk& chunk) {
  if (chunk.starts_input) documents_.BeginFile();
  const int64_t limit = options_.shard_tokens;
  int64_t line_start_tokens = 0, line_start_bytes = 0;
  for (size_t line = 0; line < chunk.line_token_ends.size(); ++line) {
    const int64_t token_end = chunk.line_token_ends[line];
    const int64_t byte_end = chunk.line_byte_ends[line];
    const int64_t line_tokens = token_end - line_start_tokens;
    const DocumentLineState before = documents_.state();
    const bool begins = documents_.LineBeginsDocument(chunk.line_blank[line], line_tokens);
    // Where this line starts, in its own input even when the reader could
    // not yet tell that the input before had ended.
    position_ = {chunk.input, chunk.start_offset + line_start_bytes};
    // A full shard closes where a document begins, or inside a document
    // that alone has filled it (token_output.h). The next shard resumes
    // from this line with the document state from before it.
    if (options_.directory && static_cast<int64_t>(current_.size()) >= limit) {
      const int64_t open_document =
          static_cast<int64_t>(current_.size()) -
          static_cast<int64_t>(current_starts_.empty() ? 0 : current_starts_.back());
      if (begins || open_document >= limit) RETURN_IF_ERROR(WriteShard(before));
    }
    if (line_tokens > 0) {
      // A shard's first token always starts a document in it: the split
      // rest of the shard before's last document, when not a new one.
      if (current_.empty()) current_continues_document_ = !begins;
      if (begins || current_.empty()) current_starts_.push_back(current_.size());
      if (begins) ++documents_count_;
    }
    current_.insert(current_.end(), chunk.ids.begin() + line_start_tokens,
                    chunk.ids.begin() + token_end);
    current_text_bytes_ += byte_end - line_start_bytes;
    tokens_ += line_tokens;
    text_bytes_ += byte_end - line_start_bytes;
    line_start_tokens = token_end;
    line_start_bytes = byte_end;
  }
  position_ = chunk.ends_input ? CorpusPosition{chunk.input + 1, 0}
                               : CorpusPosition{chunk.input, chunk.start_offset + line_start_bytes};
  return absl::OkStatus();
}

absl::Status TokenOutputWriter::WriteShard(const DocumentLineState& end_documents) {
  const std::string name = ShardName(shards());
  const std::string final_path = absl::StrCat(options_.path, "/", name);
  const std::string temp_path = absl::StrCat(final_path, ".tmp.written");
  RETURN_IF_ERROR(
      WriteTokenFile(temp_path, current_, tokenizer_, absl::MakeConstSpan(current_starts_)));
  RETURN_IF_ERROR(FsyncPath(temp_path, /*directory=*/false));
  if (std::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    return Errno("cannot rename into place", final_path);
  }
  RETURN_IF_ERROR(FsyncPath(options_.path, /*directory=*/true));
  Shard shard;
  shard.name = name;
  shard.tokens = static_cast<int64_t>(current_.size());
  shard.text_bytes = current_text_bytes_;
  shard.documents = static_cast<int64_t>(current_starts_.size());
  shard.continues_document = current_continues_document_;
  shard.end = position_;
  shard.end_documents = end_documents;
  shards_.push_back(std::move(shard));
  current_.clear();
  current_starts_.clear();
  current_continues_document_ = false;
  current_text_bytes_ = 0;
  RETURN_IF_ERROR(WriteManifest());
  if (options_.stop_after_shards > 0 &&
      shards() - resumed_shards_ >= options_.stop_after_shards) {
    return absl::AbortedError(absl::StrCat("stopped after ", options_.stop_after_shards,
                                           " shards (test hook)"));
  }
  return absl::OkStatus();
}

absl::Status TokenOutputWriter::WriteManifest() const {
  nlohmann::json manifest;
  manifest["format"] = kManifestFormat;
  manifest["version"] = kManifestVersion;
  manifest["complete"] = complete_;
  manifest["tokenizer"] = {{"description", tokenizer_.ToString()},
                           {"kind", static_cast<uint32_t>(tokenizer_.kind)},
                           {"vocab_size", tokenizer_.vocab_size},
                           {"sha256", tokenizer_.model_sha256}};
  manifest["documents"] = TextDocumentsName(options_.documents);
  manifest["shard_tokens"] = options_.shard_tokens;
  manifest["tokens"] = tokens_ - static_cast<int64_t>(current_.size());
  manifest["text_bytes"] = text_bytes_ - current_text_bytes_;
  nlohmann::json inputs = nlohmann::json::array();
  for (const TextInput& input : inputs_) {
    inputs.push_back({{"path", input.path}, {"bytes", input.disk_bytes}});
  }
  manifest["inputs"] = std::move(inputs);
  nlohmann::json shards = nlohmann::json::array();
  int64_t documents = 0;
  for (const Shard& shard : shards_) {
    documents += shard.documents - (shard.continues_document ? 1 : 0);
    const DocumentLineState& state = shard.end_documents;
    shards.push_back({{"name", shard.name},
                      {"tokens", shard.tokens},
                      {"text_bytes", shard.text_bytes},
                      {"documents", shard.documents},
                      {"continues_document", shard.continues_document},
                      {"end_input", shard.end.input},
                      {"end_offset", shard.end.offset},
                      {"end_document_state",
                       {{"starts_document", state.starts_document},
                        {"after_blank", state.after_blank},
                        {"has_text", state.has_text}}}});
  }
  // Documents of the corpus: a document split between shards counts once.
  manifest["corpus_documents"] = documents;
  manifest["shards"] = std::move(shards);
  // Written like a shard: a temporary name, fsync, rename, fsync the directory.
  const std::string path = absl::StrCat(options_.path, "/", kShardManifestName);
  const std::string temp = absl::StrCat(path, ".tmp.", getpid());
  const std::string text = manifest.dump(1) + "\n";
  FILE* f = std::fopen(temp.c_str(), "wb");
  if (f == nullptr) return Errno("cannot write", temp);
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = std::fflush(f) == 0 && ok;
  ok = fsync(fileno(f)) == 0 && ok;
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    return Errno("cannot write", path);
  }
  return FsyncPath(options_.path, /*directory=*/true);
}

absl::Status TokenOutputWriter::Finish() {
  if (!options_.directory) {
    return WriteTokenFile(options_.path, current_, tokenizer_,
                          absl::MakeConstSpan(current_starts_));
  }
  if (complete_) return absl::OkStatus();
  position_ = {static_cast<int64_t>(inputs_.size()), 0};  // all read
  if (!current_.empty() || shards_.empty()) RETURN_IF_ERROR(WriteShard(documents_.state()));
  complete_ = true;
  return WriteManifest();
}

}  // namespace tessera
