// Which GEMM backend the CPU kernels of the eml:: ops run: chosen at run time,
// process-wide. Torch-free.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace eml {

enum class Backend : int {
  aten = 0,       // ATen matmul (MKL/oneDNN on CPU)
  reference = 1,  // our plain loops (the course's C++-only version)
  blocked = 2,    // our packed, cache-blocked, register-blocked GEMM
  tpp = 3,        // LIBXSMM JIT kernels (only when built with LIBXSMM)
};

const char* backend_name(Backend backend);
std::optional<Backend> parse_backend(std::string_view name);

// Compiled in and usable on this CPU.
bool backend_available(Backend backend);
std::vector<Backend> available_backends();
// "aten, reference, blocked": for error messages.
std::string available_backend_names();

// The fastest available backend: what a fresh process uses unless EML_OPS_BACKEND says otherwise.
Backend default_backend();

// The process-wide selection. Reads and writes are atomic: a switch is seen by every
// thread's next call; a call already running finishes on the backend it started with.
Backend current_backend();
// Throws std::invalid_argument (naming the choices) for an unavailable backend.
void set_current_backend(Backend backend);
void set_current_backend(std::string_view name);

}  // namespace eml
