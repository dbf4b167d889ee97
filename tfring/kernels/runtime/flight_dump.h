// FlightDump: writes this rank's flight recorder (core/flight_recorder.h) to one JSON file,
// <folder>/rank-<rank>.json, with every Python thread's stack when Python gave a place for
// them, and serves SIGUSR1, the signal that asks a live process for a dump.
//
// Python's faulthandler writes the stacks: tfring/_process/flight_recorder.py registers it for
// SIGUSR1 (chained to the handler installed here, which it finds in place) writing into a
// memory file whose descriptor it passes here. So every dump goes through the signal, the
// dumps this process decides itself too (a stall, a lost peer: Request raises it): the
// stacks come from the moment of the dump, and faulthandler writes them even while the
// main thread is blocked in Python (a sleep, a deadlock of the script's own). The handler
// only writes a byte to a pipe; a thread of this file's reads it and writes the file.
//
// Thread-safe; a process has one (Get()).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "tfring/kernels/common/status.h"
#include "tfring/kernels/core/flight_recorder.h"

namespace tfring {

class FlightDump {
 public:
  static FlightDump& Get();

  // At each init: the folder (made at the first dump), this rank and the job's size, and
  // the recorder to write. Installs the SIGUSR1 handler and its thread the first time.
  void Configure(const std::string& folder, int rank, int size,
                 std::shared_ptr<const FlightRecorder> recorder);
  // The descriptor Python's faulthandler writes the stacks into (-1: none). Whether the
  // SIGUSR1 handler is installed.
  bool SetStacksFd(int fd);
  // Dumps now (through the signal when Python's stacks are to be had, waiting up to a few
  // seconds for the file) and returns its path in *path.
  Status Dump(const std::string& reason, std::string* path);
  // What an op's error says of the dumps: where every rank's file is, and the command that
  // reads them.
  std::string Note() const;
  const std::string& folder() const { return folder_; }

 private:
  FlightDump() = default;
  void Serve();  // the thread: one dump per byte on the pipe
  Status Write(const std::string& reason, std::string* path);

  mutable std::mutex mutex_;
  std::condition_variable written_;
  std::string folder_;
  int rank_ = 0;
  int size_ = 0;
  std::shared_ptr<const FlightRecorder> recorder_;
  int stacks_fd_ = -1;
  std::thread thread_;
  bool installed_ = false;
  // A dump asked for through the signal: its reason, and how many were written so far
  // (Dump waits for the count to pass the one it saw).
  std::string requested_reason_;
  uint64_t dumps_written_ = 0;
  std::string last_path_;
  Status last_status_;
};

// The folder each rank writes its dump to by default: under $TMPDIR (else /tmp), one per
// job (named after the job's PMIx namespace, Slurm's job and step, or else "job"), so that
// every rank of a job picks the same without a word between them.
std::string DefaultFlightRecorderFolder();

}  // namespace tfring
