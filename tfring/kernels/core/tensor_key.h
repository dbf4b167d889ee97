// A tensor's key, typed: its process set, which op it belongs to (the name the user gave or
// one derived from the graph, or an unnamed eager call's number), which of the op's tensors
// it is, and where an unnamed call was made. The runtime reads these fields; it keys maps,
// the response cache, errors and the timeline by one string made from them by KeyString,
// here only, and never parses that string back.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tfring {

// A name that copies share (a reference count, not a new string): a kernel queues its
// tensors under the same names step after step, and a request is copied on its way.
class SharedName {
 public:
  SharedName() = default;
  SharedName(std::string s)  // NOLINT: a name is written as a string
      : s_(s.empty() ? nullptr : std::make_shared<const std::string>(std::move(s))) {}
  SharedName(const char* s) : SharedName(std::string(s)) {}  // NOLINT
  const std::string& str() const { return s_ ? *s_ : Empty(); }
  operator const std::string&() const { return str(); }  // NOLINT
  size_t size() const { return str().size(); }
  bool empty() const { return str().empty(); }
  bool operator==(const SharedName& o) const { return s_ == o.s_ || str() == o.str(); }
  bool operator!=(const SharedName& o) const { return !(*this == o); }

 private:
  static const std::string& Empty();
  std::shared_ptr<const std::string> s_;
};

struct TensorKey {
  // The process set: its members' global ranks, ascending; empty for all ranks. Positions
  // in a Request's splits and in a Response's first_dims/all_splits are positions in it.
  std::vector<int32_t> set;
  SharedName name;       // the op's name; empty for an unnamed eager call
  int64_t unnamed = -1;  // an unnamed eager call's number in its set (unnamed_names.h)
  int32_t part = -1;     // a grouped op's tensor index; -1: the op's only tensor, or its unit
  // An unnamed eager call's request: where the user's code made it ("train.py:42"). Not
  // part of the key's identity (ranks pair unnamed calls by their numbers; the negotiator
  // compares call sites to say which calls drifted); a response carries none.
  std::string call_site;

  // Whether two keys belong to the same op (a grouped op's tensors do).
  bool SameOp(const TensorKey& o) const {
    return unnamed == o.unnamed && name == o.name && set == o.set;
  }
  bool operator==(const TensorKey& o) const { return part == o.part && SameOp(o); }
  bool operator!=(const TensorKey& o) const { return !(*this == o); }
};

// The key of the op named `name`, in all ranks' set.
inline TensorKey NamedKey(SharedName name) {
  TensorKey key;
  key.name = std::move(name);
  return key;
}

// The key of a grouped op's tensor `index`: the op's key with the part set.
inline TensorKey PartKey(TensorKey op, int32_t index) {
  op.part = index;
  return op;
}

// The string of a key: "grad", "grad.3" (a grouped op's tensor 3), "unnamed.12" (the 12th
// unnamed call), "grad [process set 0, 2]".
std::string KeyString(const TensorKey& key);

// The response cache's key for unnamed eager calls made at `call_site` in process set `set`:
// such a call's own key is new every time, its call site is not.
std::string UnnamedCacheKey(const std::string& call_site, const std::vector<int32_t>& set);

}  // namespace tfring
