// Training without Python: loads a TorchScript MLP of eml_ops.Layer's saved from Python,
// trains it with SGD and cross-entropy on data saved by torch.save, and saves the trained
// model and the loss of every step (torch::jit::pickle_save, which torch.load reads).
//
//   train_mlp MODEL.pt DATA.pt OUT_MODEL.pt OUT_LOSSES.pt [EPOCHS BATCH_SIZE LR]
//
// DATA.pt: {"inputs": float [n, in], "targets": int64 [n]}. Batches are taken in order, so
// Python can repeat the same training step by step (examples/cpp/demo.py does).
#include <eml_ops/eml_ops.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "pickle_io.h"

using example::load_pickle;
using example::save_pickle;

namespace {

struct Options {
  std::string model, data, out_model, out_losses;
  int64_t epochs = 3;
  int64_t batch_size = 32;
  double lr = 0.1;
};

std::vector<torch::Tensor> parameters_of(const torch::jit::Module& model) {
  std::vector<torch::Tensor> parameters;
  for (const torch::Tensor& parameter : model.parameters()) parameters.push_back(parameter);
  return parameters;
}

// One pass of SGD over the data in order; returns the loss of every step.
std::vector<double> train_epoch(torch::jit::Module& model, torch::optim::SGD& optimizer,
                                const torch::Tensor& inputs, const torch::Tensor& targets,
                                int64_t batch_size) {
  std::vector<double> losses;
  for (int64_t start = 0; start < inputs.size(0); start += batch_size) {
    const int64_t end = std::min(start + batch_size, inputs.size(0));
    optimizer.zero_grad();
    const torch::Tensor logits = model.forward({inputs.slice(0, start, end)}).toTensor();
    const torch::Tensor loss =
        torch::nn::functional::cross_entropy(logits, targets.slice(0, start, end));
    loss.backward();
    optimizer.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

// eml_ops' C++ API against ATen, on the trained first layer: the library's own entry point.
void check_api(const torch::jit::Module& model, const torch::Tensor& inputs) {
  torch::Tensor weight;
  std::optional<torch::Tensor> bias;
  for (const auto& parameter : model.named_parameters()) {
    if (parameter.name == "0.weight") weight = parameter.value;
    if (parameter.name == "0.bias") bias = parameter.value;
  }
  if (!weight.defined()) throw std::runtime_error("the model has no layer 0 with a weight");
  torch::NoGradGuard no_grad;
  const torch::Tensor ours = eml_ops::linear(inputs, weight, bias);
  const torch::Tensor aten = torch::linear(inputs, weight, bias);
  const double max_diff = (ours - aten).abs().max().item<double>();
  std::cout << "eml_ops::linear vs torch::linear: max |diff| = " << max_diff << "\n";
  if (max_diff > 1e-4) throw std::runtime_error("eml_ops::linear disagrees with torch::linear");
}

Options parse(int argc, char** argv) {
  if (argc != 5 && argc != 8) {
    throw std::invalid_argument(std::string("usage: ") + argv[0] +
                                " MODEL.pt DATA.pt OUT_MODEL.pt OUT_LOSSES.pt [EPOCHS BATCH_SIZE LR]");
  }
  Options options{argv[1], argv[2], argv[3], argv[4]};
  if (argc == 8) {
    options.epochs = std::stoll(argv[5]);
    options.batch_size = std::stoll(argv[6]);
    options.lr = std::stod(argv[7]);
  }
  return options;
}

void run(const Options& options) {
  std::cout << "eml_ops " << eml_ops::version() << " (built for torch "
            << eml_ops::torch_version() << "): backend " << eml_ops::get_backend() << ", isa "
            << eml_ops::get_isa() << "\n";
  torch::jit::Module model = torch::jit::load(options.model);
  model.train();
  const c10::Dict<torch::IValue, torch::IValue> data = load_pickle(options.data).toGenericDict();
  const torch::Tensor inputs = data.at("inputs").toTensor();
  const torch::Tensor targets = data.at("targets").toTensor();
  torch::optim::SGD optimizer(parameters_of(model), torch::optim::SGDOptions(options.lr));
  std::vector<double> losses;
  for (int64_t epoch = 0; epoch < options.epochs; ++epoch) {
    const std::vector<double> epoch_losses =
        train_epoch(model, optimizer, inputs, targets, options.batch_size);
    losses.insert(losses.end(), epoch_losses.begin(), epoch_losses.end());
    std::cout << "epoch " << epoch << ": last loss " << epoch_losses.back() << "\n";
  }
  check_api(model, inputs);
  model.save(options.out_model);
  save_pickle(torch::tensor(losses, torch::kFloat64), options.out_losses);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    run(parse(argc, argv));
  } catch (const c10::Error& error) {
    std::cerr << "train_mlp: " << error.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& error) {
    std::cerr << "train_mlp: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
