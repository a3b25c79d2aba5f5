//! The smallest memory budget that can stream a table: pure arithmetic over one row group's
//! sizes, so `build()` can refuse a budget that would stall instead of hanging later.
//!
//! A row group takes its share of the budget before it is fetched (its projected chunks as
//! fetched plus as decoded: `peak`) and keeps the decoded share (`held`) while any of its rows
//! is in the shuffle buffer. The buffer holds whole row groups: up to `⌈buffer/rows⌉` of them,
//! and at least the groups one batch draws from (`⌈batch/rows⌉`, plus the one partly drawn). So
//! the budget must fit that many held groups but one, and the next group's peak.

/// Sizes of a row group, in bytes and rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupSize {
    /// Rows in the row group.
    pub rows: u64,
    /// Bytes kept while buffered (the decoded columns).
    pub held: u64,
    /// Bytes taken while it is fetched and decoded.
    pub peak: u64,
}

/// Row groups the shuffle buffer may hold at once.
fn groups_held(group: GroupSize, batch_size: usize, buffer_rows: Option<usize>) -> u64 {
    let rows = group.rows.max(1);
    let for_batch = (batch_size as u64).div_ceil(rows) + 1;
    let for_buffer = buffer_rows.map_or(1, |b| (b as u64).div_ceil(rows));
    for_batch.max(for_buffer)
}

/// Bytes the budget needs for row groups of `group`'s size: all held groups but one, and the
/// next one's peak.
pub fn needed(group: GroupSize, batch_size: usize, buffer_rows: Option<usize>) -> u64 {
    (groups_held(group, batch_size, buffer_rows) - 1) * group.held + group.peak
}

/// The shuffle buffer a budget allows: half of it in samples, at least one batch.
pub fn buffer_rows(budget: u64, sample_bytes: u64, requested: usize, batch_size: usize) -> usize {
    let fits = (budget / 2 / sample_bytes.max(1)) as usize;
    requested.min(fits).max(batch_size)
}

/// The smallest budget that streams row groups of `group`'s size with batches of `batch_size`
/// (and a shuffle buffer of `shuffle` rows asked for, which a larger budget lets grow).
pub fn smallest(
    group: GroupSize,
    batch_size: usize,
    sample_bytes: u64,
    shuffle: Option<usize>,
) -> u64 {
    let batch = batch_size as u64 * sample_bytes;
    let mut budget = batch.max(1);
    // The need grows with the buffer, which grows with the budget by at most half of it:
    // the search ends (a budget of 2 × (peak + batch) always fits).
    for _ in 0..64 {
        let buffer = shuffle.map(|r| buffer_rows(budget, sample_bytes, r, batch_size));
        let need = needed(group, batch_size, buffer).max(batch);
        if need <= budget {
            return budget;
        }
        budget = need;
    }
    budget
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference cubes: 360,000 bytes each, row groups of 32.
    const CUBES: GroupSize = GroupSize {
        rows: 32,
        held: 32 * 360_000,
        peak: 2 * 32 * 360_000,
    };

    #[test]
    fn the_hang_of_issue_13_needs_three_groups() {
        // Batches of 48 draw from two groups and a partly drawn one: 2 held + 1 at its peak.
        let need = needed(CUBES, 48, None);
        assert_eq!(need, 2 * CUBES.held + CUBES.peak);
        assert!(need > 21 << 20, "21 MiB stalls");
        assert_eq!(smallest(CUBES, 48, 360_000, None), need);
    }

    #[test]
    fn a_shuffle_buffer_grows_with_the_budget_and_the_search_settles() {
        let s = smallest(CUBES, 32, 360_000, Some(1024));
        let buffer = buffer_rows(s, 360_000, 1024, 32);
        assert!(needed(CUBES, 32, Some(buffer)) <= s);
        // One byte less no longer fits its own buffer (or the batch).
        let smaller = s - 1;
        let b = buffer_rows(smaller, 360_000, 1024, 32);
        assert!(needed(CUBES, 32, Some(b)) > smaller);
    }

    #[test]
    fn small_groups_need_little() {
        let tiny = GroupSize {
            rows: 2,
            held: 720_000,
            peak: 1_440_000,
        };
        assert_eq!(needed(tiny, 4, None), 2 * 720_000 + 1_440_000);
    }
}
