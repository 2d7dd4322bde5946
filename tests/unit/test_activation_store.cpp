// Where the calibration activations wait between blocks (quantize/activation_store.h): the
// placement names, auto's choice on made-up free memory (every branch), the refusals of forced
// placements that do not fit, the unlinked spill file, the store's window moves on the cpu, and
// the free-memory and pinned-buffer helpers it uses (core/memory.h).
// compress_model with each placement is compared in test_compress_pipeline.cpp.
#include <gtest/gtest.h>

#include "test_tmp.h"

#include <filesystem>
#include <numeric>

#include "lithe/core/memory.h"
#include "lithe/quantize/activation_store.h"

using namespace lithe;
using namespace lithe::compress;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

// A fresh empty directory for spill files.
std::string spill_dir(const std::string& name) {
  const fs::path d = lithe_test::tmp_path(name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

bool empty_dir(const std::string& d) { return fs::is_empty(d); }

ActivationPlacement choose(ActivationPlacement asked, uint64_t x, Device dev, uint64_t dev_free, uint64_t host_free) {
  auto p = choose_activation_placement(asked, x, dev, dev_free, host_free);
  EXPECT_TRUE(p.is_ok()) << p.status().to_string();
  return p.is_ok() ? *p : ActivationPlacement::automatic;
}

TEST(ActivationPlacement, NamesAndBadName) {
  for (const char* n : {"auto", "device", "host", "disk"}) {
    auto p = parse_activation_placement(n);
    ASSERT_TRUE(p.is_ok()) << n;
    EXPECT_STREQ(activation_placement_name(*p), n);
  }
  auto bad = parse_activation_placement("bogus");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::invalid_argument);
  for (const char* want : {"'bogus'", "auto", "device", "host", "disk"})
    EXPECT_NE(bad.status().message().find(want), std::string::npos) << bad.status().message();
}

TEST(ActivationPlacement, AutoOnMadeUpFreeMemory) {
  using P = ActivationPlacement;
  EXPECT_EQ(activation_reserve(80 * kGiB), 10 * kGiB);  // an eighth
  EXPECT_EQ(activation_reserve(2 * kGiB), kGiB);        // at least 1 GiB
  // cuda: the device while X plus the reserve fits there, then the host, then the disk.
  EXPECT_EQ(choose(P::automatic, 4 * kGiB, Device::cuda, 80 * kGiB, 64 * kGiB), P::device);
  EXPECT_EQ(choose(P::automatic, 70 * kGiB, Device::cuda, 80 * kGiB, 64 * kGiB), P::device);  // 80 - 10 exactly
  EXPECT_EQ(choose(P::automatic, 70 * kGiB + 1, Device::cuda, 80 * kGiB, 100 * kGiB), P::host);
  EXPECT_EQ(choose(P::automatic, 20 * kGiB, Device::cuda, 16 * kGiB, 64 * kGiB), P::host);
  EXPECT_EQ(choose(P::automatic, 60 * kGiB, Device::cuda, 16 * kGiB, 64 * kGiB), P::disk);
  EXPECT_EQ(choose(P::automatic, 1, Device::cuda, kGiB / 2, kGiB / 2), P::disk);  // less free than the reserve
  // cpu: the device is host memory, so resident (in place) or the disk, never host.
  EXPECT_EQ(choose(P::automatic, 4 * kGiB, Device::cpu, 32 * kGiB, 32 * kGiB), P::device);
  EXPECT_EQ(choose(P::automatic, 30 * kGiB, Device::cpu, 32 * kGiB, 32 * kGiB), P::disk);
  // Forced placements that fit (even into the reserve), and disk whatever the memory.
  EXPECT_EQ(choose(P::device, 79 * kGiB, Device::cuda, 80 * kGiB, 0), P::device);
  EXPECT_EQ(choose(P::host, 60 * kGiB, Device::cuda, 0, 64 * kGiB), P::host);
  EXPECT_EQ(choose(P::host, 1, Device::cpu, kGiB, kGiB), P::host);
  EXPECT_EQ(choose(P::disk, 500 * kGiB, Device::cuda, 80 * kGiB, 64 * kGiB), P::disk);
}

TEST(ActivationPlacement, ForcedPlacementThatDoesNotFit) {
  auto dev = choose_activation_placement(ActivationPlacement::device, 5000, Device::cuda, 4000, 9000);
  ASSERT_FALSE(dev.is_ok());
  EXPECT_EQ(dev.status().code(), StatusCode::out_of_memory);
  for (const char* want : {"5000 bytes", "4000 bytes", "cuda", "--activations host or disk"})
    EXPECT_NE(dev.status().message().find(want), std::string::npos) << dev.status().message();
  auto cpu = choose_activation_placement(ActivationPlacement::device, 5000, Device::cpu, 4000, 4000);
  ASSERT_FALSE(cpu.is_ok());
  EXPECT_NE(cpu.status().message().find("--activations disk"), std::string::npos) << cpu.status().message();
  auto host = choose_activation_placement(ActivationPlacement::host, 5000, Device::cuda, 9000, 3000);
  ASSERT_FALSE(host.is_ok());
  for (const char* want : {"5000 bytes", "3000 bytes", "--activations disk"})
    EXPECT_NE(host.status().message().find(want), std::string::npos) << host.status().message();
}

TEST(SpillFile, UnlinkedReadWriteAndFullDisk) {
  const std::string dir = spill_dir("spill");
  {
    auto f = SpillFile::create(dir, 4096 + 100);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    EXPECT_TRUE(empty_dir(dir));  // unlinked at once: nothing to clean up, however the run ends
    std::vector<uint8_t> a(3000), b(3000);
    std::iota(a.begin(), a.end(), uint8_t{7});
    ASSERT_TRUE(f->write(1196, a.data(), a.size()).is_ok());
    ASSERT_TRUE(f->read(1196, b.data(), b.size()).is_ok());
    EXPECT_EQ(a, b);
    SpillFile moved = std::move(*f);  // the descriptor moves with it
    std::fill(b.begin(), b.end(), 0);
    ASSERT_TRUE(moved.read(1196, b.data(), b.size()).is_ok());
    EXPECT_EQ(a, b);
  }
  EXPECT_TRUE(empty_dir(dir));
  // More than the file system has: refused up front, naming the bytes and the directory.
  auto huge = SpillFile::create(dir, uint64_t{1} << 62);
  ASSERT_FALSE(huge.is_ok());
  EXPECT_EQ(huge.status().code(), StatusCode::out_of_memory);
  EXPECT_NE(huge.status().message().find(std::to_string(uint64_t{1} << 62) + " bytes"), std::string::npos)
      << huge.status().message();
  EXPECT_NE(huge.status().message().find(dir), std::string::npos) << huge.status().message();
  EXPECT_TRUE(empty_dir(dir));
  const Status full = check_spill_space("/spill", 2000, 1500);
  EXPECT_EQ(full.code(), StatusCode::out_of_memory);
  for (const char* want : {"2000 bytes", "'/spill'", "1500 bytes"})
    EXPECT_NE(full.message().find(want), std::string::npos) << full.message();
  EXPECT_TRUE(check_spill_space("/spill", 1500, 1500).is_ok());
  EXPECT_FALSE(SpillFile::create(dir + "/missing", 10).is_ok());
}

TEST(Memory, FreeHostMemoryAndPinnedBuffers) {
  auto host = free_memory(Device::cpu);
  ASSERT_TRUE(host.is_ok()) << host.status().to_string();
  EXPECT_GT(*host, 0u);
  if (!cuda_available()) {
    EXPECT_FALSE(free_memory(Device::cuda).is_ok());
  }
  auto b = alloc_host_pinned(1000);  // page-locked with a GPU, plain host memory without
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_EQ((*b)->device(), Device::cpu);
  EXPECT_EQ((*b)->size(), 1000u);
  EXPECT_TRUE((*b)->writable());
}

// Windows of 3, 5 and 2 rows of width 4 through each placement on the cpu: what is stored comes
// back; the device placement works on X's own rows (no copies) and the others on the scratch.
TEST(ActivationStore, WindowsMoveThroughEveryPlacement) {
  auto backend = make_cpu_backend();
  auto solver = make_cpu_solver_backend();
  const std::vector<int64_t> rows = {3, 5, 2};
  const std::string dir = spill_dir("store");
  for (ActivationPlacement p : {ActivationPlacement::device, ActivationPlacement::host, ActivationPlacement::disk}) {
    SCOPED_TRACE(activation_placement_name(p));
    auto s = ActivationStore::create(p, *backend, *solver, rows, 4, dir);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    ActivationStore& x = **s;
    EXPECT_EQ(x.placement(), p);
    EXPECT_EQ(x.bytes(), 10u * 4u * sizeof(float));
    Tensor scratch = *Tensor::empty(DType::f32, {5, 4});
    for (size_t i = 0; i < rows.size(); ++i) {
      auto t = x.target(i, scratch);
      ASSERT_TRUE(t.is_ok());
      EXPECT_EQ(t->dim(0), rows[i]);
      EXPECT_EQ(t->data() == scratch.data(), p != ActivationPlacement::device);
      for (int64_t k = 0; k < t->numel(); ++k) t->data_as<float>()[k] = static_cast<float>(100 * i + k);
      ASSERT_TRUE(x.store(i, *t).is_ok());
    }
    for (size_t i : {2u, 0u, 1u}) {
      Tensor dst = *Tensor::empty(DType::f32, {5, 4});
      ASSERT_TRUE(x.load(i, dst).is_ok());
      for (int64_t k = 0; k < rows[i] * 4; ++k) ASSERT_EQ(dst.data_as<float>()[k], static_cast<float>(100 * i + k));
      EXPECT_EQ(dst.data_as<float>()[rows[i] * 4], 0.0f) << "rows past the window are left alone";
    }
    auto small = Tensor::empty(DType::f32, {4, 4});
    EXPECT_FALSE(x.load(1, *small).is_ok());  // window 1 has 5 rows
    EXPECT_TRUE(empty_dir(dir));
  }
}

}  // namespace
