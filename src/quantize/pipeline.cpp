// The sequential layer-by-layer compression pipeline (see pipeline.h).
#include "lithe/quantize/pipeline.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>

#include <fmt/format.h>

#include "lithe/compress/solver_backend.h"
#include "lithe/core/progress.h"

namespace lithe::compress {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr LinearSite kSites[] = {LinearSite::qkv, LinearSite::o, LinearSite::gate_up, LinearSite::down};

// Accumulates the H of some sites (each with its input width) over windows on the solver's
// device, and stops each block run right after the last of them.
class HessianObserver final : public LinearObserver {
 public:
  HessianObserver(SolverBackend& solver, int64_t skip) : solver_(solver), skip_(skip) {}

  Status add_site(LinearSite site, int64_t width) {
    Acc& a = acc_[static_cast<size_t>(site)];
    a.on = true;
    LITHE_ASSIGN(a.h, solver_.new_hessian(width));
    last_ = std::max(last_, static_cast<int>(site));
    return Status::ok();
  }

  bool on_input(int64_t layer, LinearSite site, const Tensor& x, int64_t m) override {
    (void)layer;
    Acc& a = acc_[static_cast<size_t>(site)];
    const bool more = static_cast<int>(site) < last_;  // sites run in enum order
    if (!a.on) return more;
    Status st = solver_.synchronize();  // the block's ops so far count as forward time
    const auto t0 = Clock::now();
    // The reference's running average over windows: H *= c/(c+1); H += 2/(c+1) XᵀX.
    const bool counted = m > skip_;  // rows [skip_, m): the window without its sink tokens
    if (st.is_ok() && counted) {
      auto rows = x.slice_rows(skip_, m);
      st = rows.is_ok() ? solver_.accumulate_hessian(a.h, a.count, *rows, m - skip_) : rows.status();
    }
    seconds_ += since(t0);
    if (!st.is_ok()) {
      status_ = st;
      return false;
    }
    if (counted) ++a.count;
    return more;  // nothing after the last wanted site is needed
  }

  // After the last window: the first error seen, else every H finished.
  Status finish() {
    LITHE_TRY(status_);
    for (Acc& a : acc_)
      if (a.on) LITHE_TRY(solver_.finish_hessian(a.h));
    return Status::ok();
  }
  const Tensor& h(LinearSite site) const { return acc_[static_cast<size_t>(site)].h; }
  double seconds() const { return seconds_; }

 private:
  struct Acc {
    bool on = false;
    int64_t count = 0;
    Tensor h;
  };
  SolverBackend& solver_;
  int64_t skip_;  // PipelineOptions::sink_tokens
  std::array<Acc, 4> acc_;
  int last_ = -1;
  Status status_ = Status::ok();
  double seconds_ = 0;
};

std::vector<LinearKind> kinds_of(LinearSite site) {
  switch (site) {
    case LinearSite::qkv: return {LinearKind::q, LinearKind::k, LinearKind::v};
    case LinearSite::o: return {LinearKind::o};
    case LinearSite::gate_up: return {LinearKind::gate, LinearKind::up};
    case LinearSite::down: return {LinearKind::down};
  }
  return {};
}

bool needs_hessian(const PipelineOptions& opt) {
  return opt.method == CompressMethod::gptq || opt.method == CompressMethod::sparsegpt || opt.measure_error;
}

// Runs the method on one matrix (on the solver's device): fills r (q / mask / loss / bits) and
// returns the new W (f32) there.
Result<Tensor> solve(SolverBackend& solver, const PipelineOptions& opt, const Tensor& w, const Tensor& h,
                     CompressedLinearResult& r) {
  SolvedLinear s;
  switch (opt.method) {
    case CompressMethod::rtn: {
      LITHE_ASSIGN(s, solver.rtn(w, opt.grid));
      r.bits_per_weight = quantized_bits_per_weight(*s.q, false);
      break;
    }
    case CompressMethod::gptq: {
      GptqOptions g;
      g.grid = opt.grid;
      g.block_size = opt.block_size;
      g.hessian = opt.hessian;
      g.act_order = opt.act_order;
      g.static_groups = opt.static_groups;
      LITHE_ASSIGN(s, solver.gptq(w, h, g));
      r.bits_per_weight = quantized_bits_per_weight(*s.q, opt.act_order && !opt.static_groups);
      break;
    }
    case CompressMethod::sparsegpt: {
      SparseGptOptions o;
      o.sparsity = opt.sparsity;
      o.prune_n = opt.prune_n;
      o.prune_m = opt.prune_m;
      o.block_size = opt.block_size;
      o.hessian = opt.hessian;
      if (opt.sparse_quantize) o.quant = opt.grid;
      LITHE_ASSIGN(s, solver.sparsegpt(w, h, o));
      if (s.q) r.bits_per_weight = quantized_bits_per_weight(*s.q, false);
      break;
    }
    case CompressMethod::magnitude: {
      MagnitudeOptions mo;
      mo.sparsity = opt.sparsity;
      mo.prune_n = opt.prune_n;
      mo.prune_m = opt.prune_m;
      LITHE_ASSIGN(s, solver.magnitude(w, mo));
      break;
    }
  }
  if (!s.w_hat.defined()) return error(StatusCode::internal, "unknown compression method");
  r.loss = s.loss;
  r.q = std::move(s.q);
  r.mask = std::move(s.mask);
  return std::move(s.w_hat);
}

}  // namespace

const char* compress_method_name(CompressMethod m) {
  switch (m) {
    case CompressMethod::rtn: return "rtn";
    case CompressMethod::gptq: return "gptq";
    case CompressMethod::sparsegpt: return "sparsegpt";
    case CompressMethod::magnitude: return "magnitude";
  }
  return "?";
}

Result<CompressMethod> parse_compress_method(std::string_view name) {
  for (CompressMethod m : {CompressMethod::rtn, CompressMethod::gptq, CompressMethod::sparsegpt,
                           CompressMethod::magnitude})
    if (name == compress_method_name(m)) return m;
  return error(StatusCode::invalid_argument, "unknown compression method '{}' (rtn, gptq, sparsegpt, magnitude)",
               name);
}

double quantized_bits_per_weight(const QuantizedMatrix& q, bool with_g_idx) {
  double bits = q.bits + 32.0 * static_cast<double>(q.n_groups()) / static_cast<double>(q.n_in);
  if (with_g_idx && q.group > 0) bits += 32.0 / static_cast<double>(q.n_out);
  return bits;
}

Result<PipelineReport> compress_model(Model& m, const std::vector<std::vector<int32_t>>& windows,
                                      const PipelineOptions& opt, std::vector<CompressedLinearResult>& out) {
  const auto t_start = Clock::now();
  const ModelConfig& c = m.config();
  PipelineReport rep;
  rep.n_layers = opt.max_layers < 0 ? c.n_layers : std::min(opt.max_layers, c.n_layers);
  const bool need_h = needs_hessian(opt);
  if (need_h && windows.empty())
    return error(StatusCode::invalid_argument, "{} needs calibration windows", compress_method_name(opt.method));
  if (opt.sink_tokens < 0)
    return error(StatusCode::invalid_argument, "sink tokens {} must be 0 or more", opt.sink_tokens);
  for (LinearKind k : kAllLinearKinds) LITHE_TRY(m.linear_weight(0, k).status());  // weights the solvers take?
  LITHE_ASSIGN(std::unique_ptr<SolverBackend> solver, make_solver_backend(m.backend().device()));

  // X: every window's block input, one [rows, d_model] f32 matrix per window (activation_store.h).
  std::vector<int64_t> lens;
  for (const auto& w : windows) {
    if (w.empty()) return error(StatusCode::invalid_argument, "compress_model: empty calibration window");
    if (need_h && static_cast<int64_t>(w.size()) <= opt.sink_tokens)
      return error(StatusCode::invalid_argument, "a calibration window of {} tokens leaves nothing for the Hessians "
                   "after its {} sink tokens: use longer windows (--seqlen) or fewer --sink-tokens", w.size(),
                   opt.sink_tokens);
    lens.push_back(static_cast<int64_t>(w.size()));
  }
  rep.windows = static_cast<int64_t>(windows.size());
  for (int64_t n : lens) rep.tokens += n;
  std::unique_ptr<ActivationStore> x;
  Tensor scratch;  // one window on the model's device
  if (need_h) {
    const auto t0 = Clock::now();
    const std::string spill_dir = opt.spill_dir.empty() ? default_spill_dir() : opt.spill_dir;
    LITHE_ASSIGN(x, ActivationStore::create(opt.activations, m.backend(), *solver, lens, c.d_model, spill_dir));
    LITHE_ASSIGN(scratch, m.backend().alloc(DType::f32, {*std::max_element(lens.begin(), lens.end()), c.d_model}));
    rep.activation_bytes = x->bytes();
    rep.activations = x->placement();
    for (size_t i = 0; i < windows.size(); ++i) {
      LITHE_ASSIGN(Tensor xi, x->target(i, scratch));
      const void* dst = xi.data();
      LITHE_TRY(m.embed(windows[i], xi));
      if (xi.data() != dst) return error(StatusCode::internal, "compress_model: embed did not write into the window");
      LITHE_TRY(x->store(i, xi));
    }
    LITHE_TRY(solver->synchronize());
    rep.seconds_forward += since(t0);
  }

  std::unique_ptr<Progress> prog;
  if (opt.progress) prog = std::make_unique<Progress>(fmt::format("{} compress", compress_method_name(opt.method)),
                                                      rep.n_layers, opt.progress_out);
  double weights = 0, bits_sum = 0, zeros = 0, err_sum = 0;
  int64_t n_err = 0;
  for (int64_t l = 0; l < rep.n_layers; ++l) {
    std::unique_ptr<HessianObserver> obs;
    for (LinearSite site : kSites) {
      if (prog) prog->set(l, fmt::format("layer {}/{} {}", l + 1, rep.n_layers, linear_site_name(site)));
      const std::vector<LinearKind> kinds = kinds_of(site);
      // 1. H of this site's input (or, not true-sequential, of all four sites at once) over every
      //    window, through the block as compressed so far.
      if (need_h && (opt.true_sequential || site == LinearSite::qkv)) {
        std::vector<LinearSite> sites{site};
        if (!opt.true_sequential) sites.assign(std::begin(kSites), std::end(kSites));
        obs = std::make_unique<HessianObserver>(*solver, opt.sink_tokens);
        uint64_t hb = 0;
        for (LinearSite s : sites) {
          LITHE_ASSIGN(Tensor * w0, m.linear_weight(l, kinds_of(s)[0]));
          LITHE_TRY(obs->add_site(s, w0->dim(1)));
          hb += static_cast<uint64_t>(obs->h(s).nbytes());
        }
        rep.hessian_bytes = std::max(rep.hessian_bytes, hb);
        const auto t0 = Clock::now();
        for (size_t i = 0; i < windows.size(); ++i) {
          LITHE_TRY(x->load(i, scratch));
          LITHE_TRY(m.block_forward(l, scratch, x->rows(i), obs.get()));
        }
        LITHE_TRY(obs->finish());
        LITHE_TRY(solver->synchronize());
        rep.seconds_hessian += obs->seconds();
        rep.seconds_forward += since(t0) - obs->seconds();
      }
      // 2. Compress each linear of the site and put the new W in the model.
      for (LinearKind kind : kinds) {
        LITHE_ASSIGN(Tensor * wt, m.linear_weight(l, kind));
        CompressedLinearResult r;
        r.name = fmt::format("blk.{}.{}", l, linear_kind_name(kind));
        r.layer = l;
        r.kind = kind;
        r.n_out = wt->dim(0);
        r.n_in = wt->dim(1);
        const Tensor h = obs ? obs->h(site) : Tensor();
        const auto t0 = Clock::now();
        auto solved = solve(*solver, opt, *wt, h, r);
        if (!solved) return error(solved.status().code(), "{}: {}", r.name, solved.status().message());
        r.seconds = since(t0);
        if (obs) {
          LITHE_ASSIGN(r.error, solver->reconstruction_error(*wt, *solved, h));
          err_sum += r.error;
          ++n_err;
        }
        LITHE_ASSIGN(const int64_t n_zero, solver->count_zeros(*solved));
        r.sparsity = static_cast<double>(n_zero) / static_cast<double>(r.n_out * r.n_in);
        LITHE_TRY(solver->store_weight(*solved, *wt));
        rep.seconds_solve += since(t0);  // with the error measurement and the write-back
        const auto nweights = static_cast<double>(r.n_out * r.n_in);
        weights += nweights;
        bits_sum += r.bits_per_weight * nweights;
        zeros += r.sparsity * nweights;
        out.push_back(std::move(r));
        ++rep.n_linears;
      }
    }
    // 3. X_{l+1}: every window through the compressed block, in place.
    if (need_h && l + 1 < rep.n_layers) {
      const auto t0 = Clock::now();
      for (size_t i = 0; i < windows.size(); ++i) {
        LITHE_ASSIGN(Tensor xi, x->target(i, scratch));
        LITHE_TRY(x->load(i, xi));
        LITHE_TRY(m.block_forward(l, xi, x->rows(i), nullptr));
        LITHE_TRY(x->store(i, xi));
      }
      LITHE_TRY(solver->synchronize());
      rep.seconds_forward += since(t0);
    }
  }
  if (prog) {
    prog->set(rep.n_layers);
    prog->finish(fmt::format("{} layers, {} linears", rep.n_layers, rep.n_linears));
  }
  if (weights > 0) {
    rep.avg_bits_per_weight = bits_sum / weights;
    rep.sparsity = zeros / weights;
  }
  if (n_err > 0) {
    rep.total_error = err_sum;
    rep.mean_error = err_sum / static_cast<double>(n_err);
  }
  rep.seconds = since(t_start);
  return rep;
}

}  // namespace lithe::compress
