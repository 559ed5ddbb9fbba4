// The Python module eml_ops._C: the course's pybind11 functions and the controls of
// the eml:: ops (backends, ISA). The ops themselves live in libeml_ops.so (linked, so
// importing _C registers them) and are reached through torch.ops.eml.
#include <torch/extension.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "course/FunctionCpp.h"
#include "eml_ops/eml_ops.h"
#include "gemm/backend.h"
#include "gemm/blocked/kernels.h"
#include "gemm/blocked/tuning.h"
#include "gemm/cache_info.h"
#include "gemm/isa.h"
#include "gemm/peak.h"
#include "gemm/run.h"
#include "ops/linear.h"
#include "ops/packed_linear.h"

namespace {

eml::gemm::Isa isa_or_active(const std::optional<std::string>& isa) {
  return isa ? eml::gemm::isa_from_name(*isa) : eml::gemm::active_isa();
}

py::dict cache_level_dict(const eml::gemm::CacheLevel& level) {
  py::dict d;
  d["known"] = level.known();
  d["size_bytes"] = level.size_bytes;
  d["ways"] = level.ways;
  d["line_bytes"] = level.line_bytes;
  d["sharing"] = level.sharing;
  return d;
}

// The tuning of the blocked GEMM for `isa` (default: the active one) as plain data.
py::dict tuning_dict(const std::optional<std::string>& isa_name) {
  const eml::gemm::Isa isa = isa_or_active(isa_name);
  const eml::gemm::CacheInfo& caches = eml::gemm::cache_info();
  py::dict caches_dict;
  caches_dict["L1d"] = cache_level_dict(caches.l1d);
  caches_dict["L2"] = cache_level_dict(caches.l2);
  caches_dict["L3"] = cache_level_dict(caches.l3);
  py::dict values;
  for (const auto& entry : eml::gemm::blocked::tuning_entries(isa)) {
    py::dict v;
    v["value"] = entry.value;
    v["model"] = entry.model;
    v["overridden"] = entry.overridden;
    v["env"] = entry.env;
    v["note"] = entry.note;
    values[py::str(entry.name)] = v;
  }
  const auto f32 = eml::gemm::blocked::register_tile(isa, 4);
  const auto f64 = eml::gemm::blocked::register_tile(isa, 8);
  py::dict d;
  d["isa"] = eml::gemm::isa_name(isa);
  d["cache_source"] = caches.source;
  d["caches"] = caches_dict;
  d["register_tile"] = py::dict(py::arg("float32") = py::make_tuple(f32.mr, f32.nr),
                                py::arg("float64") = py::make_tuple(f64.mr, f64.nr));
  d["values"] = values;
  return d;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "eml_ops C++ core: course functions (6.3) and controls of the eml:: operators";
  m.def("hello", &eml::course::hello, "Prints 'Hello World!' from C++ (seed 6.3).");

  auto course = m.def_submodule("course", "Seed 6.3: forward/backward of the linear layer in C++.");
  auto with_aten = course.def_submodule("aten", "With ATen matmuls.");
  with_aten.def("forward", &eml::course::with_aten::forward, py::arg("i_input"), py::arg("i_weight"));
  with_aten.def("backward", &eml::course::with_aten::backward, py::arg("i_grad"),
                py::arg("i_input"), py::arg("i_weights"));
  auto with_loops = course.def_submodule("loops", "With our own C++-only loops.");
  with_loops.def("forward", &eml::course::with_loops::forward, py::arg("i_input"),
                 py::arg("i_weight"));
  with_loops.def("backward", &eml::course::with_loops::backward, py::arg("i_grad"),
                 py::arg("i_input"), py::arg("i_weights"));

  // eml::linear through the C++ dispatcher, unboxed: the eager fast path of eml_ops.Layer,
  // which skips the Python-side cost of torch.ops (scripted and compiled code use torch.ops).
  // The GIL is released once the arguments are converted, as in torch's own bindings; nothing
  // below touches a Python object without taking it again (Python kernels acquire it).
  m.def("linear", &eml::ops::linear, py::arg("input"), py::arg("weight"),
        py::arg("bias") = py::none(), py::call_guard<py::gil_scoped_release>());
  m.def("linear_packed", &eml::ops::linear_packed, py::arg("input"), py::arg("packed_weight"),
        py::arg("block_k"), py::arg("out_features"), py::arg("bias") = py::none(),
        py::call_guard<py::gil_scoped_release>());

  m.def("available_backends", &eml_ops::available_backends);
  m.def("get_backend", &eml_ops::get_backend);
  m.def("set_backend", &eml_ops::set_backend,
        "Sets the process default backend; ValueError for an unknown or unavailable one.");
  m.def("get_process_backend",
        [] { return std::string(eml::backend_name(eml::process_backend())); });
  m.def("get_thread_backend", []() -> std::optional<std::string> {
    auto backend = eml::thread_backend();
    if (!backend) return std::nullopt;
    return std::string(eml::backend_name(*backend));
  });
  m.def("set_thread_backend", [](const std::optional<std::string>& name) {
    eml::set_thread_backend(name ? std::optional(eml::require_backend(*name)) : std::nullopt);
  }, "Sets (a name) or clears (None) the calling thread's backend override.");

  m.def("get_bf16_policy", [] { return std::string(eml::bf16_policy_name(eml::bf16_policy())); },
        "Where bfloat16 runs: 'own' (our backends), 'aten' or 'auto' (see EML_OPS_BF16).");
  m.def("set_bf16_policy", [](std::string_view name) {
    eml::set_bf16_policy(eml::require_bf16_policy(name));
  }, py::arg("policy"), "Set where bfloat16 runs, process-wide: 'own', 'aten' or 'auto'.");
  m.def("bf16_own_max_rows", [](int64_t depth) { return eml::gemm::bf16_own_max_rows(depth); },
        py::arg("depth"),
        "The most rows of a bfloat16 forward of this depth (in-features) that the policy "
        "'auto' runs on ours at any size (more with the active ISA's bfloat16 dot tiles, "
        "unless ATen's kernels have AMX tiles).");
  m.def("bf16_auto_limits", [] {
    py::dict limits;
    limits["forward_volume"] = eml::gemm::kBf16OwnForwardVolume;
    limits["backward_volume"] = eml::gemm::kBf16OwnBackwardVolume;
    limits["input_gradient_rows"] = eml::gemm::kBf16OwnInputGradientRows;
    return limits;
  }, "The limits of the bfloat16 policy 'auto' (gemm/run.h): ours runs forwards below "
     "forward_volume multiply-adds (or of up to bf16_own_max_rows rows), dL/dX of up to "
     "input_gradient_rows rows, and either gradient up to backward_volume.");
  m.def("bf16_dot_tiles_are_native", &eml::gemm::blocked::active_bf16_dot_tiles_are_native,
        "Whether the active kernels multiply bfloat16 with AVX512_BF16's dot products.");
  m.def("cpu_splits_avx512", &eml::gemm::cpu_splits_avx512,
        "Whether the CPU executes AVX-512 FMAs as two 256-bit halves (AMD Zen 4).");
  m.def("cpu_has_native_bf16", &eml::gemm::cpu_has_native_bf16,
        "Whether the CPU has bfloat16 dot products (AVX512_BF16 or AMX-BF16).");
  m.def("cpu_has_amx_bf16", &eml::gemm::cpu_has_amx_bf16,
        "Whether the CPU has AMX-BF16 tiles, which ATen's oneDNN kernels use for bfloat16.");
  m.def("detected_isa", &eml_ops::detected_isa);
  m.def("supported_isas", &eml_ops::supported_isas,
        "The ISAs this CPU runs, from generic up to detected_isa().");
  m.def("get_isa", &eml_ops::get_isa);
  m.def("set_isa", &eml_ops::set_isa,
        "Selects the micro-kernel ISA of the blocked GEMM: generic, avx2 or avx512.");
  m.def("tuning", &tuning_dict, py::arg("isa") = py::none(),
        "The blocked GEMM's cache blocks and thresholds for an ISA (default: the active one): "
        "caches seen and their source, register tile, and per value the model's, the one "
        "used and whether an EML_OPS_* variable overrode it.");
  m.def(
      "tuning_report",
      [](const std::optional<std::string>& isa) {
        return eml::gemm::blocked::tuning_report(isa_or_active(isa));
      },
      py::arg("isa") = py::none(), "tuning() as text (python -m eml_ops info).");
  m.def("fma_peak_gflops", &eml::gemm::measure_fma_peak_gflops, py::arg("use_double") = false,
        py::arg("seconds") = 0.2, "Measured single-core FMA peak in GFLOP/s.",
        py::call_guard<py::gil_scoped_release>());
}
