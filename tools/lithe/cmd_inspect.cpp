// lithe inspect FILE [--json]: metadata and tensor table of a GGUF file, a safetensors file or a
// checkpoint directory. Reading goes through models/model_source (which knows the formats).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "command.h"
#include "lithe/formats/model_file.h"

namespace lithe::cli {
namespace {

struct Options {
  std::string path;
  bool json = false;
  bool all = false;
};

Status run(const Options& o) {
  LITHE_ASSIGN(auto src, open_model_file(o.path));
  const auto& info = src->info();
  if (o.json) {
    nlohmann::json j;
    j["path"] = o.path;
    j["format"] = info.format;
    j["format_version"] = info.format_version;
    j["metadata"] = info.metadata_json;
    auto& tensors = j["tensors"] = nlohmann::json::array();
    for (const auto& t : src->tensors())
      tensors.push_back({{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"bytes", t.nbytes},
                         {"offset", t.offset}});
    j["tensor_count"] = src->tensors().size();
    j["parameter_count"] = info.parameter_count;
    j["tensor_bytes"] = info.tensor_bytes;
    std::cout << j.dump(2) << "\n";
    return Status::ok();
  }
  fmt::print("{}: {} {}\n", o.path, info.format, info.format_version);
  fmt::print("{} tensors, {:.2f} M parameters, {:.2f} MiB of tensor data ({:.2f} bits per parameter)\n",
             src->tensors().size(), static_cast<double>(info.parameter_count) / 1e6,
             static_cast<double>(info.tensor_bytes) / (1 << 20),
             info.parameter_count ? 8.0 * static_cast<double>(info.tensor_bytes) / static_cast<double>(info.parameter_count) : 0.0);
  fmt::print("\nmetadata ({} entries):\n", info.metadata_text.size());
  for (const auto& [k, v] : info.metadata_text) fmt::print("  {:<44} {}\n", k, v);
  fmt::print("\ntensors:\n");
  fmt::print("  {:<40} {:<8} {:<20} {:>12}\n", "name", "dtype", "shape", "bytes");
  size_t shown = 0;
  const auto& ts = src->tensors();
  for (const auto& t : ts) {
    if (!o.all && shown == 24 && ts.size() > 30) {
      fmt::print("  ... {} more (use --all)\n", ts.size() - shown);
      break;
    }
    fmt::print("  {:<40} {:<8} {:<20} {:>12}\n", t.name, dtype_name(t.dtype), shape_str(t.shape), t.nbytes);
    ++shown;
  }
  return Status::ok();
}

void setup(CLI::App& sub, Runner& runner) {
  auto o = std::make_shared<Options>();
  sub.add_option("file", o->path, "a .gguf file, a .safetensors file or a checkpoint directory")->required();
  sub.add_flag("--json", o->json, "print JSON");
  sub.add_flag("--all", o->all, "list every tensor (text output)");
  runner = [o] { return run(*o); };
}

}  // namespace

LITHE_COMMAND(inspect, "Print the metadata and tensor table of a model file or checkpoint directory", setup);

}  // namespace lithe::cli
