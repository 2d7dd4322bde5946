// Hugging Face checkpoint directory: single-file or sharded safetensors, config.json, other files.
#include "lithe/formats/checkpoint_dir.h"

#include <filesystem>
#include <set>
#include <system_error>

#include "lithe/core/file_util.h"

namespace lithe {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kMaxJsonBytes = size_t{256} << 20;  // index and config files are far smaller

Result<json> read_json(const std::string& path) {
  LITHE_ASSIGN(std::string text, read_text_file(path, kMaxJsonBytes));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return error(StatusCode::corrupt_file, "{}: not valid JSON", path);
  if (!j.is_object()) return error(StatusCode::corrupt_file, "{}: must hold a JSON object", path);
  return j;
}

// A shard name from the index must be a plain file name inside the directory.
bool plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

}  // namespace

Result<CheckpointDir> CheckpointDir::open(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return error(StatusCode::not_found, "checkpoint directory '{}' does not exist or is not a directory", dir);

  CheckpointDir c;
  c.dir_ = dir;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (it->is_regular_file(ec2)) c.files_.emplace(it->path().filename().string(), it->path().string());
  }
  if (ec) return error(StatusCode::io_error, "cannot list '{}': {}", dir, ec.message());

  if (auto it = c.files_.find("config.json"); it != c.files_.end()) {
    LITHE_ASSIGN(c.config_, read_json(it->second));
    c.has_config_ = true;
  }

  const std::string single = dir + "/model.safetensors";
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (c.files_.count("model.safetensors") != 0) {
    LITHE_ASSIGN(safetensors::File f, safetensors::File::open(single));
    for (const auto& t : f.tensors()) {
      c.names_.push_back(t.name);
      c.where_.emplace(t.name, 0);
    }
    c.metadata_ = f.metadata();
    c.shards_.push_back(std::move(f));
    return c;
  }
  if (c.files_.count("model.safetensors.index.json") == 0) {
    if (c.files_.count("pytorch_model.bin") != 0 || c.files_.count("pytorch_model.bin.index.json") != 0)
      return error(StatusCode::unsupported,
                   "'{}' holds PyTorch pickle weights (pytorch_model.bin): convert them to safetensors", dir);
    return error(StatusCode::not_found, "'{}' has neither model.safetensors nor model.safetensors.index.json", dir);
  }

  // Sharded: {"metadata": {"total_size": N}, "weight_map": {"tensor": "model-00001-of-00002.safetensors"}}
  c.sharded_ = true;
  LITHE_ASSIGN(json index, read_json(index_path));
  if (auto m = index.find("metadata"); m != index.end() && !m->is_null()) {
    if (!m->is_object()) return error(StatusCode::corrupt_file, "{}: field 'metadata' must be an object", index_path);
    if (auto ts = m->find("total_size"); ts != m->end()) {
      if (ts->is_number_unsigned()) {
        c.index_total_size_ = ts->get<uint64_t>();
      } else if (ts->is_number_float() && ts->get<double>() >= 0 && ts->get<double>() < 1.8e19) {
        c.index_total_size_ = static_cast<uint64_t>(ts->get<double>());
      } else {
        return error(StatusCode::corrupt_file, "{}: field 'metadata.total_size' must be a non-negative number, got {}",
                     index_path, ts->dump());
      }
    }
  }
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object())
    return error(StatusCode::corrupt_file, "{}: field 'weight_map' is missing or not an object", index_path);
  if (wm->empty()) return error(StatusCode::corrupt_file, "{}: field 'weight_map' is empty", index_path);

  // Shards in file-name order (model-00001 first); tensors grouped by shard.
  std::map<std::string, std::vector<std::string>> by_shard;
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string())
      return error(StatusCode::corrupt_file, "{}: weight_map entry for tensor '{}' must be a file name, got {}",
                   index_path, name, shard.dump());
    const std::string& s = shard.get_ref<const std::string&>();
    if (!plain_file_name(s))
      return error(StatusCode::corrupt_file, "{}: weight_map entry for tensor '{}' names '{}', not a file in the directory",
                   index_path, name, s);
    by_shard[s].push_back(name);
  }
  for (const auto& [shard_name, names] : by_shard) {
    if (c.files_.count(shard_name) == 0)
      return error(StatusCode::not_found, "{}: shard '{}' (holding tensor '{}') is missing from '{}'", index_path,
                   shard_name, names.front(), dir);
    LITHE_ASSIGN(safetensors::File f, safetensors::File::open(c.files_.at(shard_name)));
    const std::set<std::string> wanted(names.begin(), names.end());
    for (const auto& n : names)
      if (f.find_tensor(n) == nullptr)
        return error(StatusCode::corrupt_file, "{}: weight_map puts tensor '{}' in '{}' but that shard does not hold it",
                     index_path, n, shard_name);
    const size_t idx = c.shards_.size();
    for (const auto& t : f.tensors()) {
      if (wanted.count(t.name) == 0) continue;  // the index is the authority on which shard holds a name
      c.names_.push_back(t.name);
      c.where_.emplace(t.name, idx);
    }
    for (const auto& [k, v] : f.metadata()) c.metadata_.emplace(k, v);
    c.shards_.push_back(std::move(f));
  }
  return c;
}

const safetensors::TensorInfo* CheckpointDir::find_tensor(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : shards_[it->second].find_tensor(name);
}

Result<Tensor> CheckpointDir::tensor(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) return error(StatusCode::not_found, "tensor '{}' not in checkpoint '{}'", name, dir_);
  return shards_[it->second].tensor(name);
}

std::optional<std::string> CheckpointDir::file_path(const std::string& file_name) const {
  auto it = files_.find(file_name);
  if (it == files_.end()) return std::nullopt;
  return it->second;
}

}  // namespace lithe
