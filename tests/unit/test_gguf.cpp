// GGUF reader/writer: round trips of every metadata type and tensor dtype, and hostile inputs
// (truncation at every length, lying counts/offsets/lengths) that must give errors, not crashes.
#include <gtest/gtest.h>

#include "test_tmp.h"

#include <cstring>
#include <random>

#include "lithe/formats/gguf.h"

using namespace lithe;
using namespace lithe::gguf;

namespace {

BufferPtr to_buffer(const std::vector<uint8_t>& bytes) {
  auto buf = alloc_host(bytes.size());
  EXPECT_TRUE(buf.is_ok());
  if (!bytes.empty()) std::memcpy((*buf)->data(), bytes.data(), bytes.size());
  return *buf;
}

Result<File> parse_bytes(const std::vector<uint8_t>& bytes) { return File::parse(to_buffer(bytes), "test.gguf"); }

struct Fixture {
  std::vector<uint8_t> f32_data, q8_data, f16_data;
  Writer w;
  Fixture() : w(64) {
    w.set("general.architecture", Value::of_string("llama"));
    w.set("u8", Value::of_u8(200));
    w.set("i8", Value::of_i8(-100));
    w.set("u16", Value::of_u16(60000));
    w.set("i16", Value::of_i16(-30000));
    w.set("u32", Value::of_u32(4000000000u));
    w.set("i32", Value::of_i32(-2000000000));
    w.set("u64", Value::of_u64(18000000000000000000ull));
    w.set("i64", Value::of_i64(-9000000000000000000ll));
    w.set("f32", Value::of_f32(1.5f));
    w.set("f64", Value::of_f64(-2.25));
    w.set("bool", Value::of_bool(true));
    w.set("str", Value::of_string("héllo\nworld"));
    w.set("strs", Value::of_strings({"a", "", "ccc"}));
    w.set("ints", Value::of_array(ValueType::i32, {Value::of_i32(1), Value::of_i32(-2)}));
    w.set("nested", Value::of_array(ValueType::array, {Value::of_array(ValueType::u8, {Value::of_u8(7)}),
                                                       Value::of_array(ValueType::u8, {})}));
    f32_data.resize(3 * 5 * 4);
    for (size_t i = 0; i < f32_data.size(); ++i) f32_data[i] = static_cast<uint8_t>(i * 7);
    q8_data.resize(2 * 34);
    for (size_t i = 0; i < q8_data.size(); ++i) q8_data[i] = static_cast<uint8_t>(i * 13 + 1);
    f16_data.resize(7 * 2);
    EXPECT_TRUE(w.add_tensor("a.weight", DType::f32, {3, 5}, f32_data).is_ok());
    EXPECT_TRUE(w.add_tensor("b.q8", DType::q8_0, {2, 32}, q8_data).is_ok());
    EXPECT_TRUE(w.add_tensor("c.vec", DType::f16, {7}, f16_data).is_ok());
  }
};

}  // namespace

TEST(Gguf, RoundTripMetadataAndTensors) {
  Fixture fx;
  auto bytes = fx.w.serialize();
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().to_string();
  auto f = parse_bytes(*bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(*f->get_int("u8"), 200);
  EXPECT_EQ(*f->get_int("i8"), -100);
  EXPECT_EQ(*f->get_int("u16"), 60000);
  EXPECT_EQ(*f->get_int("i16"), -30000);
  EXPECT_EQ(*f->get_int("u32"), 4000000000ll);
  EXPECT_EQ(*f->get_int("i32"), -2000000000);
  EXPECT_EQ(*(*f->get("u64"))->as_uint(), 18000000000000000000ull);
  EXPECT_FALSE(f->get_int("u64").is_ok());  // does not fit i64: an error, not a wrap
  EXPECT_EQ(*f->get_int("i64"), -9000000000000000000ll);
  EXPECT_EQ(*f->get_float("f32"), 1.5);
  EXPECT_EQ(*f->get_float("f64"), -2.25);
  EXPECT_TRUE(f->get_bool_or("bool", false));
  EXPECT_EQ(*f->get_string("str"), "héllo\nworld");
  EXPECT_EQ(*(*f->get("strs"))->as_string_array(), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ((*f->get("ints"))->elem_type(), ValueType::i32);
  const Value* nested = f->find("nested");
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ((*nested->as_array())->size(), 2u);
  EXPECT_EQ(*(*(*nested->as_array())->at(0).as_array())->at(0).as_int(), 7);
  // Metadata keeps file order, and every value compares equal to what was written.
  ASSERT_EQ(f->metadata().size(), 17u);  // 16 + general.alignment
  EXPECT_EQ(f->metadata()[0].first, "general.architecture");

  ASSERT_EQ(f->tensors().size(), 3u);
  auto a = f->tensor("a.weight");
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->shape(), (Shape{3, 5}));
  EXPECT_EQ(a->dtype(), DType::f32);
  EXPECT_EQ(std::memcmp(a->data(), fx.f32_data.data(), fx.f32_data.size()), 0);
  auto b = f->tensor("b.q8");
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->shape(), (Shape{2, 32}));
  EXPECT_EQ(b->nbytes(), 68u);
  EXPECT_EQ(std::memcmp(b->data(), fx.q8_data.data(), fx.q8_data.size()), 0);
  EXPECT_EQ(f->find_tensor("b.q8")->ggml_type, 8u);
  EXPECT_EQ(f->tensor("missing").status().code(), StatusCode::not_found);
  for (const auto& t : f->tensors()) EXPECT_EQ(t.offset % 64, 0u) << t.name;

  // Re-serializing the parsed file gives the same bytes.
  Writer w2(64);
  for (const auto& [k, v] : f->metadata()) w2.set(k, v);
  for (const auto& t : f->tensors()) {
    auto view = f->tensor(t);
    ASSERT_TRUE(view.is_ok());
    ASSERT_TRUE(w2.add_tensor(t.name, *view).is_ok());
  }
  EXPECT_EQ(*w2.serialize(), *bytes);
}

TEST(Gguf, WriteAtomicallyAndOpen) {
  Fixture fx;
  const std::string path = lithe_test::tmp_path("test.gguf").string();
  ASSERT_TRUE(fx.w.write(path).is_ok());
  auto f = File::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->path(), path);
  EXPECT_EQ(File::open(path + ".nope").status().code(), StatusCode::not_found);
}

TEST(Gguf, EveryTruncationIsAnErrorNotACrash) {
  Fixture fx;
  auto bytes = *fx.w.serialize();
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<long>(n));
    auto f = parse_bytes(cut);
    // The last tensor's trailing padding is not needed; anything shorter than its data must fail.
    if (!f.is_ok()) {
      EXPECT_NE(f.status().message().find("test.gguf"), std::string::npos) << f.status().message();
    } else {
      EXPECT_GE(n, bytes.size() - 64) << "truncated to " << n << " bytes but parsed";
    }
  }
}

TEST(Gguf, RandomCorruptionNeverCrashes) {
  Fixture fx;
  const auto bytes = *fx.w.serialize();
  std::mt19937 rng(1234);
  int errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto b = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % 400 % b.size()] = static_cast<uint8_t>(rng());
    auto f = parse_bytes(b);
    if (!f.is_ok()) {
      ++errors;
      continue;
    }
    for (const auto& [key, v] : f->metadata()) (void)v.summary();
    for (const auto& t : f->tensors()) EXPECT_TRUE(f->tensor(t).is_ok()) << t.name;
  }
  EXPECT_GT(errors, 100);  // most corruptions of the header are detected
}

namespace {
// Hand-built headers to hit one check at a time.
struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  Bytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
};
Bytes header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  Bytes h;
  h.put<uint32_t>(0x46554747).put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  return h;
}
std::string parse_error(const Bytes& b) {
  auto f = parse_bytes(b.b);
  EXPECT_FALSE(f.is_ok());
  return f.is_ok() ? "" : f.status().message();
}
}  // namespace

TEST(Gguf, HostileHeadersNameTheField) {
  Bytes magic;
  magic.put<uint32_t>(0x12345678);
  EXPECT_NE(parse_error(magic).find("magic"), std::string::npos);
  EXPECT_NE(parse_error(header(0, 0, 1)).find("version 1"), std::string::npos);
  EXPECT_NE(parse_error(header(0, 0, 0x03000000)).find("big-endian"), std::string::npos);
  EXPECT_NE(parse_error(header(0, 1ull << 60)).find("kv_count"), std::string::npos);
  EXPECT_NE(parse_error(header(1ull << 60, 0)).find("tensor_count"), std::string::npos);

  auto huge_string = header(0, 1);
  huge_string.str("k").put<uint32_t>(8).put<uint64_t>(1ull << 40);
  EXPECT_NE(parse_error(huge_string).find("length"), std::string::npos);

  auto huge_array = header(0, 1);
  huge_array.str("arr").put<uint32_t>(9).put<uint32_t>(4).put<uint64_t>(1ull << 50);
  EXPECT_NE(parse_error(huge_array).find("claims"), std::string::npos);

  auto bad_type = header(0, 1);
  bad_type.str("k").put<uint32_t>(99).put<uint32_t>(0);
  EXPECT_NE(parse_error(bad_type).find("unknown value type 99"), std::string::npos);

  auto bad_bool = header(0, 1);
  bad_bool.str("flag").put<uint32_t>(7).put<uint8_t>(5);
  EXPECT_NE(parse_error(bad_bool).find("flag"), std::string::npos);

  auto deep = header(0, 1);
  deep.str("deep");
  deep.put<uint32_t>(9);
  for (int i = 0; i < 10; ++i) deep.put<uint32_t>(9).put<uint64_t>(1);
  deep.put<uint32_t>(4).put<uint64_t>(1).put<uint32_t>(1);
  EXPECT_NE(parse_error(deep).find("deeper"), std::string::npos);

  auto dup = header(0, 2);
  dup.str("k").put<uint32_t>(4).put<uint32_t>(1).str("k").put<uint32_t>(4).put<uint32_t>(2);
  EXPECT_NE(parse_error(dup).find("twice"), std::string::npos);

  auto bad_align = header(0, 1);
  bad_align.str("general.alignment").put<uint32_t>(4).put<uint32_t>(48);
  EXPECT_NE(parse_error(bad_align).find("power of two"), std::string::npos);

  auto tensor = [](uint32_t ndims, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
    auto t = header(1, 0);
    t.str("w").put<uint32_t>(ndims);
    for (auto d : dims) t.put<uint64_t>(d);
    t.put<uint32_t>(type).put<uint64_t>(offset);
    t.b.resize((t.b.size() + 31) / 32 * 32 + 64, 0);  // 64 bytes of data
    return t;
  };
  EXPECT_NE(parse_error(tensor(5, {1, 1, 1, 1, 1}, 0, 0)).find("5 dimensions"), std::string::npos);
  EXPECT_NE(parse_error(tensor(1, {16}, 77, 0)).find("unknown GGML type id 77"), std::string::npos);
  EXPECT_NE(parse_error(tensor(1, {16}, 16, 0)).find("IQ2_XXS"), std::string::npos);
  EXPECT_NE(parse_error(tensor(1, {30}, 2, 0)).find("block size 32"), std::string::npos);
  EXPECT_NE(parse_error(tensor(1, {16}, 0, 8)).find("alignment"), std::string::npos);
  EXPECT_NE(parse_error(tensor(1, {17}, 0, 0)).find("past the end"), std::string::npos);
  EXPECT_NE(parse_error(tensor(1, {16}, 0, 1ull << 62)).find("past the end"), std::string::npos);
  EXPECT_NE(parse_error(tensor(4, {1ull << 40, 1ull << 40, 1 << 20, 1}, 0, 0)).find("w"), std::string::npos);
  EXPECT_TRUE(parse_bytes(tensor(1, {16}, 0, 0).b).is_ok());

  auto overlap = header(2, 0);
  overlap.str("a").put<uint32_t>(1).put<uint64_t>(16).put<uint32_t>(0).put<uint64_t>(0);
  overlap.str("b").put<uint32_t>(1).put<uint64_t>(16).put<uint32_t>(0).put<uint64_t>(64);
  overlap.b.resize((overlap.b.size() + 31) / 32 * 32 + 128, 0);
  EXPECT_TRUE(parse_bytes(overlap.b).is_ok());
  auto overlap2 = header(2, 0);
  overlap2.str("a").put<uint32_t>(1).put<uint64_t>(16).put<uint32_t>(0).put<uint64_t>(0);
  overlap2.str("b").put<uint32_t>(1).put<uint64_t>(16).put<uint32_t>(0).put<uint64_t>(32);
  overlap2.b.resize((overlap2.b.size() + 31) / 32 * 32 + 128, 0);
  // 16 f32 = 64 bytes at offset 0 overlaps a tensor at offset 32.
  EXPECT_NE(parse_error(overlap2).find("overlap"), std::string::npos);
}

TEST(Gguf, WriterRejectsBadTensors) {
  Writer w;
  std::vector<uint8_t> data(10);
  EXPECT_FALSE(w.add_tensor("x", DType::f32, {3}, data).is_ok());
  EXPECT_FALSE(w.add_tensor("x", DType::q4_0, {2, 31}, data).is_ok());
  EXPECT_FALSE(w.add_tensor("x", DType::f8_e4m3, {10}, data).is_ok());
  std::vector<uint8_t> ok(12);
  EXPECT_TRUE(w.add_tensor("x", DType::f32, {3}, ok).is_ok());
  EXPECT_FALSE(w.add_tensor("x", DType::f32, {3}, ok).is_ok());
}

TEST(Gguf, GgmlTypeTable) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q8_0,
                  DType::q2_k, DType::q3_k, DType::q4_k, DType::q5_k, DType::q6_k, DType::i8, DType::i32}) {
    auto id = ggml_from_dtype(t);
    ASSERT_TRUE(id.is_ok());
    EXPECT_EQ(*dtype_from_ggml(*id), t);
  }
  EXPECT_EQ(ggml_type_name(12), "Q4_K");
  EXPECT_EQ(*ggml_from_dtype(DType::bf16), 30u);
}
