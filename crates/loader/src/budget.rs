//! The smallest memory budget that can stream a table: pure arithmetic over one row group's
//! sizes, so `build()` can refuse a budget that would stall instead of hanging later.
//!
//! A row group takes its share of the budget before it is fetched (its projected chunks as
//! fetched plus as decoded: `peak`) and keeps the decoded share (`held`) while any of its rows
//! is in the shuffle buffer, or a share in proportion to its rows once the buffer copied its
//! last few rows out ([`Mixer::loosen`](voxlake_plan::mixer::Mixer::loosen)). When the
//! buffer asks for another group it holds fewer than `held_rows_when_asking` rows' worth (a
//! bound the mixer's own tests check), so the budget must fit that many rows and the next
//! group's peak.

use voxlake_stream::GroupBudget;

/// Rows' worth of row groups (whole groups by their rows, loose ones by the rows they kept)
/// that the [`Mixer`](voxlake_plan::mixer::Mixer) holds at most when it asks for another
/// group of at most `rows` rows. Unshuffled: less than a batch buffered, plus the rows already
/// drawn from the one group partly drawn. Shuffled: less than its buffer (or a batch, if
/// larger); stragglers beyond that are loosened.
pub(crate) fn held_rows_when_asking(
    rows: u64,
    batch_size: usize,
    buffer_rows: Option<usize>,
) -> u64 {
    let batch = batch_size.max(1) as u64;
    match buffer_rows {
        None => batch - 1 + rows.max(1) - 1,
        Some(buffer) => (buffer as u64).max(batch) - 1,
    }
}

/// What the stream counts for each group held beyond its bytes: its share is counted in whole
/// KiB, rounded up, and a buffer may hold a group per row.
pub(crate) const ROW_SHARE: u64 = 1024;

/// Bytes the budget needs for row groups of `group`'s size: the rows held when the buffer
/// asks for another group, and that group's peak, each with its `ROW_SHARE` (the next one's
/// too).
pub fn needed(group: GroupBudget, batch_size: usize, buffer_rows: Option<usize>) -> u64 {
    let per_row = group.held.div_ceil(group.rows.max(1));
    let rows = held_rows_when_asking(group.rows, batch_size, buffer_rows);
    rows * per_row + group.peak + (rows + 1) * ROW_SHARE
}

/// The shuffle buffer a budget allows: half of it in buffered rows (each its sample and its
/// `ROW_SHARE`, as [`needed`] counts them), at least one batch.
pub fn buffer_rows(budget: u64, sample_bytes: u64, requested: usize, batch_size: usize) -> usize {
    let fits = (budget / 2 / (sample_bytes + ROW_SHARE)) as usize;
    requested.min(fits).max(batch_size)
}

/// The budget [`buffer_rows`] lets hold a buffer of `rows` rows of `sample_bytes`.
pub(crate) fn budget_for_buffer(rows: usize, sample_bytes: u64) -> u64 {
    2 * rows as u64 * (sample_bytes + ROW_SHARE)
}

/// The smallest budget that streams row groups of `group`'s size with batches of `batch_size`
/// (and a shuffle buffer of `shuffle` rows asked for, which a larger budget lets grow).
pub fn smallest(
    group: GroupBudget,
    batch_size: usize,
    sample_bytes: u64,
    shuffle: Option<usize>,
) -> u64 {
    let batch = batch_size as u64 * sample_bytes;
    let mut budget = batch.max(1);
    // The need grows with the buffer, which grows with the budget by at most half of it: the
    // search ends. It starts below the smallest budget
    // and the need is monotone in the budget, so the first budget that fits is the smallest.
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
    use voxlake_plan::mixer::Mixer;

    /// The reference cubes: 360,000 bytes each, row groups of 32.
    const CUBES: GroupBudget = GroupBudget {
        rows: 32,
        held: 32 * 360_000,
        peak: 2 * 32 * 360_000,
    };

    #[test]
    fn the_hang_of_issue_13_needs_three_groups() {
        // Unshuffled batches of 48: less than a batch buffered and up to 31 rows drawn from
        // the front group (less than three groups), plus the next one's peak.
        let need = needed(CUBES, 48, None);
        assert_eq!(
            need,
            (47 + 31) * 360_000 + CUBES.peak + (78 + 1) * ROW_SHARE
        );
        assert!(need > 21 << 20, "21 MiB stalls");
        assert_eq!(smallest(CUBES, 48, 360_000, None), need);
        // A large shuffle buffer: its rows.
        assert_eq!(held_rows_when_asking(32, 32, Some(1024)), 1023);
    }

    /// Small samples: the buffer a budget allows is one the budget streams (its rows' shares
    /// counted), where counting samples alone let it grow past what `needed` accepts.
    #[test]
    fn small_samples_get_a_buffer_their_budget_streams() {
        let tiny = GroupBudget {
            rows: 2000,
            held: 2000 * 48,
            peak: 2 * 2000 * 48,
        };
        let budget = 1 << 20;
        let buffer = buffer_rows(budget, 16, 1500, 32);
        assert!(buffer < 1500, "{buffer}");
        assert!(needed(tiny, 32, Some(buffer)) <= budget);
        assert!(budget_for_buffer(buffer, 16) <= budget);
        assert!(budget_for_buffer(buffer + 1, 16) > budget - 2 * (16 + ROW_SHARE));
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

    /// The most rows' worth the mixer holds when it asks for another group, over seeds,
    /// with groups of `rows` rows except every seventh (a file's short last group).
    fn worst_held(rows: u64, batch: usize, buffer: Option<usize>) -> u64 {
        let mut worst = 0;
        for seed in 0..30 {
            let mut mixer = Mixer::new(
                buffer.map(|_| (seed, 1)),
                batch,
                buffer.unwrap_or(batch),
                false,
            );
            let mut pushed = 0u64;
            while pushed < 1000 {
                while mixer.wants() {
                    worst = worst.max(mixer.held_rows());
                    let n = if pushed % 7 == 6 { rows / 3 + 1 } else { rows };
                    mixer.push(pushed, n, n);
                    mixer.loosen(|g, _| Ok::<_, ()>(g)).unwrap();
                    pushed += 1;
                }
                mixer.next_batch();
                mixer.loosen(|g, _| Ok::<_, ()>(g)).unwrap();
            }
        }
        worst
    }

    /// The bound against the mixer itself, including the buffers close to a batch whose
    /// stragglers held 8 whole groups where the old estimate said 2.
    #[test]
    fn the_bound_against_the_mixer() {
        for (rows, batch) in [(32u64, 48usize), (3, 10), (5, 5), (32, 33)] {
            let (worst, bound) = (
                worst_held(rows, batch, None),
                held_rows_when_asking(rows, batch, None),
            );
            assert!(
                worst <= bound,
                "rows {rows} batch {batch}: {worst} > {bound}"
            );
        }
        for (rows, batch, buffer) in [
            (32u64, 32usize, 1024usize),
            (8, 64, 512),
            (2, 3, 24),
            (32, 33, 33),
            (32, 33, 40),
            (7, 50, 60),
        ] {
            let (worst, bound) = (
                worst_held(rows, batch, Some(buffer)),
                held_rows_when_asking(rows, batch, Some(buffer)),
            );
            assert!(
                worst <= bound,
                "rows {rows} batch {batch} buffer {buffer}: {worst} > {bound}"
            );
        }
    }

    #[test]
    fn small_groups_need_little() {
        let tiny = GroupBudget {
            rows: 2,
            held: 720_000,
            peak: 1_440_000,
        };
        assert_eq!(
            needed(tiny, 4, None),
            (3 + 1) * 360_000 + 1_440_000 + (4 + 1) * 1024
        );
    }
}
