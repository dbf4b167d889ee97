#include "tfring/kernels/common/options.h"

#include <cctype>
#include <cstdlib>
#include <string>

namespace tfring {
namespace {

// The value of setting `name` ("TFRING_X"): TFRING_X if set, else Horovod's HOROVOD_X, so
// that a Horovod job's environment keeps working. `name` becomes the variable read (for
// messages). nullptr when neither is set.
const char* Lookup(std::string* name) {
  const char* raw = std::getenv(name->c_str());
  if (raw != nullptr && *raw != '\0') return raw;
  const std::string horovod = "HOROVOD_" + name->substr(name->find('_') + 1);
  raw = std::getenv(horovod.c_str());
  if (raw == nullptr || *raw == '\0') return nullptr;
  *name = horovod;
  return raw;
}

Status ReadInt(const char* setting, int64_t min_value, int64_t* out) {
  std::string name(setting);
  const char* raw = Lookup(&name);
  if (raw == nullptr) return Status::OK();
  char* end = nullptr;
  long long v = std::strtoll(raw, &end, 10);
  if (*end != '\0' || v < min_value) {
    return Status::InvalidArgument(name + " must be an integer >= " +
                                   std::to_string(min_value) + ". Received: '" + raw + "'");
  }
  *out = v;
  return Status::OK();
}

Status ReadDouble(const char* setting, double min_value, double* out) {
  std::string name(setting);
  const char* raw = Lookup(&name);
  if (raw == nullptr) return Status::OK();
  char* end = nullptr;
  double v = std::strtod(raw, &end);
  if (*end != '\0' || !(v >= min_value)) {
    return Status::InvalidArgument(name + " must be a number >= " +
                                   std::to_string(min_value) + ". Received: '" + raw + "'");
  }
  *out = v;
  return Status::OK();
}

std::string Lower(std::string v) {
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return v;
}

Status ReadLogLevel(LogLevel* out) {
  std::string name("TFRING_LOG_LEVEL");
  const char* raw = Lookup(&name);
  if (raw == nullptr) return Status::OK();
  const std::string v = Lower(raw);  // Horovod writes them in capitals
  if (v == "trace") *out = LogLevel::kTrace;
  else if (v == "debug") *out = LogLevel::kDebug;
  else if (v == "info") *out = LogLevel::kInfo;
  else if (v == "warning") *out = LogLevel::kWarning;
  else if (v == "error" || v == "fatal") *out = LogLevel::kError;
  else
    return Status::InvalidArgument(
        name + " must be one of trace, debug, info, warning, error. Received: '" + raw + "'");
  return Status::OK();
}

Status ReadString(const char* setting, std::string* out) {
  std::string name(setting);
  if (const char* raw = Lookup(&name)) *out = raw;
  return Status::OK();
}

// A 0/1 switch: anything else is an error naming the variable.
Status ReadSwitch(const char* setting, bool* out) {
  int64_t value = *out ? 1 : 0;
  TFRING_RETURN_IF_ERROR(ReadInt(setting, 0, &value));
  if (value > 1) {
    return Status::InvalidArgument(std::string(setting) + " must be 0 or 1. Received: " +
                                   std::to_string(value));
  }
  *out = value == 1;
  return Status::OK();
}

Status ReadChoice(const char* setting, const char* a, const char* b, bool* is_b) {
  std::string name(setting);
  const char* raw = Lookup(&name);
  if (raw == nullptr) return Status::OK();
  const std::string v = Lower(raw);
  if (v == a) *is_b = false;
  else if (v == b) *is_b = true;
  else
    return Status::InvalidArgument(name + " must be '" + a + "' or '" + b +
                                   "'. Received: '" + raw + "'");
  return Status::OK();
}

}  // namespace

Status Options::FromEnvironment(Options* o) {
  TFRING_RETURN_IF_ERROR(ReadInt("TFRING_FUSION_THRESHOLD", 0, &o->fusion_threshold_bytes));
  TFRING_RETURN_IF_ERROR(ReadInt("TFRING_FUSION_ALONE_BYTES", 0, &o->fusion_alone_bytes));
  TFRING_RETURN_IF_ERROR(ReadDouble("TFRING_CYCLE_TIME", 0.0, &o->cycle_time_ms));
  TFRING_RETURN_IF_ERROR(ReadDouble("TFRING_BATCH_GAP_US", 0.0, &o->batch_gap_us));
  TFRING_RETURN_IF_ERROR(ReadInt("TFRING_CACHE_CAPACITY", 0, &o->cache_capacity));
  TFRING_RETURN_IF_ERROR(
      ReadDouble("TFRING_STALL_CHECK_TIME_SECONDS", 0.0, &o->stall_check_time_seconds));
  TFRING_RETURN_IF_ERROR(
      ReadDouble("TFRING_STALL_SHUTDOWN_TIME_SECONDS", 0.0, &o->stall_shutdown_time_seconds));
  TFRING_RETURN_IF_ERROR(ReadDouble("TFRING_PEER_TIMEOUT_SECONDS", 0.0, &o->peer_timeout_seconds));
  TFRING_RETURN_IF_ERROR(ReadDouble("TFRING_DRIFT_CHECK_SECONDS", 0.0, &o->drift_check_seconds));
  TFRING_RETURN_IF_ERROR(ReadLogLevel(&o->log_level));
  TFRING_RETURN_IF_ERROR(ReadString("TFRING_TIMELINE", &o->timeline_path));
  // Horovod's HOROVOD_TIMELINE=DYNAMIC means "no file until start_timeline()".
  if (o->timeline_path == "DYNAMIC") o->timeline_path.clear();
  int64_t autotune = o->autotune ? 1 : 0;
  TFRING_RETURN_IF_ERROR(ReadInt("TFRING_AUTOTUNE", 0, &autotune));
  o->autotune = autotune != 0;
  TFRING_RETURN_IF_ERROR(ReadString("TFRING_AUTOTUNE_LOG", &o->autotune_log));
  TFRING_RETURN_IF_ERROR(
      ReadDouble("TFRING_AUTOTUNE_SAMPLE_SECONDS", 0.0, &o->autotune_sample_seconds));
  TFRING_RETURN_IF_ERROR(
      ReadInt("TFRING_AUTOTUNE_WARMUP_SAMPLES", 0, &o->autotune_warmup_samples));
  TFRING_RETURN_IF_ERROR(
      ReadInt("TFRING_AUTOTUNE_SAMPLES_PER_TRIAL", 1, &o->autotune_samples_per_trial));
  int64_t mark_cycles = o->timeline_mark_cycles ? 1 : 0;
  TFRING_RETURN_IF_ERROR(ReadInt("TFRING_TIMELINE_MARK_CYCLES", 0, &mark_cycles));
  o->timeline_mark_cycles = mark_cycles != 0;
  TFRING_RETURN_IF_ERROR(
      ReadInt("TFRING_FLIGHT_RECORDER_ENTRIES", 0, &o->flight_recorder_entries));
  TFRING_RETURN_IF_ERROR(ReadString("TFRING_FLIGHT_RECORDER_DIR", &o->flight_recorder_dir));
  TFRING_RETURN_IF_ERROR(
      ReadDouble("TFRING_STRAGGLER_WINDOW_SECONDS", 0.0, &o->straggler_window_seconds));
  TFRING_RETURN_IF_ERROR(
      ReadDouble("TFRING_STRAGGLER_REPORT_SECONDS", 0.0, &o->straggler_report_seconds));
  TFRING_RETURN_IF_ERROR(ReadSwitch("TFRING_HIERARCHICAL_ALLREDUCE", &o->hierarchical_allreduce));
  TFRING_RETURN_IF_ERROR(ReadSwitch("TFRING_SCHED_BATCH", &o->background_sched_batch));
  TFRING_RETURN_IF_ERROR(
      ReadChoice("TFRING_GPU_OPERATIONS", "nccl", "mpi", &o->gpu_operations_through_mpi));
  TFRING_RETURN_IF_ERROR(ReadChoice("TFRING_NCCL_RESHAPE", "auto", "off", &o->nccl_reshape_off));
  return Status::OK();
}

}  // namespace tfring
