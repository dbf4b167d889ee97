// What this build of the library contains; the build (tfring/build.py) defines the macros.
#pragma once

// 1 when the NCCL backend and the GPU kernels are compiled in (NCCL and the CUDA runtime
// headers were found at build time).
#ifndef TFRING_WITH_NCCL
#define TFRING_WITH_NCCL 0
#endif
