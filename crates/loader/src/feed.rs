//! Batches bound for a CUDA device (feature `tch`): staged in a [`Ring`] of host buffers
//! allocated pinned once at `build()`, each batch one transfer (labels and samples together),
//! then viewed on the device.
//!
//! A staging buffer is bytes: the batch's labels (Int64, when every sample has one) first,
//! then each tensor field's samples (a volume, its mask), each part starting at a multiple of 8
//! bytes, so all of it arrives with one copy and the labels never need a blocking copy of their
//! own. On the device the parts are views of the copied bytes (`view_dtype`, no kernel); only a
//! channels-first batch runs one (the permutation). The copy runs on a stream
//! of its own (`cuda/copy.cpp`), and the event recorded after it is the buffer's fence: the
//! buffer is written again only once that copy has finished ([`Ring`]), never while the DMA
//! engine may still read it.
//!
//! Everything but [`Cuda`]'s two calls into the shim runs on the CPU in the tests, with a
//! copier that copies on the host.

use std::ffi::{c_char, c_int, c_void};
use std::ptr::NonNull;

use tch::{Device, Kind, Tensor};
use voxlake_format::DType;

use crate::LoaderError;
use crate::ring::{Fence, Ring};
use crate::torch::{empty_host, fill_raw, kind_of, with_error};

use crate::STAGING_BUFFERS;

/// Copies a host tensor to a device, with a fence that passes once the copy has finished.
pub(crate) trait Copier {
    /// The copy's fence.
    type Fence: Fence;
    /// `host` (contiguous bytes) copied to the device, asynchronously.
    fn copy(&self, host: &Tensor) -> Result<(Tensor, Self::Fence), String>;
    /// Whether staging buffers should be pinned.
    fn pinned(&self) -> bool;
}

/// Batches staged in a ring of host buffers and copied by a [`Copier`].
pub(crate) struct DeviceFeed<C: Copier> {
    copier: C,
    ring: Ring<Tensor, C::Fence>,
    batch_size: usize,
    capacity: usize,
    /// Whether the staging buffers are page-locked (else pageable: libtorch could not lock them).
    pinned: bool,
}

/// A batch on the device: each tensor field's samples in stored layout `[B, …shape]`, in
/// order, and its labels.
pub(crate) struct OnDevice {
    pub tensors: Vec<Tensor>,
    pub labels: Option<Tensor>,
}

/// One tensor field of a batch to stage: its element type, one sample's shape, and each
/// sample's little-endian bytes.
pub(crate) struct Staged<'a> {
    pub dtype: DType,
    pub shape: &'a [usize],
    pub samples: &'a [&'a [u8]],
}

/// `n` rounded up to a multiple of 8 (every element type's alignment).
fn aligned(n: usize) -> usize {
    n.div_ceil(8) * 8
}

impl<C: Copier> DeviceFeed<C> {
    /// A feed for batches of up to `batch_size` samples whose tensor fields take
    /// `field_bytes` each: the ring's buffers are allocated now (pinned when the copier asks
    /// for it; pageable, with a warning, where libtorch cannot pin).
    pub(crate) fn new(
        copier: C,
        batch_size: usize,
        field_bytes: &[usize],
    ) -> Result<Self, LoaderError> {
        let capacity = batch_size * std::mem::size_of::<i64>()
            + field_bytes
                .iter()
                .map(|b| aligned(batch_size * b))
                .sum::<usize>();
        let size = [capacity as i64];
        // Pinned where the copier asks and libtorch can; else pageable, said once.
        let mut pinned = copier.pinned();
        let mut buffers = Vec::with_capacity(STAGING_BUFFERS);
        for _ in 0..STAGING_BUFFERS {
            let buffer = match empty_host(&size, DType::U8, pinned) {
                Err(reason) if pinned => {
                    tracing::warn!(%reason, "staging buffers not pinned: batch copies will not overlap");
                    pinned = false;
                    empty_host(&size, DType::U8, false)
                }
                other => other,
            }
            .map_err(|e| {
                LoaderError::Config(format!("allocating {capacity} bytes of staging buffer: {e}"))
            })?;
            buffers.push(buffer);
        }
        Ok(DeviceFeed {
            copier,
            ring: Ring::new(buffers).map_err(LoaderError::Internal)?,
            batch_size,
            capacity,
            pinned,
        })
    }

    /// Whether the staging buffers are page-locked.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn pinned(&self) -> bool {
        self.pinned
    }

    /// Times a staging buffer was still being copied when its turn came.
    pub(crate) fn waits(&self) -> u64 {
        self.ring.waits()
    }

    /// Stages each field's samples (little-endian) and `labels` in the next buffer and copies
    /// them to the device in one transfer.
    pub(crate) fn send(
        &mut self,
        fields: &[Staged<'_>],
        labels: &[Option<i64>],
        pool: Option<&rayon::ThreadPool>,
    ) -> Result<OnDevice, String> {
        let rows = labels.len();
        let labels: Option<Vec<i64>> = labels.iter().copied().collect();
        let label_bytes = labels.as_ref().map_or(0, |l| l.len() * 8);
        // Each field's offset in the buffer, and its bytes.
        let mut offsets = Vec::with_capacity(fields.len());
        let mut used = label_bytes;
        let mut fits = rows <= self.batch_size;
        for field in fields {
            let numel: usize = field.shape.iter().product();
            let bytes = rows * numel * field.dtype.size();
            fits &= field.samples.len() == rows
                && field
                    .samples
                    .iter()
                    .all(|s| s.len() == numel * field.dtype.size());
            offsets.push((used, bytes, numel));
            used = aligned(used + bytes);
        }
        if !fits || used > self.capacity {
            return Err(format!(
                "a batch of {rows} samples ({used} bytes with labels) does not fit the {} bytes staged per batch of {}",
                self.capacity, self.batch_size
            ));
        }
        let mut lease = self.ring.acquire()?;
        let buffer = lease.buffer();
        let base = buffer.data_ptr().cast::<u8>();
        if let Some(labels) = &labels {
            // SAFETY: the buffer is `capacity` bytes, contiguous, owned by the ring and, its
            // last copy finished (`acquire`), used by nobody else; `label_bytes <= capacity`.
            let dst = unsafe { std::slice::from_raw_parts_mut(base, label_bytes) };
            for (dst, label) in dst.chunks_exact_mut(8).zip(labels) {
                dst.copy_from_slice(&label.to_ne_bytes());
            }
        }
        for (field, &(offset, _, numel)) in fields.iter().zip(&offsets) {
            // SAFETY: as above, for the field's `rows * numel` elements at `offset`, inside the
            // `used <= capacity` bytes; the offset is a multiple of 8, so aligned for every
            // element type, and the fields' ranges do not overlap. The rows were checked
            // before (the caller's `check_rows`), so no check fails here.
            unsafe {
                fill_raw(
                    base.add(offset),
                    field.dtype,
                    numel,
                    field.samples,
                    None,
                    pool,
                    None,
                )
            }
            .map_err(|e| e.to_string())?;
        }
        let staged = buffer
            .f_narrow(0, 0, used as i64)
            .map_err(|e| e.to_string())?;
        let (copied, fence) = self.copier.copy(&staged)?;
        lease.submit(fence);
        let mut tensors = Vec::with_capacity(fields.len());
        for (field, &(offset, bytes, _)) in fields.iter().zip(&offsets) {
            let kind = kind_of(field.dtype).map_err(|e| e.to_string())?;
            let mut shape = vec![rows as i64];
            shape.extend(field.shape.iter().map(|&d| d as i64));
            tensors.push(
                copied
                    .f_narrow(0, offset as i64, bytes as i64)
                    .and_then(|t| t.f_view_dtype(kind))
                    .and_then(|t| t.f_view(shape.as_slice()))
                    .map_err(|e| e.to_string())?,
            );
        }
        let labels = match labels {
            Some(_) => Some(
                copied
                    .f_narrow(0, 0, label_bytes as i64)
                    .and_then(|t| t.f_view_dtype(Kind::Int64))
                    .map_err(|e| e.to_string())?,
            ),
            None => None,
        };
        Ok(OnDevice { tensors, labels })
    }
}

/// Copies to CUDA device `index` through `cuda/copy.cpp`: on a stream of the pool, the
/// device's default stream (tch's) waiting on the copy's event, which is the fence.
pub(crate) struct Cuda(pub usize);

// SAFETY: an owned `c10::Event*`, freed once; c10 events may be queried and waited for from any
// thread.
unsafe impl Send for CudaEvent {}

/// A `c10::Event` recorded after a copy (owned; freed on drop).
pub(crate) struct CudaEvent(NonNull<c_void>);

impl Drop for CudaEvent {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `voxlake_copy_to_cuda` and is freed only here.
        unsafe { voxlake_event_free(self.0.as_ptr()) }
    }
}

unsafe extern "C" {
    /// `host` copied to CUDA device `device` on a stream of its own (a new `at::Tensor*`) and,
    /// when `event` is not null, the event recorded after the copy; or null with the error.
    fn voxlake_copy_to_cuda(
        host: *const torch_sys::C_tensor,
        device: c_int,
        event: *mut *mut c_void,
        error: *mut c_char,
        error_len: usize,
    ) -> *mut torch_sys::C_tensor;
    fn voxlake_event_query(event: *const c_void, error: *mut c_char, error_len: usize) -> c_int;
    fn voxlake_event_wait(event: *const c_void, error: *mut c_char, error_len: usize) -> c_int;
    fn voxlake_event_free(event: *mut c_void);
}

impl Fence for CudaEvent {
    fn passed(&self) -> Result<bool, String> {
        // SAFETY: a live event; the error buffer is valid for its length.
        let done = with_error(
            |e, n| unsafe { voxlake_event_query(self.0.as_ptr(), e, n) },
            |r| *r < 0,
        )?;
        Ok(done == 1)
    }

    fn wait(&self) -> Result<(), String> {
        // SAFETY: as in `passed`.
        with_error(
            |e, n| unsafe { voxlake_event_wait(self.0.as_ptr(), e, n) },
            |r| *r < 0,
        )
        .map(drop)
    }
}

impl Copier for Cuda {
    type Fence = CudaEvent;

    fn copy(&self, host: &Tensor) -> Result<(Tensor, CudaEvent), String> {
        let mut event = std::ptr::null_mut();
        // SAFETY: `host` is a live tensor handle for the call, `event` a valid out-pointer,
        // the error buffer valid for its length; the shim returns a fresh `at::Tensor*` that
        // tch's `Tensor` takes over, or null.
        let copied = with_error(
            |e, n| unsafe {
                voxlake_copy_to_cuda(host.as_ptr(), self.0 as c_int, &mut event, e, n)
            },
            |t| t.is_null(),
        )?;
        // SAFETY: a fresh `at::Tensor*` owned by nobody else.
        let copied = unsafe { Tensor::from_ptr(copied) };
        let event = NonNull::new(event).ok_or("the copy recorded no event")?;
        Ok((copied, CudaEvent(event)))
    }

    fn pinned(&self) -> bool {
        true
    }
}

/// CUDA's context being made, from the start of `build()` ([`Setup::warm`]).
pub(crate) type Warming = std::thread::JoinHandle<Result<(), LoaderError>>;

/// A CUDA device's feed, set up on threads of their own while the table opens (the context)
/// and the stream reads its first row groups (the pinned ring): both took 0.26–0.38 s on an
/// H200, added to the first batch when they were made between the open and the stream's start.
/// The first batch waits for it; an error in it is that batch's error (and every later one's).
pub(crate) enum Setup {
    /// Being set up.
    Pending(std::thread::JoinHandle<Result<DeviceFeed<Cuda>, LoaderError>>),
    /// Set up.
    Ready(DeviceFeed<Cuda>),
    /// Why it could not be set up.
    Failed(String),
}

impl Setup {
    /// Starts making CUDA's context for `device` (CUDA only: `None` for others) before the
    /// table is opened: it needs nothing of the table, and takes longer than a local open.
    pub(crate) fn warm(device: Device) -> Result<Option<Warming>, LoaderError> {
        if !device.is_cuda() {
            return Ok(None);
        }
        std::thread::Builder::new()
            .name("voxlake-cuda-context".into())
            .spawn(move || crate::torch::warm_up(device))
            .map(Some)
            .map_err(|e| LoaderError::Internal(format!("starting the CUDA set-up thread: {e}")))
    }

    /// Starts setting up the feed for `device` (CUDA only: `None` for others), after the
    /// context `warming` makes.
    pub(crate) fn start(
        device: Device,
        batch_size: usize,
        field_bytes: Vec<usize>,
        warming: Option<Warming>,
    ) -> Result<Option<Setup>, LoaderError> {
        let Device::Cuda(index) = device else {
            return Ok(None);
        };
        let thread = std::thread::Builder::new()
            .name("voxlake-cuda-setup".into())
            .spawn(move || {
                match warming.map(std::thread::JoinHandle::join) {
                    None => crate::torch::warm_up(device)?,
                    Some(Ok(warmed)) => warmed?,
                    Some(Err(panic)) => {
                        return Err(LoaderError::Internal(format!(
                            "making the CUDA context panicked: {}",
                            voxlake_io::panic_message(panic.as_ref())
                        )));
                    }
                }
                DeviceFeed::new(Cuda(index), batch_size, &field_bytes)
            })
            .map_err(|e| LoaderError::Internal(format!("starting the CUDA set-up thread: {e}")))?;
        Ok(Some(Setup::Pending(thread)))
    }

    /// The feed, waiting for its set-up the first time.
    pub(crate) fn ready(&mut self) -> Result<&mut DeviceFeed<Cuda>, String> {
        if let Setup::Pending(_) = self
            && let Setup::Pending(thread) =
                std::mem::replace(self, Setup::Failed("set up twice".into()))
        {
            *self = match thread.join() {
                Ok(Ok(feed)) => Setup::Ready(feed),
                Ok(Err(e)) => Setup::Failed(e.to_string()),
                Err(panic) => Setup::Failed(format!(
                    "setting up the device panicked: {}",
                    voxlake_io::panic_message(panic.as_ref())
                )),
            };
        }
        match self {
            Setup::Ready(feed) => Ok(feed),
            Setup::Failed(message) => Err(message.clone()),
            Setup::Pending(_) => Err("the device is still being set up".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A copier on the CPU: copies at once, and counts the fences asked about; asks for
    /// page-locked buffers where `.1`.
    struct Host<'a>(&'a Cell<usize>, bool);

    struct Done;

    impl Fence for Done {
        fn passed(&self) -> Result<bool, String> {
            Ok(true)
        }
        fn wait(&self) -> Result<(), String> {
            Ok(())
        }
    }

    impl Copier for Host<'_> {
        type Fence = Done;
        fn copy(&self, host: &Tensor) -> Result<(Tensor, Done), String> {
            self.0.set(self.0.get() + 1);
            Ok((host.copy(), Done))
        }
        fn pinned(&self) -> bool {
            self.1
        }
    }

    /// A copier like a DMA engine behind a busy stream: a copy reads the staged bytes only when
    /// it runs, which is when its fence is waited for (or at `finish`), in queue order.
    #[derive(Default)]
    struct Deferred {
        queue: std::cell::RefCell<std::collections::VecDeque<(u64, Tensor, Tensor)>>,
        queued: Cell<u64>,
        finished: Cell<u64>,
    }

    impl Deferred {
        fn run_to(&self, ticket: u64) {
            while self.finished.get() <= ticket {
                let Some((n, staged, mut out)) = self.queue.borrow_mut().pop_front() else {
                    return;
                };
                out.copy_(&staged);
                self.finished.set(n + 1);
            }
        }

        fn finish(&self) {
            self.run_to(self.queued.get());
        }
    }

    struct Ticket<'a>(u64, &'a Deferred);

    impl Fence for Ticket<'_> {
        fn passed(&self) -> Result<bool, String> {
            Ok(self.1.finished.get() > self.0)
        }
        fn wait(&self) -> Result<(), String> {
            self.1.run_to(self.0);
            Ok(())
        }
    }

    impl<'a> Copier for &'a Deferred {
        type Fence = Ticket<'a>;
        fn copy(&self, host: &Tensor) -> Result<(Tensor, Ticket<'a>), String> {
            let ticket = self.queued.get();
            self.queued.set(ticket + 1);
            let out = host.zeros_like();
            // The staged bytes themselves (a view of the ring's buffer), read when the copy runs.
            let queue = (ticket, host.shallow_clone(), out.shallow_clone());
            self.queue.borrow_mut().push_back(queue);
            Ok((out, Ticket(ticket, self)))
        }
        fn pinned(&self) -> bool {
            false
        }
    }

    #[test]
    fn staging_falls_back_to_pageable_buffers_where_none_can_be_locked() {
        // Page-locked buffers asked for: without a GPU libtorch cannot lock them, and the feed
        // goes on with pageable ones (a warning, not an error), its batches whole.
        let copies = Cell::new(0);
        let mut feed = DeviceFeed::new(Host(&copies, true), 2, &[8]).unwrap();
        assert_eq!(feed.pinned(), tch::Cuda::is_available());
        let owned: [Vec<u8>; 2] = [vec![1; 8], vec![2; 8]];
        let refs: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let got = feed
            .send(
                &[staged(DType::F32, &[2], &refs)],
                &[Some(3), Some(4)],
                None,
            )
            .unwrap();
        assert_eq!(got.tensors.len(), 1);
        assert_eq!(got.tensors[0].size(), vec![2, 2]);
        let bytes = Vec::<u8>::try_from(&got.tensors[0].view_dtype(Kind::Uint8).view(-1)).unwrap();
        assert_eq!(bytes, [vec![1; 8], vec![2; 8]].concat());
        assert_eq!(
            Vec::<i64>::try_from(&got.labels.unwrap()).unwrap(),
            vec![3, 4]
        );
        assert_eq!(copies.get(), 1);
    }

    #[test]
    fn batches_arrive_whole_when_copies_run_late() {
        // Every copy runs as late as the ring allows: a buffer written again before its copy
        // ran would hand out the later batch's bytes.
        let engine = Deferred::default();
        let mut feed = DeviceFeed::new(&engine, 4, &[6 * 4]).unwrap();
        let mut sent = Vec::new();
        for batch in 0..11usize {
            let owned: Vec<Vec<u8>> = (0..4)
                .map(|r| (0..24).map(|i| (batch * 40 + r * 7 + i) as u8).collect())
                .collect();
            let refs: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            let labels: Vec<Option<i64>> = (0..4).map(|r| Some((batch * 4 + r) as i64)).collect();
            let got = feed
                .send(&[staged(DType::F32, &[2, 3], &refs)], &labels, None)
                .unwrap();
            let nd = crate::batch::build_tensors(DType::F32, &[4, 2, 3], &refs, None).unwrap();
            sent.push((got, nd, labels));
        }
        assert!(
            feed.waits() >= 8,
            "the ring waited for each buffer's copy: {}",
            feed.waits()
        );
        engine.finish();
        for (batch, (got, nd, labels)) in sent.into_iter().enumerate() {
            let tensors = crate::batch::Tensors::Tch(crate::TchTensor(
                got.tensors.into_iter().next().unwrap(),
            ));
            assert_eq!(tensors.as_bytes(), nd.as_bytes(), "batch {batch}");
            let want: Vec<i64> = labels.into_iter().map(Option::unwrap).collect();
            assert_eq!(Vec::<i64>::try_from(&got.labels.unwrap()).unwrap(), want);
        }
    }

    fn staged<'a>(dtype: DType, shape: &'a [usize], samples: &'a [&'a [u8]]) -> Staged<'a> {
        Staged {
            dtype,
            shape,
            samples,
        }
    }

    fn samples(dtype: DType, rows: usize, numel: usize) -> Vec<Vec<u8>> {
        (0..rows)
            .map(|r| {
                (0..numel * dtype.size())
                    .map(|i| {
                        ((r * 31 + i * 7) % 251) as u8 % if dtype == DType::Bool { 2 } else { 251 }
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_staged_batch_arrives_as_the_ndarray_path_builds_it() {
        let copies = Cell::new(0);
        let shape = [2usize, 3, 4];
        let mut feed = DeviceFeed::new(Host(&copies, false), 5, &[24 * 8]).unwrap();
        for dtype in DType::ALL.into_iter().filter(|&d| kind_of(d).is_ok()) {
            // Full batches and a shorter last one, with and without labels, round the ring.
            for (turn, rows) in [5usize, 5, 3, 5, 1].into_iter().enumerate() {
                let owned = samples(dtype, rows, 24);
                let refs: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
                let labels: Vec<Option<i64>> = match turn % 2 {
                    0 => (0..rows as i64).map(|l| Some(l * -3 + 1)).collect(),
                    _ => (0..rows).map(|l| (l > 0).then_some(1)).collect(),
                };
                let got = feed
                    .send(&[staged(dtype, &shape, &refs)], &labels, None)
                    .unwrap();
                let batch_shape = [rows, 2, 3, 4];
                let nd = crate::batch::build_tensors(dtype, &batch_shape, &refs, None).unwrap();
                let got_tensors = crate::batch::Tensors::Tch(crate::TchTensor(
                    got.tensors.into_iter().next().unwrap(),
                ));
                assert_eq!(got_tensors.shape(), batch_shape);
                assert_eq!(got_tensors.dtype(), dtype);
                assert_eq!(got_tensors.as_bytes(), nd.as_bytes(), "{dtype} turn {turn}");
                match got.labels {
                    Some(l) => {
                        assert_eq!(turn % 2, 0);
                        let want: Vec<i64> = labels.iter().map(|l| l.unwrap()).collect();
                        assert_eq!(Vec::<i64>::try_from(&l).unwrap(), want);
                    }
                    None => assert_eq!(turn % 2, 1, "a missing label: no label tensor"),
                }
            }
        }
        assert_eq!(
            copies.get(),
            5 * 10,
            "one transfer per batch, labels included"
        );
        assert_eq!(feed.waits(), 0);
    }

    #[test]
    fn a_batch_larger_than_staged_is_refused() {
        let copies = Cell::new(0);
        let mut feed = DeviceFeed::new(Host(&copies, false), 2, &[4]).unwrap();
        let rows = [[0u8; 4]; 3];
        let refs: Vec<&[u8]> = rows.iter().map(|r| &r[..]).collect();
        let e = feed
            .send(
                &[staged(DType::F32, &[1], &refs)],
                &[None, None, None],
                None,
            )
            .err()
            .unwrap();
        assert!(e.contains("does not fit"), "{e}");
        let e = feed
            .send(&[staged(DType::F32, &[2], &refs[..1])], &[None], None)
            .err()
            .unwrap();
        assert!(
            e.contains("does not fit"),
            "a sample of the wrong size: {e}"
        );
        assert_eq!(copies.get(), 0);
        // The refused batches took no buffer: the next one goes through.
        assert!(
            feed.send(&[staged(DType::F32, &[1], &refs[..2])], &[None, None], None)
                .is_ok()
        );
    }

    #[test]
    fn several_fields_arrive_in_one_transfer_each_as_the_ndarray_path_builds_it() {
        // A volume (f32, 2x3) and its mask (u8, 2x3: 6 bytes, the next part aligned to 8) and
        // a scalar (f64), labelled: one copy per batch, each field viewed in place.
        let copies = Cell::new(0);
        let fields = [6 * 4, 6, 8];
        let mut feed = DeviceFeed::new(Host(&copies, false), 3, &fields).unwrap();
        for rows in [3usize, 1, 3] {
            let volume = samples(DType::F32, rows, 6);
            let mask = samples(DType::U8, rows, 6);
            let scalar = samples(DType::F64, rows, 1);
            fn refs(v: &[Vec<u8>]) -> Vec<&[u8]> {
                v.iter().map(Vec::as_slice).collect()
            }
            let (volume, mask, scalar) = (refs(&volume), refs(&mask), refs(&scalar));
            let labels: Vec<Option<i64>> = (0..rows as i64).map(|l| Some(l + 10)).collect();
            let got = feed
                .send(
                    &[
                        staged(DType::F32, &[2, 3], &volume),
                        staged(DType::U8, &[2, 3], &mask),
                        staged(DType::F64, &[], &scalar),
                    ],
                    &labels,
                    None,
                )
                .unwrap();
            assert_eq!(got.tensors.len(), 3);
            let checks = [
                (DType::F32, vec![rows, 2, 3], &volume),
                (DType::U8, vec![rows, 2, 3], &mask),
                (DType::F64, vec![rows], &scalar),
            ];
            for (t, (dtype, shape, refs)) in got.tensors.into_iter().zip(checks) {
                let t = crate::batch::Tensors::Tch(crate::TchTensor(t));
                let nd = crate::batch::build_tensors(dtype, &shape, refs, None).unwrap();
                assert_eq!((t.shape(), t.dtype()), (shape, dtype));
                assert_eq!(t.as_bytes(), nd.as_bytes(), "{dtype} of {rows} rows");
            }
            let want: Vec<i64> = labels.iter().map(|l| l.unwrap()).collect();
            assert_eq!(Vec::<i64>::try_from(&got.labels.unwrap()).unwrap(), want);
        }
        assert_eq!(
            copies.get(),
            3,
            "one transfer per batch, every field and the labels"
        );
    }

    #[test]
    fn copies_to_a_cuda_device_go_through_the_stream_shim() {
        let host = Tensor::from_slice(&[1.5f32, 2.5]);
        match Cuda(0).copy(&host) {
            // A GPU machine: the values arrive (the default stream waits for the copy), the
            // event passes.
            Ok((t, event)) => {
                assert_eq!(t.device(), Device::Cuda(0));
                event.wait().unwrap();
                assert!(event.passed().unwrap());
                let back = Vec::<f32>::try_from(&t.to_device(Device::Cpu)).unwrap();
                assert_eq!(back, vec![1.5, 2.5]);
            }
            // No GPU: libtorch's own reason, never a crash.
            Err(e) => {
                assert!(!tch::Cuda::is_available(), "{e}");
                assert!(!e.is_empty());
            }
        }
        assert!(Setup::warm(Device::Cpu).unwrap().is_none());
        assert!(
            Setup::start(Device::Cpu, 4, vec![4], None)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_cuda_feed_is_set_up_beside_the_caller_and_its_error_is_kept() {
        let warming = Setup::warm(Device::Cuda(0)).unwrap();
        assert!(warming.is_some());
        let mut setup = Setup::start(Device::Cuda(0), 4, vec![16], warming)
            .unwrap()
            .unwrap();
        match setup.ready() {
            // A GPU machine: the ring is there, and stays.
            Ok(feed) => {
                assert_eq!(feed.waits(), 0);
                assert!(setup.ready().is_ok());
            }
            // No GPU: the set-up's error, the same on every later batch.
            Err(first) => {
                assert!(!tch::Cuda::is_available(), "{first}");
                assert!(first.contains("Cuda"), "{first}");
                assert_eq!(setup.ready().err(), Some(first));
            }
        }
    }
}
