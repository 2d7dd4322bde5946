// The KV block pool of the server's scheduler: the context of every running sequence is counted
// in fixed-size blocks of tokens taken from one pool, so admission (is there room for this prompt
// chunk?) and preemption (a decode step needs a block and none is free) are decided by free
// blocks. Today each sequence's K/V live in its own contiguous KvCache and a BlockTable is the
// accounting of the blocks it holds; a paged KvCache will index physical blocks by these ids.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lithe::serve {

class BlockAllocator {
 public:
  BlockAllocator(int64_t num_blocks, int64_t block_size);

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return static_cast<int64_t>(total_); }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  // Blocks that hold `tokens` tokens.
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Takes n blocks, appending their ids to `table`; false (and nothing taken) when fewer are free.
  bool allocate(int64_t n, std::vector<int32_t>& table);
  // Returns every block of `table` to the pool and clears it.
  void release(std::vector<int32_t>& table);

 private:
  int64_t block_size_;
  size_t total_;
  std::vector<int32_t> free_;  // a stack: recently freed blocks are reused first
};

}  // namespace lithe::serve
