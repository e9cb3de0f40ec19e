#include "core/device_memory.hpp"

#include <dlfcn.h>
#include <link.h>

#include <atomic>

namespace ringrun::core {
namespace {

int first_object_only(dl_phdr_info* info, std::size_t, void* adds) {
  *static_cast<unsigned long long*>(adds) = info->dlpi_adds;
  return 1;  // the counter is the same on every entry: stop after the first
}

}  // namespace

// True once libcuda.so.1 is in the process. The dlopen(RTLD_NOLOAD) probe is repeated only when
// the set of loaded objects changed since the last probe (dl_iterate_phdr's dlpi_adds counter).
bool cuda_driver_loaded() {
  static std::atomic<bool> loaded{false};
  static std::atomic<unsigned long long> probed_at{~0ull};
  if (loaded.load(std::memory_order_relaxed)) return true;
  unsigned long long adds = 0;
  dl_iterate_phdr(first_object_only, &adds);
  if (probed_at.load(std::memory_order_relaxed) == adds) return false;
  void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (handle) {
    dlclose(handle);  // drops only the reference NOLOAD took
    loaded.store(true, std::memory_order_relaxed);
    return true;
  }
  probed_at.store(adds, std::memory_order_relaxed);
  return false;
}

namespace {

// The driver API, looked up in the libcuda.so.1 the program loaded (values from cuda.h).
using PointerGetAttribute = int (*)(void* data, int attribute, unsigned long long pointer);
constexpr int kAttributeMemoryType = 2;    // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kAttributeOrdinal = 9;       // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr int kAttributeIsManaged = 8;     // CU_POINTER_ATTRIBUTE_IS_MANAGED
constexpr unsigned kMemoryTypeDevice = 2;  // CU_MEMORYTYPE_DEVICE

BufferLocation locate_cuda(const void* pointer) {
  static const PointerGetAttribute get = [] {
    void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) return PointerGetAttribute{nullptr};
    auto fn = reinterpret_cast<PointerGetAttribute>(dlsym(handle, "cuPointerGetAttribute"));
    dlclose(handle);  // the program keeps it loaded
    return fn;
  }();
  if (!get) return {};
  auto address = reinterpret_cast<unsigned long long>(pointer);
  unsigned type = 0, managed = 0;
  int ordinal = -1;
  if (get(&type, kAttributeMemoryType, address) != 0 || type != kMemoryTypeDevice) return {};
  BufferLocation where;
  if (get(&managed, kAttributeIsManaged, address) == 0 && managed) where.managed = true;
  where.device = !where.managed;  // managed memory is host-accessible: the host transports take it
  if (get(&ordinal, kAttributeOrdinal, address) == 0) where.ordinal = ordinal;
  return where;
}

}  // namespace

BufferLocation locate_buffer(const void* pointer) {
  if (pointer == nullptr || !cuda_driver_loaded()) return {};
  return locate_cuda(pointer);
}

}  // namespace ringrun::core
