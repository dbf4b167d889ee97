// Writer and Reader: the byte encoding of the control plane's messages (message.cc) and of
// the straggler watch's windows (straggler_watch.cc). Fixed-size values are copied as the
// host lays them out, which is safe because every rank of a job runs the same build (each
// message starts with a version byte, message.cc). Reader's every Get checks what is left
// first, so a damaged message is an error, never a read past its end.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tfring {

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(&out_[at], &v, sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  // A count, then the values (tensor dimensions, splits: int64; ranks: int32).
  template <typename T>
  void PutVector(const std::vector<T>& v) {
    Put<uint32_t>(static_cast<uint32_t>(v.size()));
    for (T x : v) Put<T>(x);
  }
  void PutInts(const std::vector<int64_t>& v) { PutVector(v); }
  void PutRanks(const std::vector<int32_t>& v) { PutVector(v); }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <typename T>
  bool Get(T* v) {
    if (pos_ + sizeof(T) > in_.size()) return false;
    std::memcpy(v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetString(std::string* s) {
    uint32_t n;
    if (!Get(&n) || pos_ + n > in_.size()) return false;
    s->assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  template <typename T>
  bool GetVector(std::vector<T>* v) {
    uint32_t n;
    // The count is checked against what is left before anything is allocated: a damaged
    // count must be an error, not a request for gigabytes.
    if (!Get(&n) || pos_ + static_cast<size_t>(n) * sizeof(T) > in_.size()) return false;
    v->resize(n);
    for (auto& x : *v)
      if (!Get(&x)) return false;
    return true;
  }
  bool GetInts(std::vector<int64_t>* v) { return GetVector(v); }
  bool GetRanks(std::vector<int32_t>* v) { return GetVector(v); }
  // A one-byte flag: 0 or 1, anything else is damage.
  bool GetBool(bool* b) {
    uint8_t v;
    if (!Get(&v) || v > 1) return false;
    *b = v == 1;
    return true;
  }
  bool done() const { return pos_ == in_.size(); }
  // Whether `n` more bytes are left.
  bool Fits(size_t n) const { return pos_ + n <= in_.size(); }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

}  // namespace tfring
