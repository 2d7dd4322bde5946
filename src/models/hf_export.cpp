#include "lithe/models/hf_export.h"

#include <sys/stat.h>

#include <filesystem>

#include "lithe/compress/checkpoint.h"
#include "lithe/core/file_util.h"
#include "lithe/core/log.h"
#include "lithe/core/progress.h"
#include "lithe/formats/gguf.h"
#include "lithe/formats/safetensors.h"
#include "lithe/kernels/convert.h"
#include "lithe/models/llama_names.h"
#include "lithe/models/tokenizer_export.h"

namespace fs = std::filesystem;

namespace lithe {
namespace {

Status check_dtype(DType d) {
  if (d == DType::f16 || d == DType::bf16 || d == DType::f32) return Status::ok();
  return error(StatusCode::invalid_argument, "export dtype {} is not supported: use f16, bf16 or f32", dtype_name(d));
}

}  // namespace

StagingDir::StagingDir(StagingDir&& o) noexcept : out(std::move(o.out)), tmp(std::move(o.tmp)), done(o.done) {
  o.done = true;  // the moved-from object no longer owns the directory
}

StagingDir::~StagingDir() {
  std::error_code ec;
  if (!done) fs::remove_all(tmp, ec);
}

Result<StagingDir> make_staging(const std::string& out_dir, bool force) {
  StagingDir s;
  s.out = fs::path(out_dir);
  std::error_code ec;
  if (fs::exists(s.out, ec) && !force)
    return error(StatusCode::already_exists, "output directory '{}' already exists: choose another -o or pass --force",
                 out_dir);
  fs::path parent = s.out.parent_path();
  if (parent.empty()) parent = ".";
  fs::create_directories(parent, ec);
  if (!fs::is_directory(parent, ec))
    return error(StatusCode::io_error, "cannot create the output's parent directory '{}'", parent.string());
  s.tmp = parent / fmt::format(".{}.tmp-{}", s.out.filename().string(), static_cast<long>(getpid()));
  fs::remove_all(s.tmp, ec);
  if (!fs::create_directory(s.tmp, ec))
    return error(StatusCode::io_error, "cannot create '{}': {}", s.tmp.string(), ec.message());
  return s;
}

Status commit_staging(StagingDir& s) {
  std::error_code ec;
  if (fs::exists(s.out, ec)) {
    fs::path old = s.out;
    old += fmt::format(".old-{}", static_cast<long>(getpid()));
    fs::rename(s.out, old, ec);
    if (ec) return error(StatusCode::io_error, "cannot move the old '{}' aside: {}", s.out.string(), ec.message());
    fs::rename(s.tmp, s.out, ec);
    if (ec) return error(StatusCode::io_error, "cannot rename '{}' to '{}': {}", s.tmp.string(), s.out.string(), ec.message());
    fs::remove_all(old, ec);
  } else {
    fs::rename(s.tmp, s.out, ec);
    if (ec) return error(StatusCode::io_error, "cannot rename '{}' to '{}': {}", s.tmp.string(), s.out.string(), ec.message());
  }
  s.done = true;
  return Status::ok();
}

namespace {

nlohmann::json generation_config(const HfLlamaConfig& c) {
  nlohmann::json g = {{"_from_model_config", true}, {"transformers_version", "4.46.0"}};
  auto ids = [](const std::vector<int64_t>& v) -> nlohmann::json {
    if (v.size() == 1) return v[0];
    return v;
  };
  if (!c.bos_token_ids.empty()) g["bos_token_id"] = ids(c.bos_token_ids);
  if (!c.eos_token_ids.empty()) g["eos_token_id"] = ids(c.eos_token_ids);
  return g;
}

std::string torch_dtype_name(DType d) {
  return d == DType::f16 ? "float16" : d == DType::bf16 ? "bfloat16" : "float32";
}

}  // namespace

Result<HfLlamaConfig> hf_export_config(const ModelFile& model, DType dtype) {
  HfLlamaConfig cfg;
  if (const gguf::File* g = model.gguf()) {
    if (g->find_tensor("rope_freqs.weight") != nullptr)
      return error(StatusCode::unsupported, "'{}': exporting llama3 rope frequency factors (rope_freqs.weight) as a "
                   "config.json rope_scaling is not supported yet", g->path());
    LITHE_ASSIGN(cfg, llama_config_from_gguf(*g));
  } else if (!model.config().is_null()) {
    LITHE_ASSIGN(cfg, parse_hf_llama_config(model.config()));
  } else {
    return error(StatusCode::invalid_argument,
                 "cannot export a bare safetensors file: it has no config; export from a GGUF file or a checkpoint "
                 "directory with config.json");
  }
  cfg.torch_dtype = torch_dtype_name(dtype);
  return cfg;
}

Result<HfTensor> hf_export_tensor(const ModelFile& model, const ModelTensorInfo& ti, const HfLlamaConfig& cfg,
                                  DType dtype) {
  HfTensor out{ti.name, {}};
  RopePermute perm = RopePermute::none;
  if (const gguf::File* g = model.gguf()) {
    LITHE_ASSIGN(HfName n, gguf_to_hf_name(ti.name, arch_permutes_qk(g->get_string_or("general.architecture", ""))));
    out.name = n.name;
    perm = n.permute;
  }
  LITHE_ASSIGN(Tensor src, model.tensor(ti.name));
  LITHE_ASSIGN(Tensor t, convert(src, DType::f32));
  if (perm != RopePermute::none) {
    const int64_t heads = perm == RopePermute::q ? cfg.num_attention_heads : cfg.num_key_value_heads;
    auto p = unpermute_rope_rows(t, heads);
    if (!p) return p.status().with_context(fmt::format("tensor '{}'", ti.name));
    t = std::move(*p);
  }
  if (dtype != DType::f32) {
    LITHE_ASSIGN(t, convert(t, dtype));
  }
  out.tensor = std::move(t);
  return out;
}

Status write_hf_config_files(const std::string& dir, const HfLlamaConfig& cfg, const nlohmann::json& extra) {
  nlohmann::json j = to_json(cfg);
  for (const auto& [k, v] : extra.items()) j[k] = v;
  LITHE_TRY(write_file_atomic(dir + "/config.json", j.dump(2) + "\n"));
  return write_file_atomic(dir + "/generation_config.json", generation_config(cfg).dump(2) + "\n");
}

Result<HfExportReport> export_hf(const ModelFile& model, const HfExportOptions& opts) {
  LITHE_TRY(check_dtype(opts.dtype));
  if (const std::string qm = compress::quant_method(model); !qm.empty())
    return error(StatusCode::unsupported, "'{}' is a compressed checkpoint (quant_method '{}'): exporting it as a dense "
                 "HF directory is not supported yet{}", model.directory(), qm, qm == "lithe" ? " (--format gptq is)" : "");
  LITHE_ASSIGN(HfLlamaConfig cfg, hf_export_config(model, opts.dtype));
  LITHE_ASSIGN(StagingDir stage, make_staging(opts.out_dir, opts.force));

  // Tensors: convert one at a time (bounded memory: the writer holds the converted tensors, which
  // is the output size; the source stays memory-mapped).
  safetensors::Writer w;
  LITHE_TRY(w.set_metadata("format", "pt"));
  HfExportReport report;
  Progress progress("export", static_cast<int64_t>(model.tensors().size()));
  for (const auto& ti : model.tensors()) {
    LITHE_ASSIGN(HfTensor t, hf_export_tensor(model, ti, cfg, opts.dtype));
    LITHE_TRY(w.add_tensor(t.name, t.tensor));
    report.tensors++;
    report.bytes += t.tensor.nbytes();
    progress.advance(1, t.name);
  }
  progress.finish();

  const std::string tmp = stage.tmp.string();
  LITHE_TRY(w.write_sharded(tmp, opts.max_shard_bytes).status());
  LITHE_TRY(write_hf_config_files(tmp, cfg));
  LITHE_ASSIGN(report.tokenizer, export_model_tokenizer(model, tmp));
  LITHE_TRY(commit_staging(stage));
  log::info("exported {} tensors ({:.1f} MiB, {}) to {}{}", report.tensors, static_cast<double>(report.bytes) / (1 << 20),
            dtype_name(opts.dtype), opts.out_dir, report.tokenizer ? " with tokenizer" : "");
  return report;
}

}  // namespace lithe
