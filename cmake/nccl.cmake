# Finds NCCL: the CUDA toolkit's copy (Debian/NVIDIA packages), $NCCL_ROOT, or the one inside
# PyTorch's Python packages (nvidia/nccl, which ships only libnccl.so.2). Defines the imported
# target NCCL::nccl and NCCL_FOUND; without NCCL the CUDA backend is not built.
set(_nccl_hints $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_LIBRARY_DIR}/.. /usr/local/cuda)
execute_process(COMMAND python3 -c "import nvidia, os; print(nvidia.__path__[0])"
                OUTPUT_VARIABLE _nvidia_py OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(_nvidia_py)
  list(APPEND _nccl_hints ${_nvidia_py}/nccl)
endif()
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_nccl_hints} PATH_SUFFIXES lib lib64)
set(NCCL_FOUND OFF)
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  set(NCCL_FOUND ON)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY} INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
  message(STATUS "NCCL: ${NCCL_LIBRARY}")
endif()
