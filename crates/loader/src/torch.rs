//! Batches as libtorch tensors (feature `tch`).
//!
//! The batch is assembled straight into the tensor's memory: one copy from the Arrow buffers.
//! On CPU that tensor is the batch (channels moved first during the copy). For a CUDA device
//! — the only code here that needs a GPU, kept small — the host tensor is allocated pinned,
//! straight from libtorch's caching host allocator (`empty_pinned`, a few lines of C++ in
//! `cuda/pinned.cpp`, since tch only offers `pin_memory`, a second copy that warns on every
//! call), filled, copied with `non_blocking`, and the channel axis is moved on the device. The
//! allocator keeps a block out of reuse until the copy that reads it has finished, so dropping
//! the host tensor early is safe. The producer thread runs ahead by the loader's
//! prefetch, so that many batches are already on the device when the training loop asks.

use std::mem::MaybeUninit;

use half::f16;
use tch::{Device, Kind, Tensor};
use voxlake_format::DType;

use crate::LoaderError;
use crate::batch::{Element, Tensors, fill_batch};

/// A libtorch tensor in a batch (a newtype so batches stay `Clone` and comparable).
#[derive(Debug)]
pub struct TchTensor(pub Tensor);

impl Clone for TchTensor {
    fn clone(&self) -> Self {
        TchTensor(self.0.shallow_clone())
    }
}

impl PartialEq for TchTensor {
    fn eq(&self, other: &Self) -> bool {
        self.0.size() == other.0.size() && self.0.kind() == other.0.kind() && self.0.equal(&other.0)
    }
}

impl TchTensor {
    /// The bytes of a contiguous CPU tensor.
    pub(crate) fn cpu_bytes(&self) -> Option<&[u8]> {
        if self.0.device() != Device::Cpu || !self.0.is_contiguous() {
            return None;
        }
        let len = self.0.numel() * self.0.kind().elt_size_in_bytes();
        // SAFETY: a contiguous CPU tensor owns `len` initialized bytes at data_ptr, alive as
        // long as `self`.
        Some(unsafe { std::slice::from_raw_parts(self.0.data_ptr().cast::<u8>(), len) })
    }
}

/// Checks that libtorch can use `device`: a CUDA device needs CUDA and that many GPUs.
pub fn check_device(device: Device) -> Result<(), LoaderError> {
    if let Device::Cuda(index) = device {
        let count = tch::Cuda::device_count();
        if index as i64 >= count {
            return Err(LoaderError::Config(format!(
                "device cuda:{index} asked for, but libtorch sees {count} CUDA device(s){}",
                if tch::Cuda::is_available() {
                    ""
                } else {
                    " (no CUDA: is libtorch a CPU build, or the driver missing?)"
                }
            )));
        }
    }
    Ok(())
}

/// Sets CUDA up at `build()` rather than at the first batch (measured 0.24–0.41 s there on an
/// H100 machine): libtorch's context on `device`, and a pinned block of one batch's size in
/// the caching host allocator, which the first batches then reuse. Nothing to do on CPU.
pub(crate) fn warm_up(device: Device, batch_bytes: u64) -> Result<(), LoaderError> {
    if !device.is_cuda() {
        return Ok(());
    }
    let context = Tensor::f_zeros([1], (Kind::Float, device))
        .map_err(|e| LoaderError::Config(format!("setting up {device:?}: {e}")))?;
    drop(context);
    // Where pinning fails, each batch falls back to pageable memory (and says nothing here).
    let _ = empty_pinned(&[batch_bytes as i64], DType::U8);
    Ok(())
}

/// libtorch's kind for a table element type; unsigned 16/32/64-bit have none.
pub fn kind_of(dtype: DType) -> Result<Kind, LoaderError> {
    Ok(match dtype {
        DType::Bool => Kind::Bool,
        DType::I8 => Kind::Int8,
        DType::I16 => Kind::Int16,
        DType::I32 => Kind::Int,
        DType::I64 => Kind::Int64,
        DType::U8 => Kind::Uint8,
        DType::F16 => Kind::Half,
        DType::BF16 => Kind::BFloat16,
        DType::F32 => Kind::Float,
        DType::F64 => Kind::Double,
        DType::U16 | DType::U32 | DType::U64 => {
            return Err(LoaderError::Config(format!(
                "libtorch has no {dtype} tensors: convert the table with --dtype"
            )));
        }
    })
}

pub(crate) fn dtype_of(kind: Kind) -> DType {
    match kind {
        Kind::Bool => DType::Bool,
        Kind::Int8 => DType::I8,
        Kind::Int16 => DType::I16,
        Kind::Int => DType::I32,
        Kind::Int64 => DType::I64,
        Kind::Uint8 => DType::U8,
        Kind::Half => DType::F16,
        Kind::BFloat16 => DType::BF16,
        Kind::Double => DType::F64,
        _ => DType::F32,
    }
}

/// Assembles `samples` (stored shape `sample_shape`) into a tensor on `device`, channels first
/// when `channels` is `Some(C)`.
pub(crate) fn assemble(
    dtype: DType,
    sample_shape: &[usize],
    samples: &[&[u8]],
    channels: Option<usize>,
    device: Device,
    pool: Option<&rayon::ThreadPool>,
) -> Result<Tensors, LoaderError> {
    let kind = kind_of(dtype)?;
    let numel: usize = sample_shape.iter().product();
    let b = samples.len();
    let cuda = device.is_cuda();
    // On CPU the channel axis moves during the copy; for a GPU it moves there.
    let host_channels = if cuda { None } else { channels };
    let mut host_shape: Vec<i64> = vec![b as i64];
    match host_channels {
        Some(c) => {
            host_shape.push(c as i64);
            host_shape.extend(
                sample_shape[..sample_shape.len() - 1]
                    .iter()
                    .map(|&d| d as i64),
            );
        }
        None => host_shape.extend(sample_shape.iter().map(|&d| d as i64)),
    }
    // Pinned memory makes the copy asynchronous; without a GPU pinning fails: stay pageable.
    let host = match cuda {
        true => empty_pinned(&host_shape, dtype)
            .unwrap_or_else(|_| Tensor::empty(host_shape.as_slice(), (kind, Device::Cpu))),
        false => Tensor::empty(host_shape.as_slice(), (kind, Device::Cpu)),
    };
    fill(&host, dtype, numel, samples, host_channels, pool);
    if !cuda {
        return Ok(Tensors::Tch(TchTensor(host)));
    }
    // CUDA only from here: an asynchronous copy, then the permutation on the device.
    let failed = |e: String| LoaderError::Internal(format!("copying a batch to {device:?}: {e}"));
    let on_device = to_device(&host, device).map_err(failed)?;
    let on_device = match channels {
        Some(_) => {
            let rank = on_device.dim() as i64;
            let mut order = vec![0, rank - 1];
            order.extend(1..rank - 1);
            on_device
                .f_permute(order.as_slice())
                .and_then(|t| t.f_contiguous())
                .map_err(|e| failed(e.to_string()))?
        }
        None => on_device,
    };
    Ok(Tensors::Tch(TchTensor(on_device)))
}

unsafe extern "C" {
    /// `cuda/copy.cpp`: `host` copied to CUDA device `device` on a stream of its own (a new
    /// `at::Tensor*`), or null with the error.
    fn voxlake_copy_to_cuda(
        host: *const torch_sys::C_tensor,
        device: std::ffi::c_int,
        error: *mut std::ffi::c_char,
        error_len: usize,
    ) -> *mut torch_sys::C_tensor;

    /// `cuda/pinned.cpp`: a new `at::Tensor*` (tch's tensor handle), or null with the error.
    fn voxlake_empty_host(
        sizes: *const i64,
        ndim: usize,
        scalar_type: std::ffi::c_int,
        pinned: std::ffi::c_int,
        error: *mut std::ffi::c_char,
        error_len: usize,
    ) -> *mut torch_sys::C_tensor;
}

/// libtorch's `c10::ScalarType` number for a table element type.
fn scalar_type(dtype: DType) -> Option<std::ffi::c_int> {
    Some(match dtype {
        DType::U8 => 0,
        DType::I8 => 1,
        DType::I16 => 2,
        DType::I32 => 3,
        DType::I64 => 4,
        DType::F16 => 5,
        DType::BF16 => 15,
        DType::F32 => 6,
        DType::F64 => 7,
        DType::Bool => 11,
        DType::U16 | DType::U32 | DType::U64 => return None,
    })
}

/// An uninitialised contiguous CPU tensor in pinned memory, from libtorch's caching host
/// allocator; an error (libtorch's text) where there is no CUDA device to pin for.
pub(crate) fn empty_pinned(shape: &[i64], dtype: DType) -> Result<Tensor, String> {
    empty_host(shape, dtype, true)
}

/// An uninitialised contiguous CPU tensor, pinned or not, through the shim.
fn empty_host(shape: &[i64], dtype: DType, pinned: bool) -> Result<Tensor, String> {
    let kind = scalar_type(dtype).ok_or_else(|| format!("libtorch has no {dtype} tensors"))?;
    let mut error = [0 as std::ffi::c_char; 512];
    // SAFETY: `shape` is valid for `shape.len()` reads and `error` for `error.len()` writes
    // during the call; the shim returns a heap `at::Tensor*` that tch's `Tensor` takes over
    // (tch's own handles are the same), or null.
    let tensor = unsafe {
        voxlake_empty_host(
            shape.as_ptr(),
            shape.len(),
            kind,
            pinned.into(),
            error.as_mut_ptr(),
            error.len(),
        )
    };
    if tensor.is_null() {
        // SAFETY: the shim wrote a NUL-terminated string into `error` (zeroed before).
        let text = unsafe { std::ffi::CStr::from_ptr(error.as_ptr()) };
        return Err(text.to_string_lossy().into_owned());
    }
    // SAFETY: a non-null result is a fresh `at::Tensor*` owned by nobody else.
    Ok(unsafe { Tensor::from_ptr(tensor) })
}

/// The labels as an Int64 tensor on `device`, if every sample has one: from pinned memory with
/// a non-blocking copy, queued on the same stream as the batch's copy (on CPU, the host tensor).
pub(crate) fn labels_to(
    device: Device,
    labels: &[Option<i64>],
) -> Result<Option<TchTensor>, LoaderError> {
    let Some(labels) = labels.iter().copied().collect::<Option<Vec<i64>>>() else {
        return Ok(None);
    };
    let n = labels.len() as i64;
    let host = match device.is_cuda() {
        true => empty_pinned(&[n], DType::I64)
            .unwrap_or_else(|_| Tensor::empty([n], (Kind::Int64, Device::Cpu))),
        false => Tensor::empty([n], (Kind::Int64, Device::Cpu)),
    };
    // SAFETY: `host` is a fresh contiguous CPU tensor of `n` Int64 elements, owned here.
    let dst =
        unsafe { std::slice::from_raw_parts_mut(host.data_ptr().cast::<i64>(), labels.len()) };
    dst.copy_from_slice(&labels);
    if !device.is_cuda() {
        return Ok(Some(TchTensor(host)));
    }
    let on_device = to_device(&host, device)
        .map_err(|e| LoaderError::Internal(format!("copying labels to {device:?}: {e}")))?;
    Ok(Some(TchTensor(on_device)))
}

/// An asynchronous copy of a (pinned) host tensor to a CUDA `device`: on a stream of its own,
/// the device's default stream waiting for it (`cuda/copy.cpp`). On CPU, the tensor itself.
fn to_device(host: &Tensor, device: Device) -> Result<Tensor, String> {
    let Device::Cuda(index) = device else {
        return Ok(host.shallow_clone());
    };
    let mut error = [0 as std::ffi::c_char; 512];
    // SAFETY: `host` is a live tensor handle for the call, `error` valid for its length; the
    // shim returns a fresh `at::Tensor*` that tch's `Tensor` takes over, or null.
    let copied = unsafe {
        voxlake_copy_to_cuda(
            host.as_ptr(),
            index as std::ffi::c_int,
            error.as_mut_ptr(),
            error.len(),
        )
    };
    if !copied.is_null() {
        // SAFETY: a fresh `at::Tensor*` owned by nobody else.
        return Ok(unsafe { Tensor::from_ptr(copied) });
    }
    // SAFETY: the shim wrote a NUL-terminated string into `error` (zeroed before).
    let reason = unsafe { std::ffi::CStr::from_ptr(error.as_ptr()) };
    Err(reason.to_string_lossy().into_owned())
}

/// Writes the samples into a fresh contiguous CPU tensor's memory.
fn fill(
    host: &Tensor,
    dtype: DType,
    numel: usize,
    samples: &[&[u8]],
    channels: Option<usize>,
    pool: Option<&rayon::ThreadPool>,
) {
    fn typed<T: Element>(
        host: &Tensor,
        numel: usize,
        samples: &[&[u8]],
        channels: Option<usize>,
        pool: Option<&rayon::ThreadPool>,
    ) {
        let len = numel * samples.len();
        assert_eq!(host.numel(), len, "tensor size");
        // SAFETY: `host` is a contiguous CPU tensor of `len` elements of T (its kind matches
        // `dtype`), owned here; `fill_batch` writes every element.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(host.data_ptr().cast::<MaybeUninit<T>>(), len)
        };
        fill_batch(dst, numel, samples, channels, pool);
    }
    match dtype {
        DType::Bool => typed::<bool>(host, numel, samples, channels, pool),
        DType::I8 => typed::<i8>(host, numel, samples, channels, pool),
        DType::I16 => typed::<i16>(host, numel, samples, channels, pool),
        DType::I32 => typed::<i32>(host, numel, samples, channels, pool),
        DType::I64 => typed::<i64>(host, numel, samples, channels, pool),
        DType::U8 => typed::<u8>(host, numel, samples, channels, pool),
        DType::F16 => typed::<f16>(host, numel, samples, channels, pool),
        DType::BF16 => typed::<half::bf16>(host, numel, samples, channels, pool),
        DType::F32 => typed::<f32>(host, numel, samples, channels, pool),
        DType::F64 => typed::<f64>(host, numel, samples, channels, pool),
        DType::U16 | DType::U32 | DType::U64 => unreachable!("refused by kind_of"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Vec<u8>> {
        (0..3)
            .map(|s| {
                (0..24)
                    .flat_map(|v| (s as f32 * 100.0 + v as f32).to_le_bytes())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn cpu_tensors_equal_the_ndarray_path() {
        let owned = samples();
        let refs: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let shape = [2, 3, 4];
        for channels in [None, Some(4)] {
            let t = assemble(DType::F32, &shape, &refs, channels, Device::Cpu, None).unwrap();
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap();
            let parallel = assemble(
                DType::F32,
                &shape,
                &refs,
                channels,
                Device::Cpu,
                Some(&pool),
            )
            .unwrap();
            assert_eq!(t.as_bytes(), parallel.as_bytes(), "one thread and a pool");
            let batch_shape: Vec<usize> = match channels {
                Some(c) => vec![3, c, 2, 3],
                None => vec![3, 2, 3, 4],
            };
            let nd =
                crate::batch::build_tensors(DType::F32, &batch_shape, &refs, channels).unwrap();
            assert_eq!(t.shape(), batch_shape);
            assert_eq!(t.dtype(), DType::F32);
            assert_eq!(t.as_bytes(), nd.as_bytes(), "channels {channels:?}");
            assert!(t.as_bytes().is_some());
        }
    }

    #[test]
    fn a_cuda_device_without_cuda_is_refused() {
        if tch::Cuda::device_count() > 0 {
            return; // a GPU machine: nothing to refuse
        }
        let e = check_device(Device::Cuda(0)).unwrap_err().to_string();
        assert!(e.contains("cuda:0") && e.contains("0 CUDA device"), "{e}");
        assert!(check_device(Device::Cpu).is_ok());
    }

    #[test]
    fn pinned_host_tensors_come_from_the_shim() {
        match empty_pinned(&[2, 3], DType::F32) {
            // A GPU machine: pinned, of the asked shape and type.
            Ok(t) => {
                assert!(tch::Cuda::is_available());
                assert_eq!((t.size(), t.kind()), (vec![2, 3], Kind::Float));
                assert!(t.f_is_pinned(Device::Cuda(0)).unwrap());
            }
            // No GPU here: libtorch's reason, not a crash.
            Err(e) => {
                assert!(!tch::Cuda::is_available(), "{e}");
                assert!(!e.is_empty());
            }
        }
        assert!(empty_pinned(&[1], DType::U32).unwrap_err().contains("u32"));
        // The shim's numbering is libtorch's: the kind tch reads back is the one asked for
        // (every type libtorch has).
        for dtype in DType::ALL.into_iter().filter(|&d| kind_of(d).is_ok()) {
            let t = empty_host(&[4, 2], dtype, false).unwrap();
            assert_eq!((t.kind(), t.size()), (kind_of(dtype).unwrap(), vec![4, 2]));
            assert_eq!(t.device(), Device::Cpu);
        }
    }

    #[test]
    fn copies_to_a_cuda_device_go_through_the_stream_shim() {
        let host = Tensor::from_slice(&[1.5f32, 2.5]);
        match to_device(&host, Device::Cuda(0)) {
            // A GPU machine: the values arrive (the default stream waits for the copy).
            Ok(t) => {
                assert_eq!(t.device(), Device::Cuda(0));
                let back = Vec::<f32>::try_from(&t.to_device(Device::Cpu)).unwrap();
                assert_eq!(back, vec![1.5, 2.5]);
            }
            // No GPU: libtorch's own reason, never a crash.
            Err(e) => {
                assert!(!tch::Cuda::is_available(), "{e}");
                assert!(!e.is_empty());
            }
        }
        assert_eq!(
            Vec::<f32>::try_from(&to_device(&host, Device::Cpu).unwrap()).unwrap(),
            vec![1.5, 2.5]
        );
    }

    #[test]
    fn labels_are_a_tensor_when_every_sample_has_one() {
        let t = labels_to(Device::Cpu, &[Some(3), Some(-5), Some(7)])
            .unwrap()
            .unwrap();
        assert_eq!(t.0.kind(), Kind::Int64);
        assert_eq!(Vec::<i64>::try_from(&t.0).unwrap(), vec![3, -5, 7]);
        assert!(labels_to(Device::Cpu, &[Some(1), None]).unwrap().is_none());
        // A batch hands out the labels copied with it when asked for on their device.
        let zeros = [0u8; 4];
        let batch = crate::batch::Batch {
            tensors: crate::batch::build_tensors(DType::F32, &[3, 1], &[&zeros[..]; 3], None)
                .unwrap(),
            labels: vec![Some(0), Some(0), Some(0)],
            ids: vec![String::new(); 3],
            lineage: Vec::new(),
            epoch: 0,
            index: 0,
            device_labels: Some(t),
        };
        let got = batch.label_tensor(Device::Cpu).unwrap();
        assert_eq!(Vec::<i64>::try_from(&got).unwrap(), vec![3, -5, 7]);
    }

    #[test]
    fn pinning_without_a_gpu_falls_back() {
        // No GPU here: pin_memory fails and the batch stays in pageable memory.
        let host = Tensor::empty([4], (Kind::Float, Device::Cpu));
        assert!(host.f_pin_memory(Device::Cuda(0)).is_err() || tch::Cuda::is_available());
        assert!(kind_of(DType::U32).is_err());
        assert_eq!(dtype_of(kind_of(DType::F16).unwrap()), DType::F16);
        assert_eq!(dtype_of(kind_of(DType::BF16).unwrap()), DType::BF16);
    }
}
