// `tessera data text|synthetic` (see data_command.h).
#include "client/data_command.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "worker/data/synthetic_task.h"
#include "worker/data/text_to_tokens.h"

namespace tessera {

int RunDataCommand(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  const std::string& mode = args.positional[0];
  const std::string out_path = args.Get("out");
  if (out_path.empty()) {
    err << "tessera data: --out FILE is required\n";
    return kExitUsage;
  }
  if (mode == "text") {
    std::vector<std::string> inputs(args.positional.begin() + 1, args.positional.end());
    if (inputs.empty()) {
      err << "tessera data text: give at least one input text file\n";
      return kExitUsage;
    }
    absl::Status s = BuildByteTokenFileFromText(inputs, out_path);
    if (!s.ok()) {
      err << "tessera data text: " << s.message() << "\n";
      return kExitFailed;
    }
    out << "wrote " << out_path << "\n";
    return kExitOk;
  }
  if (mode == "synthetic") {
    v1::SyntheticData task;
    std::string name = absl::AsciiStrToUpper(args.Get("task"));
    v1::SyntheticData::Task t;
    if (!v1::SyntheticData::Task_Parse(name, &t) || t == v1::SyntheticData::TASK_UNSPECIFIED) {
      err << "tessera data synthetic: --task must be addition or copy\n";
      return kExitUsage;
    }
    task.set_task(t);
    int64_t tokens = 0;
    uint64_t seed = 0;
    int max_digits = 0;
    if (!absl::SimpleAtoi(args.Get("tokens"), &tokens) || tokens <= 0) {
      err << "tessera data synthetic: --tokens must be a positive number\n";
      return kExitUsage;
    }
    if (tokens > kMaxSyntheticTokens) {  // generated in memory before writing
      err << "tessera data synthetic: --tokens must be at most " << kMaxSyntheticTokens << "\n";
      return kExitUsage;
    }
    if (args.Has("seed") && !absl::SimpleAtoi(args.Get("seed"), &seed)) {
      err << "tessera data synthetic: --seed must be a number\n";
      return kExitUsage;
    }
    if (args.Has("max-digits") && !absl::SimpleAtoi(args.Get("max-digits"), &max_digits)) {
      err << "tessera data synthetic: --max-digits must be a number\n";
      return kExitUsage;
    }
    task.set_max_digits(max_digits);
    absl::Status s = WriteSyntheticTokenFile(task, seed, tokens, out_path);
    if (!s.ok()) {
      err << "tessera data synthetic: " << s.message() << "\n";
      return kExitFailed;
    }
    out << "wrote " << tokens << " tokens to " << out_path << "\n";
    return kExitOk;
  }
  err << "tessera data: the mode must be text or synthetic\n";
  return kExitUsage;
}

}  // namespace tessera
