#include "tfring/kernels/common/shared_library.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <cstdio>

namespace tfring {
namespace {

std::string LoadedFile(void* handle, const std::string& fallback) {
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
      map->l_name[0] != '\0') {
    return map->l_name;
  }
  return fallback;
}

}  // namespace

std::unique_ptr<SharedLibrary> SharedLibrary::Open(const std::string& path,
                                                   const std::string& what,
                                                   std::string* error) {
  if (path.empty()) {
    *error = "tfring has no file for " + what + " (a build without the GPU path)";
    return nullptr;
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    *error = "tfring could not load " + what + " from " + path + ": " +
             (why != nullptr ? why : "unknown reason");
    return nullptr;
  }
  return std::unique_ptr<SharedLibrary>(new SharedLibrary(handle, LoadedFile(handle, path)));
}

std::unique_ptr<SharedLibrary> SharedLibrary::AlreadyLoaded(const std::string& soname) {
  void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) {
    dlerror();  // clear it: not loaded is the answer, not a failure
    return nullptr;
  }
  return std::unique_ptr<SharedLibrary>(new SharedLibrary(handle, LoadedFile(handle, soname)));
}

std::string SharedLibrary::FileHolding(const void* address) {
  Dl_info info;
  if (address == nullptr || dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

bool SharedLibrary::SameFile(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

SharedLibrary::~SharedLibrary() { dlclose(handle_); }

void* SharedLibrary::Find(const char* name) const { return dlsym(handle_, name); }

void SharedLibrary::Note(const char* name, void* found, std::string* missing,
                         std::string* stray) const {
  if (found == nullptr) {
    *missing += std::string(missing->empty() ? "" : ", ") + name;
  } else if (FileHolding(found) != file_) {
    *stray += std::string(name) + " in " + FileHolding(found) + "; ";
  }
}

std::string JsonQuoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned char>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string LoadedLibraryReport::Json() const {
  return "{\"chosen\": " + JsonQuoted(chosen) + ", \"file\": " + JsonQuoted(file) +
         ", \"version\": " + std::to_string(version) + ", \"error\": " + JsonQuoted(error) +
         ", \"stray\": " + JsonQuoted(stray) + "}";
}

}  // namespace tfring
