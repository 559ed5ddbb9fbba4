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

#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

namespace {

torch::IValue load_pickle(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("cannot read " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  return torch::jit::pickle_load(bytes);
}

void save_pickle(const torch::IValue& value, const std::string& path) {
  const std::vector<char> bytes = torch::jit::pickle_save(value);
  std::ofstream file(path, std::ios::binary);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!file) throw std::runtime_error("cannot write " + path);
}

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
