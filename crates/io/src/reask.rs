//! When a stalled read is asked again (pure): a request that has not answered, or a body that
//! has sent nothing, for twice the 99th percentile of the store's measured time to first byte is asked
//! again ([`crate::remote`] does it), so a stalled connection costs about that, not the client's
//! 30 s timeout. Object stores stall single requests now and then (a slow server, a lost
//! packet on one connection); asking again is what their SDKs' "hedged" or "timed-out and
//! retried" reads do.
//!
//! Until [`WARM`] answers are timed the deadline is [`UNMEASURED`]; it never goes below
//! [`FLOOR`] (a runtime busy decoding must not look like a store stalling) nor above
//! [`CEILING`]. Each re-ask of the same read waits twice as long as the one before, and after
//! [`REASKS`] the read waits as long as the client itself allows: a store that is merely slow,
//! or away and being retried by object_store's own policy, is never failed by this guard, only
//! asked again a few times. Re-asks are budgeted as hedged requests are ("The Tail at Scale"):
//! at most [`BUDGET_BASE`] plus one in [`BUDGET_EVERY`] answers; past it a read waits as the
//! client allows, so an overloaded store is not sent more requests than it answers.
//!
//! ```
//! use std::time::Duration;
//! use voxlake_io::reask::{FLOOR, ReaskClock, UNMEASURED};
//!
//! let mut clock = ReaskClock::default();
//! assert_eq!(clock.deadline(0), Some(UNMEASURED));
//! for i in 0..100u64 {
//!     clock.answered(Duration::from_millis(200 + i)); // 200–299 ms
//! }
//! // Twice the 99th percentile (298 ms), doubling per re-ask, then none.
//! assert_eq!(clock.deadline(0), Some(Duration::from_millis(596)));
//! assert_eq!(clock.deadline(1), Some(Duration::from_millis(1192)));
//! assert_eq!(clock.deadline(3), None);
//! # let _ = FLOOR;
//! ```

use std::collections::VecDeque;
use std::time::Duration;

/// Answers timed before the measured deadline replaces [`UNMEASURED`].
pub const WARM: usize = 20;
/// Answers remembered (the percentile is over these).
const RECENT: usize = 200;
/// The deadline before the store's answers are measured.
pub const UNMEASURED: Duration = Duration::from_secs(2);
/// The least deadline.
pub const FLOOR: Duration = Duration::from_millis(250);
/// The most a measured deadline can be (the first wait; re-asks double it).
pub const CEILING: Duration = Duration::from_secs(10);
/// Times one read is asked again before it waits as long as the client allows.
pub const REASKS: u32 = 3;
/// Re-asks allowed before any answer counts toward the budget.
pub const BUDGET_BASE: u64 = 8;
/// One re-ask allowed per this many answers.
pub const BUDGET_EVERY: u64 = 50;

/// The store's recent times to first byte, and the deadlines they give.
#[derive(Debug, Clone, Default)]
pub struct ReaskClock {
    recent: VecDeque<Duration>,
    /// Answers timed in all.
    answers: u64,
    /// Re-asks made in all.
    reasked: u64,
}

impl ReaskClock {
    /// A request answered after `took` (its time to first byte).
    pub fn answered(&mut self, took: Duration) {
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(took);
        self.answers += 1;
    }

    /// A read was asked again.
    pub fn reasked(&mut self) {
        self.reasked += 1;
    }

    /// How long the `reask`-th asking of a read (0: the first) waits for its answer or its next
    /// bytes before it is asked again; `None`: as long as the client allows (its last asking,
    /// or the re-ask budget spent).
    pub fn deadline(&self, reask: u32) -> Option<Duration> {
        if reask >= REASKS || self.reasked >= BUDGET_BASE + self.answers / BUDGET_EVERY {
            return None;
        }
        let first = if self.recent.len() < WARM {
            UNMEASURED
        } else {
            let mut sorted: Vec<Duration> = self.recent.iter().copied().collect();
            sorted.sort_unstable();
            // The 99th percentile, nearest rank.
            let p99 = sorted[(sorted.len() * 99).div_ceil(100) - 1];
            (p99 * 2).clamp(FLOOR, CEILING)
        };
        Some(first * (1 << reask))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever was measured: the first deadline within its bounds, each re-ask waiting
        /// twice the one before, and the last asking unbounded.
        #[test]
        fn deadlines_are_bounded_and_grow(times in prop::collection::vec(0u64..60_000, 0..400)) {
            let mut clock = ReaskClock::default();
            for t in &times {
                clock.answered(Duration::from_millis(*t));
            }
            let first = clock.deadline(0).unwrap();
            prop_assert!(first >= FLOOR && first <= CEILING.max(UNMEASURED));
            for k in 1..REASKS {
                prop_assert_eq!(clock.deadline(k), Some(first * (1 << k)));
            }
            prop_assert_eq!(clock.deadline(REASKS), None);
            if times.len() >= WARM {
                // At least 99 % of the remembered answers came within half the deadline, or
                // the deadline is at its floor or ceiling.
                let kept = &times[times.len().saturating_sub(RECENT)..];
                let within = kept.iter().filter(|t| Duration::from_millis(**t) * 2 <= first).count();
                prop_assert!(
                    within * 100 >= kept.len() * 99 || first == CEILING,
                    "{} of {} within {:?}", within, kept.len(), first
                );
            }
        }
    }

    #[test]
    fn re_asks_are_budgeted_by_the_answers() {
        let mut clock = ReaskClock::default();
        for _ in 0..BUDGET_BASE {
            assert!(clock.deadline(0).is_some());
            clock.reasked();
        }
        assert_eq!(clock.deadline(0), None, "the base budget spent");
        for _ in 0..BUDGET_EVERY {
            clock.answered(Duration::from_millis(5));
        }
        assert!(
            clock.deadline(0).is_some(),
            "one more per {BUDGET_EVERY} answers"
        );
        clock.reasked();
        assert_eq!(clock.deadline(0), None);
    }

    #[test]
    fn one_slow_answer_in_a_hundred_does_not_set_the_deadline() {
        let mut clock = ReaskClock::default();
        for _ in 0..99 {
            clock.answered(Duration::from_millis(20));
        }
        clock.answered(Duration::from_secs(30));
        assert_eq!(clock.deadline(0), Some(FLOOR));
    }
}
