#include "backend.h"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "isa.h"

#ifdef EML_OPS_WITH_LIBXSMM
#include "tpp/tpp_gemm.h"
#endif

namespace eml {
namespace {

// The entry of `values` that `name_of` names `name`, if any.
template <typename Value, std::size_t N, typename NameOf>
std::optional<Value> find_by_name(const std::array<Value, N>& values, std::string_view name,
                                  NameOf name_of) {
  for (Value value : values) {
    if (name == name_of(value)) return value;
  }
  return std::nullopt;
}

// The names of `values`, comma-separated: the choices an error message lists.
template <typename Values, typename NameOf>
std::string joined_names(const Values& values, NameOf name_of) {
  std::string names;
  for (auto value : values) {
    if (!names.empty()) names += ", ";
    names += name_of(value);
  }
  return names;
}

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

constexpr std::array<Bf16Policy, 3> kAllBf16Policies = {Bf16Policy::own, Bf16Policy::aten,
                                                         Bf16Policy::automatic};

std::optional<Bf16Policy> parse_bf16_policy(std::string_view name) {
  return find_by_name(kAllBf16Policies, name, bf16_policy_name);
}

// EML_OPS_BF16 when it names a policy, else the CPU's default (the Python package raises on
// a bad value; C++-only users get the default).
Bf16Policy initial_bf16_policy() {
  if (const char* requested = std::getenv("EML_OPS_BF16")) {
    if (auto parsed = parse_bf16_policy(requested)) return *parsed;
  }
  return gemm::cpu_has_native_bf16() ? Bf16Policy::automatic : Bf16Policy::own;
}

std::atomic<Bf16Policy>& bf16_policy_slot() {
  static std::atomic<Bf16Policy> policy{initial_bf16_policy()};
  return policy;
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
  return find_by_name(kAllBackends, name, backend_name);
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
  return joined_names(available_backends(), backend_name);
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

Bf16Policy bf16_policy() { return bf16_policy_slot().load(std::memory_order_relaxed); }

void set_bf16_policy(Bf16Policy policy) {
  bf16_policy_slot().store(policy, std::memory_order_relaxed);
}

const char* bf16_policy_name(Bf16Policy policy) {
  switch (policy) {
    case Bf16Policy::own: return "own";
    case Bf16Policy::aten: return "aten";
    case Bf16Policy::automatic: return "auto";
  }
  return "unknown";
}

Bf16Policy require_bf16_policy(std::string_view name) {
  if (auto parsed = parse_bf16_policy(name)) return *parsed;
  throw std::invalid_argument("eml_ops: unknown bfloat16 policy '" + std::string(name) +
                              "'; choose one of: " +
                              joined_names(kAllBf16Policies, bf16_policy_name));
}

}  // namespace eml
