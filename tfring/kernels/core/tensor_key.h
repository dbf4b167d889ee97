// Tensor keys: the strings the runtime keys, caches and names a tensor by, made and read in
// this file only. A key is a tensor's name (the user's, or an unnamed eager call's
// "unnamed.<n>"), a grouped op's tensor index after it (".<i>"), and, for a process set
// other than all ranks, the set (" [process set 0, 2]"). Errors and the timeline show keys
// as they are.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tfring {

// The key of tensor `name` in `process_set` (empty: all ranks, whose key is the name).
std::string TensorKey(const std::string& name, const std::vector<int32_t>& process_set);
// A unit's (grouped op's) tensor `index`, as messages name it: "grad.3", or
// "grad.3 [process set 0, 2]" for the unit "grad [process set 0, 2]".
std::string PartName(const std::string& unit_key, size_t index);
// The call a key belongs to: the parts of a grouped op ("x.0", "x.1"; "unnamed.5.0") share
// one ("x", "unnamed.5"); the set stays.
std::string CallOf(const std::string& key);

// The name of the `n`th unnamed eager call of a process set: "unnamed.<n>".
std::string UnnamedName(int64_t n);
// n of a key made from UnnamedName (a part or a set after it allowed); -1 for any other.
int64_t UnnamedNumber(const std::string& key);
// Whether `key` is an unnamed call's own, of one tensor: "unnamed.<n>" and perhaps a set,
// not a grouped op's part. Read in place: this runs for every tensor the runtime takes.
bool IsSingleUnnamedKey(const std::string& key);
// The response cache's key for unnamed eager calls made at `call_site` in `process_set`:
// such a call's own name is new every time, its call site is not.
std::string UnnamedCacheKey(const std::string& call_site, const std::vector<int32_t>& process_set);

}  // namespace tfring
