// tfring's batched device copy: the source of batched_copy_ptx.h (BUILD.md, 'GPU (NCCL)',
// says how that file is made from this one). Not compiled by tfring's build, which has no
// nvcc: the driver compiles the PTX when tfring loads it.
//
// One launch copies up to kMaxCopies buffers: blockIdx.y picks the copy, and the x blocks and
// threads stride over it in the widest words both ends are aligned to (16, 4 or 1 bytes).
#define kMaxCopies 64

struct CopyBatch {  // passed by value: 1536 bytes of kernel parameters
  const char* src[kMaxCopies];
  char* dst[kMaxCopies];
  unsigned long long bytes[kMaxCopies];
};

template <typename Word>
__device__ unsigned long long CopyWords(const char* src, char* dst, unsigned long long bytes,
                                        unsigned long long first, unsigned long long stride) {
  const unsigned long long words = bytes / sizeof(Word);
  const Word* s = reinterpret_cast<const Word*>(src);
  Word* d = reinterpret_cast<Word*>(dst);
  for (unsigned long long i = first; i < words; i += stride) d[i] = s[i];
  return words * sizeof(Word);
}

extern "C" __global__ void tfring_batched_copy(CopyBatch batch) {
  const char* src = batch.src[blockIdx.y];
  char* dst = batch.dst[blockIdx.y];
  const unsigned long long bytes = batch.bytes[blockIdx.y];
  const unsigned long long first = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned long long alignment = (unsigned long long)src | (unsigned long long)dst;
  unsigned long long done = 0;
  if ((alignment & 15) == 0) {
    done = CopyWords<uint4>(src, dst, bytes, first, stride);
  } else if ((alignment & 3) == 0) {
    done = CopyWords<unsigned int>(src, dst, bytes, first, stride);
  }
  for (unsigned long long i = done + first; i < bytes; i += stride) dst[i] = src[i];
}
