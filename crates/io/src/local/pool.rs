//! Recycled read buffers for the ranges that are read, not mapped (files on network and FUSE
//! mounts): a fresh buffer per read costs a page fault and the kernel's zeroing of every 4 KiB
//! page, each time, on top of the read's own copy (the reference table on a memory filesystem
//! that is read, not mapped: half the loader's system time, and RSS past a small budget from the
//! allocator's high-water marks).

use std::sync::{Arc, Mutex, PoisonError, Weak};

use bytes::Bytes;

/// Idle bytes the pool keeps; buffers given back beyond that are freed. A buffer is only made
/// when none is idle, so there are never more than the reads held at once at their peak (which
/// the loader's memory budget bounds), each as large as the largest range read into it.
const POOL_MAX_BYTES: usize = 1 << 30;

/// Buffers that were read into and are no longer viewed, ready to be read into again.
#[derive(Debug, Default)]
pub(crate) struct BufferPool {
    free: Mutex<Vec<Vec<u8>>>,
}

impl BufferPool {
    /// A buffer of `len` initialised bytes: the smallest idle one that is large enough, else
    /// the largest idle one grown, else a new one (zeroed where new).
    fn take(&self, len: usize) -> Vec<u8> {
        let mut buf = {
            let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
            let fit = free
                .iter()
                .enumerate()
                .filter(|(_, b)| b.len() >= len)
                .min_by_key(|(_, b)| b.len())
                .or_else(|| free.iter().enumerate().max_by_key(|(_, b)| b.len()))
                .map(|(i, _)| i);
            fit.map_or_else(Vec::new, |i| free.swap_remove(i))
        };
        if buf.len() < len {
            // Grown empty: its old bytes are not worth the copy a reallocation would make.
            buf.clear();
            buf.resize(len, 0);
        }
        buf
    }

    fn give(&self, buf: Vec<u8>) {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        let held: usize = free.iter().map(Vec::len).sum();
        if held + buf.len() <= POOL_MAX_BYTES {
            free.push(buf);
        }
    }

    /// Idle buffers and their bytes.
    pub(crate) fn idle(&self) -> (usize, usize) {
        let free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        (free.len(), free.iter().map(Vec::len).sum())
    }

    /// `len` bytes filled by `read`, in a buffer from `pool` that goes back to it when the last
    /// view of the returned `Bytes` is dropped. A failed read gives the buffer back at once.
    pub(crate) fn read<E>(
        pool: &Arc<BufferPool>,
        len: usize,
        read: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<Bytes, E> {
        let mut filling = BufferPool::filling(pool, len);
        read(filling.buf())?;
        Ok(filling.into_bytes())
    }

    /// A buffer of `len` bytes from `pool` to fill (asynchronously, in parts), handed out as
    /// [`Bytes`] once filled; dropped unfilled, it goes back to the pool.
    pub(crate) fn filling(pool: &Arc<BufferPool>, len: usize) -> Filling {
        Filling(Pooled {
            buf: pool.take(len),
            len,
            pool: Arc::downgrade(pool),
        })
    }
}

/// A pooled buffer being filled.
pub(crate) struct Filling(Pooled);

impl Filling {
    /// Its `len` bytes, to fill.
    pub(crate) fn buf(&mut self) -> &mut [u8] {
        let len = self.0.len;
        &mut self.0.buf[..len]
    }

    /// The filled bytes; the buffer goes back to the pool when the last view is dropped.
    pub(crate) fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self.0)
    }
}

/// A pooled buffer behind `Bytes`: its first `len` bytes are the data; back to the pool (if the
/// store is still there) when dropped.
struct Pooled {
    buf: Vec<u8>,
    len: usize,
    pool: Weak<BufferPool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.give(std::mem::take(&mut self.buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(value: u8) -> impl FnOnce(&mut [u8]) -> Result<(), ()> {
        move |buf| {
            buf.fill(value);
            Ok(())
        }
    }

    #[test]
    fn a_buffer_is_reused_only_after_its_last_view_is_dropped() {
        let pool = Arc::new(BufferPool::default());
        let first = BufferPool::read(&pool, 1000, fill(1)).unwrap();
        let view = first.slice(10..20);
        let address = first.as_ptr();
        drop(first);
        // A view still reads it: not in the pool, and the next read gets another buffer.
        assert_eq!(pool.idle(), (0, 0));
        let second = BufferPool::read(&pool, 1000, fill(2)).unwrap();
        assert_ne!(second.as_ptr(), address);
        assert_eq!(view.as_ref(), &[1; 10]);
        drop(view);
        assert_eq!(pool.idle(), (1, 1000));
        // Now it is read into again, and what is handed out is exactly `len` bytes.
        let third = BufferPool::read(&pool, 600, fill(3)).unwrap();
        assert_eq!(third.as_ptr(), address);
        assert_eq!(third.as_ref(), &[3; 600][..]);
        assert_eq!(second.as_ref(), &[2; 1000][..]);
        assert_eq!(pool.idle(), (0, 0));
    }

    #[test]
    fn the_smallest_fitting_buffer_is_taken_else_the_largest_grown() {
        let pool = Arc::new(BufferPool::default());
        let held: Vec<Bytes> = [300, 100, 200]
            .into_iter()
            .map(|len| BufferPool::read(&pool, len, fill(0)).unwrap())
            .collect();
        drop(held);
        assert_eq!(pool.idle(), (3, 600));
        let fits = BufferPool::read(&pool, 150, fill(0)).unwrap();
        assert_eq!(pool.idle(), (2, 400), "the 200-byte buffer");
        let grown = BufferPool::read(&pool, 500, fill(7)).unwrap();
        assert_eq!(pool.idle(), (1, 100), "the 300-byte one, grown");
        assert_eq!(grown.as_ref(), &[7; 500][..]);
        drop((fits, grown));
        assert_eq!(pool.idle(), (3, 800));
    }

    #[test]
    fn a_failed_read_gives_its_buffer_back_and_a_dropped_pool_frees() {
        let pool = Arc::new(BufferPool::default());
        let failed = BufferPool::read(&pool, 64, |_| Err("no"));
        assert_eq!(failed.unwrap_err(), "no");
        assert_eq!(pool.idle(), (1, 64));
        // Views may outlive the store: their buffer is then freed, not given back.
        let bytes = BufferPool::read(&pool, 64, fill(5)).unwrap();
        drop(pool);
        assert_eq!(bytes.as_ref(), &[5; 64][..]);
    }
}
