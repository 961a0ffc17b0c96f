// See export_command.h.
#include "client/export_command.h"

#include "absl/strings/str_format.h"
#include "client/hf_export.h"
#include "client/job_file.h"
#include "common/spec_defaults.h"
#include "common/spec_rules.h"

namespace tessera {

int RunExportCommand(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  const std::string job_file = args.Get("job"), out_dir = args.Get("out");
  if (job_file.empty() || out_dir.empty()) {
    err << "tessera export: --job FILE (the job file the checkpoint was trained with) and "
           "--out DIR are required\n";
    return kExitUsage;
  }
  const std::string format = args.Get("format", "safetensors");
  if (format != "safetensors") {
    err << "tessera export: --format: the only format is safetensors, got '" << format << "'\n";
    return kExitUsage;
  }
  const std::string dtype_name = args.Get("dtype", "bf16");
  if (dtype_name != "bf16" && dtype_name != "fp32") {
    err << "tessera export: --dtype: bf16 or fp32, got '" << dtype_name << "'\n";
    return kExitUsage;
  }
  absl::StatusOr<v1::JobSpec> spec = ReadJobFile(job_file);
  if (!spec.ok()) {
    err << "tessera export: " << spec.status().message() << "\n";
    return kExitUsage;
  }
  // The checkpoint's spec hash is what vouches for the job file: only the
  // spec the coordinator validated and trained the checkpoint with matches
  // it. The spec's own rules (bounds first) refuse a bad file by its field
  // before anything is sized from it.
  if (absl::Status s = ValidateJobSpecFields(*spec); !s.ok()) {
    err << "tessera export: " << job_file << ": " << s.message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<HfExportReport> report =
      ExportHuggingFace(WithDefaults(*spec), args.positional[0],
                        dtype_name == "bf16" ? HfExportDType::kBFloat16 : HfExportDType::kFloat32,
                        out_dir);
  if (!report.ok()) {
    err << "tessera export: " << absl::StatusCodeToString(report.status().code()) << ": "
        << report.status().message() << "\n";
    return kExitFailed;
  }
  out << absl::StrFormat(
      "exported step %d: %d tensors, %d parameters (%s), %.1f MiB to %s/model.safetensors and "
      "config.json\n",
      report->step, report->tensors, report->parameters, dtype_name,
      report->file_bytes / 1048576.0, out_dir);
  if (const std::string tokenizer = args.Get("tokenizer"); !tokenizer.empty()) {
    if (absl::Status s = ExportTokenizer(WithDefaults(*spec), tokenizer, out_dir); !s.ok()) {
      err << "tessera export: " << absl::StatusCodeToString(s.code()) << ": " << s.message()
          << "\n";
      return kExitFailed;
    }
    out << "copied " << tokenizer << " to " << out_dir << "/tokenizer.model\n";
  }
  return kExitOk;
}

}  // namespace tessera
