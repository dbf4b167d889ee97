// The contract between tfring's XLA lowerings (xla_ops.cc, compiled with TensorFlow's XLA
// headers) and the handler that runs them (xla_handler.cc, which knows only XLA's FFI):
// the custom call's target and the attributes it carries.
//
// A lowered collective is one XLA custom call (typed FFI) with the op's tensors as operands
// and a tuple of same-shaped results. Its attributes travel in the call's backend_config as
// an MLIR dictionary ("{kind = 0 : i32, name = \"...\", ...}"), which XLA parses and the
// handler reads by name. No pointer or process-local id travels in them, so a compiled
// step depends only on the op's attributes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace tfring {
namespace xla_call {

// Registered for XLA's "Host" platform (xla_handler.cc).
constexpr char kTarget[] = "tfring_collective";

// What one custom call does and how, as the TF op's attributes said.
struct Attributes {
  int32_t kind = 0;  // CollectiveKind
  std::string name;  // the op's tensor_name (grouped ops add ".<i>" per tensor, as eagerly)
  int32_t reduce_op = 0;
  float prescale = 1.0f, postscale = 1.0f;
  int32_t root_rank = 0;
  std::vector<int32_t> process_set;  // empty: all ranks
  int64_t process_set_world = 0;     // the op's "process_set_world" (submit.h, ProcessSetAttr)
  bool cacheable = true;
};

// `text` as an MLIR string literal: anything but letters, digits and a few safe marks is
// written as a \XX hex escape, so any name (quotes, backslashes, UTF-8) survives.
inline std::string QuotedString(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                       (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '/' ||
                       c == '-' || c == ':' || c == ' ';
    if (plain) {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "\\%02X", c);
      out += hex;
    }
  }
  return out + "\"";
}

// A float as an MLIR f32 literal that reads back exactly (9 significant digits, always
// with a decimal point and an exponent, which MLIR's float syntax needs).
inline std::string FloatLiteral(float value) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.8e : f32", static_cast<double>(value));
  return text;
}

// The backend_config of a custom call carrying `a`.
inline std::string Encode(const Attributes& a) {
  std::string ranks;
  for (size_t i = 0; i < a.process_set.size(); ++i) {
    ranks += (i == 0 ? ": " : ", ") + std::to_string(a.process_set[i]);
  }
  return "{kind = " + std::to_string(a.kind) + " : i32, name = " + QuotedString(a.name) +
         ", reduce_op = " + std::to_string(a.reduce_op) +
         " : i32, prescale = " + FloatLiteral(a.prescale) +
         ", postscale = " + FloatLiteral(a.postscale) +
         ", root_rank = " + std::to_string(a.root_rank) +
         " : i32, process_set = array<i32" + ranks +
         ">, process_set_world = " + std::to_string(a.process_set_world) + " : i64, cacheable = " +
         (a.cacheable ? "1" : "0") + " : i32}";
}

}  // namespace xla_call
}  // namespace tfring
