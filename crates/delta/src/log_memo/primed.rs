//! Answers just read by one reader of the log, handed once to the next that asks the same:
//! voxlake's own commit reader looks at `_last_checkpoint` and lists `_delta_log` before it
//! knows whether the log is one it reads (no checkpoint); where it is not, the Delta kernel
//! asks both again at once, and gets what was seen a moment before instead of a round trip
//! each.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use object_store::ObjectMeta;
use object_store::path::Path;

/// A primed object's answer: its bytes and metadata, or `None` where it was not found.
pub(crate) type Found = Option<(Bytes, ObjectMeta)>;

/// The primed answers (each taken once).
#[derive(Debug, Default)]
pub(crate) struct Primed {
    gets: Mutex<HashMap<Path, Found>>,
    listings: Mutex<HashMap<Path, Vec<ObjectMeta>>>,
}

impl Primed {
    /// The next plain get of `location` is answered with `found`.
    pub(crate) fn get(&self, location: Path, found: Found) {
        if let Ok(mut gets) = self.gets.lock() {
            gets.insert(location, found);
        }
    }

    /// The next listing of `prefix` (from its start or from an offset) is answered from
    /// `objects`, a whole listing of it.
    pub(crate) fn listing(&self, prefix: Path, objects: Vec<ObjectMeta>) {
        if let Ok(mut listings) = self.listings.lock() {
            listings.insert(prefix, objects);
        }
    }

    /// The primed answer to a plain get of `location`, taken.
    pub(crate) fn take_get(&self, location: &Path) -> Option<Found> {
        self.gets.lock().ok()?.remove(location)
    }

    /// The primed listing of `prefix` past `offset` (in the store's order, by location), taken.
    pub(crate) fn take_listing(
        &self,
        prefix: Option<&Path>,
        offset: Option<&Path>,
    ) -> Option<Vec<ObjectMeta>> {
        let objects = self.listings.lock().ok()?.remove(prefix?)?;
        Some(match offset {
            Some(offset) => objects
                .into_iter()
                .filter(|o| o.location.as_ref() > offset.as_ref())
                .collect(),
            None => objects,
        })
    }

    /// Lets every primed answer go.
    pub(crate) fn clear(&self) {
        if let Ok(mut gets) = self.gets.lock() {
            gets.clear();
        }
        if let Ok(mut listings) = self.listings.lock() {
            listings.clear();
        }
    }
}
