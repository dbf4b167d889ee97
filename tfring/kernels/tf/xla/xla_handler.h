// What the handlers of tfring's XLA custom calls share (xla_handler.cc on the host,
// xla_gpu_handler.cc on a GPU): reading a call's buffers and attributes into the runtime's
// entries, and handing them over.
#pragma once

#include <vector>

#include "tfring/kernels/core/entry.h"
#include "xla/ffi/api/ffi.h"

// Defined in TensorFlow's library (libtensorflow_cc). ffi.h declares it from TF 2.22 on (FFI
// API 0.4); older headers (TF 2.21: API 0.2) do not, so it is declared here for them.
#if XLA_FFI_API_MAJOR == 0 && XLA_FFI_API_MINOR < 4
namespace xla::ffi {
const XLA_FFI_Api* GetXlaFfiApi();
}  // namespace xla::ffi
#endif

namespace tfring {
namespace xla_call {

// One entry per operand of the call (its result i is operand i's output), filled from the
// call's attributes (xla_call.h) as an eager op's kernel fills them. The caller sets the
// device fields of GPU entries.
::xla::ffi::Error MakeEntries(const ::xla::ffi::RemainingArgs& args,
                              const ::xla::ffi::RemainingRets& rets,
                              const ::xla::ffi::Dictionary& attrs, std::vector<Entry>* entries);

// Hands `entries` (done callbacks unset) to the runtime as one op and waits until every
// one is done; the first failure, with the runtime's message, as XLA's error.
::xla::ffi::Error SubmitAndWait(std::vector<Entry> entries);

}  // namespace xla_call
}  // namespace tfring
