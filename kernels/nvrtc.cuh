// What the kernels read from headers that nvcc includes by itself (cuda_runtime.h brings math.h) and
// NVRTC, which compiles them (gpu_marl_envs/backends/nvrtc.py), does not have: NVRTC has CUDA's device
// functions built in, but no C or C++ standard library header. Under nvcc these are already defined.
#pragma once

#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
