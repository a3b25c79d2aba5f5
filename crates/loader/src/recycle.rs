//! [`Recycler`]: batch memory handed back for the loader (or lookup) to fill again.

use std::sync::{Arc, Mutex};

use crate::Tensors;

/// Gives a batch's first field back to its loader (or lookup) for refilling
/// ([`Loader::recycler`](crate::Loader::recycler)).
#[derive(Debug, Clone)]
pub struct Recycler {
    recycled: Arc<Mutex<Vec<Tensors>>>,
    max: usize,
}

impl Recycler {
    pub(crate) fn new(recycled: Arc<Mutex<Vec<Tensors>>>, max: usize) -> Recycler {
        Recycler { recycled, max }
    }

    /// Keeps `tensors` (a batch's first field, [`Batch::tensors`](crate::Batch::tensors)) for
    /// a later batch, if the loader holds fewer spares than it keeps; libtorch tensors are not
    /// kept.
    pub fn recycle(&self, tensors: Tensors) {
        if matches!(tensors, Tensors::Tch(_)) {
            return;
        }
        // A poisoned lock only means a panic elsewhere, which the iterator reports.
        if let Ok(mut recycled) = self.recycled.lock()
            && recycled.len() < self.max
        {
            recycled.push(tensors);
        }
    }
}
