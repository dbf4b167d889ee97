// FakeDeviceMemory: DeviceMemory over host memory, so that the runtime's device path (the
// execution step's routing by device, the staging executor) runs in tests without a GPU.
//
// A "ready event" is a FakeEvent: WaitForInput blocks until a test sets it, as a CUDA event
// completes once the producer kernel has written the input. Copies are counted, and each
// copy checks that the input it reads was waited for first.
//
// Failures to inject: a FakeEvent marked `failed` (the producer's kernel reported an error),
// copies to the host from device kFailsCopyToHost, and copies to device kFailsCopyToDevice.
#pragma once

#include <atomic>
#include <mutex>
#include <set>

#include "tfring/kernels/core/device_memory.h"

namespace tfring {
namespace testing {

struct FakeEvent {
  std::atomic<bool> ready{false};
  std::atomic<bool> failed{false};  // WaitForInput fails (as on a sticky CUDA error)
};

constexpr int kFailsCopyToHost = 8;
constexpr int kFailsCopyToDevice = 9;

class FakeDeviceMemory : public DeviceMemory {
 public:
  struct Counters {
    std::atomic<int> waits{0}, stream_waits{0}, to_host{0}, to_device{0}, unwaited_reads{0};
  };
  explicit FakeDeviceMemory(Counters* counters) : counters_(counters) {}

  Status WaitForInput(const Entry& e) override;
  Status WaitForStream(const Entry& e) override;
  Status CopyToHost(void* host, const void* device, int64_t bytes, int device_id) override;
  Status CopyToDevice(void* device, const void* host, int64_t bytes, int device_id) override;

 private:
  Counters* counters_;
  std::mutex mutex_;
  std::set<const void*> waited_;  // inputs whose producers were waited for
};

}  // namespace testing
}  // namespace tfring
