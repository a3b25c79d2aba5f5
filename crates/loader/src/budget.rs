//! The smallest memory budget that can stream a table: pure arithmetic over one row group's
//! sizes, so `build()` can refuse a budget that would stall instead of hanging later.
//!
//! A row group takes its share of the budget before it is fetched (its projected chunks as
//! fetched plus as decoded: `peak`) and keeps the decoded share (`held`) while any of its rows
//! is in the shuffle buffer: the buffer holds whole row groups. When the buffer asks for another
//! group it holds at most [`held_when_asking`] of them, so the budget must fit that many held
//! groups and the next one's peak.

use voxlake_stream::GroupBudget;

/// Row groups of `rows` rows the [`Mixer`](voxlake_stream::mixer::Mixer) holds when it asks
/// for another, at most. Unshuffled it reads in order: the groups a batch needs, one partly
/// drawn. Shuffled it asks while it holds fewer than `m = ⌈buffer/rows⌉` groups (at most `m − 1`
/// then), or fewer rows than a batch: then each group it holds has a row left, so it holds at
/// most `batch − 1` groups, and no more than the rows a draw can leave behind (a draw happens
/// with at most `max(m·rows, batch − 1 + rows)` rows buffered) plus the groups pushed since.
/// Uniform draws do leave single rows in many groups when the buffer is close to a batch.
pub fn held_when_asking(rows: u64, batch_size: usize, buffer_rows: Option<usize>) -> u64 {
    let rows = rows.max(1);
    let batch = batch_size.max(1) as u64;
    match buffer_rows {
        None => batch.div_ceil(rows),
        Some(buffer) => {
            let m = (buffer.max(batch_size) as u64).div_ceil(rows).max(1);
            let left_after_draw = (m * rows).max(batch - 1 + rows) - batch;
            let stragglers = (batch - 1).min(left_after_draw + batch.div_ceil(rows));
            (m - 1).max(stragglers)
        }
    }
}

/// Bytes the budget needs for row groups of `group`'s size: the groups held when the buffer
/// asks for another, and that one's peak.
pub fn needed(group: GroupBudget, batch_size: usize, buffer_rows: Option<usize>) -> u64 {
    held_when_asking(group.rows, batch_size, buffer_rows) * group.held + group.peak
}

/// The shuffle buffer a budget allows: half of it in samples, at least one batch.
pub fn buffer_rows(budget: u64, sample_bytes: u64, requested: usize, batch_size: usize) -> usize {
    let fits = (budget / 2 / sample_bytes.max(1)) as usize;
    requested.min(fits).max(batch_size)
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
    // The need grows with the buffer, which grows with the budget by at most half of it (the
    // stragglers' term does not grow): the search ends. It starts below the smallest budget
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
    use voxlake_stream::mixer::Mixer;

    /// The reference cubes: 360,000 bytes each, row groups of 32.
    const CUBES: GroupBudget = GroupBudget {
        rows: 32,
        held: 32 * 360_000,
        peak: 2 * 32 * 360_000,
    };

    #[test]
    fn the_hang_of_issue_13_needs_three_groups() {
        // Unshuffled batches of 48 draw from two groups and a partly drawn one: 2 held + 1 at
        // its peak.
        let need = needed(CUBES, 48, None);
        assert_eq!(need, 2 * CUBES.held + CUBES.peak);
        assert!(need > 21 << 20, "21 MiB stalls");
        assert_eq!(smallest(CUBES, 48, 360_000, None), need);
        // A large shuffle buffer: its window, as before.
        assert_eq!(held_when_asking(32, 32, Some(1024)), 31);
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

    /// The bound holds for the mixer itself: over shapes where uniform draws leave stragglers
    /// (buffer close to a batch), the most groups it ever holds when it asks for another.
    #[test]
    fn the_bound_holds_for_the_mixer() {
        let shapes = [
            (32u64, 33usize, 33usize),
            (32, 63, 64),
            (32, 100, 100),
            (16, 100, 100),
            (10, 19, 19),
            (7, 30, 40),
            (5, 7, 7),
            (8, 64, 64),
            (32, 32, 1024),
            (2, 3, 3),
            (1, 4, 4),
        ];
        for (rows, batch, buffer) in shapes {
            let bound = held_when_asking(rows, batch, Some(buffer));
            let mut worst = 0;
            for seed in 0..30 {
                let mut mixer = Mixer::new(Some((seed, 1)), batch, buffer, false);
                let mut pushed = 0u64;
                while pushed < 2000 {
                    while mixer.wants() {
                        worst = worst.max(mixer.live_groups().len() as u64);
                        mixer.push(pushed, rows, rows);
                        pushed += 1;
                    }
                    mixer.next_batch();
                }
            }
            assert!(
                worst <= bound,
                "rows {rows} batch {batch} buffer {buffer}: held {worst} > {bound}"
            );
            // (The old bound, max(⌈batch/rows⌉, ⌈buffer/rows⌉ − 1), held 2 where 8 were seen.)
        }
        // Unshuffled: the groups of one batch and one partly drawn, never more.
        for (rows, batch) in [(32u64, 48usize), (3, 10), (5, 5)] {
            let mut mixer = Mixer::new(None, batch, batch, false);
            let (mut pushed, mut worst) = (0u64, 0);
            while pushed < 500 {
                while mixer.wants() {
                    worst = worst.max(mixer.live_groups().len() as u64);
                    mixer.push(pushed, rows, rows);
                    pushed += 1;
                }
                mixer.next_batch();
            }
            assert!(
                worst <= held_when_asking(rows, batch, None),
                "rows {rows} batch {batch}: {worst}"
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
        assert_eq!(needed(tiny, 4, None), 2 * 720_000 + 1_440_000);
    }
}
