// Where a buffer lives: host memory, or memory of a CUDA device, asked of the CUDA driver that the
// program itself loaded (the CUDA runtime and NCCL load only once a device buffer is seen, so a
// device buffer without them gets a clear error instead of a crash). Managed memory is
// host-accessible: the host transports take it.
//
// Cheap for host buffers in programs that never touch CUDA: nothing is asked of CUDA until
// libcuda.so.1 is loaded in the process (a process without it has no device memory), and CUDA is
// never initialised by this check. Any CUDA error means "host memory".
#pragma once

namespace ringrun::core {

struct BufferLocation {
  bool device = false;   // device memory (not managed)
  bool managed = false;  // CUDA managed memory (host-accessible)
  int ordinal = -1;      // the CUDA device it belongs to, when device
};

BufferLocation locate_buffer(const void* pointer);

// Whether the process has loaded the CUDA driver: until it has, no pointer is device memory.
// Costs a dl_iterate_phdr while it has not: callers with many pointers ask once.
bool cuda_driver_loaded();

}  // namespace ringrun::core
