// The scalar reference of the gq runtime formats (kernels/group_quant.h).
#include "lithe/kernels/group_quant.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "lithe/core/half.h"

namespace lithe::gq {

bool is_2to4(const Matrix& m) {
  if (m.n_in % 4 != 0 || m.fmt.group % 4 != 0) return false;
  const int64_t G = m.n_groups();
  for (int64_t r = 0; r < m.n_out; ++r)
    for (int64_t k = 0; k < m.n_in; k += 4) {
      const uint8_t z = m.zeros[static_cast<size_t>(r * G + k / m.fmt.group)];
      int nonzero = 0;
      for (int64_t j = 0; j < 4; ++j) nonzero += m.codes[static_cast<size_t>(r * m.n_in + k + j)] != z;
      if (nonzero > 2) return false;
    }
  return true;
}

Status validate(const Matrix& m) {
  const QuantFormat& f = m.fmt;
  if (f.bits != 2 && f.bits != 3 && f.bits != 4 && f.bits != 8)
    return error(StatusCode::invalid_argument, "gq matrix: bits {} is not 2, 3, 4 or 8", f.bits);
  if (m.n_out <= 0 || m.n_in <= 0)
    return error(StatusCode::invalid_argument, "gq matrix: shape [{}, {}] must be positive", m.n_out, m.n_in);
  if (f.group <= 0 || f.group > m.n_in)
    return error(StatusCode::invalid_argument, "gq matrix [{}, {}]: group {} is not in 1..n_in", m.n_out, m.n_in, f.group);
  const auto cells = static_cast<size_t>(m.n_out * m.n_in), groups = static_cast<size_t>(m.n_out * m.n_groups());
  if (m.codes.size() != cells || m.scales.size() != groups || m.zeros.size() != groups ||
      (!m.perm.empty() && m.perm.size() != static_cast<size_t>(m.n_in)))
    return error(StatusCode::invalid_argument,
                 "gq matrix [{}, {}] group {}: codes {} / scales {} / zeros {} / perm {} entries do not fit", m.n_out,
                 m.n_in, f.group, m.codes.size(), m.scales.size(), m.zeros.size(), m.perm.size());
  const int maxq = m.maxq();
  for (uint8_t c : m.codes)
    if (c > maxq) return error(StatusCode::invalid_argument, "gq matrix: code {} is over {} for {} bits", c, maxq, f.bits);
  for (uint8_t z : m.zeros) {
    if (z > maxq) return error(StatusCode::invalid_argument, "gq matrix: zero point {} is over {}", z, maxq);
    if (f.sym && z != (1 << (f.bits - 1)))
      return error(StatusCode::invalid_argument, "gq matrix: symmetric format with zero point {} (must be {})", z,
                   1 << (f.bits - 1));
  }
  if (!m.perm.empty()) {
    std::vector<uint8_t> seen(static_cast<size_t>(m.n_in), 0);
    for (int32_t p : m.perm) {
      if (p < 0 || p >= m.n_in || seen[static_cast<size_t>(p)]++ != 0)
        return error(StatusCode::invalid_argument, "gq matrix: perm is not a permutation of 0..{} (value {})",
                     m.n_in - 1, p);
    }
  }
  if (f.sparse24 && !is_2to4(m))
    return error(StatusCode::invalid_argument, "gq matrix [{}, {}] is marked 2:4 sparse but a run of 4 columns holds "
                 "more than 2 non-zero weights", m.n_out, m.n_in);
  return Status::ok();
}

std::vector<float> dequantize(const Matrix& m) {
  std::vector<float> w(static_cast<size_t>(m.n_out * m.n_in));
  const int64_t G = m.n_groups();
  for (int64_t r = 0; r < m.n_out; ++r)
    for (int64_t k = 0; k < m.n_in; ++k) {
      const auto gi = static_cast<size_t>(r * G + k / m.fmt.group);
      const int q = m.codes[static_cast<size_t>(r * m.n_in + k)] - m.zeros[gi];
      const int64_t c = m.perm.empty() ? k : m.perm[static_cast<size_t>(k)];
      w[static_cast<size_t>(r * m.n_in + c)] = f16_to_f32(m.scales[gi]) * static_cast<float>(q);
    }
  return w;
}

void reference_linear(const Matrix& m, const float* x, int64_t rows, float* y) {
  const std::vector<float> w = dequantize(m);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t r = 0; r < m.n_out; ++r) {
      double acc = 0;
      const float* wr = w.data() + r * m.n_in;
      const float* xi = x + i * m.n_in;
      for (int64_t c = 0; c < m.n_in; ++c) acc += static_cast<double>(wr[c]) * xi[c];
      y[i * m.n_out + r] = static_cast<float>(acc);
    }
}

Result<QuantFormat> parse_format(std::string_view name) {
  auto bad = [&] {
    return error(StatusCode::invalid_argument, "'{}' is not a gq format: use intB[-gG][-sym][-2:4] with B 2, 3, 4 or 8 "
                 "and G a group size (none: per channel), e.g. int4-g128", name);
  };
  if (!name.starts_with("int") || name.size() < 4) return bad();
  QuantFormat f;
  f.bits = name[3] - '0';
  f.group = 0;
  if (f.bits != 2 && f.bits != 3 && f.bits != 4 && f.bits != 8) return bad();
  std::string_view rest = name.substr(4);
  if (rest.starts_with("-g")) {
    rest.remove_prefix(2);
    int64_t g = 0;
    size_t i = 0;
    for (; i < rest.size() && rest[i] >= '0' && rest[i] <= '9' && g < (1 << 20); ++i) g = g * 10 + (rest[i] - '0');
    if (i == 0 || g <= 0) return bad();
    f.group = g;
    rest.remove_prefix(i);
  }
  if (rest.starts_with("-sym")) {
    f.sym = true;
    rest.remove_prefix(4);
  }
  if (rest.starts_with("-2:4")) {
    f.sparse24 = true;
    rest.remove_prefix(4);
  }
  if (!rest.empty()) return bad();
  return f;
}

Matrix random_matrix(const QuantFormat& f, int64_t n_out, int64_t n_in, uint64_t seed, bool act_order, float scale) {
  Matrix m;
  m.fmt = f;
  m.n_out = n_out;
  m.n_in = n_in;
  std::mt19937_64 rng(seed);
  const int maxq = (1 << f.bits) - 1;
  std::uniform_int_distribution<int> code(0, maxq);
  std::uniform_real_distribution<float> unit(0.5f, 1.5f);
  const int64_t G = f.group > 0 ? (n_in + f.group - 1) / f.group : 0;
  m.scales.resize(static_cast<size_t>(n_out * G));
  m.zeros.resize(static_cast<size_t>(n_out * G));
  for (size_t i = 0; i < m.scales.size(); ++i) {
    m.scales[i] = f32_to_f16(unit(rng) * scale / static_cast<float>(maxq));
    m.zeros[i] = static_cast<uint8_t>(f.sym ? 1 << (f.bits - 1) : code(rng));
  }
  m.codes.resize(static_cast<size_t>(n_out * n_in));
  for (auto& c : m.codes) c = static_cast<uint8_t>(code(rng));
  if (f.sparse24 && G > 0)
    for (int64_t r = 0; r < n_out; ++r)
      for (int64_t k = 0; k + 4 <= n_in; k += 4) {
        const uint8_t z = m.zeros[static_cast<size_t>(r * G + k / f.group)];
        const int a = static_cast<int>(rng() % 4), b = (a + 1 + static_cast<int>(rng() % 3)) % 4;
        m.codes[static_cast<size_t>(r * n_in + k + a)] = z;
        m.codes[static_cast<size_t>(r * n_in + k + b)] = z;
      }
  if (act_order) {
    m.perm.resize(static_cast<size_t>(n_in));
    std::iota(m.perm.begin(), m.perm.end(), 0);
    std::shuffle(m.perm.begin(), m.perm.end(), rng);
  }
  return m;
}

}  // namespace lithe::gq
