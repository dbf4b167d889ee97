// The C API that tfring/_process/runtime.py calls through ctypes: lifetime and process layout.
// Collectives do not go through here; they are TensorFlow ops (tf/kernels.cc).
#include <cstdint>
#include <cstring>
#include <string>

#include "tfring/kernels/backends/mpi/mpi_context.h"
#include "tfring/kernels/common/build_config.h"
#include "tfring/kernels/common/logging.h"
#include "tfring/kernels/common/status.h"
#include "tfring/kernels/runtime/flight_dump.h"
#include "tfring/kernels/runtime/global_runtime.h"

#if TFRING_WITH_NCCL
#include <cuda_runtime_api.h>

#include "tfring/kernels/backends/cuda/cuda_runtime_library.h"
#include "tfring/kernels/backends/nccl/nccl_library.h"
#endif

using tfring::GlobalRuntime;

namespace {
int Layout(int tfring::ProcessLayout::*field) {
  if (!GlobalRuntime::Get().initialized()) return -1;
  return GlobalRuntime::Get().layout().*field;
}

// The NCCL and CUDA runtime tfring's GPU calls go to, loaded now if not yet, as JSON
// (tfring/_process/gpu_libraries.py reads it): each library's LoadedLibraryReport, the
// reshaping calls found, the versions NCCL and the CUDA runtime give when called by name, and
// how many GPUs tfring's CUDA runtime sees (or its error).
std::string GpuLibrariesJson() {
#if TFRING_WITH_NCCL
  const tfring::NcclReshapeCalls& calls = tfring::ReshapeCalls();
  const tfring::LoadedLibraryReport& nccl = tfring::NcclReport();
  const tfring::LoadedLibraryReport& cuda = tfring::CudaRuntimeReport();
  std::string json = "{\"built\": true, \"nccl\": " + nccl.Json() +
                     ", \"revoke\": " + (calls.revoke ? "true" : "false") +
                     ", \"shrink\": " + (calls.shrink ? "true" : "false") +
                     ", \"grow\": " + (calls.grow ? "true" : "false") +
                     ", \"cuda_runtime\": " + cuda.Json();
  // Asked by name, as every GPU call of tfring's is: the answers come from the table's
  // libraries only if the names are bound to tfring's own definitions.
  int nccl_answer = 0, cuda_answer = 0;
  if (nccl.error.empty()) ncclGetVersion(&nccl_answer);
  if (cuda.error.empty()) cudaRuntimeGetVersion(&cuda_answer);
  json += ", \"versions_by_call\": [" + std::to_string(nccl_answer) + ", " +
          std::to_string(cuda_answer) + "]";
  int devices = -1;
  const cudaError_t rc = cuda.error.empty() ? cudaGetDeviceCount(&devices) : cudaSuccess;
  json += ", \"devices\": " + std::to_string(rc == cudaSuccess ? devices : -1);
  if (rc != cudaSuccess) {
    json += ", \"devices_error\": " +
            tfring::JsonQuoted(std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc));
  }
  return json + "}";
#else
  return "{\"built\": false}";
#endif
}
}  // namespace

extern "C" {

// Returns 0 on success, else the StatusCode, with the message copied into `error`.
// `world_kind`: 0 every process of MPI_COMM_WORLD; 1 the `num_ranks` world ranks `ranks`;
// 2 the communicator whose Fortran handle is `fortran_handle` (mpi4py's comm.py2f()).
int tfring_init(int world_kind, const int32_t* ranks, int num_ranks, int64_t fortran_handle,
                char* error, int error_len) {
  tfring::WorldChoice world;
  world.kind = static_cast<tfring::WorldChoice::Kind>(world_kind);
  if (world_kind == 1) world.ranks.assign(ranks, ranks + num_ranks);
  world.fortran_handle = fortran_handle;
  tfring::Status s = world_kind < 0 || world_kind > 2
                         ? tfring::Status::InvalidArgument("bad world kind")
                         : GlobalRuntime::Get().Init(world);
  if (!s.ok() && error_len > 0) {
    std::strncpy(error, s.message().c_str(), error_len - 1);
    error[error_len - 1] = '\0';
  }
  return static_cast<int>(s.code());
}

void tfring_shutdown() { GlobalRuntime::Get().Shutdown(); }
void tfring_shutdown_for_reset() { GlobalRuntime::Get().Shutdown(/*for_reset=*/true); }
void tfring_atexit() { GlobalRuntime::Get().AtExit(); }
void tfring_atexit_within(double seconds, int finalize_anyway, int exit_status,
                          const char* message) {
  GlobalRuntime::Get().AtExitWithin(seconds, finalize_anyway != 0, exit_status, message);
}
int tfring_is_initialized() { return GlobalRuntime::Get().initialized() ? 1 : 0; }
int tfring_peer_lost() { return GlobalRuntime::Get().peer_lost() ? 1 : 0; }
int tfring_stopped_on_failure() { return GlobalRuntime::Get().stopped_on_failure() ? 1 : 0; }
double tfring_peer_timeout_seconds() { return GlobalRuntime::Get().peer_timeout_seconds(); }
int tfring_rank() { return Layout(&tfring::ProcessLayout::rank); }
int tfring_size() { return Layout(&tfring::ProcessLayout::size); }
int tfring_local_rank() { return Layout(&tfring::ProcessLayout::local_rank); }
int tfring_local_size() { return Layout(&tfring::ProcessLayout::local_size); }
int tfring_cross_rank() { return Layout(&tfring::ProcessLayout::cross_rank); }
int tfring_cross_size() { return Layout(&tfring::ProcessLayout::cross_size); }
int tfring_mpi_threads_supported() {
  return GlobalRuntime::Get().mpi_threads_supported() ? 1 : 0;
}
// The descriptor Python's faulthandler writes every thread's stack into on SIGUSR1
// (runtime/flight_dump.h). Returns 1 when the runtime serves SIGUSR1 (its handler is in
// place for faulthandler to chain to), else 0.
int tfring_set_flight_stacks_fd(int fd) { return tfring::FlightDump::Get().SetStacksFd(fd); }
// Writes this rank's flight recorder now; its path in `path`. Returns 0 on success, else the
// StatusCode, with the message copied into `error`.
int tfring_dump_flight_recorder(const char* reason, char* path, int path_len, char* error,
                                int error_len) {
  std::string written;
  tfring::Status s = tfring::FlightDump::Get().Dump(reason, &written);
  const std::string& out = s.ok() ? written : s.message();
  char* into = s.ok() ? path : error;
  const int len = s.ok() ? path_len : error_len;
  if (len > 0) {
    std::strncpy(into, out.c_str(), len - 1);
    into[len - 1] = '\0';
  }
  return static_cast<int>(s.code());
}

// Returns 0 on success, else the StatusCode, with the message copied into `error`.
int tfring_start_timeline(const char* path, int mark_cycles, char* error, int error_len) {
  tfring::Status s = GlobalRuntime::Get().StartTimeline(path, mark_cycles != 0);
  if (!s.ok() && error_len > 0) {
    std::strncpy(error, s.message().c_str(), error_len - 1);
    error[error_len - 1] = '\0';
  }
  return static_cast<int>(s.code());
}

void tfring_stop_timeline() { GlobalRuntime::Get().StopTimeline(); }

// The fusion threshold (bytes) and cycle time (ms) in force; 0 before init.
int tfring_tuned_params(int64_t* fusion_threshold_bytes, double* cycle_time_ms) {
  tfring::TunedParams p;
  if (!GlobalRuntime::Get().TunedParamsNow(&p)) return 0;
  *fusion_threshold_bytes = p.fusion_threshold_bytes;
  *cycle_time_ms = p.cycle_time_ms;
  return 1;
}

// The straggler report (core/straggler_watch.h) as JSON, copied into `out` when it fits.
// Returns its length (plus one: the terminating NUL) so that a caller can ask again with a
// buffer that large; 1 for "" (no exchange yet); -1 before init.
int tfring_straggler_report(char* out, int out_len) {
  std::string json;
  if (!GlobalRuntime::Get().StragglerReport(&json)) return -1;
  const int needed = static_cast<int>(json.size()) + 1;
  if (out_len >= needed) std::memcpy(out, json.c_str(), needed);
  return needed;
}

// GpuLibrariesJson, copied into `out` when it fits; returns its length plus one (the NUL),
// so that a caller can ask again with a buffer that large.
int tfring_gpu_libraries(char* out, int out_len) {
  const std::string json = GpuLibrariesJson();
  const int needed = static_cast<int>(json.size()) + 1;
  if (out_len >= needed) std::memcpy(out, json.c_str(), needed);
  return needed;
}

// Logs at debug level which NCCL and CUDA runtime tfring's GPU calls go to (init() calls it
// once the log level is set; the libraries are loaded before, by its check).
void tfring_log_gpu_libraries() {
#if TFRING_WITH_NCCL
  const tfring::NcclReshapeCalls& calls = tfring::ReshapeCalls();
  const tfring::LoadedLibraryReport& nccl = tfring::NcclReport();
  const tfring::LoadedLibraryReport& cuda = tfring::CudaRuntimeReport();
  TFRING_LOG(kDebug) << "NCCL: " << (nccl.error.empty() ? nccl.file : nccl.error) << " (version "
                     << nccl.version << "); revoke " << (calls.revoke ? "yes" : "no")
                     << ", shrink " << (calls.shrink ? "yes" : "no") << ", grow "
                     << (calls.grow ? "yes" : "no");
  TFRING_LOG(kDebug) << "CUDA runtime: " << (cuda.error.empty() ? cuda.file : cuda.error)
                     << " (version " << cuda.version << ")";
#endif
}

int tfring_mpi_built() { return 1; }
int tfring_nccl_built() { return TFRING_WITH_NCCL ? 1 : 0; }

// Copies the MPI library's version line into `out`.
void tfring_mpi_version(char* out, int out_len) {
  const std::string v = tfring::MpiContext::LibraryVersion();
  std::strncpy(out, v.c_str(), out_len - 1);
  out[out_len - 1] = '\0';
}

// The message of the error for `what` asked before init() (common/status.h,
// NotInitialized), so that Python's ValueError says it in the same words.
void tfring_not_initialized_message(const char* what, char* out, int out_len) {
  const std::string m = tfring::NotInitialized(what).message();
  std::strncpy(out, m.c_str(), out_len - 1);
  out[out_len - 1] = '\0';
}

// tfring.elastic's renumbering of the ranks (GlobalRuntime::process_set_world).
void tfring_set_process_set_world(int64_t world) {
  GlobalRuntime::Get().set_process_set_world(world);
}

// The message of the error for a process set made before the ranks were renumbered
// (core/message.h, StaleProcessSetMessage), so that Python's ValueError says it in the same
// words.
void tfring_stale_process_set_message(const int32_t* ranks, int num_ranks, const char* what,
                                      char* out, int out_len) {
  const std::string m = tfring::StaleProcessSetMessage(
      std::vector<int32_t>(ranks, ranks + num_ranks), what);
  std::strncpy(out, m.c_str(), out_len - 1);
  out[out_len - 1] = '\0';
}

}  // extern "C"
