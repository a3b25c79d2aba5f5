// Host-to-device copies on a stream of their own (tch has no stream API). The batch is copied
// on a stream from libtorch's pool; the device's default stream, on which tch runs every
// kernel of the training step, waits for that copy through an event, so copies overlap the
// step's kernels instead of queueing behind them. The output was allocated on the copy stream:
// it is recorded as used by the default stream, so libtorch's caching allocator does not hand
// its memory out again before the step's kernels are done with it.
//
// The event recorded after the copy is handed back (when asked for): the loader's staging ring
// writes the next batch into the host buffer only once it has passed (`voxlake_event_*`).
//
// Only c10's device-generic interfaces (the CUDA implementation libtorch_cuda registers when it
// loads): no CUDA header or library is needed to build it. Without a GPU libtorch throws, and
// the error text goes back to the caller.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <cstddef>
#include <cstring>
#include <exception>

static void describe(const std::exception &e, char *error, size_t error_len) {
  if (error_len > 0) {
    std::strncpy(error, e.what(), error_len - 1);
    error[error_len - 1] = '\0';
  }
}

extern "C" void *voxlake_copy_to_cuda(const void *host, int device, void **event, char *error,
                                      size_t error_len) {
  try {
    const at::Tensor &src = *static_cast<const at::Tensor *>(host);
    const at::Device cuda(at::kCUDA, static_cast<c10::DeviceIndex>(device));
    c10::DeviceGuard on_device(cuda);
    const c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    const c10::Stream copy_stream = impl.getStreamFromGlobalPool(cuda, /*isHighPriority=*/false);
    const c10::Stream compute = impl.getDefaultStream(cuda);
    at::Tensor out;
    {
      c10::StreamGuard on_copy_stream(copy_stream);
      out = src.to(cuda, /*non_blocking=*/true);
    }
    c10::Event copied(c10::DeviceType::CUDA);
    copied.record(copy_stream);
    copied.block(compute);
    impl.recordDataPtrOnStream(out.storage().data_ptr(), compute);
    if (event != nullptr) {
      *event = new c10::Event(std::move(copied));
    }
    return new at::Tensor(std::move(out));
  } catch (const std::exception &e) {
    describe(e, error, error_len);
    return nullptr;
  }
}

// 1 when the copy before `event` has finished, 0 when not yet, -1 with the error.
extern "C" int voxlake_event_query(const void *event, char *error, size_t error_len) {
  try {
    return static_cast<const c10::Event *>(event)->query() ? 1 : 0;
  } catch (const std::exception &e) {
    describe(e, error, error_len);
    return -1;
  }
}

// Blocks until the copy before `event` has finished: 0, or -1 with the error.
extern "C" int voxlake_event_wait(const void *event, char *error, size_t error_len) {
  try {
    static_cast<const c10::Event *>(event)->synchronize();
    return 0;
  } catch (const std::exception &e) {
    describe(e, error, error_len);
    return -1;
  }
}

extern "C" void voxlake_event_free(void *event) { delete static_cast<c10::Event *>(event); }
