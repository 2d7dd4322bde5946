#include "lithe/eval/line_plot.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "lithe/core/file_util.h"

namespace lithe {
namespace {

// ---- PNG: chunks with CRC-32, one zlib stream of stored deflate blocks ----

uint32_t crc32(const uint8_t* p, size_t n, uint32_t c = 0xffffffffu) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t x = i;
      for (int k = 0; k < 8; ++k) x = (x & 1) ? 0xedb88320u ^ (x >> 1) : x >> 1;
      t[i] = x;
    }
    return t;
  }();
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c;
}

void put_be32(std::string& s, uint32_t v) {
  for (int sh = 24; sh >= 0; sh -= 8) s.push_back(static_cast<char>((v >> sh) & 0xff));
}

void put_chunk(std::string& png, const char* type, const std::string& data) {
  put_be32(png, static_cast<uint32_t>(data.size()));
  std::string body = std::string(type, 4) + data;
  png += body;
  put_be32(png, crc32(reinterpret_cast<const uint8_t*>(body.data()), body.size()) ^ 0xffffffffu);
}

std::string zlib_stored(const std::string& raw) {
  std::string z = "\x78\x01";
  size_t off = 0;
  do {
    const size_t len = std::min<size_t>(65535, raw.size() - off);
    z.push_back(off + len == raw.size() ? 1 : 0);  // BFINAL, BTYPE 00 (stored)
    z.push_back(static_cast<char>(len & 0xff));
    z.push_back(static_cast<char>(len >> 8));
    z.push_back(static_cast<char>(~len & 0xff));
    z.push_back(static_cast<char>((~len >> 8) & 0xff));
    z.append(raw, off, len);
    off += len;
  } while (off < raw.size());
  uint32_t a = 1, b = 0;  // Adler-32
  for (unsigned char ch : raw) {
    a = (a + ch) % 65521;
    b = (b + a) % 65521;
  }
  put_be32(z, (b << 16) | a);
  return z;
}

// ---- 3x5 font: 5 rows of 3 bits per glyph (bit 2 = left column) ----

std::array<uint8_t, 5> glyph(char c) {
  static const std::string_view chars = "0123456789.-=:,()/abcdefghiklmnoprstuvwxy";
  static const uint8_t rows[][5] = {
      {7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7}, {5, 5, 7, 1, 1},  // 0-4
      {7, 4, 7, 1, 7}, {7, 4, 7, 5, 7}, {7, 1, 1, 1, 1}, {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7},  // 5-9
      {0, 0, 0, 0, 2}, {0, 0, 7, 0, 0}, {0, 7, 0, 7, 0}, {0, 2, 0, 2, 0}, {0, 0, 0, 2, 4},  // . - = : ,
      {2, 4, 4, 4, 2}, {2, 1, 1, 1, 2}, {1, 1, 2, 4, 4},                                    // ( ) /
      {0, 3, 5, 5, 3}, {4, 6, 5, 5, 6}, {0, 3, 4, 4, 3}, {1, 3, 5, 5, 3}, {0, 3, 7, 4, 3},  // a-e
      {3, 4, 6, 4, 4}, {0, 3, 5, 3, 6}, {4, 4, 6, 5, 5}, {2, 0, 2, 2, 2}, {4, 5, 6, 5, 5},  // f g h i k
      {6, 2, 2, 2, 7}, {0, 7, 7, 5, 5}, {0, 6, 5, 5, 5}, {0, 2, 5, 5, 2}, {0, 6, 5, 6, 4},  // l m n o p
      {0, 5, 6, 4, 4}, {0, 3, 6, 3, 6}, {2, 7, 2, 2, 3}, {0, 5, 5, 5, 3}, {0, 5, 5, 5, 2},  // r s t u v
      {0, 5, 5, 7, 7}, {0, 5, 2, 2, 5}, {5, 5, 3, 1, 6}};                                   // w x y
  const size_t i = chars.find(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (i == std::string_view::npos) return {0, 0, 0, 0, 0};
  return {rows[i][0], rows[i][1], rows[i][2], rows[i][3], rows[i][4]};
}

enum Ink : uint8_t { white, black, grid, first_series };
const std::vector<uint8_t> kPalette = {255, 255, 255, 0,   0,   0,   225, 225, 225,  // white, black, grid
                                       31,  119, 180, 214, 39,  40,  44,  160, 44,   // series colours
                                       255, 127, 14,  148, 103, 189, 140, 86,  75,
                                       227, 119, 194, 23,  190, 207};
constexpr int kSeriesColours = 8;
constexpr int kScale = 2;  // font pixels per glyph bit

struct Canvas {
  int w, h;
  std::vector<uint8_t> px;
  Canvas(int width, int height) : w(width), h(height), px(static_cast<size_t>(width * height), white) {}
  void dot(int x, int y, uint8_t c) {
    if (x >= 0 && y >= 0 && x < w && y < h) px[static_cast<size_t>(y * w + x)] = c;
  }
  void line(int x0, int y0, int x1, int y1, uint8_t c, int thick = 1) {  // Bresenham
    const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    for (int err = dx + dy;;) {
      for (int t = 0; t < thick; ++t) dot(x0, y0 + t, c);
      if (x0 == x1 && y0 == y1) break;
      const int e2 = 2 * err;
      if (e2 >= dy) err += dy, x0 += sx;
      if (e2 <= dx) err += dx, y0 += sy;
    }
  }
  int text_width(std::string_view s) const { return static_cast<int>(s.size()) * 4 * kScale; }
  void text(int x, int y, std::string_view s, uint8_t c) {  // (x, y): top left
    for (char ch : s) {
      const auto g = glyph(ch);
      for (int r = 0; r < 5; ++r)
        for (int col = 0; col < 3; ++col)
          if (g[static_cast<size_t>(r)] & (4 >> col))
            for (int a = 0; a < kScale; ++a)
              for (int b = 0; b < kScale; ++b) dot(x + col * kScale + a, y + r * kScale + b, c);
      x += 4 * kScale;
    }
  }
};

std::string tick_label(double v, double step) {
  if (std::abs(v) >= 1000 && std::fmod(v, 1000) == 0) return fmt::format("{}k", static_cast<int64_t>(v / 1000));
  const int decimals = step >= 1 ? 0 : std::min(4, static_cast<int>(std::ceil(-std::log10(step))));
  return fmt::format("{:.{}f}", v, decimals);
}

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about n ticks over span.
double nice_step(double span, int n) {
  const double raw = span / n, p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

}  // namespace

std::string encode_png_indexed(int width, int height, const std::vector<uint8_t>& pixels,
                               const std::vector<uint8_t>& rgb) {
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put_be32(ihdr, static_cast<uint32_t>(width));
  put_be32(ihdr, static_cast<uint32_t>(height));
  ihdr += std::string("\x08\x03\x00\x00\x00", 5);  // 8-bit palette indices, no interlace
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "PLTE", std::string(rgb.begin(), rgb.end()));
  std::string raw;
  raw.reserve(static_cast<size_t>((width + 1) * height));
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);  // filter: none
    raw.append(reinterpret_cast<const char*>(pixels.data()) + static_cast<size_t>(y) * static_cast<size_t>(width),
               static_cast<size_t>(width));
  }
  put_chunk(png, "IDAT", zlib_stored(raw));
  put_chunk(png, "IEND", "");
  return png;
}

Status write_line_plot_png(const std::string& path, const std::vector<PlotSeries>& series, const PlotOptions& o) {
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  bool any = false;
  for (const auto& s : series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(y)) continue;
      if (!any) x0 = x1 = x, y0 = y1 = y;
      any = true;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  if (!any) return error(StatusCode::invalid_argument, "nothing to plot into '{}': no finite points", path);
  x0 = std::min(x0, 0.0);
  if (x1 <= x0) x1 = x0 + 1;
  const double pad = y1 > y0 ? 0.05 * (y1 - y0) : 0.5;
  y0 -= pad, y1 += pad;

  Canvas c(o.width, o.height);
  const int left = 80, right = o.width - 20, top = 36, bottom = o.height - 50;
  auto px = [&](double x) { return left + static_cast<int>(std::lround((x - x0) / (x1 - x0) * (right - left))); };
  auto py = [&](double y) { return bottom - static_cast<int>(std::lround((y - y0) / (y1 - y0) * (bottom - top))); };
  const double xs = nice_step(x1 - x0, 6), ys = nice_step(y1 - y0, 6);
  for (double x = std::ceil(x0 / xs) * xs; x <= x1 + 1e-9 * xs; x += xs) {
    c.line(px(x), top, px(x), bottom, grid);
    const std::string l = tick_label(x, xs);
    c.text(px(x) - c.text_width(l) / 2, bottom + 8, l, black);
  }
  for (double y = std::ceil(y0 / ys) * ys; y <= y1; y += ys) {
    c.line(left, py(y), right, py(y), grid);
    const std::string l = tick_label(y, ys);
    c.text(left - 8 - c.text_width(l), py(y) - 5, l, black);
  }
  c.line(left, bottom, right, bottom, black);
  c.line(left, top, left, bottom, black);
  c.text((left + right - c.text_width(o.x_label)) / 2, bottom + 30, o.x_label, black);
  c.text(8, top - 24, o.y_label, black);
  c.text((left + right - c.text_width(o.title)) / 2, 8, o.title, black);
  auto ink = [](size_t i) { return static_cast<uint8_t>(first_series + static_cast<int>(i) % kSeriesColours); };
  int legend_w = 0;
  for (size_t i = 0; i < series.size(); ++i) {
    const auto& pts = series[i].points;
    for (size_t j = 1; j < pts.size(); ++j)
      if (std::isfinite(pts[j - 1].second) && std::isfinite(pts[j].second))
        c.line(px(pts[j - 1].first), py(pts[j - 1].second), px(pts[j].first), py(pts[j].second), ink(i), 2);
    legend_w = std::max(legend_w, c.text_width(series[i].name) + 30);
  }
  // The legend, top right on a white box over the curves.
  const int lx = right - 12 - legend_w, ly = top + 8;
  for (int y = ly - 4; y < ly + 16 * static_cast<int>(series.size()); ++y)
    for (int x = lx - 6; x < right - 4; ++x) c.dot(x, y, white);
  for (size_t i = 0; i < series.size(); ++i) {
    const int y = ly + 16 * static_cast<int>(i);
    c.line(lx, y + 5, lx + 22, y + 5, ink(i), 3);
    c.text(lx + 30, y, series[i].name, black);
  }
  return write_file_atomic(path, encode_png_indexed(o.width, o.height, c.px, kPalette));
}

}  // namespace lithe
