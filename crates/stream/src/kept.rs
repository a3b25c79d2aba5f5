//! Row groups kept in the memory budget from one epoch to the next.
//!
//! A row group the consumer is done with gives its budget share back. Unless a read waits for
//! budget, it is kept instead, decoded, with that share: the next epoch's read of the same row
//! group takes it back without fetching, decoding or checking it again (a snapshot's files
//! never change). A read that finds too little budget free first lets go of the least recently
//! kept row groups until its share is free; while one waits, nothing is kept. So kept row
//! groups only ever hold budget no read is asking for, and a table that fits the budget is read
//! from its store once a job (`docs/usage.md`, "memory budget").

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use arrow_array::RecordBatch;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use voxlake_plan::order::Unit;

/// A row group's identity: its file and its index in the file.
pub(crate) type GroupKey = (usize, usize);

/// Under a filter: the row group's first row in the file and the rows of it selected.
pub(crate) type FileRows = Option<(u64, Option<Arc<[u32]>>)>;

/// Its rows' checks, where the consumer checks each row before using it (`Verify::OnUse`).
pub(crate) type Checks = Option<Arc<voxlake_table::checksums::RowChecks>>;

/// A whole row group as kept and shared: its columns, the rows of the file they are (under a
/// filter), their checks (which remember the rows found whole).
#[derive(Debug, Clone)]
pub(crate) struct Whole {
    pub(crate) batch: RecordBatch,
    pub(crate) file_rows: FileRows,
    pub(crate) checks: Checks,
}

/// The row group a unit reads, as its kept and shared reads know it.
pub(crate) fn keep_key(unit: &Unit) -> GroupKey {
    (unit.file, unit.row_group)
}

/// A kept row group and what it holds of the budget.
#[derive(Debug)]
pub(crate) struct KeptGroup {
    pub(crate) whole: Whole,
    pub(crate) permit: OwnedSemaphorePermit,
}

/// A row group's budget share, and where the row group goes once the last holder of the share
/// is dropped (a `RowGroupBatch` and its clones).
#[derive(Debug)]
pub(crate) struct Share {
    permit: Option<OwnedSemaphorePermit>,
    keep: Option<Keep>,
}

/// A whole row group to keep for the next epoch's read of it.
#[derive(Debug)]
struct Keep {
    to: Weak<Kept>,
    whole: Whole,
    key: GroupKey,
}

impl Share {
    /// `permit`, given back when dropped.
    pub(crate) fn new(permit: OwnedSemaphorePermit) -> Share {
        Share {
            permit: Some(permit),
            keep: None,
        }
    }

    /// Has the whole row group `group` kept in `kept` as `key` when `share` is dropped, and
    /// notes it there as in use meanwhile; nothing where `share` is not the only reference or
    /// `kept` keeps nothing.
    pub(crate) fn keep_in(share: &mut Arc<Share>, kept: &Arc<Kept>, key: GroupKey, group: Whole) {
        if !kept.enabled {
            return;
        }
        if let Some(only) = Arc::get_mut(share) {
            only.keep = Some(Keep {
                to: Arc::downgrade(kept),
                whole: group,
                key,
            });
            kept.register(key, Arc::downgrade(share));
        }
    }

    /// The whole row group this share keeps, if it does.
    pub(crate) fn whole(&self) -> Option<Whole> {
        Some(self.keep.as_ref()?.whole.clone())
    }

    /// The share of `rows` of the row group's `total` copied out of it: the rest of the budget
    /// given back, the row group let go rather than kept.
    pub(crate) fn for_rows(mut self, rows: usize, total: usize) -> Share {
        self.keep = None;
        let mut permit = self.permit.take();
        if let Some(permit) = &mut permit {
            let held = permit.num_permits();
            let keep = (held * rows).div_ceil(total.max(1)).clamp(1, held.max(1));
            drop(permit.split(held - keep));
        }
        Share { permit, keep: None }
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        if let (Some(permit), Some(keep)) = (self.permit.take(), self.keep.take())
            && let Some(kept) = keep.to.upgrade()
        {
            let group = KeptGroup {
                whole: keep.whole,
                permit,
            };
            kept.put(keep.key, group);
        }
    }
}

/// Buffers smaller than this are not read in again when a kept row group is reused: mappings
/// only hold the large ones (`voxlake_io::local`).
const FAULT_IN_MIN: usize = 64 << 10;

/// Reads in the pages of `batch`'s large buffers ([`voxlake_io::local::fault_in`]).
pub(crate) fn fault_in(batch: &RecordBatch) -> std::io::Result<()> {
    fn buffers(data: &arrow_data::ArrayData) -> std::io::Result<()> {
        for buffer in data.buffers() {
            if buffer.len() >= FAULT_IN_MIN {
                voxlake_io::local::fault_in(buffer.as_slice())?;
            }
        }
        data.child_data().iter().try_for_each(buffers)
    }
    batch
        .columns()
        .iter()
        .try_for_each(|column| buffers(&column.to_data()))
}

/// The row groups a stream keeps (see the module's documentation).
#[derive(Debug, Default)]
pub(crate) struct Kept {
    /// Whether row groups are kept at all (`ReadOptions::keep`).
    enabled: bool,
    table: Mutex<Table>,
    /// Reads waiting for budget now: while there are any, nothing is kept.
    waiting: AtomicUsize,
}

/// [`Kept`]'s row groups and the order they were kept in.
#[derive(Debug, Default)]
struct Table {
    by_group: HashMap<GroupKey, (u64, KeptGroup)>,
    order: BTreeMap<u64, GroupKey>,
    clock: u64,
    /// The row groups read and in use now (by the epoch ending while the next one reads ahead,
    /// or a padded unit of the same row group): a read of one shares it.
    live: HashMap<GroupKey, Weak<Share>>,
}

/// A read that may wait for budget (see [`Kept::make_room`]); counted until dropped.
pub(crate) struct Waiting<'a>(&'a Kept);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Kept {
    /// Row groups kept where `enabled`, else none.
    pub(crate) fn new(enabled: bool) -> Kept {
        Kept {
            enabled,
            ..Kept::default()
        }
    }

    /// Keeps `group` as `key`, unless a read waits for budget (it is dropped then, its share
    /// given back) or nothing is kept.
    pub(crate) fn put(&self, key: GroupKey, group: KeptGroup) {
        if !self.enabled {
            return drop(group);
        }
        let mut table = self.lock();
        // Checked under the lock that `make_room` takes after counting itself: a read that
        // counted itself first finds this group kept and lets it go, else this sees it.
        if self.waiting.load(Ordering::SeqCst) > 0 {
            drop(table);
            return drop(group);
        }
        if table.live.get(&key).is_some_and(|w| w.strong_count() == 0) {
            table.live.remove(&key);
        }
        table.clock += 1;
        let now = table.clock;
        table.order.insert(now, key);
        let replaced = table.by_group.insert(key, (now, group));
        if let Some((then, _)) = &replaced {
            table.order.remove(then);
        }
        drop(table);
        drop(replaced);
    }

    /// The row group kept as `key`, taken out.
    pub(crate) fn take(&self, key: GroupKey) -> Option<KeptGroup> {
        let mut table = self.lock();
        let (then, group) = table.by_group.remove(&key)?;
        table.order.remove(&then);
        Some(group)
    }

    /// Notes `share` as row group `key` read and in use (see [`live`](Self::live)).
    fn register(&self, key: GroupKey, share: Weak<Share>) {
        self.lock().live.insert(key, share);
    }

    /// Row group `key` as a read in use now holds it, if one does.
    pub(crate) fn live(&self, key: GroupKey) -> Option<Arc<Share>> {
        let mut table = self.lock();
        let share = table.live.get(&key)?.upgrade();
        if share.is_none() {
            table.live.remove(&key);
        }
        // Returned (not dropped) while locked: the last reference's drop keeps the row group,
        // which takes this lock.
        share
    }

    /// Counts a read that may wait for budget until the guard is dropped.
    pub(crate) fn waiting(&self) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        Waiting(self)
    }

    /// Lets go of the least recently kept row groups until `budget` has `kib` permits free or
    /// nothing is kept. The caller holds a [`Waiting`] guard, so nothing is kept meanwhile.
    pub(crate) fn make_room(&self, _waiting: &Waiting<'_>, budget: &Semaphore, kib: usize) {
        loop {
            if budget.available_permits() >= kib {
                return;
            }
            let oldest = {
                let mut table = self.lock();
                let Some((_, key)) = table.order.pop_first() else {
                    return;
                };
                table.by_group.remove(&key)
            };
            // Dropped outside the lock: its share goes back, its memory (or mapping) is freed.
            drop(oldest);
        }
    }

    /// Row groups kept now, and the budget (KiB) they hold.
    #[cfg(test)]
    pub(crate) fn held(&self) -> (usize, usize) {
        let table = self.lock();
        let kib = table
            .by_group
            .values()
            .map(|(_, g)| g.permit.num_permits())
            .sum();
        (table.by_group.len(), kib)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // A panic while holding it leaves the table whole (every change is one insert/remove).
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;
    use arrow_schema::{DataType, Field, Schema};

    fn group(budget: &Arc<Semaphore>, kib: u32) -> KeptGroup {
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from_iter_values(0..4))],
        )
        .unwrap();
        KeptGroup {
            whole: Whole {
                batch,
                file_rows: None,
                checks: None,
            },
            permit: budget.clone().try_acquire_many_owned(kib).unwrap(),
        }
    }

    /// A whole row group in use is found live (a read shares it); once its last holder is
    /// dropped it is kept with its share, and a row group with rows copied out is let go.
    #[test]
    fn a_row_group_in_use_is_shared_then_kept() {
        let budget = Arc::new(Semaphore::new(100));
        let kept = Arc::new(Kept::new(true));
        let whole = group(&budget, 30);
        let mut share = Arc::new(Share::new(whole.permit));
        Share::keep_in(&mut share, &kept, (3, 1), whole.whole);
        let shared = kept.live((3, 1)).expect("in use");
        assert!(Arc::ptr_eq(&shared, &share) && shared.whole().is_some());
        assert!(kept.live((3, 0)).is_none());
        drop((share, shared));
        assert!(kept.live((3, 1)).is_none(), "no longer in use");
        assert_eq!(kept.held(), (1, 30), "kept with its share");
        let back = kept.take((3, 1)).unwrap();
        // Rows copied out of it: the rest of its share given back, nothing kept.
        let mut share = Arc::new(Share::new(back.permit));
        Share::keep_in(&mut share, &kept, (3, 1), back.whole);
        let rows = Arc::try_unwrap(share).unwrap().for_rows(1, 3);
        assert_eq!(budget.available_permits(), 90);
        drop(rows);
        assert_eq!((kept.held(), budget.available_permits()), ((0, 0), 100));
        // A stream that keeps nothing neither shares nor keeps.
        let off = Arc::new(Kept::new(false));
        let whole = group(&budget, 30);
        let mut share = Arc::new(Share::new(whole.permit));
        Share::keep_in(&mut share, &off, (3, 1), whole.whole);
        assert!(off.live((3, 1)).is_none() && share.whole().is_none());
        drop(share);
        assert_eq!((off.held(), budget.available_permits()), ((0, 0), 100));
    }

    #[test]
    fn room_is_made_oldest_first_and_nothing_is_kept_while_a_read_waits() {
        let budget = Arc::new(Semaphore::new(100));
        let off = Kept::new(false);
        off.put((0, 0), group(&budget, 30));
        assert_eq!((off.held(), budget.available_permits()), ((0, 0), 100));
        let kept = Kept::new(true);
        for (key, kib) in [((0, 0), 30), ((0, 1), 30), ((1, 0), 30)] {
            kept.put(key, group(&budget, kib));
        }
        assert_eq!(kept.held(), (3, 90));
        assert_eq!(budget.available_permits(), 10);
        // Taken back: no longer kept; kept again: the most recent.
        let back = kept.take((0, 0)).unwrap();
        assert!(kept.take((0, 0)).is_none());
        kept.put((0, 0), back);
        {
            let waiting = kept.waiting();
            kept.make_room(&waiting, &budget, 60);
            // (0, 1) went first, then (1, 0): (0, 0) was kept last.
            assert_eq!(budget.available_permits(), 70);
            assert!(kept.take((0, 1)).is_none() && kept.take((1, 0)).is_none());
            // While a read waits, a group given back is not kept: its share goes back.
            kept.put((2, 0), group(&budget, 20));
            assert_eq!(budget.available_permits(), 70);
            assert_eq!(kept.held(), (1, 30));
            kept.make_room(&waiting, &budget, 1000);
            assert_eq!(
                budget.available_permits(),
                100,
                "all let go: still too little"
            );
        }
        kept.put((2, 0), group(&budget, 20));
        assert_eq!(kept.held(), (1, 20), "kept again once no read waits");
    }
}
