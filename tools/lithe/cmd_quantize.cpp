// lithe quantize -m IN -o OUT --method rtn|gptq|sparsegpt|magnitude [--bits 4] [--group 128] [--sym]
//   [--act-order] [--static-groups] [--sparsity 0.5 | --nm 2:4] [--calib FILE] [--nsamples 128]
//   [--seqlen 2048] [--seed 0] [--sink-tokens 0] [--percdamp 0.01] [--one-pass] [--device cpu|cuda] [--dequantize]
//   [--max-layers N] [--activations auto|device|host|disk] [--force]
// lithe quantize --synthetic llama2-7b [--dtype f16] --device cuda ...: timing only (nothing written).
// Loads IN (cpu: dequantized to f32; cuda: f32/f16/bf16 kept, other formats f16, f32 with
// --dequantize), runs the sequential calibration pipeline on that device (quantize/pipeline.h),
// writes a lithe compressed checkpoint (compress/checkpoint.h) and reports time (forward /
// hessian / solve), bits per weight (scales and zeros counted) and each linear's reconstruction
// error ‖WX − ŴX‖²/‖WX‖². The calibration activations wait between blocks on the device, in
// host memory or in an unlinked temporary file next to OUT (--activations, activation_store.h).
// --synthetic makes a model of a known shape with random weights and calibrates it on random
// token ids.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>

#include "command.h"
#include "lithe/core/file_util.h"
#include "lithe/kernels/convert.h"
#include "lithe/models/compressed_export.h"
#include "lithe/models/llama_names.h"
#include "lithe/quantize/calibration.h"
#include "lithe/quantize/pipeline.h"

namespace lithe::cli {
namespace {

struct Options {
  std::string model, out, method = "gptq", nm, calib = compress::kDefaultCalibrationText, device = "cpu";
  std::string synthetic, dtype = "f16", activations = "auto";
  int bits = 4;
  int64_t group = 128, nsamples = 128, seqlen = 2048, max_layers = -1, sink_tokens = 0;
  bool dequantize = false;
  uint64_t seed = 0;
  double sparsity = 0.5, percdamp = 0.01;
  bool sym = false, act_order = false, static_groups = false, clip = false, one_pass = false, force = false;
  bool quantize_sparse = false, partial_groups = false;
};

Status parse_nm(const std::string& s, int64_t& n, int64_t& m) {
  const auto colon = s.find(':');
  try {
    if (colon == std::string::npos) throw std::invalid_argument(s);
    n = std::stoll(s.substr(0, colon));
    m = std::stoll(s.substr(colon + 1));
  } catch (const std::exception&) {
    return error(StatusCode::invalid_argument, "--nm '{}' is not N:M (e.g. 2:4)", s);
  }
  if (n <= 0 || m <= n) return error(StatusCode::invalid_argument, "--nm {}: need 0 < N < M", s);
  return Status::ok();
}

// The model to compress and its calibration windows: a file (windows from the calibration text)
// or a synthetic model (random weights, random token ids).
Status load(const Options& o, Device device, std::unique_ptr<Model>& model,
            std::vector<std::vector<int32_t>>& windows) {
  if (!o.synthetic.empty()) {
    LITHE_ASSIGN(model, Model::synthetic(o.synthetic, o.dtype, device, o.seed + 1));
    LITHE_ASSIGN(windows, compress::random_token_windows(model->config().vocab_size, o.nsamples, o.seqlen, o.seed));
    return Status::ok();
  }
  LoadOptions lo;
  lo.device = device;
  lo.dequantize = device == Device::cpu || o.dequantize;  // the cpu solvers work on f32 weights
  lo.packed_linears = false;                              // the solvers read dense weights
  LITHE_ASSIGN(model, Model::load(o.model, lo));
  LITHE_ASSIGN(std::string text, read_text_file(o.calib));
  LITHE_ASSIGN(windows, compress::calibration_windows(model->tokenizer(), text, o.nsamples, o.seqlen, o.seed));
  return Status::ok();
}

Status run(const Options& o) {
  LITHE_ASSIGN(compress::CompressMethod method, compress::parse_compress_method(o.method));
  LITHE_ASSIGN(Device device, parse_device(o.device));
  LITHE_ASSIGN(compress::ActivationPlacement activations, compress::parse_activation_placement(o.activations));
  const bool synthetic = !o.synthetic.empty();
  if (synthetic == !o.model.empty())
    return error(StatusCode::invalid_argument, "give -m MODEL (with -o OUT) or --synthetic NAME (timing only)");
  if (synthetic && !o.out.empty())
    return error(StatusCode::invalid_argument, "--synthetic writes nothing: drop -o {}", o.out);
  if (!synthetic && o.out.empty()) return error(StatusCode::invalid_argument, "-o OUT is required with -m");
  if (!synthetic && std::filesystem::exists(o.out) && !o.force)
    return error(StatusCode::already_exists, "output '{}' exists: choose another -o or pass --force", o.out);
  const bool pruning = method == compress::CompressMethod::sparsegpt || method == compress::CompressMethod::magnitude;
  const bool quantized = !pruning || o.quantize_sparse;
  compress::PipelineOptions po;
  po.method = method;
  po.grid.bits = o.bits;
  po.grid.sym = o.sym;
  po.grid.group = o.group;
  po.grid.partial_groups = o.partial_groups;
  po.grid.mse = o.clip;
  po.hessian.percdamp = o.percdamp;
  po.act_order = o.act_order;
  po.static_groups = o.static_groups;
  po.sparsity = o.sparsity;
  po.sparse_quantize = o.quantize_sparse;
  po.nsamples = o.nsamples;
  po.seqlen = o.seqlen;
  po.seed = o.seed;
  po.sink_tokens = o.sink_tokens;
  po.true_sequential = !o.one_pass;
  po.max_layers = o.max_layers;
  po.activations = activations;
  if (!synthetic) {  // a spill file next to the output, where its space is expected; else $TMPDIR
    const std::filesystem::path parent = std::filesystem::absolute(o.out).parent_path();
    if (std::filesystem::is_directory(parent)) po.spill_dir = parent.string();
  }
  if (!o.nm.empty()) LITHE_TRY(parse_nm(o.nm, po.prune_n, po.prune_m));

  const auto t_load = std::chrono::steady_clock::now();
  std::unique_ptr<Model> model;
  std::vector<std::vector<int32_t>> windows;
  LITHE_TRY(load(o, device, model, windows));
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  const ModelConfig& c = model->config();
  if (quantized)
    for (int64_t n_in : {c.d_model, c.q_dim(), c.d_ff}) LITHE_TRY(po.grid.validate(n_in));

  std::vector<compress::CompressedLinearResult> results;
  LITHE_ASSIGN(compress::PipelineReport rep, compress::compress_model(*model, windows, po, results));

  fmt::print("{:<16} {:>11} {:>8} {:>9} {:>10} {:>8}\n", "linear", "shape", "bits/w", "sparsity", "rel. error",
             "solve s");
  for (const auto& r : results)
    fmt::print("{:<16} {:>5}x{:<5} {:8.3f} {:9.3f} {:10.3e} {:8.3f}\n", r.name, r.n_out, r.n_in, r.bits_per_weight,
               r.sparsity, r.error, r.seconds);
  fmt::print("{} on {} ({} weights): {} linears in {} layers, {} windows x {} tokens: {:.1f} s (forward {:.1f}, "
             "hessian {:.1f}, solve {:.1f}; load {:.1f}); {:.3f} bits per weight (scales and zeros counted), sparsity "
             "{:.3f}, mean error {:.3e}; X {:.2f} GB ({}), H {:.2f} GB\n",
             compress::compress_method_name(method), device_name(device),
             dtype_name(model->weights().layers[0].wq.dtype()), rep.n_linears,
             rep.n_layers, rep.windows, o.seqlen, rep.seconds, rep.seconds_forward, rep.seconds_hessian,
             rep.seconds_solve, load_s, rep.avg_bits_per_weight, rep.sparsity, rep.mean_error,
             static_cast<double>(rep.activation_bytes) / 1e9, compress::activation_placement_name(rep.activations),
             static_cast<double>(rep.hessian_bytes) / 1e9);
  if (synthetic) {
    fmt::print("synthetic {} (random weights and token ids): nothing written\n", o.synthetic);
    return Status::ok();
  }

  std::vector<compress::CompressedLinear> linears;
  for (auto& r : results) {
    LITHE_ASSIGN(HfName hf, gguf_to_hf_name(r.name + ".weight", false));
    compress::CompressedLinear L;
    L.hf_name = hf.name.substr(0, hf.name.size() - std::string(".weight").size());
    L.n_out = r.n_out;
    L.n_in = r.n_in;
    L.mask = std::move(r.mask);
    if (r.q) {
      L.q = std::move(r.q);
    } else {  // pruned only: the pruned weights as the model now holds them (as f32 on the host)
      LITHE_ASSIGN(Tensor* w, model->linear_weight(r.layer, r.kind));
      LITHE_ASSIGN(Tensor host, w->to(Device::cpu));
      if (host.dtype() != DType::f32) {
        LITHE_ASSIGN(host, convert(host, DType::f32));
      }
      L.dense_f32.assign(host.data_as<float>(), host.data_as<float>() + host.numel());
    }
    linears.push_back(std::move(L));
  }
  compress::CompressionInfo info;
  info.method = compress::compress_method_name(method);
  info.bits = quantized ? o.bits : 0;
  info.group = o.group;
  info.sym = o.sym;
  info.act_order = o.act_order;
  info.static_groups = o.static_groups;
  info.sparsity = pruning && o.nm.empty() ? o.sparsity : 0;
  info.n = po.prune_n;
  info.m = po.prune_m;
  info.calibration = compress::CalibrationInfo{o.calib, o.nsamples, o.seqlen, o.seed, o.sink_tokens};
  compress::CheckpointWriteOptions wo;
  wo.force = o.force;
  wo.scale_dtype = DType::f32;  // dequantizes exactly to the weights the pipeline measured
  LITHE_TRY(compress::write_lithe_checkpoint(*model, linears, info, o.out, wo));

  fmt::print("wrote {}\n", o.out);
  return Status::ok();
}

void setup(CLI::App& sub, Runner& runner) {
  auto o = std::make_shared<Options>();
  sub.add_option("-m,--model", o->model, "input model: .gguf file or checkpoint directory (never modified)");
  sub.add_option("-o,--out", o->out, "output lithe checkpoint directory");
  sub.add_option("--synthetic", o->synthetic,
                 "instead of -m/-o: random weights of a known shape (llama2-7b, llama3-8b, llama2-13b) calibrated "
                 "on random token ids; reports the timing, writes nothing");
  sub.add_option("--dtype", o->dtype, "weight dtype of --synthetic: f16, bf16 or f32")->capture_default_str();
  sub.add_option("--method", o->method, "rtn, gptq, sparsegpt or magnitude")->capture_default_str();
  sub.add_option("--bits", o->bits, "bits per weight: 2, 3, 4 or 8")->capture_default_str();
  sub.add_option("--group", o->group, "input columns per scale/zero group (0: per output channel)")->capture_default_str();
  sub.add_flag("--partial-groups", o->partial_groups,
               "allow a shorter last group when --group does not divide a layer's input dimension");
  sub.add_flag("--sym", o->sym, "symmetric grid");
  sub.add_flag("--act-order", o->act_order, "gptq: quantize columns by descending Hessian diagonal");
  sub.add_flag("--static-groups", o->static_groups, "gptq with --act-order: groups fixed on the original order");
  sub.add_flag("--clip", o->clip, "search a clipping range per group (minimises the p=2.4 error)");
  sub.add_option("--sparsity", o->sparsity, "sparsegpt/magnitude: fraction of weights pruned")->capture_default_str();
  sub.add_option("--nm", o->nm, "sparsegpt/magnitude: N:M semi-structured (N zeros per M), e.g. 2:4");
  sub.add_flag("--quantize-sparse", o->quantize_sparse, "sparsegpt: also quantize the kept weights (--bits/--group)");
  sub.add_option("--calib", o->calib, "calibration text")->capture_default_str();
  sub.add_option("--nsamples", o->nsamples, "calibration windows")->capture_default_str();
  sub.add_option("--seqlen", o->seqlen, "tokens per window")->capture_default_str();
  sub.add_option("--seed", o->seed, "window sampling seed")->capture_default_str();
  sub.add_option("--sink-tokens", o->sink_tokens,
                 "leave the first N tokens of each window out of the Hessians (attention sinks; 0 = GPTQ reference)")
      ->capture_default_str();
  sub.add_option("--percdamp", o->percdamp, "Hessian dampening (fraction of its mean diagonal)")->capture_default_str();
  sub.add_flag("--one-pass", o->one_pass, "all Hessians of a block from one pass of the uncompressed block");
  sub.add_option("--device", o->device, "where the model and the solvers run: cpu or cuda")->capture_default_str();
  sub.add_flag("--dequantize", o->dequantize, "cuda: keep the weights in f32 (the cpu always does)");
  sub.add_option("--max-layers", o->max_layers, "compress only the first N blocks (-1: all), for timing")
      ->capture_default_str();
  sub.add_option("--activations", o->activations,
                 "where the calibration activations wait between blocks: auto (the device when they fit, else host "
                 "memory, else disk), device, host, or disk (an unlinked temporary file next to -o, or in $TMPDIR)")
      ->capture_default_str();
  sub.add_flag("--force", o->force, "replace an existing output directory");
  runner = [o] { return run(*o); };
}

}  // namespace

LITHE_COMMAND(quantize, "Compress a model (RTN, GPTQ, SparseGPT, magnitude pruning) into a lithe checkpoint", setup);

}  // namespace lithe::cli
