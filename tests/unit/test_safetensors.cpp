// safetensors reader/writer and checkpoint directories: round trips, sharding, a golden file
// written by the reference (Rust) serializer, and a bad-input suite that must fail cleanly.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "lithe/core/file_util.h"
#include "lithe/core/half.h"
#include "lithe/formats/checkpoint_dir.h"
#include "lithe/formats/safetensors.h"

namespace lithe {
namespace {

namespace fs = std::filesystem;
namespace st = safetensors;
using nlohmann::json;

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            fmt::format("lithe-st-{}-{}-{}", getpid(), info->test_suite_name(), info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

BufferPtr to_buffer(const std::vector<uint8_t>& bytes) {
  BufferPtr b = alloc_host(bytes.size()).value();
  if (!bytes.empty()) std::memcpy(b->data(), bytes.data(), bytes.size());
  return b;
}

Result<st::File> parse_bytes(const std::vector<uint8_t>& bytes, const std::string& name = "bad.safetensors") {
  return st::File::parse(to_buffer(bytes), name);
}

// A file from a header text (not padded) and data bytes.
std::vector<uint8_t> make_file(const std::string& header, const std::vector<uint8_t>& data = {}) {
  std::vector<uint8_t> out(8 + header.size() + data.size());
  const uint64_t n = header.size();
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  if (!header.empty()) std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 31);
  return v;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data());
  return {p, p + t.nbytes()};
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Expects a non-ok status whose message holds every one of `parts`.
void expect_error(const Status& s, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(s.is_ok()) << "expected an error mentioning " << *parts.begin();
  for (const auto& p : parts)
    EXPECT_NE(s.message().find(p), std::string::npos) << "message '" << s.message() << "' does not mention '" << p << "'";
}
template <typename T>
void expect_error(const Result<T>& r, std::initializer_list<std::string> parts) {
  expect_error(r.status(), parts);
}

constexpr DType kAllDTypes[] = {DType::f64,  DType::f32, DType::f16, DType::bf16, DType::i64,     DType::i32,
                                DType::i16,  DType::i8,  DType::u8,  DType::boolean, DType::f8_e4m3, DType::f8_e5m2};

// A small valid file: three tensors, the last one non-empty, so every strict prefix is invalid.
std::vector<uint8_t> small_valid_file() {
  st::Writer w;
  static const std::vector<uint8_t> a = pattern(24, 1), b = pattern(4, 2), c = pattern(6, 3);
  EXPECT_TRUE(w.add_tensor("a", DType::f32, {2, 3}, a).is_ok());
  EXPECT_TRUE(w.add_tensor("b", DType::f16, {2}, b).is_ok());
  EXPECT_TRUE(w.add_tensor("c", DType::u8, {6}, c).is_ok());
  EXPECT_TRUE(w.set_metadata("format", "pt").is_ok());
  return w.serialize().value();
}

// ---------------------------------------------------------------------------------------------
// dtypes

TEST(SafetensorsDType, NamesRoundTrip) {
  for (DType d : kAllDTypes) {
    auto name = st::dtype_code(d);
    ASSERT_TRUE(name.is_ok()) << dtype_name(d);
    auto back = st::parse_dtype(*name);
    ASSERT_TRUE(back.is_ok());
    EXPECT_EQ(*back, d);
  }
  EXPECT_EQ(*st::parse_dtype("BF16"), DType::bf16);
  EXPECT_EQ(*st::parse_dtype("BOOL"), DType::boolean);
  expect_error(st::parse_dtype("F17"), {"'F17'", "unknown"});
  expect_error(st::parse_dtype("f16"), {"'f16'"});  // names are upper case
  expect_error(st::parse_dtype("U32"), {"'U32'", "no lithe type"});
  EXPECT_EQ(st::parse_dtype("U32").status().code(), StatusCode::unsupported);
  expect_error(st::dtype_code(DType::q4_k), {"q4_k"});
}

// ---------------------------------------------------------------------------------------------
// round trips

TEST(SafetensorsRoundTrip, EveryDTypeZeroDAndEmpty) {
  TempDir tmp;
  st::Writer w;
  std::vector<std::vector<uint8_t>> data;
  std::vector<std::pair<std::string, Shape>> added;
  uint8_t seed = 0;
  for (DType d : kAllDTypes) {
    const Shape shape = {2, 3};
    data.push_back(pattern(6 * static_cast<size_t>(dtype_traits(d).block_bytes), seed++));
    const std::string name = fmt::format("t.{}", dtype_name(d));
    ASSERT_TRUE(w.add_tensor(name, d, shape, data.back()).is_ok());
    added.emplace_back(name, shape);
  }
  data.push_back(pattern(8, 99));  // 0-d f64
  ASSERT_TRUE(w.add_tensor("scalar", DType::f64, {}, data.back()).is_ok());
  data.emplace_back();
  ASSERT_TRUE(w.add_tensor("empty.rows", DType::f32, {0, 4}, data.back()).is_ok());
  ASSERT_TRUE(w.add_tensor("empty.cols", DType::bf16, {3, 0}, data.back()).is_ok());
  data.push_back(pattern(3, 7));  // last, so the file ends with data
  ASSERT_TRUE(w.add_tensor("tail", DType::i8, {3}, data.back()).is_ok());
  ASSERT_TRUE(w.set_metadata("format", "pt").is_ok());
  ASSERT_TRUE(w.set_metadata("note", "grüße").is_ok());

  const std::string path = tmp / "all.safetensors";
  ASSERT_TRUE(w.write(path).is_ok());
  auto f = st::File::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->header_bytes() % 8, 0u);
  EXPECT_EQ(f->data_offset(), 8 + f->header_bytes());
  EXPECT_EQ(f->file_size(), f->data_offset() + w.total_bytes());
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("note"), "grüße");
  ASSERT_EQ(f->tensors().size(), std::size(kAllDTypes) + 4);  // 12 dtypes + 4 more tensors

  // Data order is insertion order; every non-empty tensor follows the previous one.
  uint64_t expect_begin = 0;
  for (const auto& t : f->tensors()) {
    EXPECT_EQ(t.begin, expect_begin) << t.name;
    expect_begin = t.end;
  }
  for (size_t i = 0; i < added.size(); ++i) {
    auto t = f->tensor(added[i].first);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    EXPECT_EQ(t->dtype(), kAllDTypes[i]);
    EXPECT_EQ(t->shape(), added[i].second);
    EXPECT_EQ(bytes_of(*t), data[i]) << added[i].first;
    EXPECT_FALSE(t->buffer()->writable());  // a view into the read-only mapping
  }
  auto scalar = f->tensor("scalar");
  ASSERT_TRUE(scalar.is_ok());
  EXPECT_EQ(scalar->ndim(), 0);
  EXPECT_EQ(scalar->numel(), 1);
  EXPECT_EQ(bytes_of(*scalar), data[std::size(kAllDTypes)]);
  auto er = f->tensor("empty.rows");
  ASSERT_TRUE(er.is_ok());
  EXPECT_EQ(er->shape(), (Shape{0, 4}));
  EXPECT_EQ(er->numel(), 0);
  auto ec = f->tensor("empty.cols");
  ASSERT_TRUE(ec.is_ok());
  EXPECT_EQ(ec->shape(), (Shape{3, 0}));
  EXPECT_EQ(ec->dtype(), DType::bf16);
  expect_error(f->tensor("missing"), {"'missing'", path});
  EXPECT_EQ(f->tensor("missing").status().code(), StatusCode::not_found);

  // serialize() and write() produce the same bytes; writing is deterministic.
  EXPECT_EQ(w.serialize().value(), read_file(path));
  EXPECT_EQ(w.serialize().value(), w.serialize().value());
}

TEST(SafetensorsRoundTrip, HeaderIsPaddedJsonWithSpaces) {
  const std::vector<uint8_t> bytes = small_valid_file();
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | bytes[static_cast<size_t>(i)];
  ASSERT_EQ(n % 8, 0u);
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<ptrdiff_t>(n));
  const size_t last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}');
  const json j = json::parse(header);
  EXPECT_EQ(j["__metadata__"]["format"], "pt");
  EXPECT_EQ(j["a"]["dtype"], "F32");
  EXPECT_EQ(j["a"]["data_offsets"], json({0, 24}));
  EXPECT_EQ(j["b"]["data_offsets"], json({24, 28}));
}

TEST(SafetensorsRoundTrip, HostTensorsAndParseFromMemory) {
  Tensor t = Tensor::empty(DType::f32, {4, 5}).value();
  for (int i = 0; i < 20; ++i) t.data_as<float>()[i] = static_cast<float>(i) * 0.5f - 3.0f;
  Tensor h = Tensor::empty(DType::f16, {3}).value();
  for (int i = 0; i < 3; ++i) h.data_as<uint16_t>()[i] = f32_to_f16(static_cast<float>(i) + 0.25f);
  st::Writer w;
  ASSERT_TRUE(w.add_tensor("w", t).is_ok());
  ASSERT_TRUE(w.add_tensor("h", h).is_ok());
  t = Tensor();  // the writer keeps the buffers alive
  h = Tensor();
  EXPECT_EQ(w.num_tensors(), 2u);
  EXPECT_EQ(w.total_bytes(), 80u + 6u);
  auto f = parse_bytes(w.serialize().value(), "mem");
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->path(), "mem");
  auto rw = f->tensor("w");
  ASSERT_TRUE(rw.is_ok());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(rw->data_as<float>()[i], static_cast<float>(i) * 0.5f - 3.0f);
  auto rh = f->tensor("h");
  ASSERT_TRUE(rh.is_ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(f16_to_f32(rh->data_as<uint16_t>()[i]), static_cast<float>(i) + 0.25f);
  EXPECT_TRUE(f->metadata().empty());
}

TEST(SafetensorsWriter, RejectsBadTensors) {
  st::Writer w;
  const std::vector<uint8_t> d = pattern(16, 0);
  ASSERT_TRUE(w.add_tensor("x", DType::f32, {4}, d).is_ok());
  expect_error(w.add_tensor("x", DType::f32, {4}, d), {"'x'", "already"});
  expect_error(w.add_tensor("__metadata__", DType::f32, {4}, d), {"reserved"});
  expect_error(w.add_tensor("y", DType::f32, {5}, d), {"'y'", "16 bytes"});
  expect_error(w.add_tensor("y", DType::f64, {3}, d), {"'y'"});
  expect_error(w.add_tensor("q", DType::q4_0, {32}, pattern(18, 0)), {"'q'", "q4_0"});
  expect_error(w.add_tensor("neg", DType::f32, {-1}, {}), {"'neg'"});
  expect_error(w.add_tensor("huge", DType::f32, {0, int64_t{1} << 40, int64_t{1} << 40}, {}), {"'huge'", "too many elements"});
  expect_error(w.add_tensor(std::string("bad\xff", 4), DType::f32, {4}, d), {"UTF-8"});
  expect_error(w.set_metadata("k", std::string("\xc3", 1)), {"'k'", "UTF-8"});
  expect_error(w.add_tensor("undef", Tensor()), {"'undef'"});
  EXPECT_EQ(w.num_tensors(), 1u);
}

// ---------------------------------------------------------------------------------------------
// golden file written by the reference serializer (tests/gen/gen_safetensors_golden.py)

TEST(SafetensorsGolden, MatchesReferenceSerializer) {
  const std::string dir = std::string(LITHE_TEST_DATA) + "/safetensors";
  auto f = st::File::open(dir + "/golden.safetensors");
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  const json expected = json::parse(read_text_file(dir + "/golden.json").value());
  for (const auto& [k, v] : expected["metadata"].items()) EXPECT_EQ(f->metadata().at(k), v.get<std::string>());
  ASSERT_EQ(f->tensors().size(), expected["tensors"].size());
  for (const auto& [name, e] : expected["tensors"].items()) {
    SCOPED_TRACE(name);
    auto t = f->tensor(name);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    EXPECT_EQ(st::dtype_code(t->dtype()).value(), e["dtype"].get<std::string>());
    EXPECT_EQ(t->shape(), e["shape"].get<Shape>());
    std::string hex;
    for (uint8_t b : bytes_of(*t)) hex += fmt::format("{:02x}", b);
    EXPECT_EQ(hex, e["hex"].get<std::string>());
    if (!e.contains("values")) continue;
    const json& vals = e["values"];
    ASSERT_EQ(static_cast<int64_t>(vals.size()), t->numel());
    for (size_t i = 0; i < vals.size(); ++i) {
      switch (t->dtype()) {
        case DType::f32: EXPECT_EQ(t->data_as<float>()[i], vals[i].get<float>()); break;
        case DType::f64: EXPECT_EQ(t->data_as<double>()[i], vals[i].get<double>()); break;
        case DType::f16: EXPECT_EQ(f16_to_f32(t->data_as<uint16_t>()[i]), vals[i].get<float>()); break;
        case DType::bf16: EXPECT_EQ(bf16_to_f32(t->data_as<uint16_t>()[i]), vals[i].get<float>()); break;
        case DType::i64: EXPECT_EQ(t->data_as<int64_t>()[i], vals[i].get<int64_t>()); break;
        case DType::i32: EXPECT_EQ(t->data_as<int32_t>()[i], vals[i].get<int32_t>()); break;
        case DType::i16: EXPECT_EQ(t->data_as<int16_t>()[i], vals[i].get<int16_t>()); break;
        case DType::i8: EXPECT_EQ(t->data_as<int8_t>()[i], vals[i].get<int8_t>()); break;
        case DType::u8: EXPECT_EQ(t->data_as<uint8_t>()[i], vals[i].get<uint8_t>()); break;
        case DType::boolean: EXPECT_EQ(t->data_as<uint8_t>()[i] != 0, vals[i].get<bool>()); break;
        default: FAIL() << "unexpected dtype " << dtype_name(t->dtype());
      }
    }
  }
  // Our writer reproduces the reference bytes when given the tensors in the same order.
  st::Writer w;
  for (const auto& [k, v] : f->metadata()) ASSERT_TRUE(w.set_metadata(k, v).is_ok());
  for (const auto& info : f->tensors()) ASSERT_TRUE(w.add_tensor(info.name, f->tensor(info).value()).is_ok());
  auto mine = parse_bytes(w.serialize().value(), "mine");
  ASSERT_TRUE(mine.is_ok());
  for (const auto& info : f->tensors()) {
    EXPECT_EQ(bytes_of(mine->tensor(info.name).value()), bytes_of(f->tensor(info).value())) << info.name;
    EXPECT_EQ(mine->find_tensor(info.name)->begin, info.begin) << info.name;
  }
}

// ---------------------------------------------------------------------------------------------
// sharding and checkpoint directories

json index_of(const std::string& dir) { return json::parse(read_text_file(dir + "/model.safetensors.index.json").value()); }

TEST(SafetensorsSharding, ThreeShardsReadBackThroughCheckpointDir) {
  TempDir tmp;
  st::Writer w;
  std::vector<std::vector<uint8_t>> data;
  for (int i = 0; i < 6; ++i) data.push_back(pattern(1000, static_cast<uint8_t>(i)));
  for (int i = 0; i < 6; ++i)
    ASSERT_TRUE(w.add_tensor(fmt::format("layers.{}.weight", i), DType::f32, {10, 25}, data[i]).is_ok());
  ASSERT_TRUE(w.set_metadata("format", "pt").is_ok());
  auto res = w.write_sharded(tmp.str(), 2500);
  ASSERT_TRUE(res.is_ok()) << res.status().to_string();
  EXPECT_TRUE(res->sharded);
  ASSERT_EQ(res->files.size(), 4u);
  EXPECT_EQ(res->files[0], tmp / "model-00001-of-00003.safetensors");
  EXPECT_EQ(res->files[2], tmp / "model-00003-of-00003.safetensors");
  EXPECT_EQ(res->files[3], tmp / "model.safetensors.index.json");

  const json index = index_of(tmp.str());
  EXPECT_EQ(index["metadata"]["total_size"], 6000);
  EXPECT_EQ(index["weight_map"]["layers.0.weight"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["layers.3.weight"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["layers.5.weight"], "model-00003-of-00003.safetensors");

  ASSERT_TRUE(write_file_atomic(tmp / "config.json", std::string(R"({"model_type": "llama", "hidden_size": 8})")).is_ok());
  ASSERT_TRUE(write_file_atomic(tmp / "tokenizer.json", std::string("{}")).is_ok());
  auto c = CheckpointDir::open(tmp.str());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_TRUE(c->sharded());
  EXPECT_EQ(c->shards().size(), 3u);
  EXPECT_EQ(c->index_total_size(), 6000u);
  ASSERT_EQ(c->tensor_names().size(), 6u);
  for (int i = 0; i < 6; ++i) {
    const std::string name = fmt::format("layers.{}.weight", i);
    EXPECT_EQ(c->tensor_names()[static_cast<size_t>(i)], name);
    EXPECT_TRUE(c->has_tensor(name));
    auto t = c->tensor(name);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    EXPECT_EQ(t->shape(), (Shape{10, 25}));
    EXPECT_EQ(bytes_of(*t), data[static_cast<size_t>(i)]);
    ASSERT_NE(c->find_tensor(name), nullptr);
  }
  EXPECT_EQ(c->metadata().at("format"), "pt");
  ASSERT_NE(c->config(), nullptr);
  EXPECT_EQ((*c->config())["hidden_size"], 8);
  EXPECT_EQ(c->file_path("tokenizer.json"), tmp / "tokenizer.json");
  EXPECT_FALSE(c->file_path("generation_config.json").has_value());
  expect_error(c->tensor("nope"), {"'nope'", tmp.str()});
  EXPECT_EQ(c->find_tensor("nope"), nullptr);

  // The checkpoint stays usable after a copy (tensor views share the mappings).
  CheckpointDir copy = *c;
  c = error(StatusCode::internal, "dropped");
  EXPECT_EQ(bytes_of(copy.tensor("layers.4.weight").value()), data[4]);
}

TEST(SafetensorsSharding, SmallModelIsOneFile) {
  TempDir tmp;
  st::Writer w;
  const std::vector<uint8_t> d = pattern(64, 5);
  ASSERT_TRUE(w.add_tensor("a", DType::f32, {16}, d).is_ok());
  ASSERT_TRUE(w.add_tensor("b", DType::i32, {4, 4}, d).is_ok());
  auto res = w.write_sharded(tmp.str(), 1 << 20);
  ASSERT_TRUE(res.is_ok());
  EXPECT_FALSE(res->sharded);
  ASSERT_EQ(res->files.size(), 1u);
  EXPECT_EQ(res->files[0], tmp / "model.safetensors");
  EXPECT_FALSE(fs::exists(tmp / "model.safetensors.index.json"));
  auto c = CheckpointDir::open(tmp.str());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_FALSE(c->sharded());
  EXPECT_EQ(c->config(), nullptr);
  EXPECT_EQ(c->tensor_names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(bytes_of(c->tensor("b").value()), d);
  expect_error(w.write_sharded(tmp.str(), 0), {"shard size"});
}

TEST(SafetensorsSharding, OversizedTensorGetsItsOwnShard) {
  TempDir tmp;
  st::Writer w;
  const std::vector<uint8_t> small = pattern(100, 1), big = pattern(5000, 2);
  ASSERT_TRUE(w.add_tensor("s0", DType::u8, {100}, small).is_ok());
  ASSERT_TRUE(w.add_tensor("big", DType::u8, {5000}, big).is_ok());
  ASSERT_TRUE(w.add_tensor("s1", DType::u8, {100}, small).is_ok());
  auto res = w.write_sharded(tmp.str(), 1000, "shards");
  ASSERT_TRUE(res.is_ok());
  ASSERT_EQ(res->files.size(), 4u);
  EXPECT_EQ(res->files[1], tmp / "shards-00002-of-00003.safetensors");
  EXPECT_EQ(st::File::open(res->files[1]).value().tensors().at(0).name, "big");
  EXPECT_EQ(res->files[3], tmp / "shards.safetensors.index.json");
}

class CheckpointDirErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    st::Writer w;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(w.add_tensor(fmt::format("t{}", i), DType::u8, {100}, data_).is_ok());
    ASSERT_TRUE(w.write_sharded(tmp_.str(), 100).is_ok());
  }
  void write_index(const json& j) {
    ASSERT_TRUE(write_file_atomic(tmp_ / "model.safetensors.index.json", j.dump()).is_ok());
  }
  TempDir tmp_;
  std::vector<uint8_t> data_ = pattern(100, 9);
};

TEST_F(CheckpointDirErrors, MissingShard) {
  fs::remove(tmp_ / "model-00002-of-00003.safetensors");
  auto c = CheckpointDir::open(tmp_.str());
  expect_error(c, {"model-00002-of-00003.safetensors", "'t1'", "missing"});
  EXPECT_EQ(c.status().code(), StatusCode::not_found);
}

TEST_F(CheckpointDirErrors, WeightMapEntryNotInShard) {
  json index = index_of(tmp_.str());
  index["weight_map"]["t0"] = "model-00003-of-00003.safetensors";
  write_index(index);
  expect_error(CheckpointDir::open(tmp_.str()), {"'t0'", "model-00003-of-00003.safetensors", "weight_map"});
}

TEST_F(CheckpointDirErrors, ShardNameOutsideTheDirectory) {
  json index = index_of(tmp_.str());
  index["weight_map"]["t0"] = "../model-00001-of-00003.safetensors";
  write_index(index);
  expect_error(CheckpointDir::open(tmp_.str()), {"'t0'", "not a file in the directory"});
}

TEST_F(CheckpointDirErrors, MalformedIndex) {
  ASSERT_TRUE(write_file_atomic(tmp_ / "model.safetensors.index.json", std::string("{\"weight_map\": ")).is_ok());
  expect_error(CheckpointDir::open(tmp_.str()), {"model.safetensors.index.json", "not valid JSON"});
  write_index(json{{"metadata", {{"total_size", 300}}}});
  expect_error(CheckpointDir::open(tmp_.str()), {"weight_map"});
  write_index(json{{"weight_map", {{"t0", 5}}}});
  expect_error(CheckpointDir::open(tmp_.str()), {"'t0'", "file name"});
  write_index(json{{"metadata", {{"total_size", "big"}}}, {"weight_map", {{"t0", "model-00001-of-00003.safetensors"}}}});
  expect_error(CheckpointDir::open(tmp_.str()), {"total_size"});
}

TEST_F(CheckpointDirErrors, CorruptShardNamesTheFile) {
  ASSERT_TRUE(write_file_atomic(tmp_ / "model-00003-of-00003.safetensors", std::string("garbage!garbage")).is_ok());
  expect_error(CheckpointDir::open(tmp_.str()), {"model-00003-of-00003.safetensors", "header length"});
}

TEST_F(CheckpointDirErrors, BadConfigAndMissingWeights) {
  ASSERT_TRUE(write_file_atomic(tmp_ / "config.json", std::string("{\"a\": ")).is_ok());
  expect_error(CheckpointDir::open(tmp_.str()), {"config.json", "not valid JSON"});
  const std::string empty = tmp_ / "sub";
  fs::create_directories(empty);
  expect_error(CheckpointDir::open(empty), {"model.safetensors"});
  EXPECT_EQ(CheckpointDir::open(empty).status().code(), StatusCode::not_found);
  ASSERT_TRUE(write_file_atomic(empty + "/pytorch_model.bin", std::string("x")).is_ok());
  expect_error(CheckpointDir::open(empty), {"pytorch_model.bin"});
  expect_error(CheckpointDir::open(tmp_ / "does-not-exist"), {"does-not-exist"});
}

// ---------------------------------------------------------------------------------------------
// bad input: every failure is a Status naming the file, the tensor and the field

TEST(SafetensorsBadInput, EveryTruncationFails) {
  const std::vector<uint8_t> good = small_valid_file();
  ASSERT_TRUE(parse_bytes(good).is_ok());
  for (size_t n = 0; n < good.size(); ++n) {
    const std::vector<uint8_t> prefix(good.begin(), good.begin() + static_cast<ptrdiff_t>(n));
    auto r = parse_bytes(prefix, "cut.safetensors");
    ASSERT_FALSE(r.is_ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_EQ(r.status().code(), StatusCode::corrupt_file) << r.status().to_string();
    EXPECT_NE(r.status().message().find("cut.safetensors"), std::string::npos) << r.status().message();
  }
}

TEST(SafetensorsBadInput, CorruptedHeaderBytesNeverCrash) {
  const std::vector<uint8_t> good = small_valid_file();
  int failures = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0xff}, uint8_t{'"'}, uint8_t{'9'}, uint8_t{'}'}, uint8_t{'['}}) {
      std::vector<uint8_t> bad = good;
      if (bad[i] == v) continue;
      bad[i] = v;
      auto r = parse_bytes(bad);
      if (!r.is_ok()) {
        ++failures;
        EXPECT_FALSE(r.status().message().empty());
        continue;
      }
      for (const auto& t : r->tensors()) {  // whatever parsed must give in-bounds views
        auto view = r->tensor(t);
        ASSERT_TRUE(view.is_ok()) << view.status().to_string();
        EXPECT_LE(view->offset() + view->nbytes(), bad.size());
      }
    }
  }
  EXPECT_GT(failures, 0);
}

TEST(SafetensorsBadInput, HeaderLength) {
  std::vector<uint8_t> f = small_valid_file();
  expect_error(parse_bytes({1, 2, 3}), {"bad.safetensors", "too short"});
  std::vector<uint8_t> huge = f;
  huge[7] = 0x40;  // 2^62
  expect_error(parse_bytes(huge), {"bad.safetensors", "header length", "limit"});
  std::vector<uint8_t> past = f;
  const uint64_t n = f.size() - 8 + 1;
  for (int i = 0; i < 8; ++i) past[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  expect_error(parse_bytes(past), {"header length", "past the end"});
  expect_error(parse_bytes(make_file("")), {"not valid JSON"});
}

TEST(SafetensorsBadInput, JsonStructure) {
  expect_error(parse_bytes(make_file("{\"a\": {\"dtype\": \"F32\", ")), {"bad.safetensors", "not valid JSON"});
  expect_error(parse_bytes(make_file("{} trailing")), {"not valid JSON"});
  expect_error(parse_bytes(make_file("[1, 2]")), {"must be a JSON object"});
  expect_error(parse_bytes(make_file("{\"a\": \"\xff\"}")), {"not valid JSON"});
  expect_error(parse_bytes(make_file(R"({"w": 5})")), {"'w'", "entry"});
  expect_error(parse_bytes(make_file(R"({"__metadata__": [1]})")), {"__metadata__"});
  expect_error(parse_bytes(make_file(R"({"__metadata__": {"k": 1}})")), {"__metadata__", "'k'"});
  // Header padding with spaces is fine, as is an empty file.
  auto ok = parse_bytes(make_file("{}      "));
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_TRUE(ok->tensors().empty());
}

TEST(SafetensorsBadInput, MissingAndMistypedFields) {
  const std::vector<uint8_t> d(16);
  expect_error(parse_bytes(make_file(R"({"w": {"shape": [4], "data_offsets": [0, 16]}})", d)), {"'w'", "'dtype'", "missing"});
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "F32", "data_offsets": [0, 16]}})", d)), {"'w'", "'shape'", "missing"});
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "F32", "shape": [4]}})", d)), {"'w'", "'data_offsets'", "missing"});
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": 3, "shape": [4], "data_offsets": [0, 16]}})", d)), {"'w'", "'dtype'"});
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "F32", "shape": 4, "data_offsets": [0, 16]}})", d)), {"'w'", "'shape'"});
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})", d)), {"'w'", "'shape'"});
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "F32", "shape": [4.0], "data_offsets": [0, 16]}})", d)), {"'w'", "'shape'"});
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "F32", "shape": ["4"], "data_offsets": [0, 16]}})", d)), {"'w'", "'shape'"});
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0]}})", d)), {"'w'", "'data_offsets'"});
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16, 32]}})", d)), {"'w'", "'data_offsets'"});
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [-1, 16]}})", d)), {"'w'", "'data_offsets'"});
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": "0-16"}})", d)), {"'w'", "'data_offsets'"});
}

TEST(SafetensorsBadInput, UnknownDType) {
  const std::vector<uint8_t> d(16);
  auto r = parse_bytes(make_file(R"({"w": {"dtype": "F17", "shape": [4], "data_offsets": [0, 16]}})", d));
  expect_error(r, {"bad.safetensors", "'w'", "'dtype'", "'F17'"});
  auto u = parse_bytes(make_file(R"({"w": {"dtype": "U64", "shape": [2], "data_offsets": [0, 16]}})", d));
  expect_error(u, {"'w'", "'dtype'", "'U64'"});
  EXPECT_EQ(u.status().code(), StatusCode::unsupported);
}

TEST(SafetensorsBadInput, LyingOffsetsAndLengths) {
  const std::vector<uint8_t> d(16);
  // Past the data section.
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}})", d)),
               {"'w'", "'data_offsets'", "past the data section"});
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [18446744073709551614, 18446744073709551615]}})", d)),
               {"'w'", "'data_offsets'", "past the data section"});
  // begin after end.
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [16, 0]}})", d)),
               {"'w'", "'data_offsets'", "begin after end"});
  // Length disagrees with the shape.
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})", d)),
               {"'w'", "'data_offsets'", "needs 12"});
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "F64", "shape": [], "data_offsets": [0, 16]}})", d)),
               {"'w'", "'data_offsets'", "needs 8"});
  // Shape products that overflow, even with a zero dimension.
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 16]}})", d)),
               {"'w'", "'shape'", "too large"});
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "F32", "shape": [0, 4294967296, 4294967296], "data_offsets": [0, 0]}})", d)),
               {"'w'", "'shape'", "too large"});
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 16]}})", d)),
               {"'w'", "'shape'"});
  expect_error(parse_bytes(make_file(R"({"w": {"dtype": "F32", "shape": [99999999999999999999], "data_offsets": [0, 16]}})", d)),
               {"'w'", "'shape'"});
}

TEST(SafetensorsBadInput, OverlapsAndDuplicates) {
  const std::vector<uint8_t> d(16);
  auto r = parse_bytes(make_file(
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", d));
  expect_error(r, {"'b'", "'a'", "overlaps", "'data_offsets'"});
  // Identical ranges overlap too.
  expect_error(parse_bytes(make_file(
                   R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}, "b": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]}})", d)),
               {"overlaps"});
  // Empty tensors occupy no bytes; holes between tensors are tolerated.
  auto ok = parse_bytes(make_file(
      R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}, "e": {"dtype": "F32", "shape": [0], "data_offsets": [2, 2]}, "b": {"dtype": "U8", "shape": [4], "data_offsets": [8, 12]}})", d));
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(ok->tensors()[1].name, "e");  // data order
  // A name twice (JSON objects would silently keep one).
  expect_error(parse_bytes(make_file(
                   R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}, "a": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})", d)),
               {"'a'", "twice"});
  expect_error(parse_bytes(make_file(R"({"a": {"dtype": "U8", "dtype": "F32", "shape": [4], "data_offsets": [0, 4]}})", d)),
               {"'a'", "'dtype'", "twice"});
}

}  // namespace
}  // namespace lithe
