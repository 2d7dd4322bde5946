// A small line chart written as a PNG without image libraries: series of (x, y) points over
// shared linear axes, tick labels and a legend in a built-in 3x5 pixel font (digits, lowercase
// letters, . - = ( ) / : , and space; other characters are left blank). The PNG holds 8-bit
// palette indices in uncompressed ("stored") deflate blocks, so it needs no zlib.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "lithe/core/status.h"

namespace lithe {

struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

struct PlotOptions {
  std::string title, x_label, y_label;
  int width = 960, height = 560;
};

// Draws the series (up to 8 colours, then repeating) and writes `path`; errors name the file.
Status write_line_plot_png(const std::string& path, const std::vector<PlotSeries>& series, const PlotOptions& opts);

// The PNG bytes of a width x height image of palette indices (row-major) with palette rgb[3 * n].
std::string encode_png_indexed(int width, int height, const std::vector<uint8_t>& pixels,
                               const std::vector<uint8_t>& rgb);

}  // namespace lithe
