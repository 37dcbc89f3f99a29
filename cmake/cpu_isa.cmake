# The vector ISA bppsa's C++ code is compiled for (BPPSA_CPU_ISA; docs/library.md#building-and-the-cmake-package).
# Accepted levels: native (the machine building it), generic (the compiler's default target, no
# flag), and on x86-64 the psABI levels x86-64, x86-64-v2, x86-64-v3 (AVX2, FMA), x86-64-v4 (AVX-512).
include(CheckCXXCompilerFlag)
include(CheckCXXSourceCompiles)

if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64|x64)$")
  set(BPPSA_X86_64 ON)
  set(BPPSA_CPU_LEVELS native generic x86-64 x86-64-v2 x86-64-v3 x86-64-v4)
else()
  set(BPPSA_X86_64 OFF)
  set(BPPSA_CPU_LEVELS native generic)
endif()

# bppsa_cpu_isa_flag(OPTION LEVEL OUT): the compile flag of LEVEL ("" for generic, or for native where the
# compiler has no native flag); FATAL_ERROR naming OPTION and the accepted values for anything else.
function(bppsa_cpu_isa_flag option level out)
  if(NOT level IN_LIST BPPSA_CPU_LEVELS)
    if(level MATCHES "^x86-64" AND NOT BPPSA_X86_64)
      set(_why "the x86-64 levels need an x86-64 processor, this is ${CMAKE_SYSTEM_PROCESSOR}")
    else()
      set(_why "unknown level")
    endif()
    string(REPLACE ";" ", " _accepted "${BPPSA_CPU_LEVELS}")
    message(FATAL_ERROR "${option}=${level}: ${_why}; accepted: ${_accepted}")
  endif()
  if(level STREQUAL "generic")
    set(_flag "")
  elseif(level STREQUAL "native")
    if(DEFINED CACHE{BPPSA_NATIVE_FLAG})
      set(_flag "${BPPSA_NATIVE_FLAG}")
    else()
      # -march=native where the compiler has it (x86, aarch64 GCC and Clang), else -mcpu=native (POWER), else none.
      check_cxx_compiler_flag(-march=native _bppsa_has_march_native)
      if(_bppsa_has_march_native)
        set(_flag -march=native)
      else()
        check_cxx_compiler_flag(-mcpu=native _bppsa_has_mcpu_native)
        set(_flag "")
        if(_bppsa_has_mcpu_native)
          set(_flag -mcpu=native)
        endif()
      endif()
      set(BPPSA_NATIVE_FLAG "${_flag}" CACHE INTERNAL "the compiler's flag for BPPSA_CPU_ISA=native")
    endif()
  else()
    set(_flag -march=${level})
  endif()
  set(${out} "${_flag}" PARENT_SCOPE)
endfunction()

# bppsa_cpu_isa_options(LEVEL FLAG OUT): FLAG and what compiling for LEVEL needs with it.
# -ffp-contract=off: GCC (GNU mode) fuses a·b + c into an FMA wherever its optimiser sees fit, so the
# same source line inlined at two call sites may round differently where the level has FMA (AVX2,
# AVX-512, aarch64), and results would change with the path a computation takes (thread counts, the
# host replays of the GPU kernels); Eigen's vector kernels call FMA explicitly and are unaffected.
# GCC before 13 warns -Wmaybe-uninitialized inside its own AVX-512 intrinsics (PR 105593) wherever
# Eigen uses them, so that warning is off where the level has AVX-512.
function(bppsa_cpu_isa_options level flag out)
  set(_options ${flag})
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    list(APPEND _options -ffp-contract=off)
  endif()
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13 AND flag)
    if(level STREQUAL "native" AND NOT DEFINED CACHE{BPPSA_NATIVE_AVX512})
      set(CMAKE_REQUIRED_FLAGS ${flag})
      check_cxx_source_compiles("#ifndef __AVX512F__\n#error no AVX-512\n#endif\nint main() {}" BPPSA_NATIVE_AVX512)
    endif()
    if(level STREQUAL "x86-64-v4" OR (level STREQUAL "native" AND BPPSA_NATIVE_AVX512))
      list(APPEND _options -Wno-maybe-uninitialized)
    endif()
  endif()
  set(${out} "${_options}" PARENT_SCOPE)
endfunction()

# bppsa_cpu_isa_id(LEVEL OUT): LEVEL as a C identifier (x86-64-v3 → x86_64_v3), for module names.
function(bppsa_cpu_isa_id level out)
  string(REPLACE "-" "_" _id "${level}")
  set(${out} "${_id}" PARENT_SCOPE)
endfunction()

# bppsa_target_cpu_isa(TARGET LEVEL): TARGET's C++ is compiled for LEVEL instead of BPPSA_CPU_ISA
# (library copies and Python variants; the CPU query module, which must run on any x86-64).
function(bppsa_target_cpu_isa target level)
  bppsa_cpu_isa_flag(BPPSA_PYTHON_ISAS "${level}" _flag)
  bppsa_cpu_isa_options("${level}" "${_flag}" _options)
  set_target_properties(${target} PROPERTIES BPPSA_OWN_CPU_ISA ON)
  if(_options)
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${_options}>")
  endif()
endfunction()

# Default native: the machine building it. Results stay bit-identical across thread counts and runs
# at every level: numeric buffers start on 64-byte boundaries (bppsa/core/aligned.hpp), so Eigen peels
# the same scalar heads wherever a product lands, and -ffp-contract=off (above) fixes the roundings.
set(BPPSA_CPU_ISA native CACHE STRING
    "Vector ISA of bppsa's C++ code: generic (the compiler's default), native (this machine), or on x86-64 x86-64, x86-64-v2, x86-64-v3 (AVX2), x86-64-v4 (AVX-512)")
set_property(CACHE BPPSA_CPU_ISA PROPERTY STRINGS ${BPPSA_CPU_LEVELS})
bppsa_cpu_isa_flag(BPPSA_CPU_ISA "${BPPSA_CPU_ISA}" BPPSA_CPU_ISA_FLAG)
# Every C++ target of this project, unless it chose its own level (bppsa_target_cpu_isa); not CUDA
# device code, and not the exported bppsa::bppsa interface: consumers choose their own flags.
bppsa_cpu_isa_options("${BPPSA_CPU_ISA}" "${BPPSA_CPU_ISA_FLAG}" _bppsa_isa_options)
if(_bppsa_isa_options)
  add_compile_options("$<$<AND:$<COMPILE_LANGUAGE:CXX>,$<NOT:$<BOOL:$<TARGET_PROPERTY:BPPSA_OWN_CPU_ISA>>>>:${_bppsa_isa_options}>")
endif()
if(BPPSA_CPU_ISA_FLAG)
  message(STATUS "bppsa: C++ compiled for BPPSA_CPU_ISA=${BPPSA_CPU_ISA} (${BPPSA_CPU_ISA_FLAG})")
else()
  message(STATUS "bppsa: C++ compiled for BPPSA_CPU_ISA=${BPPSA_CPU_ISA} (no -march flag: the compiler's default target)")
endif()
