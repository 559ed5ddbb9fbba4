# find_package(Torch) for eml_opsConfig.cmake, which includes this file when Torch is not
# found yet. It also works for a CUDA build of torch (the PyPI wheels) on a machine without
# the CUDA toolkit.
#
# Torch's CMake package insists on the toolkit for a CUDA build: Caffe2Config.cmake runs
# public/cuda.cmake, which needs nvcc and the toolkit's headers and libraries, and stops with
# "Your installed Caffe2 version uses CUDA but I cannot find the CUDA libraries" without them.
# A program that runs eml_ops on the CPU needs none of it: libtorch_cuda.so loads the CUDA
# runtime of torch's pip packages at run time, as it does in Python. cuda.cmake does nothing
# once a target torch::cudart exists (its include guard), so unless the project compiles CUDA
# itself (the CUDA language enabled, or CMAKE_CUDA_COMPILER given), an empty torch::cudart
# stands in for the toolkit's runtime; a CPU build of torch never looks at it. A project that
# wants Torch's own CUDA set-up calls find_package(Torch) before find_package(eml_ops).
include(CMakeFindDependencyMacro)
if(NOT TARGET torch::cudart AND NOT CMAKE_CUDA_COMPILER)
  get_property(_eml_ops_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  if(NOT "CUDA" IN_LIST _eml_ops_languages)
    add_library(torch::cudart INTERFACE IMPORTED)
  endif()
endif()
find_dependency(Torch)
