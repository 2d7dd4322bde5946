// The sequential layer-by-layer compression pipeline (see pipeline.h).
#include "lithe/quantize/pipeline.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "lithe/core/progress.h"
#include "compress/linalg.h"

namespace lithe::compress {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr LinearSite kSites[] = {LinearSite::qkv, LinearSite::o, LinearSite::gate_up, LinearSite::down};

// Accumulates the H of some sites (each with its input width) over windows, and stops each
// block run right after the last of them.
class HessianObserver final : public LinearObserver {
 public:
  HessianObserver(const std::vector<LinearSite>& sites, const std::vector<int64_t>& widths) {
    for (size_t i = 0; i < sites.size(); ++i) {
      Acc& a = acc_[static_cast<size_t>(sites[i])];
      a.on = true;
      a.n = widths[i];
      a.h.assign(static_cast<size_t>(a.n * a.n), 0.0);
      last_ = std::max(last_, static_cast<int>(sites[i]));
    }
  }

  bool on_input(int64_t layer, LinearSite site, const float* x, int64_t m, int64_t n_in) override {
    (void)layer;
    Acc& a = acc_[static_cast<size_t>(site)];
    const bool more = static_cast<int>(site) < last_;  // sites run in enum order
    if (!a.on) return more;
    if (n_in != a.n) {
      ok_ = false;
      return false;
    }
    const auto t0 = Clock::now();
    g_.resize(a.h.size());
    detail::gram_f(a.n, m, x, g_.data());  // XᵀX of this window, f32 over its m tokens
    // The reference's running average over windows: H *= c/(c+1); H += 2/(c+1) XᵀX.
    const double keep = static_cast<double>(a.count) / static_cast<double>(a.count + 1);
    const double add = 2.0 / static_cast<double>(a.count + 1);
    for (size_t i = 0; i < a.h.size(); ++i) a.h[i] = a.h[i] * keep + add * static_cast<double>(g_[i]);
    ++a.count;
    seconds_ += since(t0);
    return more;  // nothing after the last wanted site is needed
  }

  bool ok() const { return ok_; }
  const std::vector<double>& h(LinearSite site) const { return acc_[static_cast<size_t>(site)].h; }
  double seconds() const { return seconds_; }

 private:
  struct Acc {
    bool on = false;
    int64_t n = 0, count = 0;
    std::vector<double> h;
  };
  std::array<Acc, 4> acc_;
  int last_ = -1;
  std::vector<float> g_;  // one window's XᵀX
  bool ok_ = true;
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

double zero_fraction(const std::vector<float>& w) {
  const auto z = std::count(w.begin(), w.end(), 0.0f);
  return w.empty() ? 0.0 : static_cast<double>(z) / static_cast<double>(w.size());
}

// Runs the method on one matrix: fills r (q / mask / loss / bits) and returns the new W.
Result<std::vector<float>> solve(const PipelineOptions& opt, std::span<const float> w, int64_t n_out, int64_t n_in,
                                 std::span<const double> h, CompressedLinearResult& r) {
  switch (opt.method) {
    case CompressMethod::rtn: {
      LITHE_ASSIGN(QuantizedMatrix q, rtn(w, n_out, n_in, opt.grid));
      std::vector<float> w_hat = dequantize(q);
      r.bits_per_weight = quantized_bits_per_weight(q, false);
      r.q = std::move(q);
      return w_hat;
    }
    case CompressMethod::gptq: {
      GptqOptions g;
      g.grid = opt.grid;
      g.block_size = opt.block_size;
      g.hessian = opt.hessian;
      g.act_order = opt.act_order;
      g.static_groups = opt.static_groups;
      LITHE_ASSIGN(GptqResult res, gptq(w, n_out, n_in, h, g));
      r.loss = res.loss;
      r.bits_per_weight = quantized_bits_per_weight(res.q, opt.act_order && !opt.static_groups);
      r.q = std::move(res.q);
      return std::move(res.w_hat);
    }
    case CompressMethod::sparsegpt: {
      SparseGptOptions s;
      s.sparsity = opt.sparsity;
      s.prune_n = opt.prune_n;
      s.prune_m = opt.prune_m;
      s.block_size = opt.block_size;
      s.hessian = opt.hessian;
      if (opt.sparse_quantize) s.quant = opt.grid;
      LITHE_ASSIGN(SparseGptResult res, sparsegpt(w, n_out, n_in, h, s));
      r.loss = res.loss;
      if (res.q) {
        r.bits_per_weight = quantized_bits_per_weight(*res.q, false);
        r.q = std::move(res.q);
      }
      r.mask = std::move(res.mask);
      return std::move(res.w);
    }
    case CompressMethod::magnitude: {
      MagnitudeOptions mo;
      mo.sparsity = opt.sparsity;
      mo.prune_n = opt.prune_n;
      mo.prune_m = opt.prune_m;
      LITHE_ASSIGN(PruneResult res, prune_magnitude(w, n_out, n_in, mo));
      r.mask = std::move(res.mask);
      return std::move(res.w);
    }
  }
  return error(StatusCode::internal, "unknown compression method");
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
  for (LinearKind k : kAllLinearKinds) LITHE_TRY(m.linear_weight(0, k).status());  // f32 host weights?

  // X: every window's block input, one contiguous [tokens, d_model] host tensor.
  std::vector<int64_t> offset{0};
  int64_t max_len = 0;
  for (const auto& w : windows) {
    if (w.empty()) return error(StatusCode::invalid_argument, "compress_model: empty calibration window");
    offset.push_back(offset.back() + static_cast<int64_t>(w.size()));
    max_len = std::max<int64_t>(max_len, static_cast<int64_t>(w.size()));
  }
  rep.windows = static_cast<int64_t>(windows.size());
  rep.tokens = offset.back();
  Tensor x, scratch;
  if (need_h) {
    const auto t0 = Clock::now();
    LITHE_ASSIGN(x, Tensor::empty(DType::f32, {rep.tokens, c.d_model}));
    LITHE_ASSIGN(scratch, Tensor::empty(DType::f32, {max_len, c.d_model}));
    rep.activation_bytes = static_cast<uint64_t>(x.nbytes());
    for (size_t i = 0; i < windows.size(); ++i) {
      LITHE_ASSIGN(Tensor xi, x.slice_rows(offset[i], offset[i + 1]));
      const void* dst = xi.data();
      LITHE_TRY(m.embed(windows[i], xi));
      if (xi.data() != dst) return error(StatusCode::internal, "compress_model: embed did not write into X");
    }
    rep.seconds_forward += since(t0);
  }
  auto window_rows = [&](size_t i) { return x.slice_rows(offset[i], offset[i + 1]); };

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
        std::vector<int64_t> widths;
        for (LinearSite s : sites) {
          LITHE_ASSIGN(Tensor * w0, m.linear_weight(l, kinds_of(s)[0]));
          widths.push_back(w0->dim(1));
        }
        obs = std::make_unique<HessianObserver>(sites, widths);
        uint64_t hb = 0;
        for (int64_t n : widths) hb += static_cast<uint64_t>(n * n * 8);
        rep.hessian_bytes = std::max(rep.hessian_bytes, hb);
        const auto t0 = Clock::now();
        for (size_t i = 0; i < windows.size(); ++i) {
          const int64_t len = offset[i + 1] - offset[i];
          LITHE_ASSIGN(Tensor xi, window_rows(i));
          std::memcpy(scratch.data(), xi.data(), static_cast<size_t>(len * c.d_model) * sizeof(float));
          LITHE_TRY(m.block_forward(l, scratch, len, obs.get()));
        }
        if (!obs->ok()) return error(StatusCode::internal, "blk.{}: site input width differs from the weight", l);
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
        const std::span<const float> w(wt->data_as<float>(), static_cast<size_t>(r.n_out * r.n_in));
        const std::span<const double> h = obs ? std::span<const double>(obs->h(site)) : std::span<const double>();
        const auto t0 = Clock::now();
        auto solved = solve(opt, w, r.n_out, r.n_in, h, r);
        if (!solved) return error(solved.status().code(), "{}: {}", r.name, solved.status().message());
        r.seconds = since(t0);
        rep.seconds_solve += r.seconds;
        if (obs) {
          LITHE_ASSIGN(r.error, reconstruction_error(w, *solved, h, r.n_out, r.n_in));
          err_sum += r.error;
          ++n_err;
        }
        r.sparsity = zero_fraction(*solved);
        if (wt->buffer()->writable()) {  // the dequantized copy the model owns: overwrite it
          std::memcpy(wt->data(), solved->data(), solved->size() * sizeof(float));
        } else {  // a read-only view of the file (stored f32): a fresh tensor takes its place
          LITHE_ASSIGN(Tensor nw, Tensor::empty(DType::f32, {r.n_out, r.n_in}));
          std::memcpy(nw.data(), solved->data(), solved->size() * sizeof(float));
          *wt = std::move(nw);
        }
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
        LITHE_ASSIGN(Tensor xi, window_rows(i));
        LITHE_TRY(m.block_forward(l, xi, offset[i + 1] - offset[i], nullptr));
      }
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
