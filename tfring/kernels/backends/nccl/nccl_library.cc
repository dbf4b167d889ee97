#include "tfring/kernels/backends/nccl/nccl_library.h"

#include <cstdlib>
#include <memory>
#include <type_traits>

#include "tfring/kernels/backends/nccl/nccl_calls.h"
#include "tfring/kernels/common/logging.h"

#ifndef TFRING_NCCL_FILE
#define TFRING_NCCL_FILE ""
#endif

// The name a call has in the library, after the header's macros (none rename NCCL's calls
// today; the CUDA runtime's do).
#define TFRING_NCCL_NAME_OF(name) TFRING_NCCL_STRINGIFY(name)
#define TFRING_NCCL_STRINGIFY(name) #name

namespace tfring {
namespace {

// The first releases with each reshaping call as documented (earlier ones may have had the
// symbol under development).
constexpr int kRevokeSince = 22807;  // 2.28.7
constexpr int kShrinkSince = 22703;  // 2.27.3
constexpr int kGrowSince = 22902;    // 2.29.2
constexpr const char* kSoname = "libnccl.so.2";

// The reshaping calls are looked up, never called by name: where the headers built against
// declare them, their types must be the ones NcclReshapeCalls holds.
#if NCCL_VERSION_CODE >= 22807  // kRevokeSince (the preprocessor knows no constexpr)
static_assert(std::is_same<decltype(&ncclCommRevoke), decltype(NcclReshapeCalls::revoke)>::value,
              "ncclCommRevoke's type");
#endif
#if NCCL_VERSION_CODE >= 22703  // kShrinkSince
static_assert(std::is_same<decltype(&ncclCommShrink), decltype(NcclReshapeCalls::shrink)>::value,
              "ncclCommShrink's type");
static_assert(NCCL_SHRINK_DEFAULT == kNcclShrinkDefault && NCCL_SHRINK_ABORT == kNcclShrinkAbort,
              "ncclCommShrink's flags");
#endif
#if NCCL_VERSION_CODE >= 22902  // kGrowSince
static_assert(std::is_same<decltype(&ncclCommGrow), decltype(NcclReshapeCalls::grow)>::value,
              "ncclCommGrow's type");
static_assert(std::is_same<decltype(&ncclCommGetUniqueId),
                           decltype(NcclReshapeCalls::unique_id_for_grow)>::value,
              "ncclCommGetUniqueId's type");
#endif

struct Table {
#define TFRING_NCCL_ENTRY(ret, name, params, args) ret(*name) params = nullptr;
  TFRING_NCCL_CALLS(TFRING_NCCL_ENTRY)
#undef TFRING_NCCL_ENTRY
};

struct Nccl {
  std::unique_ptr<SharedLibrary> library;  // kept open for the life of the process
  Table table;
  NcclReshapeCalls reshape;
  LoadedLibraryReport report;
};

std::string VersionText(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

int VersionOf(const SharedLibrary& library) {
  auto get = reinterpret_cast<ncclResult_t (*)(int*)>(library.Find("ncclGetVersion"));
  int version = 0;
  return get != nullptr && get(&version) == ncclSuccess ? version : 0;
}

template <typename Fn>
void FindSince(const SharedLibrary& library, const char* name, int version, int since, Fn* fn) {
  *fn = version >= since ? reinterpret_cast<Fn>(library.Find(name)) : nullptr;
}

// The library to use: an NCCL already in the process when it is the chosen file or the
// version tfring was built against, else the chosen file; null (and `error`) otherwise.
std::unique_ptr<SharedLibrary> Choose(const std::string& chosen, std::string* error) {
  std::unique_ptr<SharedLibrary> present = SharedLibrary::AlreadyLoaded(kSoname);
  if (present == nullptr || SharedLibrary::SameFile(present->file(), chosen)) {
    return present != nullptr ? std::move(present) : SharedLibrary::Open(chosen, "NCCL", error);
  }
  const int theirs = VersionOf(*present);
  if (theirs == NCCL_VERSION_CODE) {
    TFRING_LOG(kDebug) << "NCCL: " << present->file() << " was already loaded (NCCL "
                       << VersionText(theirs)
                       << ", the version tfring was built against): tfring uses it instead "
                       << "of " << chosen;
    return present;
  }
  *error = "two NCCLs in one process: " + present->file() + " (NCCL " + VersionText(theirs) +
           ") was loaded first, by another library (TensorFlow, say), and tfring was built "
           "against NCCL " + VersionText(NCCL_VERSION_CODE) + " (" + chosen +
           "). tfring does not load a second NCCL beside it: rebuild tfring against that "
           "NCCL (TFRING_NCCL_HOME), or set TFRING_NCCL_LIBRARY to it, or have the other "
           "library use " + chosen + " (docs/gpu.md, 'Which NCCL and CUDA runtime run')";
  return nullptr;
}

void Load(Nccl* n) {
  const char* setting = std::getenv("TFRING_NCCL_LIBRARY");
  n->report.chosen = setting != nullptr && *setting != '\0' ? setting : TFRING_NCCL_FILE;
  std::string error;
  std::unique_ptr<SharedLibrary> library = Choose(n->report.chosen, &error);
  if (library == nullptr) {
    n->report.error = error;
    return;
  }
  Table table;
  std::string missing, stray;
#define TFRING_NCCL_FIND(ret, name, params, args) \
  library->FindInto(TFRING_NCCL_NAME_OF(name), &table.name, &missing, &stray);
  TFRING_NCCL_CALLS(TFRING_NCCL_FIND)
#undef TFRING_NCCL_FIND
  n->report.file = library->file();
  n->report.stray = stray;
  if (!missing.empty()) {
    n->report.error = "tfring could not use NCCL " + library->file() + ": it lacks " + missing;
    return;
  }
  NcclReshapeCalls& c = n->reshape;
  if (table.ncclGetVersion(&c.version) == ncclSuccess) {
    FindSince(*library, "ncclCommRevoke", c.version, kRevokeSince, &c.revoke);
    FindSince(*library, "ncclCommShrink", c.version, kShrinkSince, &c.shrink);
    FindSince(*library, "ncclCommGetUniqueId", c.version, kGrowSince, &c.unique_id_for_grow);
    FindSince(*library, "ncclCommGrow", c.version, kGrowSince, &c.grow);
    if (c.unique_id_for_grow == nullptr) c.grow = nullptr;  // a grow needs both
  }
  n->report.version = c.version;
  n->table = table;
  n->library = std::move(library);
  TFRING_LOG(kDebug) << "NCCL: " << n->report.file << " (version " << VersionText(c.version)
                     << "); revoke " << (c.revoke ? "yes" : "no") << ", shrink "
                     << (c.shrink ? "yes" : "no") << ", grow " << (c.grow ? "yes" : "no");
}

const Nccl& TheNccl() {
  static const Nccl* nccl = [] {
    auto* n = new Nccl();  // never destroyed: NCCL is called at exit
    Load(n);
    return n;
  }();
  return *nccl;
}

// What a call returns when no NCCL could be loaded: an error code, or for the calls that
// describe errors, the reason none could.
template <typename Ret>
Ret Unloaded(const LoadedLibraryReport& report);
template <>
ncclResult_t Unloaded<ncclResult_t>(const LoadedLibraryReport&) {
  return ncclSystemError;
}
template <>
const char* Unloaded<const char*>(const LoadedLibraryReport& report) {
  return report.error.c_str();
}

}  // namespace

const LoadedLibraryReport& NcclReport() { return TheNccl().report; }
const NcclReshapeCalls& ReshapeCalls() { return TheNccl().reshape; }

}  // namespace tfring

// tfring's definitions of NCCL's names: hidden, as the CUDA runtime's are.
#define TFRING_NCCL_FORWARD(ret, name, params, args)                       \
  extern "C" __attribute__((visibility("hidden"))) ret name params {     \
    const tfring::Nccl& n = tfring::TheNccl();                            \
    if (n.table.name == nullptr) return tfring::Unloaded<ret>(n.report);  \
    return n.table.name args;                                             \
  }
TFRING_NCCL_CALLS(TFRING_NCCL_FORWARD)
