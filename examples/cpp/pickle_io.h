// Tensors and values between Python and the example programs: torch.save files are read with
// torch::jit::pickle_load, results written with torch::jit::pickle_save (torch.load reads them).
#pragma once

#include <torch/script.h>

#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace example {

inline torch::IValue load_pickle(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("cannot read " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  return torch::jit::pickle_load(bytes);
}

inline void save_pickle(const torch::IValue& value, const std::string& path) {
  const std::vector<char> bytes = torch::jit::pickle_save(value);
  std::ofstream file(path, std::ios::binary);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!file) throw std::runtime_error("cannot write " + path);
}

}  // namespace example
