//! Batches as libtorch tensors (feature `tch`).
//!
//! The batch is assembled straight into the tensor's memory: one copy from the Arrow buffers.
//! On CPU that tensor is the batch (channels moved first during the copy). For a CUDA device
//! the batch goes through `feed`: staged in pinned buffers allocated once,
//! copied on a stream of its own with its labels, the channel axis moved on the device. The
//! producer thread runs ahead by the loader's prefetch, so that many batches are already on
//! the device when the training loop asks. `cuda/pinned.cpp` allocates pinned host tensors
//! (tch only offers `pin_memory`, a second copy that warns on every call).

use std::mem::MaybeUninit;

use half::f16;
use tch::{Device, Kind, Tensor};
use voxlake_format::DType;

use crate::LoaderError;
use crate::TchTensor;
use voxlake_kernels::{Dest, Element, fill_each, fill_sample};

use crate::Check;

impl crate::LoaderBuilder {
    /// Hand out the tensors as libtorch tensors on `device` (feature `tch`): assembled in one copy from the
    /// Arrow buffers; for CUDA, into pinned memory and copied asynchronously, with the channel
    /// axis moved on the device. Without it, batches are `ndarray`s.
    pub fn with_device(mut self, device: Device) -> Self {
        self.device = Some(device);
        self
    }
}

impl crate::Batch {
    /// The labels as an Int64 tensor on `device`, if every sample has one (feature `tch`). For
    /// the loader's CUDA device they were copied with the batch, without blocking.
    pub fn label_tensor(&self, device: Device) -> Option<Tensor> {
        if let Some(labels) = &self.device_labels
            && labels.0.device() == device
        {
            return Some(labels.0.shallow_clone());
        }
        let labels: Vec<i64> = self.labels.iter().copied().collect::<Option<_>>()?;
        Some(Tensor::from_slice(&labels).to_device(device))
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

/// Sets libtorch's CUDA context up on `device` (0.24–0.41 s on an H100 machine), on the
/// feed's set-up thread beside the stream's first reads (`feed::Setup`). Nothing to do on CPU.
pub(crate) fn warm_up(device: Device) -> Result<(), LoaderError> {
    if !device.is_cuda() {
        return Ok(());
    }
    let context = Tensor::f_zeros([1], (Kind::Float, device))
        .map_err(|e| LoaderError::Config(format!("setting up {device:?}: {e}")))?;
    drop(context);
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

/// Assembles `samples` (stored shape `sample_shape`) into a CPU tensor, channels first when
/// `channels` is `Some(C)` (CUDA batches go through [`feed`](crate::feed)).
pub(crate) fn assemble_cpu(
    dtype: DType,
    sample_shape: &[usize],
    samples: &[&[u8]],
    channels: Option<usize>,
    pool: Option<&rayon::ThreadPool>,
    check: Check<'_>,
) -> Result<TchTensor, LoaderError> {
    let kind = kind_of(dtype)?;
    let numel: usize = sample_shape.iter().product();
    let mut shape: Vec<i64> = vec![samples.len() as i64];
    match channels {
        Some(c) => {
            shape.push(c as i64);
            shape.extend(
                sample_shape[..sample_shape.len() - 1]
                    .iter()
                    .map(|&d| d as i64),
            );
        }
        None => shape.extend(sample_shape.iter().map(|&d| d as i64)),
    }
    let host = Tensor::empty(shape.as_slice(), (kind, Device::Cpu));
    fill(&host, dtype, numel, samples, channels, pool, check)?;
    Ok(TchTensor(host))
}

/// A batch staged for a CUDA device (stored layout `[B, …shape]`) with the channel axis moved
/// first on the device when `channels` is set.
pub(crate) fn channels_first(on_device: Tensor, channels: Option<usize>) -> Result<Tensor, String> {
    if channels.is_none() {
        return Ok(on_device);
    }
    let rank = on_device.dim() as i64;
    let mut order = vec![0, rank - 1];
    order.extend(1..rank - 1);
    on_device
        .f_permute(order.as_slice())
        .and_then(|t| t.f_contiguous())
        .map_err(|e| e.to_string())
}

unsafe extern "C" {
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

/// Runs a shim call with an error buffer; `Err` with the shim's text when `failed` says so.
pub(crate) fn with_error<T>(
    call: impl FnOnce(*mut std::ffi::c_char, usize) -> T,
    failed: impl FnOnce(&T) -> bool,
) -> Result<T, String> {
    let mut error = [0 as std::ffi::c_char; 512];
    let result = call(error.as_mut_ptr(), error.len());
    if !failed(&result) {
        return Ok(result);
    }
    // SAFETY: the shim wrote a NUL-terminated string into `error` (zeroed before), or nothing.
    let text = unsafe { std::ffi::CStr::from_ptr(error.as_ptr()) };
    Err(text.to_string_lossy().into_owned())
}

/// An uninitialised contiguous CPU tensor through the shim: pinned, from libtorch's caching host
/// allocator, or pageable; an error (libtorch's text) where there is no CUDA device to pin for.
pub(crate) fn empty_host(shape: &[i64], dtype: DType, pinned: bool) -> Result<Tensor, String> {
    let kind = scalar_type(dtype).ok_or_else(|| format!("libtorch has no {dtype} tensors"))?;
    // SAFETY: `shape` is valid for `shape.len()` reads and the error buffer for its length
    // during the call; the shim returns a heap `at::Tensor*` that tch's `Tensor` takes over
    // (tch's own handles are the same), or null.
    let tensor = with_error(
        |error, len| unsafe {
            voxlake_empty_host(shape.as_ptr(), shape.len(), kind, pinned.into(), error, len)
        },
        |t| t.is_null(),
    )?;
    // SAFETY: a non-null result is a fresh `at::Tensor*` owned by nobody else.
    Ok(unsafe { Tensor::from_ptr(tensor) })
}

/// Writes the samples into a fresh contiguous CPU tensor's memory.
fn fill(
    host: &Tensor,
    dtype: DType,
    numel: usize,
    samples: &[&[u8]],
    channels: Option<usize>,
    pool: Option<&rayon::ThreadPool>,
    check: Check<'_>,
) -> Result<(), LoaderError> {
    let len = numel * samples.len();
    assert_eq!(host.numel(), len, "tensor size");
    assert_eq!(
        host.kind(),
        kind_of(dtype).unwrap_or(Kind::Uint8),
        "tensor kind"
    );
    // SAFETY: `host` is a contiguous CPU tensor of `len` elements of `dtype`, owned here, so
    // its memory is aligned for them and written by nobody else.
    unsafe {
        fill_raw(
            host.data_ptr().cast(),
            dtype,
            numel,
            samples,
            channels,
            pool,
            check,
        )
    }
}

/// Writes `samples` (each `numel` elements of `dtype`) to `dst`, channels moved first when
/// `channels` is set, `check(i)` before sample `i` (see [`Check`]).
///
/// # Safety
/// `dst` must be valid for writes of `numel * samples.len()` elements of `dtype`, aligned for
/// them, and not accessed by anything else during the call.
pub(crate) unsafe fn fill_raw(
    dst: *mut u8,
    dtype: DType,
    numel: usize,
    samples: &[&[u8]],
    channels: Option<usize>,
    pool: Option<&rayon::ThreadPool>,
    check: Check<'_>,
) -> Result<(), LoaderError> {
    unsafe fn typed<T: Element>(
        dst: *mut u8,
        numel: usize,
        samples: &[&[u8]],
        channels: Option<usize>,
        pool: Option<&rayon::ThreadPool>,
        check: Check<'_>,
    ) -> Result<(), LoaderError> {
        assert!(dst.cast::<T>().is_aligned(), "batch memory alignment");
        let len = numel * samples.len();
        // SAFETY: the caller's contract; `fill_sample` writes every element.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst.cast::<MaybeUninit<T>>(), len) };
        fill_each(dst, numel, samples.len(), pool, check, |i, dst| {
            fill_sample(dst, samples[i], channels, Dest::Batch);
        })
    }
    // SAFETY (each arm): the caller's contract, for the element type of `dtype`.
    unsafe {
        match dtype {
            DType::Bool => typed::<bool>(dst, numel, samples, channels, pool, check),
            DType::I8 => typed::<i8>(dst, numel, samples, channels, pool, check),
            DType::I16 => typed::<i16>(dst, numel, samples, channels, pool, check),
            DType::I32 => typed::<i32>(dst, numel, samples, channels, pool, check),
            DType::I64 => typed::<i64>(dst, numel, samples, channels, pool, check),
            DType::U8 => typed::<u8>(dst, numel, samples, channels, pool, check),
            DType::U16 => typed::<u16>(dst, numel, samples, channels, pool, check),
            DType::U32 => typed::<u32>(dst, numel, samples, channels, pool, check),
            DType::U64 => typed::<u64>(dst, numel, samples, channels, pool, check),
            DType::F16 => typed::<f16>(dst, numel, samples, channels, pool, check),
            DType::BF16 => typed::<half::bf16>(dst, numel, samples, channels, pool, check),
            DType::F32 => typed::<f32>(dst, numel, samples, channels, pool, check),
            DType::F64 => typed::<f64>(dst, numel, samples, channels, pool, check),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Tensors;

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
            let t = Tensors::Tch(
                assemble_cpu(DType::F32, &shape, &refs, channels, None, None).unwrap(),
            );
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap();
            let parallel = Tensors::Tch(
                assemble_cpu(DType::F32, &shape, &refs, channels, Some(&pool), None).unwrap(),
            );
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
    fn channels_moved_on_the_device_match_the_ndarray_path() {
        // A CUDA batch arrives in stored layout and is permuted there: here, on the CPU.
        let owned = samples();
        let refs: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let stored = assemble_cpu(DType::F32, &[2, 3, 4], &refs, None, None, None).unwrap();
        let moved = Tensors::Tch(TchTensor(channels_first(stored.0, Some(4)).unwrap()));
        let nd = crate::batch::build_tensors(DType::F32, &[3, 4, 2, 3], &refs, Some(4)).unwrap();
        assert_eq!(moved.shape(), vec![3, 4, 2, 3]);
        assert_eq!(moved.as_bytes(), nd.as_bytes());
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
        match empty_host(&[2, 3], DType::F32, true) {
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
        assert!(
            empty_host(&[1], DType::U32, true)
                .unwrap_err()
                .contains("u32")
        );
        // The shim's numbering is libtorch's: the kind tch reads back is the one asked for
        // (every type libtorch has).
        for dtype in DType::ALL.into_iter().filter(|&d| kind_of(d).is_ok()) {
            let t = empty_host(&[4, 2], dtype, false).unwrap();
            assert_eq!((t.kind(), t.size()), (kind_of(dtype).unwrap(), vec![4, 2]));
            assert_eq!(t.device(), Device::Cpu);
        }
    }

    #[test]
    fn labels_are_a_tensor_when_every_sample_has_one() {
        // A batch hands out the labels copied with it when asked for on their device, else a
        // tensor of its labels.
        let t = TchTensor(Tensor::from_slice(&[3i64, -5, 7]));
        let zeros = [0u8; 4];
        let batch = crate::batch::Batch {
            tensors: crate::batch::build_tensors(DType::F32, &[3, 1], &[&zeros[..]; 3], None)
                .unwrap(),
            first: "tensor".into(),
            more: Vec::new(),
            labels: vec![Some(0), Some(0), Some(0)],
            ids: vec![String::new(); 3],
            sources: Vec::new(),
            lineage: Vec::new(),
            epoch: 0,
            index: 0,
            device_labels: Some(t),
        };
        let got = batch.label_tensor(Device::Cpu).unwrap();
        assert_eq!(Vec::<i64>::try_from(&got).unwrap(), vec![3, -5, 7]);
    }

    #[test]
    fn kinds_and_dtypes_map_both_ways() {
        assert!(kind_of(DType::U32).is_err());
        for dtype in [DType::F16, DType::BF16] {
            let t = TchTensor(Tensor::zeros([1], (kind_of(dtype).unwrap(), Device::Cpu)));
            assert_eq!(t.dtype(), dtype);
        }
    }
}
