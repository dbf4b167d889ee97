// How a GPU op's entries wait for the kernels that produced their inputs, whoever launched
// them: TensorFlow's GPU kernels (tf/gpu/gpu_entry.cc), XLA's custom call
// (tf/xla/xla_gpu_handler.cc) and the native GPU tests all come here, so the tests run the
// same code the framework adapters do.
#pragma once

#include <vector>

#include "tfring/kernels/common/status.h"
#include "tfring/kernels/core/entry.h"

namespace tfring {

// Records one CUDA event on `stream` (a cudaStream_t of GPU `device`) now, after the work
// already queued there (the inputs' producers, earlier users of the outputs), and ties every
// entry to it: device, stream and ready_event set, on_device marked. The executor's stream
// waits for the event before reading. The event is freed once every entry has completed
// (each entry's done callback, if set, runs first). On error, the entries are unchanged.
Status TieToProducerStream(void* stream, int device, std::vector<Entry>* entries);

}  // namespace tfring
