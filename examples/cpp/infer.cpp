// Inference without Python: loads a model saved from Python, runs it on an input tensor saved
// by torch.save, and writes the output with torch::jit::pickle_save (torch.load reads it).
// The model is either TorchScript (torch.jit.script(...).save, MODEL.pt) or an AOTInductor
// package (torch._inductor.aoti_compile_and_package of a torch.export'ed model, MODEL.pt2),
// whose compiled code calls eml::linear through the dispatcher. The eml:: operators come
// from libeml_ops.so, linked in; this file includes nothing of eml_ops.
//
//   infer MODEL.pt|MODEL.pt2 INPUT.pt OUTPUT.pt
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/script.h>

#include <iostream>
#include <string>
#include <vector>

#include "pickle_io.h"

using example::load_pickle;
using example::save_pickle;

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

torch::Tensor run_model(const std::string& path, const torch::Tensor& input) {
  torch::NoGradGuard no_grad;
  if (ends_with(path, ".pt2")) {
    torch::inductor::AOTIModelPackageLoader package(path);
    return package.run({input}).at(0);
  }
  torch::jit::Module model = torch::jit::load(path);
  model.eval();
  return model.forward({input}).toTensor();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: " << argv[0] << " MODEL.pt|MODEL.pt2 INPUT.pt OUTPUT.pt\n";
    return 2;
  }
  try {
    const torch::Tensor input = load_pickle(argv[2]).toTensor();
    const torch::Tensor output = run_model(argv[1], input);
    save_pickle(output, argv[3]);
    std::cout << "infer: " << input.sizes() << " -> " << output.sizes() << "\n";
  } catch (const c10::Error& error) {
    std::cerr << "infer: " << error.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& error) {  // e.g. "Unknown builtin op: eml::linear"
    std::cerr << "infer: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
