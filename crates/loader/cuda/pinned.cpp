// The one piece of libtorch the `tch` crate does not expose that the loader needs: an empty
// tensor in pinned (page-locked) host memory, straight from libtorch's caching host allocator.
// tch only offers `pin_memory`, which copies a pageable tensor into a new pinned one (and, since
// libtorch 2.11, warns on every call). The caching host allocator records an event for each
// asynchronous copy that reads a block and reuses the block only once that copy has finished,
// so a batch's pinned memory may be dropped as soon as its copy is queued.
//
// Built by the loader's build script with the `tch` feature, against the headers of the
// libtorch it links. Without CUDA (or without a GPU) libtorch throws; the error text is
// returned and the caller falls back to pageable memory.
#include <ATen/ATen.h>

#include <cstring>
#include <exception>

// `pinned` 0 gives pageable memory: the tests check the dtype numbering that way on CPU.
extern "C" void *voxlake_empty_host(const int64_t *sizes, size_t ndim, int scalar_type,
                                    int pinned, char *error, size_t error_len) {
  try {
    auto options = at::TensorOptions()
                       .dtype(static_cast<at::ScalarType>(scalar_type))
                       .device(at::kCPU)
                       .pinned_memory(pinned != 0);
    return new at::Tensor(at::empty(at::IntArrayRef(sizes, ndim), options));
  } catch (const std::exception &e) {
    if (error_len > 0) {
      std::strncpy(error, e.what(), error_len - 1);
      error[error_len - 1] = '\0';
    }
    return nullptr;
  }
}
