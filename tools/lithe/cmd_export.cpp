// lithe export -m MODEL -o DIR --format hf [--dtype f16|bf16|f32] [--force]
// lithe export -m LITHE_CHECKPOINT -o DIR --format gptq [--force]   (AutoGPTQ layout, 4/8 bits)
#include <fmt/format.h>

#include "command.h"
#include "lithe/models/compressed_export.h"
#include "lithe/formats/model_file.h"
#include "lithe/models/hf_export.h"

namespace lithe::cli {
namespace {

struct Options {
  std::string model, out, format = "hf", dtype = "f16";
  bool force = false;
};

Status run(const Options& o) {
  if (o.format == "gptq") {
    LITHE_ASSIGN(auto model, open_model_file(o.model));
    LITHE_ASSIGN(compress::GptqExportReport r, compress::export_gptq(*model, o.out, o.force));
    fmt::print("wrote {}: {} quantized linears in the AutoGPTQ layout, {} tensors{}\n", o.out, r.linears, r.tensors,
               r.tokenizer ? ", tokenizer" : "");
    return Status::ok();
  }
  if (o.format != "hf")
    return error(StatusCode::invalid_argument, "unknown export format '{}': use hf or gptq", o.format);
  const auto dtype = dtype_from_name(o.dtype);
  if (!dtype) return error(StatusCode::invalid_argument, "unknown --dtype '{}': use f16, bf16 or f32", o.dtype);
  LITHE_ASSIGN(auto model, open_model_file(o.model));
  HfExportOptions opts;
  opts.out_dir = o.out;
  opts.dtype = *dtype;
  opts.force = o.force;
  LITHE_ASSIGN(HfExportReport r, export_hf(*model, opts));
  fmt::print("wrote {}: {} tensors, {:.1f} MiB of {} weights{}\n", o.out, r.tensors,
             static_cast<double>(r.bytes) / (1 << 20), o.dtype, r.tokenizer ? ", tokenizer" : "");
  return Status::ok();
}

void setup(CLI::App& sub, Runner& runner) {
  auto o = std::make_shared<Options>();
  sub.add_option("-m,--model", o->model, "input model: .gguf file or checkpoint directory")->required();
  sub.add_option("-o,--out", o->out, "output directory (must not exist unless --force)")->required();
  sub.add_option("--format", o->format, "output format: hf (Hugging Face directory) or gptq (AutoGPTQ layout of a lithe checkpoint)")->capture_default_str();
  sub.add_option("--dtype", o->dtype, "weight dtype: f16, bf16 or f32")->capture_default_str();
  sub.add_flag("--force", o->force, "replace an existing output directory");
  runner = [o] { return run(*o); };
}

}  // namespace

LITHE_COMMAND(export, "Write a model as a Hugging Face directory (hf) or a lithe checkpoint in the AutoGPTQ layout (gptq)", setup);

}  // namespace lithe::cli
