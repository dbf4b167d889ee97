#include "tfring/kernels/core/cycle_bits.h"

namespace tfring {

CycleBits::CycleBits(int num_slots, int num_ranks) {
  const size_t slot_words = (static_cast<size_t>(num_slots) + 63) / 64;
  const size_t rank_words = (static_cast<size_t>(num_ranks) + 63) / 64;
  ready_ = 1;
  valid_ = ready_ + slot_words;
  joined_ = valid_ + slot_words;
  running_ = joined_ + rank_words;
  words_.assign(running_ + rank_words, ~uint64_t{0});
  words_[0] = 0;
  for (size_t i = ready_; i < valid_; ++i) words_[i] = 0;
}

}  // namespace tfring
