#include "tfring/kernels/backends/cuda/cuda_runtime_library.h"

#include <cstdlib>
#include <memory>

#include "tfring/kernels/backends/cuda/cuda_runtime_calls.h"
#include "tfring/kernels/common/logging.h"

#ifndef TFRING_CUDA_RUNTIME_FILE
#define TFRING_CUDA_RUNTIME_FILE ""
#endif

// The name a call has in the library: cuda_runtime_api.h maps some names to versioned ones
// by macro (cudaGetDeviceProperties -> cudaGetDeviceProperties_v2 in CUDA 12), and the table
// must look up what the header's callers would link against.
#define TFRING_CUDA_NAME_OF(name) TFRING_CUDA_STRINGIFY(name)
#define TFRING_CUDA_STRINGIFY(name) #name

namespace tfring {
namespace {

struct Table {
#define TFRING_CUDA_ENTRY(ret, name, params, args) ret(*name) params = nullptr;
  TFRING_CUDA_RUNTIME_CALLS(TFRING_CUDA_ENTRY)
#undef TFRING_CUDA_ENTRY
};

struct Runtime {
  std::unique_ptr<SharedLibrary> library;  // kept open for the life of the process
  Table table;
  LoadedLibraryReport report;
};

void Load(Runtime* r) {
  const char* setting = std::getenv("TFRING_CUDA_RUNTIME_LIBRARY");
  r->report.chosen = setting != nullptr && *setting != '\0' ? setting : TFRING_CUDA_RUNTIME_FILE;
  std::string error;
  auto library = SharedLibrary::Open(r->report.chosen, "the CUDA runtime", &error);
  if (library == nullptr) {
    r->report.error = error;
    return;
  }
  Table table;
  std::string missing, stray;
#define TFRING_CUDA_FIND(ret, name, params, args) \
  library->FindInto(TFRING_CUDA_NAME_OF(name), &table.name, &missing, &stray);
  TFRING_CUDA_RUNTIME_CALLS(TFRING_CUDA_FIND)
#undef TFRING_CUDA_FIND
  r->report.file = library->file();
  r->report.stray = stray;
  if (!missing.empty()) {
    r->report.error = "tfring could not use the CUDA runtime " + library->file() +
                      ": it lacks " + missing;
    return;
  }
  r->table = table;
  r->library = std::move(library);
  r->table.cudaRuntimeGetVersion(&r->report.version);
  TFRING_LOG(kDebug) << "CUDA runtime: " << r->report.file << " (version "
                     << r->report.version << ")";
}

const Runtime& TheRuntime() {
  static const Runtime* runtime = [] {
    auto* r = new Runtime();  // never destroyed: CUDA is called at exit
    Load(r);
    return r;
  }();
  return *runtime;
}

}  // namespace

const LoadedLibraryReport& CudaRuntimeReport() { return TheRuntime().report; }

}  // namespace tfring

// tfring's definitions of the CUDA runtime's names: hidden, so that tfring's own calls bind
// to them when its library is linked (no other library can stand in between) and no other
// library in the process binds to them.
#define TFRING_CUDA_FORWARD(ret, name, params, args)                            \
  extern "C" __attribute__((visibility("hidden"))) ret name params {          \
    const tfring::Runtime& r = tfring::TheRuntime();                           \
    if (r.table.name == nullptr) return tfring::Unloaded<ret>(#name, r.report); \
    return r.table.name args;                                                  \
  }

namespace tfring {
namespace {

// What a call returns when the CUDA runtime could not be loaded: an error code, or for the
// calls that describe errors, the reason it could not.
template <typename Ret>
Ret Unloaded(const char* call, const LoadedLibraryReport& report);
template <>
cudaError_t Unloaded<cudaError_t>(const char*, const LoadedLibraryReport&) {
  return cudaErrorSharedObjectInitFailed;
}
template <>
const char* Unloaded<const char*>(const char* call, const LoadedLibraryReport& report) {
  if (std::string(call) == "cudaGetErrorName") return "cudaErrorSharedObjectInitFailed";
  return report.error.c_str();
}

}  // namespace
}  // namespace tfring

TFRING_CUDA_RUNTIME_CALLS(TFRING_CUDA_FORWARD)
