// Inference without Python: loads a TorchScript model saved from Python, runs it on an input
// tensor saved by torch.save, and writes the output with torch::jit::pickle_save (torch.load reads
// it). The eml:: operators come from libeml_ops.so, linked in; this file includes nothing of
// eml_ops.
//
//   infer MODEL.pt INPUT.pt OUTPUT.pt
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

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: " << argv[0] << " MODEL.pt INPUT.pt OUTPUT.pt\n";
    return 2;
  }
  try {
    torch::jit::Module model = torch::jit::load(argv[1]);
    model.eval();
    const torch::Tensor input = load_pickle(argv[2]).toTensor();
    torch::NoGradGuard no_grad;
    const torch::Tensor output = model.forward({input}).toTensor();
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
