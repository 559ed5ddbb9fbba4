// Which GEMM backend the CPU kernels of the eml:: ops run: chosen at run time. A process
// default (set_process_backend), and a per-thread override on top (BackendGuard, Python's
// use_backend), as torch.autocast's state is per thread. Torch-free, part of the GEMM
// library: run.h's gemm::run takes the selected backend.
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

// What a fresh process uses unless EML_OPS_BACKEND says otherwise: blocked. It is built
// everywhere and computes every element type and shape itself; tpp needs LIBXSMM (and a
// working JIT), computes float32/float64 only, and is faster than blocked on some shapes
// and slower on others (`python -m eml_ops bench --backends blocked,tpp` on the CPU at
// hand), so no one backend is the fastest everywhere.
Backend default_backend();

// The backend a kernel called on this thread runs: the thread's override if it has one,
// else the process default. Kernels read it once, on the calling thread, when they start.
Backend current_backend();

// The process default, for every thread without an override. Reads and writes are atomic:
// a switch is seen by the next call of every such thread; a call already running finishes
// on the backend it started with. Starts as EML_OPS_BACKEND or default_backend().
Backend process_backend();
// Throws std::invalid_argument (naming the choices) for an unknown or unavailable backend.
void set_process_backend(Backend backend);
void set_process_backend(std::string_view name);

// The calling thread's override (nullopt: none, the thread follows the process default).
// New threads start without one. Setting checks availability as set_process_backend does.
std::optional<Backend> thread_backend();
void set_thread_backend(std::optional<Backend> backend);

// Overrides the calling thread's backend for a scope and restores the previous override.
class BackendGuard {
 public:
  explicit BackendGuard(Backend backend) : previous_(thread_backend()) {
    set_thread_backend(backend);
  }
  ~BackendGuard() { set_thread_backend(previous_); }
  BackendGuard(const BackendGuard&) = delete;
  BackendGuard& operator=(const BackendGuard&) = delete;

 private:
  std::optional<Backend> previous_;
};

// parse_backend plus the availability check; std::invalid_argument naming the choices.
Backend require_backend(std::string_view name);

// Where bfloat16 runs, process-wide: on our backends (own), on ATen's kernels (aten), or
// on ours for the small products where ATen's bfloat16 kernels lose and on ATen's for the
// rest (automatic, named "auto"; which products: gemm::runs_on_own_gemm, run.h). Starts as
// EML_OPS_BF16 says; by default own, unless the CPU has bfloat16 dot products (AVX512_BF16,
// AMX): there automatic, since ATen's oneDNN kernels run larger products several times
// faster than our float32-accumulating ones.
enum class Bf16Policy { own, aten, automatic };
Bf16Policy bf16_policy();
void set_bf16_policy(Bf16Policy policy);
const char* bf16_policy_name(Bf16Policy policy);
// std::invalid_argument naming the choices for anything but "own", "aten" and "auto".
Bf16Policy require_bf16_policy(std::string_view name);

}  // namespace eml
