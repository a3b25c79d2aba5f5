//! A ring of host staging buffers for copies to a device (FFCV-style), pure: what a buffer is
//! and how a copy is fenced are the caller's.
//!
//! Each batch bound for a GPU is assembled into the next buffer in turn, copied to the device
//! asynchronously, and the copy's fence (a CUDA event recorded after it) kept with the buffer.
//! The buffer is handed out again only once that fence has passed, so a copy still reading a
//! buffer never sees the next batch written into it. The buffers are allocated once (pinned,
//! counted in the loader's memory budget), so no batch allocates host memory.
//!
//! ```ignore
//! let mut ring = Ring::new(buffers)?;
//! let mut lease = ring.acquire()?; // waits if this buffer's last copy is still running
//! fill(lease.buffer());
//! let fence = copy_to_device(lease.buffer());
//! lease.submit(fence); // the buffer is not handed out again before `fence` passes
//! ```

/// A point in a device's queue the host can ask about or wait for (a CUDA event).
pub(crate) trait Fence {
    /// Whether everything queued before the fence has finished.
    fn passed(&self) -> Result<bool, String>;
    /// Blocks until everything queued before the fence has finished.
    fn wait(&self) -> Result<(), String>;
}

/// Staging buffers used in turn, each with the fence of the last copy that read it.
pub(crate) struct Ring<B, F> {
    slots: Vec<(B, Option<F>)>,
    next: usize,
    waits: u64,
}

impl<B, F: Fence> Ring<B, F> {
    /// A ring over `buffers` (at least one).
    pub(crate) fn new(buffers: Vec<B>) -> Result<Self, String> {
        if buffers.is_empty() {
            return Err("a staging ring needs at least one buffer".into());
        }
        Ok(Ring {
            slots: buffers.into_iter().map(|b| (b, None)).collect(),
            next: 0,
            waits: 0,
        })
    }

    /// How many times [`acquire`](Self::acquire) found the buffer's copy still running and
    /// waited for it (a ring too short for the device's pace, or a busy device).
    pub(crate) fn waits(&self) -> u64 {
        self.waits
    }

    /// The next buffer in turn, once the copy that last read it has finished (waiting for it
    /// if it has not). A fence that fails to answer is an error, and the buffer stays fenced.
    pub(crate) fn acquire(&mut self) -> Result<Lease<'_, B, F>, String> {
        let slot = self.next;
        if let Some(fence) = &self.slots[slot].1
            && !fence.passed()?
        {
            self.waits += 1;
            fence.wait()?;
        }
        self.slots[slot].1 = None;
        self.next = (slot + 1) % self.slots.len();
        Ok(Lease { ring: self, slot })
    }
}

/// A buffer of the ring, free to write until [`submit`](Lease::submit)ted with the fence of
/// the copy that reads it. Dropped without that, the buffer is simply free again.
pub(crate) struct Lease<'a, B, F> {
    ring: &'a mut Ring<B, F>,
    slot: usize,
}

impl<B, F> Lease<'_, B, F> {
    /// The buffer.
    pub(crate) fn buffer(&mut self) -> &mut B {
        &mut self.ring.slots[self.slot].0
    }

    /// Hands the buffer to a copy: it is not handed out again before `fence` has passed.
    pub(crate) fn submit(self, fence: F) {
        self.ring.slots[self.slot].1 = Some(fence);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cell::RefCell;
    use std::collections::VecDeque;
    use std::rc::Rc;

    type Buffer = Rc<RefCell<Vec<u8>>>;

    /// A model of one CUDA stream: copies run in the order queued, each reading its buffer
    /// when it runs (not when queued), as a DMA engine does.
    #[derive(Default)]
    struct Device {
        queued: VecDeque<(u64, Buffer, u8)>,
        finished: u64,
        /// Copies that read something else than the batch written before they were queued.
        torn: Vec<String>,
        copied: Vec<u8>,
    }

    impl Device {
        fn run(&mut self, copies: usize) {
            for _ in 0..copies {
                let Some((ticket, buffer, expected)) = self.queued.pop_front() else {
                    return;
                };
                let data = buffer.borrow();
                if data.iter().any(|&b| b != expected) {
                    self.torn
                        .push(format!("copy {ticket} of batch {expected} read {data:?}"));
                }
                self.copied.push(data[0]);
                self.finished = ticket + 1;
            }
        }
    }

    struct Event {
        ticket: u64,
        device: Rc<RefCell<Device>>,
    }

    impl Fence for Event {
        fn passed(&self) -> Result<bool, String> {
            Ok(self.device.borrow().finished > self.ticket)
        }
        fn wait(&self) -> Result<(), String> {
            let mut device = self.device.borrow_mut();
            while device.finished <= self.ticket {
                if device.queued.is_empty() {
                    return Err("waiting for a copy never queued".into());
                }
                device.run(1);
            }
            Ok(())
        }
    }

    /// Runs `progress.len()` batches through a ring of `slots` buffers; after each is queued
    /// the device runs `progress[i]` copies. Returns the device and the ring's waits.
    fn run(slots: usize, progress: &[usize]) -> (Device, u64) {
        let device = Rc::new(RefCell::new(Device::default()));
        let buffers: Vec<Buffer> = (0..slots)
            .map(|_| Rc::new(RefCell::new(vec![0xFF; 16])))
            .collect();
        let mut ring = Ring::new(buffers).unwrap();
        for (batch, &copies) in progress.iter().enumerate() {
            let mut lease = ring.acquire().unwrap();
            let value = batch as u8;
            lease.buffer().borrow_mut().fill(value);
            let buffer = lease.buffer().clone();
            let ticket = {
                let mut d = device.borrow_mut();
                let ticket = batch as u64;
                d.queued.push_back((ticket, buffer, value));
                ticket
            };
            lease.submit(Event {
                ticket,
                device: device.clone(),
            });
            device.borrow_mut().run(copies);
        }
        let n = device.borrow().queued.len();
        device.borrow_mut().run(n);
        let waits = ring.waits();
        drop(ring);
        let device = Rc::try_unwrap(device).ok().unwrap().into_inner();
        (device, waits)
    }

    #[test]
    fn a_buffer_waits_for_the_copy_still_reading_it() {
        // A device that never gets ahead: every turn of the ring waits for the oldest copy.
        let (device, waits) = run(3, &[0; 10]);
        assert!(device.torn.is_empty(), "{:?}", device.torn);
        assert_eq!(device.copied, (0..10).collect::<Vec<u8>>());
        assert_eq!(waits, 7, "batches 3..10 found their buffer busy");
        // A device that keeps up: no wait.
        let (device, waits) = run(2, &[1; 10]);
        assert!(device.torn.is_empty());
        assert_eq!(waits, 0);
    }

    #[test]
    fn a_fence_that_fails_is_an_error_and_the_buffer_stays_fenced() {
        struct Broken;
        impl Fence for Broken {
            fn passed(&self) -> Result<bool, String> {
                Ok(false)
            }
            fn wait(&self) -> Result<(), String> {
                Err("device lost".into())
            }
        }
        let mut ring = Ring::new(vec![1u8]).unwrap();
        ring.acquire().unwrap().submit(Broken);
        assert_eq!(ring.acquire().err().as_deref(), Some("device lost"));
        assert_eq!(ring.acquire().err().as_deref(), Some("device lost"));
        assert!(Ring::<u8, Broken>::new(Vec::new()).is_err());
        // A lease dropped without a copy leaves its buffer free.
        let mut ring = Ring::<u8, Broken>::new(vec![1u8]).unwrap();
        *ring.acquire().unwrap().buffer() = 2;
        assert_eq!(*ring.acquire().unwrap().buffer(), 2);
    }

    proptest! {
        /// However far behind the device runs, no copy reads a buffer written after it was
        /// queued, and every batch is copied once, in order.
        #[test]
        fn no_copy_reads_a_buffer_rewritten_in_flight(
            slots in 1usize..5,
            progress in proptest::collection::vec(0usize..3, 1..60),
        ) {
            let (device, _) = run(slots, &progress);
            prop_assert!(device.torn.is_empty(), "{:?}", device.torn);
            let expected: Vec<u8> = (0..progress.len()).map(|b| b as u8).collect();
            prop_assert_eq!(device.copied, expected);
        }
    }
}
