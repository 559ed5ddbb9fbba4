// Seed section 6.3: the course's C++ extension, with exactly the seed's declarations,
// in two variants kept side by side: ATen matmuls, and our own C++-only loops.
#pragma once

#include <torch/types.h>

#include <vector>

namespace eml::course {

// Prints "Hello World!".
void hello();

// Y = X · W^T with ATen.
namespace with_aten {
torch::Tensor forward(torch::Tensor i_input, torch::Tensor i_weight);
// Returns {dL/dX = grad · W, dL/dW = grad^T · X}.
std::vector<torch::Tensor> backward(torch::Tensor i_grad, torch::Tensor i_input,
                                    torch::Tensor i_weights);
}  // namespace with_aten

// The same, with our own loops over data_ptr (the reference GEMM). Inputs must be
// contiguous 2-D float32/float64 tensors: the Python side makes them so.
namespace with_loops {
torch::Tensor forward(torch::Tensor i_input, torch::Tensor i_weight);
std::vector<torch::Tensor> backward(torch::Tensor i_grad, torch::Tensor i_input,
                                    torch::Tensor i_weights);
}  // namespace with_loops

}  // namespace eml::course
