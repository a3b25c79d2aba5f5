//! Where a batch's tensors go: host `ndarray`s or, with the `tch` feature, a libtorch device
//! (`torch`: device checks and the CPU copy; `feed`: the CUDA staging ring). The one place the
//! feature is decided: without it [`Device`], [`TchTensor`] and the staging types are empty
//! (no value of them exists), so the rest of the loader names them without a gate and the
//! compiler proves the device paths unreachable. [`Tensors`](crate::Tensors) has the same
//! variants in every build. `wire` holds what reaches `torch` and `feed`.

mod wire;

use voxlake_format::DType;

pub(crate) use wire::{Device, Staging, Warming, is_cuda, staging, warm};

/// A libtorch tensor in a batch (a newtype so batches stay `Clone` and comparable); without
/// the `tch` feature no value of it exists.
#[cfg(feature = "tch")]
#[derive(Debug)]
pub struct TchTensor(pub tch::Tensor);

/// A libtorch tensor in a batch: without the `tch` feature no value of it exists.
#[cfg(not(feature = "tch"))]
#[derive(Debug, Clone, PartialEq)]
pub enum TchTensor {}

impl TchTensor {
    /// The tensor's shape.
    pub(crate) fn shape(&self) -> Vec<usize> {
        imp::shape(self)
    }

    /// The tensor's element type.
    pub(crate) fn dtype(&self) -> DType {
        imp::dtype(self)
    }

    /// The bytes of a contiguous CPU tensor.
    pub(crate) fn cpu_bytes(&self) -> Option<&[u8]> {
        imp::cpu_bytes(self)
    }
}

#[cfg(feature = "tch")]
mod imp {
    use tch::{Device, Kind};
    use voxlake_format::DType;

    use super::TchTensor;

    impl Clone for TchTensor {
        fn clone(&self) -> Self {
            TchTensor(self.0.shallow_clone())
        }
    }

    impl PartialEq for TchTensor {
        fn eq(&self, other: &Self) -> bool {
            self.0.size() == other.0.size()
                && self.0.kind() == other.0.kind()
                && self.0.equal(&other.0)
        }
    }

    pub(super) fn shape(t: &TchTensor) -> Vec<usize> {
        t.0.size().iter().map(|&d| d as usize).collect()
    }

    pub(super) fn dtype(t: &TchTensor) -> DType {
        match t.0.kind() {
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

    pub(super) fn cpu_bytes(t: &TchTensor) -> Option<&[u8]> {
        if t.0.device() != Device::Cpu || !t.0.is_contiguous() {
            return None;
        }
        let len = t.0.numel() * t.0.kind().elt_size_in_bytes();
        // SAFETY: a contiguous CPU tensor owns `len` initialized bytes at data_ptr, alive as
        // long as `t`.
        Some(unsafe { std::slice::from_raw_parts(t.0.data_ptr().cast::<u8>(), len) })
    }
}

/// The same over the empty type: each takes a value that cannot exist.
#[cfg(not(feature = "tch"))]
mod imp {
    use voxlake_format::DType;

    use super::TchTensor;

    pub(super) fn shape(t: &TchTensor) -> Vec<usize> {
        match *t {}
    }

    pub(super) fn dtype(t: &TchTensor) -> DType {
        match *t {}
    }

    pub(super) fn cpu_bytes(t: &TchTensor) -> Option<&[u8]> {
        match *t {}
    }
}
