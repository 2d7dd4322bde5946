// Core runtime: Status/Result, dtype table, Tensor views, buffers (host, mmap), thread pool
// (coverage, concurrent callers, nesting), progress rendering, atomic file writes.
#include <gtest/gtest.h>

#include "test_tmp.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "lithe/core/buffer.h"
#include "lithe/core/file_util.h"
#include "lithe/core/progress.h"
#include "lithe/core/status.h"
#include "lithe/core/tensor.h"
#include "lithe/core/thread_pool.h"

using namespace lithe;

namespace {
Result<int> parse_positive(int x) {
  if (x <= 0) return error(StatusCode::invalid_argument, "value {} must be positive", x);
  return x;
}
Status twice(int x, int* out) {
  LITHE_ASSIGN(int v, parse_positive(x));
  *out = 2 * v;
  return Status::ok();
}
}  // namespace

TEST(Status, ResultAndMacros) {
  int out = 0;
  EXPECT_TRUE(twice(4, &out).is_ok());
  EXPECT_EQ(out, 8);
  Status s = twice(-3, &out);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_EQ(s.to_string(), "invalid argument: value -3 must be positive");
  EXPECT_EQ(s.with_context("flag --n").message(), "flag --n: value -3 must be positive");
  EXPECT_DEATH((void)parse_positive(0).value(), "value 0 must be positive");
}

TEST(DType, TableAndRowBytes) {
  EXPECT_EQ(dtype_traits(DType::q4_k).block_bytes, 144);
  EXPECT_EQ(dtype_traits(DType::q6_k).block_bytes, 210);
  EXPECT_EQ(*row_bytes(DType::q4_1, 576), 18 * 20);
  EXPECT_EQ(*row_bytes(DType::bf16, 3), 6);
  EXPECT_FALSE(row_bytes(DType::q4_k, 100).is_ok());
  EXPECT_NE(row_bytes(DType::q4_k, 100).status().message().find("256"), std::string::npos);
  EXPECT_EQ(dtype_from_name("Q8_0"), DType::q8_0);
  EXPECT_EQ(dtype_from_name("nope"), std::nullopt);
  for (int i = 0; i < kNumDTypes; ++i) EXPECT_EQ(dtype_from_name(dtype_name(static_cast<DType>(i))), static_cast<DType>(i));
}

TEST(Tensor, ViewsShapesAndErrors) {
  auto t = Tensor::empty(DType::f32, {3, 4});
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t->strides(), (std::vector<int64_t>{16, 4}));
  EXPECT_EQ(t->nbytes(), 48u);
  EXPECT_TRUE(t->is_contiguous());
  auto r = t->slice_rows(1, 3);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->shape(), (Shape{2, 4}));
  EXPECT_EQ(static_cast<const uint8_t*>(r->data()) - static_cast<const uint8_t*>(t->data()), 16);
  EXPECT_FALSE(t->slice_rows(2, 5).is_ok());
  EXPECT_FALSE(t->reshape({5, 2}).is_ok());
  EXPECT_EQ(t->reshape({12})->shape(), (Shape{12}));
  auto q = Tensor::empty(DType::q4_0, {2, 64});
  ASSERT_TRUE(q.is_ok());
  EXPECT_EQ(q->nbytes(), 2u * 2 * 18);
  EXPECT_EQ(q->strides(), (std::vector<int64_t>{36, 0}));
  EXPECT_FALSE(Tensor::empty(DType::q4_0, {2, 33}).is_ok());
  auto v = Tensor::empty(DType::q8_0, {96});
  ASSERT_TRUE(v->slice_rows(32, 64).is_ok());
  EXPECT_EQ(v->slice_rows(32, 64)->offset(), 34u);
  EXPECT_FALSE(v->slice_rows(5, 64).is_ok());  // not on a block boundary: an error, not an abort
  EXPECT_FALSE(Tensor::empty(DType::f32, {1 << 30, 1 << 30, 1 << 30}).is_ok());
  // Found by fuzz_gguf: a zero dimension must not hide an overflowing product of the others.
  EXPECT_FALSE(Tensor::view(*alloc_host(64), 0, DType::f32, {0, int64_t{1} << 40, int64_t{1} << 40}).is_ok());
  EXPECT_TRUE(Tensor::view(*alloc_host(64), 0, DType::f32, {0, 1 << 20}).is_ok());
  auto buf = alloc_host(10);
  EXPECT_FALSE(Tensor::view(*buf, 4, DType::f32, {2}).is_ok());
  EXPECT_TRUE(Tensor::view(*buf, 2, DType::f32, {2}).is_ok());
  EXPECT_EQ(t->describe(), "f32 [3, 4] cpu");
}

TEST(Buffer, MapFileAndDeviceWithoutCuda) {
  const std::string path = lithe_test::tmp_path("map.bin").string();
  const std::string text = "hello mapped world";
  ASSERT_TRUE(write_file_atomic(path, text).is_ok());
  auto m = map_file(path);
  ASSERT_TRUE(m.is_ok());
  EXPECT_EQ((*m)->size(), text.size());
  EXPECT_FALSE((*m)->writable());
  EXPECT_EQ(std::memcmp((*m)->data(), text.data(), text.size()), 0);
  EXPECT_EQ(map_file(path + ".missing").status().code(), StatusCode::not_found);
  EXPECT_FALSE(map_file(::testing::TempDir()).is_ok());  // a directory
  if (!cuda_available()) {
    auto d = alloc_device(100);
    EXPECT_FALSE(d.is_ok());
    EXPECT_NE(d.status().message().find("100 bytes"), std::string::npos);
  }
  EXPECT_EQ(*parse_device("cuda"), Device::cuda);
  EXPECT_FALSE(parse_device("tpu").is_ok());
}

TEST(FileUtil, AtomicWriteLeavesNoTempOnFailure) {
  namespace fs = std::filesystem;
  const fs::path dir = lithe_test::tmp_path("atomic");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "out.txt").string();
  ASSERT_TRUE(write_file_atomic(path, std::string("first")).is_ok());
  Status st = write_file_atomic_with(path, [](std::FILE* f) -> Status {
    std::fputs("partial", f);
    return error(StatusCode::io_error, "simulated failure");
  });
  EXPECT_FALSE(st.is_ok());
  EXPECT_EQ(*read_text_file(path), "first");  // the old file is intact
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) entries += e.is_regular_file();
  EXPECT_EQ(entries, 1);  // the temporary file was removed
  EXPECT_FALSE(write_file_atomic((dir / "no/such/dir.txt").string(), std::string("x")).is_ok());
  EXPECT_FALSE(read_text_file(path, 3).is_ok());
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(4);
  for (int64_t n : {0, 1, 3, 17, 1000}) {
    for (int64_t grain : {1, 7, 5000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "n=" << n << " grain=" << grain;
    }
  }
}

TEST(ThreadPool, ConcurrentCallersAndNestingAreSafe) {
  ThreadPool pool(3);
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep)
        pool.parallel_for(100, 1, [&](int64_t b, int64_t e) {
          // nested: must run inline without deadlock
          pool.parallel_for(e - b, 1, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
        });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 50 * 100);
}

TEST(Progress, RendersForTtyAndLogs) {
  const std::string tty = Progress::render("quantize", 5, 10, 20.0, "layer 5/10", true);
  EXPECT_NE(tty.find("[############............]"), std::string::npos) << tty;
  EXPECT_NE(tty.find("5/10 (50%)"), std::string::npos);
  EXPECT_NE(tty.find("eta 20s"), std::string::npos);
  EXPECT_NE(tty.find("layer 5/10"), std::string::npos);
  const std::string log = Progress::render("quantize", 10, 10, 125.0, "", false);
  EXPECT_EQ(log.find('['), std::string::npos);
  EXPECT_NE(log.find("elapsed 2m05s eta 0s"), std::string::npos) << log;
  EXPECT_NE(Progress::render("scan", 42, 0, 1.0, "", false).find("42 elapsed"), std::string::npos);
  // A log (non-TTY) progress prints plain lines, never carriage returns.
  std::FILE* f = std::tmpfile();
  {
    Progress p("work", 100, f);
    for (int i = 0; i < 100; ++i) p.advance();
  }
  std::rewind(f);
  char buf[4096] = {};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const std::string out(buf, n);
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_NE(out.find("100/100 (100%)"), std::string::npos) << out;
  EXPECT_LE(std::count(out.begin(), out.end(), '\n'), 13);  // every 10% at most, plus the end
}
