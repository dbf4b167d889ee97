#include "tests/cpp/fake_device_memory.h"

#include <chrono>
#include <cstring>
#include <thread>

namespace tfring {
namespace testing {

Status FakeDeviceMemory::WaitForInput(const Entry& e) {
  if (e.device < 0) return Status::Internal("WaitForInput on host entry '" + e.request.name + "'");
  ++counters_->waits;
  if (auto* event = static_cast<FakeEvent*>(e.ready_event)) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!event->ready.load(std::memory_order_acquire)) {
      if (event->failed.load()) {
        return Status::Internal("the producer's event reported an error (injected)");
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return Status::DeadlineExceeded("ready event of '" + e.request.name + "' never fired");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  waited_.insert(e.input);
  return Status::OK();
}

Status FakeDeviceMemory::WaitForStream(const Entry& e) {
  if (e.device < 0) return Status::Internal("WaitForStream on host entry '" + e.request.name + "'");
  ++counters_->stream_waits;
  return Status::OK();
}

Status FakeDeviceMemory::CopyToHost(void* host, const void* device, int64_t bytes, int device_id) {
  ++counters_->to_host;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!waited_.count(device)) ++counters_->unwaited_reads;
  }
  if (device_id < 0) return Status::Internal("CopyToHost without a device");
  if (device_id == kFailsCopyToHost) return Status::Internal("copy failed (injected)");
  if (bytes > 0) std::memcpy(host, device, bytes);
  return Status::OK();
}

Status FakeDeviceMemory::CopyToDevice(void* device, const void* host, int64_t bytes,
                                      int device_id) {
  ++counters_->to_device;
  if (device_id < 0) return Status::Internal("CopyToDevice without a device");
  if (device_id == kFailsCopyToDevice) return Status::Internal("copy failed (injected)");
  if (bytes > 0) std::memcpy(device, host, bytes);
  return Status::OK();
}

}  // namespace testing
}  // namespace tfring
