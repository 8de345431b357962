// CPU backend: the namespace of the vector code. The kernels (flash_fwd.cpp, flash_bwd.cpp,
// features.cpp and the headers they include) may be compiled several times, once per
// instruction set (CMake FA_NATIVE=OFF on x86-64; cpu/dispatch.cpp picks one at run time). Each
// build lives in its own inline namespace, named by FA_CPU_ISA, so that the linker never mixes
// an inline function compiled for one instruction set into the code of another; source code
// names everything fa::cpu::... all the same.
#pragma once

#ifndef FA_CPU_ISA
#define FA_CPU_ISA native
#endif

#define FA_CPU_BEGIN \
  namespace fa::cpu { \
  inline namespace FA_CPU_ISA {
#define FA_CPU_END \
  }                \
  }
