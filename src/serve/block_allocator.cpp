#include "lithe/serve/block_allocator.h"

#include <algorithm>

namespace lithe::serve {

BlockAllocator::BlockAllocator(int64_t num_blocks, int64_t block_size)
    : block_size_(std::max<int64_t>(1, block_size)), total_(static_cast<size_t>(std::max<int64_t>(0, num_blocks))) {
  free_.reserve(total_);
  for (size_t i = total_; i-- > 0;) free_.push_back(static_cast<int32_t>(i));
}

bool BlockAllocator::allocate(int64_t n, std::vector<int32_t>& table) {
  if (n <= 0) return true;
  if (n > num_free()) return false;
  for (int64_t i = 0; i < n; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void BlockAllocator::release(std::vector<int32_t>& table) {
  free_.insert(free_.end(), table.rbegin(), table.rend());
  table.clear();
}

}  // namespace lithe::serve
