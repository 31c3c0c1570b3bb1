//! Policies that rank each packet once, by arrival or by a field of the packet: FIFO, strict
//! priority, EDF, LSTF. They run per packet at leaves and internal nodes alike.

use super::{Mode, Policy, RankShape, ShapeCx, Tags};
use crate::packet::Meta;
use crate::policy::MemberCfg;
use sluice_queue::Rank;

/// How far ahead of now deadline-like ranks reach, for sizing their queues: one second.
pub const DEADLINE_SPAN_NS: u64 = 1_000_000_000;

/// A deadline-like time `t` as a rank at `now`: clamped to `[now, now + DEADLINE_SPAN_NS]`.
///
/// The moving-range queues (cFFS and its approximate form) hold two adjacent windows that
/// follow their minimum; ranks that come in behind it are filed at its front, in arrival
/// order. Deadlines arrive in any order, so unclamped, one 10 s ahead reaching an empty queue
/// moved the windows there, and the nearer deadlines after it left in arrival order. Ranks
/// in `[now, now + span]` always land in the windows or in the one just below them, which the
/// queue takes back while the farther window is empty, which it then is (nothing queued
/// ranks beyond `now + span`). So deadlines up to a second ahead are ordered to within a
/// bucket; later ones rank as a second ahead (first come, first served among them), and
/// deadlines already passed as due now (overdue packets leave first, in arrival order).
#[inline]
fn deadline_rank(t: u64, now: u64) -> Rank {
    t.clamp(now, now.saturating_add(DEADLINE_SPAN_NS))
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
    fn rank_packet(&mut self, _: &mut Tags, cfg: &MemberCfg, pkt: &Meta, _: u64) -> Rank {
        Rank::from(cfg.priority.unwrap_or(pkt.priority))
    }
}

/// Earliest deadline first: rank = the packet's absolute `deadline` (ns), within a second of
/// now ([`deadline_rank`]).
#[derive(Debug, Default)]
pub struct Edf;

impl Policy for Edf {
    fn name(&self) -> &'static str {
        "edf"
    }
    fn mode(&self, _at_leaf: bool) -> Mode {
        Mode::PerPacket
    }
    fn shape(&self, _cx: &ShapeCx, _which: usize) -> RankShape {
        RankShape::Moving {
            span: DEADLINE_SPAN_NS,
            dense: false,
        }
    }
    fn rank_packet(&mut self, _: &mut Tags, _: &MemberCfg, pkt: &Meta, now: u64) -> Rank {
        deadline_rank(pkt.deadline, now)
    }
}

/// Least slack time first: rank = arrival + slack, the time the packet runs out of slack.
/// Waiting spends every queued packet's slack at the same pace, so this order stays right as
/// time passes (Mittal et al.'s universal packet scheduling). Ranks are dense in time, and
/// within a second of now ([`deadline_rank`]).
#[derive(Debug, Default)]
pub struct Lstf;

impl Policy for Lstf {
    fn name(&self) -> &'static str {
        "lstf"
    }
    fn mode(&self, _at_leaf: bool) -> Mode {
        Mode::PerPacket
    }
    fn shape(&self, _cx: &ShapeCx, _which: usize) -> RankShape {
        RankShape::Moving {
            span: DEADLINE_SPAN_NS,
            dense: true,
        }
    }
    fn rank_packet(&mut self, _: &mut Tags, _: &MemberCfg, pkt: &Meta, now: u64) -> Rank {
        deadline_rank(pkt.arrival.saturating_add(pkt.slack), now)
    }
}
