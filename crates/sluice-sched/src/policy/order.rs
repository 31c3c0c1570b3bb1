//! Policies that rank each packet once, by arrival or by a field of the packet: FIFO, strict
//! priority, EDF, LSTF. They run per packet at leaves and internal nodes alike.

use super::{ABSENT, Mode, Policy, RankShape, ShapeCx, Tags};
use crate::packet::Meta;
use crate::policy::MemberCfg;
use sluice_queue::Rank;

/// How far ahead of now deadline-like ranks are told apart: one second.
pub const DEADLINE_SPAN_NS: u64 = 1_000_000_000;

/// The span their queues are sized for: twice that, so that a second of deadlines ahead of now
/// stays inside the queue's windows behind up to a second of backlog (see [`deadline_rank`]).
const DEADLINE_QUEUE_SPAN_NS: u64 = 2 * DEADLINE_SPAN_NS;

/// A deadline-like time `t` as a rank at `now`, for a queue whose first entry has rank
/// `floor` (`now` when it is empty): clamped to `[now, now + DEADLINE_SPAN_NS]`, and never
/// past `min(floor, now) + DEADLINE_QUEUE_SPAN_NS` unless the node capped a rank higher before
/// (`cap`, below: the floor stepped back within its bucket since).
///
/// The moving-range queues (cFFS and its approximate form) hold two adjacent windows, aligned
/// to their span, from the one their first entry is in: whatever its phase, they reach at
/// least a span past its bucket. Deadlines arrive in any order, so unclamped, one 10 s ahead
/// reaching an empty queue moved the windows there, and the nearer deadlines after it left in
/// arrival order. And the windows follow the first entry, not `now`: behind a rate limit, a
/// backlog older than the span's slack (74 ms at the worst phase, when the span was one
/// second) pushed ranks past them, where the queue clamped them and a deadline 47 ms away left
/// after one a second away. So: deadlines up to a second ahead are ordered to within a bucket
/// while the backlog is younger than a second; later ones rank as a second ahead (first come,
/// first served among them), and deadlines already passed as due now (overdue packets leave
/// first, in arrival order). Behind an older backlog, deadlines past `floor + 2 s` rank there,
/// in arrival order, after everything queued, and the queue never clamps.
///
/// That last rank never moves back (`cap`, the node's latest): the first entry leaves its
/// bucket in arrival order, not by rank, so `floor` steps back within a bucket as entries
/// leave, and `floor + 2 s` with it, across a bucket's edge when 2 s is not a whole number of
/// buckets. Behind a backlog older than a second, packets due later than that (a flow's, in
/// order) then took turns between two buckets, and a flow's packets left out of order, 1.1 s
/// of them. Kept, it is at most the old `floor + 2 s`, with the old floor in the new one's
/// bucket (within a second behind `now` the floor only steps back there: packets arriving
/// rank above it), so inside the windows all the same.
///
/// On an exact queue ([`Policy::exact_queues`]) there are no windows to stay in: the rank is
/// `t` itself, so overdue packets too leave by their deadlines.
#[inline]
fn time_rank(exact: bool, cap: &mut Rank, t: u64, now: u64, floor: Rank) -> Rank {
    if exact {
        t.min(ABSENT - 1)
    } else {
        deadline_rank(cap, t, now, floor)
    }
}

/// See [`time_rank`].
#[inline]
fn deadline_rank(cap: &mut Rank, t: u64, now: u64, floor: Rank) -> Rank {
    let last = now
        .saturating_add(DEADLINE_SPAN_NS)
        .min(floor.min(now).saturating_add(DEADLINE_QUEUE_SPAN_NS))
        // Never past a second ahead of `now`, even a `now` earlier than the last one.
        .max((*cap).min(now.saturating_add(DEADLINE_SPAN_NS)));
    *cap = last;
    t.clamp(now.min(last), last)
}

/// First in, first out: every entry has rank 0, and equal ranks leave in arrival order.
#[derive(Debug, Default)]
pub struct Fifo;

impl Policy for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn mode(&self, _at_leaf: bool) -> Mode {
        Mode::PerPacket
    }
    fn shape(&self, _cx: &ShapeCx, _which: usize) -> RankShape {
        RankShape::Levels(1)
    }
}

/// Strict priority: a child's configured priority at internal nodes, the packet's `priority`
/// field at leaves; 0 first, FIFO within a level.
#[derive(Debug, Default)]
pub struct Prio;

impl Policy for Prio {
    fn name(&self) -> &'static str {
        "prio"
    }
    fn mode(&self, _at_leaf: bool) -> Mode {
        Mode::PerPacket
    }
    fn shape(&self, _cx: &ShapeCx, _which: usize) -> RankShape {
        RankShape::Levels(256)
    }
    fn rank_packet(&mut self, _: &mut Tags, cfg: &MemberCfg, pkt: &Meta, _: u64, _: Rank) -> Rank {
        Rank::from(cfg.priority.unwrap_or(pkt.priority))
    }
}

/// Earliest deadline first: rank = the packet's absolute `deadline` (ns), within a second of
/// now on a bucketed queue (see `time_rank`); on an exact one, the deadline less one ns. A
/// packet without one (0) ranks as late as a rank can be: after every packet due within the
/// second on a bucketed queue (first come first served with those due later), after every
/// packet with a deadline on an exact one.
#[derive(Debug, Default)]
pub struct Edf {
    /// Rank by the deadlines themselves ([`Policy::exact_queues`]).
    exact: bool,
    /// The latest rank a deadline was capped at ([`time_rank`]).
    cap: Rank,
}

impl Policy for Edf {
    fn name(&self) -> &'static str {
        "edf"
    }
    fn mode(&self, _at_leaf: bool) -> Mode {
        Mode::PerPacket
    }
    fn shape(&self, _cx: &ShapeCx, _which: usize) -> RankShape {
        RankShape::Moving {
            span: DEADLINE_QUEUE_SPAN_NS,
            dense: false,
        }
    }
    fn rank_packet(
        &mut self,
        _: &mut Tags,
        _: &MemberCfg,
        pkt: &Meta,
        now: u64,
        floor: Rank,
    ) -> Rank {
        if self.exact {
            // The deadlines themselves, less one, so that every deadline (1 ..= 2^64 - 1) ranks
            // before none (0, wrapped to the last rank). Ranked as it, a deadline of 2^64 - 1 or
            // 2^64 - 2 ns tied with none, and a packet without one that came first left first.
            // (A packet's rank may be ABSENT's value: that means "not queued" only to a
            // member's queues, and a per-packet node pushes every rank it is given.)
            return pkt.deadline.wrapping_sub(1);
        }
        // Not given: as late as a rank can be.
        let t = if pkt.deadline == 0 {
            u64::MAX
        } else {
            pkt.deadline
        };
        time_rank(self.exact, &mut self.cap, t, now, floor)
    }
    fn exact_queues(&mut self) {
        self.exact = true;
    }
    fn ranks_by_time(&self) -> bool {
        true
    }
}

/// Least slack time first: rank = arrival + slack, the time the packet runs out of slack.
/// Waiting spends every queued packet's slack at the same pace, so this order stays right as
/// time passes (Mittal et al.'s universal packet scheduling). Ranks are dense in time, and
/// within a second of now on a bucketed queue (see `time_rank`).
#[derive(Debug, Default)]
pub struct Lstf {
    /// Rank by the times themselves ([`Policy::exact_queues`]).
    exact: bool,
    /// The latest rank a time was capped at ([`time_rank`]).
    cap: Rank,
}

impl Policy for Lstf {
    fn name(&self) -> &'static str {
        "lstf"
    }
    fn mode(&self, _at_leaf: bool) -> Mode {
        Mode::PerPacket
    }
    fn shape(&self, _cx: &ShapeCx, _which: usize) -> RankShape {
        RankShape::Moving {
            span: DEADLINE_QUEUE_SPAN_NS,
            dense: true,
        }
    }
    fn rank_packet(
        &mut self,
        _: &mut Tags,
        _: &MemberCfg,
        pkt: &Meta,
        now: u64,
        floor: Rank,
    ) -> Rank {
        time_rank(
            self.exact,
            &mut self.cap,
            pkt.arrival.saturating_add(pkt.slack),
            now,
            floor,
        )
    }
    fn exact_queues(&mut self) {
        self.exact = true;
    }
    fn ranks_by_time(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_cap_never_reaches_past_a_second_ahead() {
        let mut cap = 0;
        // Behind a backlog older than a second: capped at floor + 2 s, kept as the floor
        // steps back within its bucket.
        let (now, floor) = (20_000_000_000, 18_500_000_000);
        assert_eq!(
            deadline_rank(&mut cap, u64::MAX, now, floor),
            20_500_000_000
        );
        assert_eq!(
            deadline_rank(&mut cap, u64::MAX, now, floor - 1000),
            20_500_000_000
        );
        // A host's clock read earlier (`now` 10 s back) with an empty queue: a second ahead
        // of that `now`, as without a kept cap, not 11 s.
        let now = 10_000_000_000;
        assert_eq!(deadline_rank(&mut cap, u64::MAX, now, now), 11_000_000_000);
    }
}
