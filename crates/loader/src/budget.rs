//! The smallest memory budget that can stream a table: pure arithmetic over one row group's
//! sizes, so `build()` can refuse a budget that would stall instead of hanging later.
//!
//! A row group takes its share of the budget before it is fetched (its projected chunks as
//! fetched plus as decoded: `peak`) and keeps the decoded share (`held`) while any of its rows
//! is in the shuffle buffer: the buffer holds whole row groups. When the buffer asks for another
//! group it holds [`held_when_asking`] of them (a bound unshuffled, an estimate shuffled), so the
//! budget must fit that many held groups and the next one's peak.

use voxlake_stream::GroupBudget;

/// Row groups of `rows` rows the [`Mixer`](voxlake_stream::mixer::Mixer) typically holds when
/// it asks for another. Unshuffled (in order, a bound): the groups a batch needs, one partly
/// drawn. Shuffled: its window, `⌈buffer/rows⌉ − 1`, or the groups of a batch. An estimate for
/// shuffled buffers close to a batch: uniform draws there leave the last rows of several groups
/// behind (each keeps its whole group), and the mixer then holds more (8 where this says 2, at
/// 32-row groups, batches of 33 and a buffer of 33); a provable bound would count up to
/// `batch − 1` such groups and refuse budgets that stream. A run that outgrows its budget so ends
/// in an error naming the bytes it needs (the producer's stall check), never a hang.
pub fn held_when_asking(rows: u64, batch_size: usize, buffer_rows: Option<usize>) -> u64 {
    let rows = rows.max(1);
    let for_batch = (batch_size.max(1) as u64).div_ceil(rows);
    match buffer_rows {
        None => for_batch,
        Some(buffer) => {
            let window = (buffer.max(batch_size) as u64).div_ceil(rows).max(1);
            for_batch.max(window - 1)
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
        // A large shuffle buffer: its window.
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

    /// The most groups the mixer holds when it asks for another, over 30 seeds.
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
                    worst = worst.max(mixer.live_groups().len() as u64);
                    mixer.push(pushed, rows, rows);
                    pushed += 1;
                }
                mixer.next_batch();
            }
        }
        worst
    }

    /// The estimate against the mixer itself: a bound unshuffled, and shuffled with a buffer of
    /// several batches (the loader's usual case); exceeded with a buffer close to a batch (the
    /// known gap, which the producer's stall check reports at run time).
    #[test]
    fn the_estimate_against_the_mixer() {
        for (rows, batch) in [(32u64, 48usize), (3, 10), (5, 5)] {
            let worst = worst_held(rows, batch, None);
            assert!(
                worst <= held_when_asking(rows, batch, None),
                "rows {rows} batch {batch}: {worst}"
            );
        }
        for (rows, batch, buffer) in [(32u64, 32usize, 1024usize), (8, 64, 512), (2, 3, 24)] {
            let (worst, estimate) = (
                worst_held(rows, batch, Some(buffer)),
                held_when_asking(rows, batch, Some(buffer)),
            );
            assert!(
                worst <= estimate,
                "rows {rows} batch {batch} buffer {buffer}: {worst} > {estimate}"
            );
        }
        let (worst, estimate) = (
            worst_held(32, 33, Some(33)),
            held_when_asking(32, 33, Some(33)),
        );
        assert!(
            worst > estimate,
            "the gap at a buffer of one batch is closed: {worst} <= {estimate}"
        );
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
