// Every TFRING_* environment setting, read once (at init) in one place.
// Names and units mirror Horovod's HOROVOD_* settings. docs/settings.md has the same table.
//
//   variable                            unit     default   meaning
//   TFRING_FUSION_THRESHOLD             bytes    67108864  largest fusion buffer; 0 disables fusion
//   TFRING_FUSION_ALONE_BYTES           bytes    1048576   host tensors this large never share a
//                                                          fusion buffer: they go alone, without a
//                                                          copy (GPU tensors fuse up to the threshold)
//   TFRING_CYCLE_TIME                   ms       1         longest an idle background thread sleeps
//                                                          before it answers its peers again (an
//                                                          enqueue always wakes it at once; up to
//                                                          16 times that while eager callers run
//                                                          the cycles themselves)
//   TFRING_BATCH_GAP_US                 us       50        ops from a graph arrive one by one: wait
//                                                          until none has come for this long (at
//                                                          most TFRING_CYCLE_TIME), so that they
//                                                          are fused; eager ops never wait; 0: off
//   TFRING_CACHE_CAPACITY               entries  1024      response cache size; 0 disables it
//   TFRING_STALL_CHECK_TIME_SECONDS     s        60        warn about tensors some ranks lack; 0: off
//   TFRING_STALL_SHUTDOWN_TIME_SECONDS  s        600       fail every op and stop after a stall this long; 0: never
//   TFRING_PEER_TIMEOUT_SECONDS         s        30        a peer silent this long is lost
//   TFRING_LOG_LEVEL                    -        warning   trace, debug, info, warning, error
//   TFRING_TIMELINE                     path     (none)    rank 0 writes a Chrome-trace timeline there
//   TFRING_TIMELINE_MARK_CYCLES         0/1      0         mark each cycle that ran collectives
//   TFRING_AUTOTUNE                     0/1      0         tune fusion threshold and cycle time
//                                                          on the running job, then hold the best
//   TFRING_AUTOTUNE_LOG                 path     (none)    CSV of each trial and the choice
//   TFRING_AUTOTUNE_SAMPLE_SECONDS      s        1         shortest measurement sample
//   TFRING_AUTOTUNE_WARMUP_SAMPLES      samples  2         samples ignored at the start
//   TFRING_AUTOTUNE_SAMPLES_PER_TRIAL   samples  3         samples per candidate (median)
//   TFRING_GPU_OPERATIONS               -        nccl      GPU tensors: nccl, or mpi (staged through
//                                                          host memory); builds with NCCL only
//   TFRING_NCCL_LIBRARY                 path     (build's) the NCCL file GPU calls go to; read
//   TFRING_CUDA_RUNTIME_LIBRARY         path     (build's) at the first GPU call, not at init
//                                                          (nccl_library.h, cuda_runtime_library.h)
//   TFRING_SCHED_BATCH                  0/1      1         run the runtime's background thread under
//                                                          Linux's SCHED_BATCH policy (coordinator.h)
//   TFRING_HIERARCHICAL_ALLREDUCE       0/1      0         allreduce inside each host first, then
//                                                          across hosts (one rank per host): GPU:
//                                                          NCCL + MPI; host tensors: MPI only
//   TFRING_FLIGHT_RECORDER_ENTRIES      entries  1024      recent collectives each rank keeps for
//                                                          a dump (flight_recorder.h); 0: none
//   TFRING_FLIGHT_RECORDER_DIR          path     (a /tmp   where each rank writes its dump
//                                                folder)
//   TFRING_STRAGGLER_WINDOW_SECONDS     s        1         how often the ranks' waits go to rank 0
//                                                          for the straggler report
//                                                          (straggler_watch.h); 0: off
//   TFRING_STRAGGLER_REPORT_SECONDS     s        0         rank 0 logs the straggler report's line
//                                                          this often; 0: never
#pragma once

#include <cstdint>
#include <string>

#include "tfring/kernels/common/status.h"

namespace tfring {

enum class LogLevel : int { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4 };

struct Options {
  int64_t fusion_threshold_bytes = 64ll * 1024 * 1024;
  int64_t fusion_alone_bytes = 1024 * 1024;
  double cycle_time_ms = 1.0;
  double batch_gap_us = 50.0;
  int64_t cache_capacity = 1024;
  double stall_check_time_seconds = 60.0;
  double stall_shutdown_time_seconds = 600.0;
  // Ranks waiting on each other's missing calls (an unnamed eager call one rank made and
  // another did not) fail those calls after this long; 0: never (Negotiator::TakeDrifted).
  double drift_check_seconds = 2.0;
  double peer_timeout_seconds = 30.0;
  LogLevel log_level = LogLevel::kWarning;
  bool autotune = false;
  std::string autotune_log;
  double autotune_sample_seconds = 1.0;
  int64_t autotune_warmup_samples = 2;
  int64_t autotune_samples_per_trial = 3;
  std::string timeline_path;
  bool timeline_mark_cycles = false;
  bool gpu_operations_through_mpi = false;
  bool hierarchical_allreduce = false;
  // TFRING_NCCL_RESHAPE=off: after an elastic reset, NCCL's world communicator is made anew
  // rather than kept, shrunk or grown from the last runtime's (backends/nccl/nccl_kept_world.h).
  bool nccl_reshape_off = false;
  bool background_sched_batch = true;
  // The flight recorder (core/flight_recorder.h): how many recent collectives each rank
  // keeps (0: none), and the folder each rank's file goes to when it is dumped (filled in
  // by the global runtime when the environment leaves it empty).
  int64_t flight_recorder_entries = 1024;
  std::string flight_recorder_dir;
  // The straggler watch (core/straggler_watch.h).
  double straggler_window_seconds = 1.0;
  double straggler_report_seconds = 0.0;

  // Reads the environment. A malformed value is an InvalidArgument naming the variable.
  static Status FromEnvironment(Options* options);
};

}  // namespace tfring
