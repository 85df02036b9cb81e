// attend::Error: the one exception type of the library.
//
// Every message says what was expected and what was found, and names the file, tensor or field:
//   model.safetensors: tensor 'h.3.attn.c_attn.weight' has shape [768, 2304], config implies [768, 2305]
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace attend {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
  ~Error() override;  // defined in error.cpp, so the vtable has one home
};

// Throws attend::Error with a formatted message when `condition` is false.
template <typename... Args>
inline void check(bool condition, fmt::format_string<Args...> format, Args&&... args) {
  if (!condition) throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace attend
