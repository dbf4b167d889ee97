// A shared library that tfring opened itself, by file, and the functions looked up in it.
//
// tfring's GPU calls go through tables of functions looked up here (backends/cuda/
// cuda_runtime_library.h, backends/nccl/nccl_library.h) instead of through the dynamic
// linker's symbol binding: TensorFlow's GPU build exports trampolines under NCCL's and CUDA's
// names and loads them RTLD_GLOBAL, so a library that left those names undefined would bind
// them to TensorFlow's, which open whatever files TensorFlow's search finds (docs/gpu.md,
// 'Which NCCL and CUDA runtime run'). dlsym on a handle searches that library and its own
// dependencies only, never the process's global scope.
#pragma once

#include <memory>
#include <string>

namespace tfring {

class SharedLibrary {
 public:
  // Opens `path` (RTLD_NOW | RTLD_LOCAL). On failure returns null and sets `*error` to a
  // sentence naming `what` and the file.
  static std::unique_ptr<SharedLibrary> Open(const std::string& path, const std::string& what,
                                             std::string* error);
  // The object this process already loaded under `soname` (by anyone), or null.
  static std::unique_ptr<SharedLibrary> AlreadyLoaded(const std::string& soname);
  // The file that holds `address` ("" when none does): where a function really lives.
  static std::string FileHolding(const void* address);
  // Whether two paths name one file (device and inode; links resolved).
  static bool SameFile(const std::string& a, const std::string& b);

  ~SharedLibrary();  // closes the handle (the object stays while others hold it)
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  // `name` in this library (or its own dependencies), or null.
  void* Find(const char* name) const;
  // Looks `name` up into `*fn`, noting it in `*missing` when absent and in `*stray` when it
  // lives in another file than this library (one of its dependencies).
  template <typename Fn>
  void FindInto(const char* name, Fn* fn, std::string* missing, std::string* stray) const {
    void* found = Find(name);
    *fn = reinterpret_cast<Fn>(found);
    Note(name, found, missing, stray);
  }
  // The file the dynamic loader mapped, as it names it.
  const std::string& file() const { return file_; }

 private:
  SharedLibrary(void* handle, std::string file) : handle_(handle), file_(std::move(file)) {}
  void Note(const char* name, void* found, std::string* missing, std::string* stray) const;
  void* handle_;
  std::string file_;
};

}  // namespace tfring

namespace tfring {

// What tfring loaded for one library its calls go to, for reports (tfringrun --check-build,
// init() at debug level, the tests) and for the errors of the calls themselves.
struct LoadedLibraryReport {
  std::string chosen;  // the file tfring's build found, or its TFRING_*_LIBRARY setting
  std::string file;    // the file loaded; "" when none could be
  int version = 0;     // as the library reports it
  std::string error;   // why none was loaded, or why it is refused; "" when all is well
  // Where every looked-up function lives, when any is not in `file` (a check of the lookup).
  std::string stray;
  std::string Json() const;
};

// `text` as a JSON string, quotes included.
std::string JsonQuoted(const std::string& text);

}  // namespace tfring
