//! The device's set-up as the loader's build calls it: the device checked, CUDA's context and
//! staging ring started (`torch`, `feed`); without the `tch` feature, empty types and functions
//! that take a value which cannot exist.

#[cfg(not(feature = "tch"))]
pub(crate) use empty::*;
#[cfg(feature = "tch")]
pub(crate) use imp::*;

#[cfg(feature = "tch")]
mod imp {
    use std::sync::Mutex;

    pub(crate) use tch::Device;
    use voxlake_format::SampleSpec;

    use crate::LoaderError;
    pub(crate) use crate::feed::{Setup as Staging, Warming};

    /// Whether batches for `device` are staged for a CUDA copy.
    pub(crate) fn is_cuda(device: Device) -> bool {
        device.is_cuda()
    }

    /// Checks `device` and starts making its CUDA context (`None` for a CPU device), before
    /// the table opens: it needs nothing of the table, and takes longer than a local open.
    pub(crate) fn warm(device: Device) -> Result<Option<Warming>, LoaderError> {
        crate::torch::check_device(device)?;
        Staging::warm(device)
    }

    /// The staging ring for `device` (`None` but for CUDA), set up beside the stream's first
    /// reads after the context `warming` makes; every tensor field of `spec` must have a
    /// libtorch kind.
    pub(crate) fn staging(
        device: Device,
        spec: &SampleSpec,
        batch_size: usize,
        warming: Option<Warming>,
    ) -> Result<Option<Mutex<Staging>>, LoaderError> {
        for (_, field) in spec.tensors() {
            crate::torch::kind_of(field.dtype())?;
        }
        let fields: Vec<usize> = spec.tensors().map(|(_, s)| s.nbytes()).collect();
        Ok(Staging::start(device, batch_size, fields, warming)?.map(Mutex::new))
    }
}

#[cfg(not(feature = "tch"))]
mod empty {
    use std::sync::Mutex;

    use voxlake_format::SampleSpec;

    use crate::LoaderError;

    /// No device without the `tch` feature.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Device {}
    /// No staging ring without a device.
    pub(crate) enum Staging {}
    /// No CUDA context being made.
    pub(crate) enum Warming {}

    pub(crate) fn is_cuda(device: Device) -> bool {
        match device {}
    }

    pub(crate) fn warm(device: Device) -> Result<Option<Warming>, LoaderError> {
        match device {}
    }

    pub(crate) fn staging(
        device: Device,
        _: &SampleSpec,
        _: usize,
        _: Option<Warming>,
    ) -> Result<Option<Mutex<Staging>>, LoaderError> {
        match device {}
    }
}
