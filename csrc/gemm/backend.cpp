#include "backend.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "isa.h"

#ifdef EML_OPS_WITH_LIBXSMM
#include "tpp/tpp_gemm.h"
#endif

namespace eml {
namespace {

constexpr std::array<Backend, 4> kAllBackends = {Backend::aten, Backend::reference,
                                                 Backend::blocked, Backend::tpp};

// The initial selection: EML_OPS_BACKEND when it names an available backend, else the
// default. (The Python package raises on a bad value; C++-only users get the default.)
Backend initial_backend() {
  if (const char* requested = std::getenv("EML_OPS_BACKEND")) {
    if (auto parsed = parse_backend(requested); parsed && backend_available(*parsed)) {
      return *parsed;
    }
  }
  return default_backend();
}

bool initial_bf16_on_own_gemm() {
  const char* requested = std::getenv("EML_OPS_BF16");
  if (requested != nullptr && std::string_view(requested) == "own") return true;
  if (requested != nullptr && std::string_view(requested) == "aten") return false;
  return !gemm::cpu_has_native_bf16();
}

std::atomic<bool>& bf16_on_own_gemm_slot() {
  static std::atomic<bool> own{initial_bf16_on_own_gemm()};
  return own;
}

std::atomic<int>& selected_backend() {
  static std::atomic<int> selected{static_cast<int>(initial_backend())};
  return selected;
}

// The calling thread's override; -1: none.
thread_local int thread_override = -1;

void require_available(Backend backend) {
  if (!backend_available(backend)) {
    throw std::invalid_argument(std::string("eml_ops: backend '") + backend_name(backend) +
                                "' is not available in this build; choose one of: " +
                                available_backend_names());
  }
}

}  // namespace

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::aten: return "aten";
    case Backend::reference: return "reference";
    case Backend::blocked: return "blocked";
    case Backend::tpp: return "tpp";
  }
  return "unknown";
}

std::optional<Backend> parse_backend(std::string_view name) {
  for (Backend backend : kAllBackends) {
    if (name == backend_name(backend)) return backend;
  }
  return std::nullopt;
}

bool backend_available(Backend backend) {
  if (backend == Backend::tpp) {
#ifdef EML_OPS_WITH_LIBXSMM
    return gemm::tpp_available();
#else
    return false;
#endif
  }
  return true;
}

std::vector<Backend> available_backends() {
  std::vector<Backend> available;
  for (Backend backend : kAllBackends) {
    if (backend_available(backend)) available.push_back(backend);
  }
  return available;
}

std::string available_backend_names() {
  std::string names;
  for (Backend backend : available_backends()) {
    if (!names.empty()) names += ", ";
    names += backend_name(backend);
  }
  return names;
}

Backend default_backend() { return Backend::blocked; }

Backend current_backend() {
  if (thread_override >= 0) return static_cast<Backend>(thread_override);
  return process_backend();
}

Backend process_backend() {
  return static_cast<Backend>(selected_backend().load(std::memory_order_relaxed));
}

void set_process_backend(Backend backend) {
  require_available(backend);
  selected_backend().store(static_cast<int>(backend), std::memory_order_relaxed);
}

void set_process_backend(std::string_view name) { set_process_backend(require_backend(name)); }

std::optional<Backend> thread_backend() {
  if (thread_override < 0) return std::nullopt;
  return static_cast<Backend>(thread_override);
}

void set_thread_backend(std::optional<Backend> backend) {
  if (backend) require_available(*backend);
  thread_override = backend ? static_cast<int>(*backend) : -1;
}

Backend require_backend(std::string_view name) {
  auto parsed = parse_backend(name);
  if (!parsed) {
    throw std::invalid_argument("eml_ops: unknown backend '" + std::string(name) +
                                "'; choose one of: " + available_backend_names());
  }
  require_available(*parsed);
  return *parsed;
}

bool bf16_on_own_gemm() { return bf16_on_own_gemm_slot().load(std::memory_order_relaxed); }

void set_bf16_on_own_gemm(bool own) {
  bf16_on_own_gemm_slot().store(own, std::memory_order_relaxed);
}

}  // namespace eml
