//! When the sampler ticks: on absolute deadlines `start + n × interval`, so that the rate does
//! not drift and a late wake-up is made up rather than lost.
//!
//! The thread sleeps with `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)` until the next
//! deadline: the time spent sampling, and a wake-up that came late, do not shift the ticks
//! after it (a relative sleep would add both to every period). A tick whose deadline has already
//! passed runs at once, so the average rate is the target. A stall longer than [`CATCH_UP`]
//! intervals is not made up (samples taken back to back would all see the same instant): its
//! slots are counted as skipped and the ticks resume on the schedule.

use std::time::Duration;

use nix::sys::time::TimeSpec;
use nix::time::{ClockId, ClockNanosleepFlags, clock_nanosleep};

/// The most overdue ticks that are made up after a late wake-up.
pub const CATCH_UP: u64 = 10;

/// The tick schedule and how well it was kept.
#[derive(Debug)]
pub struct Ticker {
    start_ns: u64,
    interval_ns: u64,
    /// The number of the next tick; tick `n` is due at `start + n × interval`.
    next: u64,
    /// Ticks that ran after their deadline had passed (made up without sleeping).
    pub late: u64,
    /// Slots given up in stalls longer than [`CATCH_UP`] intervals.
    pub skipped: u64,
    /// The longest delay between a tick's deadline and its start.
    pub max_late: Duration,
}

/// CLOCK_MONOTONIC in nanoseconds (the clock `std::time::Instant` reads on Linux).
pub fn monotonic_ns() -> u64 {
    let now = ClockId::CLOCK_MONOTONIC.now().unwrap_or_else(|_| TimeSpec::new(0, 0));
    u64::try_from(Duration::from(now).as_nanos()).unwrap_or(u64::MAX)
}

impl Ticker {
    /// A schedule whose tick 0 is due now.
    pub fn start(interval: Duration) -> Ticker {
        Ticker {
            start_ns: monotonic_ns(),
            interval_ns: u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX).max(1),
            next: 0,
            late: 0,
            skipped: 0,
            max_late: Duration::ZERO,
        }
    }

    fn deadline_ns(&self, tick: u64) -> u64 {
        self.start_ns.saturating_add(tick.saturating_mul(self.interval_ns))
    }

    /// Waits until the next tick is due and returns the monotonic time it starts at, in ns.
    pub fn wait(&mut self) -> u64 {
        let deadline = self.deadline_ns(self.next);
        let mut now = monotonic_ns();
        if now < deadline {
            let target = TimeSpec::from(Duration::from_nanos(deadline));
            // A signal interrupts the sleep (EINTR); sleeping again to the same absolute deadline
            // loses nothing.
            while clock_nanosleep(
                ClockId::CLOCK_MONOTONIC,
                ClockNanosleepFlags::TIMER_ABSTIME,
                &target,
            )
            .is_err()
                && monotonic_ns() < deadline
            {}
            now = monotonic_ns();
        } else {
            let overdue = (now - deadline) / self.interval_ns;
            if overdue >= CATCH_UP {
                // A stall: resume with the most recent slot, giving up the ones before it.
                self.skipped += overdue;
                self.next += overdue;
            }
            if self.next > 0 {
                self.late += 1;
            }
        }
        // Measured from the deadline first missed, so a stall shows at its full length.
        let late = Duration::from_nanos(now - deadline.min(now));
        self.max_late = self.max_late.max(late);
        self.next += 1;
        now
    }

    /// Ticks started so far.
    pub fn ticks(&self) -> u64 {
        self.next - self.skipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_does_not_drift_and_makes_up_a_late_tick() {
        // Periods long enough that a busy machine's scheduler (a build beside the tests) does
        // not stall the thread for the CATCH_UP periods that would count as skipped.
        let interval = Duration::from_millis(20);
        let mut ticker = Ticker::start(interval);
        let first = ticker.wait();
        // Work that overruns a period: the next tick is due already and runs without sleeping.
        std::thread::sleep(Duration::from_millis(30));
        ticker.wait();
        assert!(ticker.late >= 1);
        for _ in 0..20 {
            ticker.wait();
        }
        let elapsed = monotonic_ns() - first;
        // 22 ticks after the first, whatever happened in between: 21 periods of 20 ms.
        assert!(elapsed >= 21 * 20_000_000, "{elapsed} ns");
        assert_eq!(ticker.ticks(), 22);
        assert_eq!(ticker.skipped, 0);
    }

    #[test]
    fn a_long_stall_is_skipped_not_made_up() {
        let interval = Duration::from_millis(1);
        let mut ticker = Ticker::start(interval);
        ticker.wait();
        std::thread::sleep(Duration::from_millis(30));
        ticker.wait();
        assert!(ticker.skipped >= 20, "{} skipped", ticker.skipped);
        assert!(ticker.max_late >= Duration::from_millis(25), "{:?}", ticker.max_late);
        let before = ticker.ticks();
        ticker.wait();
        assert_eq!(ticker.ticks(), before + 1);
    }
}
