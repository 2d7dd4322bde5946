// The sequential layer-by-layer compression pipeline (GPTQ Sec. 3.2.4 "Setup", with "true
// sequential" order inside a block).
//
// The model runs where it was loaded, and the solvers run there too (compress/solver_backend.h):
// cpu backend: f32 host weights (load with dequantize), H in f64; cuda backend: f32 / f16 / bf16
// device weights, activations and H (f32) on the GPU, GPTQ / SparseGPT on the GPU. For each block
// l, in order, and inside it for each site in order (qkv, o, gate_up, down):
//   1. every calibration window's block input X_l runs through block l (whose earlier sites are
//      already compressed) up to the site; the site's input rows accumulate
//      H = 2/N Σ_windows XᵀX (N windows, with the reference's running-average scaling
//      H *= n/(n+1); H += 2/(n+1) XᵀX after each window), shared by the site's linears;
//   2. each linear of the site is compressed (RTN, GPTQ, SparseGPT or magnitude pruning) and its
//      weight in the model replaced by the dequantized / pruned W (in the weight's dtype), so
//      later sites and blocks see compressed inputs; its reconstruction error
//      tr(ΔW H ΔWᵀ)/tr(W H Wᵀ) is recorded.
// Then all windows run through the now-compressed block (in place) to give X_{l+1}.
// Memory: X (windows x seqlen x d_model f32; on the model's device, in host memory or on disk:
// activation_store.h) + one window's scratch and block workspace + one H per site (n_in² f64 on
// the cpu, f32 on cuda; all four at once without true_sequential). RTN and magnitude pruning
// need no H: without measure_error they skip every forward pass. Embeddings, norms and the
// output head are left as they are.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lithe/compress/gptq.h"
#include "lithe/compress/hessian.h"
#include "lithe/compress/quant_grid.h"
#include "lithe/compress/rtn.h"
#include "lithe/compress/sparsegpt.h"
#include "lithe/models/model.h"
#include "lithe/quantize/activation_store.h"

namespace lithe::compress {

enum class CompressMethod { rtn, gptq, sparsegpt, magnitude };
const char* compress_method_name(CompressMethod m);
Result<CompressMethod> parse_compress_method(std::string_view name);  // "rtn", "gptq", ...

struct PipelineOptions {
  CompressMethod method = CompressMethod::gptq;
  QuantGrid grid{};  // rtn and gptq; sparsegpt with sparse_quantize
  // GPTQ / SparseGPT solver settings (gptq.h, sparsegpt.h).
  int64_t block_size = 128;
  HessianOptions hessian{};
  bool act_order = false;
  bool static_groups = false;
  // SparseGPT / magnitude pruning.
  double sparsity = 0.5;
  int64_t prune_n = 0, prune_m = 0;  // n:m (n zeros per m)
  bool sparse_quantize = false;      // sparsegpt: also round the kept weights to `grid`
  // Calibration as drawn (calibration.h); recorded here, the windows are passed in.
  int64_t nsamples = 128, seqlen = 2048;
  uint64_t seed = 0;
  // The first `sink_tokens` positions of every window run through the blocks (later tokens attend
  // to them) but stay out of the Hessians (position 0 becomes an attention sink whose rows are far
  // larger than the rest and dominate H). 0 = every token, as the GPTQ reference and the default:
  // on SmolLM2-135M leaving one out helped the first 8 blocks but hurt the whole model (GPTQ
  // w4g128 perplexity 37.35 with 1 vs 32.20 with 0; bench/RESULTS.md).
  int64_t sink_tokens = 0;
  // Accumulate H for RTN / magnitude too, to report their reconstruction error.
  bool measure_error = true;
  // Inside a block, H of each site from the block with its earlier sites already compressed
  // (default, 4 partial block passes per window); false: all four H from one pass of the
  // uncompressed block (the reference's opt.py; about 2.5x fewer block FLOPs).
  bool true_sequential = true;
  // Where X waits between blocks (activation_store.h): auto = the model's device when it fits,
  // else host memory, else a temporary file in spill_dir ("" = $TMPDIR, else /tmp).
  ActivationPlacement activations = ActivationPlacement::automatic;
  std::string spill_dir;
  int64_t max_layers = -1;  // compress only the first max_layers blocks (-1: all), for tests/timing
  bool progress = true;  // "layer i/N" bar with ETA on progress_out (stderr when null)
  std::FILE* progress_out = nullptr;
};

struct CompressedLinearResult {
  std::string name;  // "blk.3.attn_q"
  int64_t layer = 0;
  LinearKind kind = LinearKind::q;
  int64_t n_out = 0, n_in = 0;
  std::optional<QuantizedMatrix> q;  // quantized methods
  std::vector<uint8_t> mask;         // pruning methods: 1 = kept, [n_out][n_in]
  double error = -1;                 // tr(ΔW H ΔWᵀ)/tr(W H Wᵀ); -1 when H was not accumulated
  double loss = 0;                   // the solver's own loss (gptq, sparsegpt)
  double bits_per_weight = 16;       // storage incl. f16 scales + zeros (+ g_idx); 16 when dense
  double sparsity = 0;               // fraction of zero weights
  double seconds = 0;                // solver time
};

struct PipelineReport {
  int64_t n_layers = 0, n_linears = 0;
  int64_t windows = 0, tokens = 0;    // calibration windows and their total tokens
  uint64_t activation_bytes = 0;     // X (0 when no forward pass was needed)
  ActivationPlacement activations = ActivationPlacement::device;  // where X was kept
  uint64_t hessian_bytes = 0;        // the H of one pass (largest)
  // seconds_solve: the solvers plus each linear's error measurement and weight write-back.
  double seconds = 0, seconds_forward = 0, seconds_hessian = 0, seconds_solve = 0;
  double avg_bits_per_weight = 0;    // weighted by weights, over the compressed linears
  double sparsity = 0;               // zeros / weights over the compressed linears
  double mean_error = -1, total_error = -1;  // over linears with a measured error
};

// Compresses every linear of every block of `m` in place (see above) and appends one result per
// linear to `out` in block order (q, k, v, o, gate, up, down). `windows` may be empty only when
// no H is needed (rtn / magnitude without measure_error).
Result<PipelineReport> compress_model(Model& m, const std::vector<std::vector<int32_t>>& windows,
                                      const PipelineOptions& opt, std::vector<CompressedLinearResult>& out);

// Storage bits per weight of a quantized matrix: bits + 2 f16 per group per row (+ a 32-bit g_idx
// per column when act-order permutes dynamic groups).
double quantized_bits_per_weight(const QuantizedMatrix& q, bool with_g_idx);

}  // namespace lithe::compress
