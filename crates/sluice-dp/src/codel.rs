//! When to mark: CoDel's control law (RFC 8289), per flow, deciding which leaving frames carry
//! a Congestion Experienced mark (see [`crate::ecn`]).
//!
//! Marking every frame that waited past a target (a step threshold) is too strong for TCPs that
//! halve, like Cubic, on one mark per round trip: the queue is still above the target after
//! the sender has slowed down, so the next round trip is marked again and the link idles. CoDel
//! instead lets a queue stay above `target` for one `interval` (a burst), then marks one frame,
//! and then one every `interval / sqrt(count)` while the sojourn stays above the target,
//! stopping as soon as a frame leaves below it. The state is kept per flow (as fq_codel does),
//! so a light flow's frames, which a fair scheduler serves quickly, never pay for a heavy
//! flow's queue.
//!
//! As in RFC 8289 (`bytes() <= MAXPACKET`) and Linux's fq_codel, a flow with no more than one
//! frame's worth of bytes left queued is never "above target", whatever the sojourn: its frame
//! waited behind other flows' frames, not behind its own queue, and marking it would slow a
//! sender that has no standing queue. This matters with GSO super-frames: at 200 Mbit/s one
//! 64 KB frame takes 2.6 ms on the wire, more than the target, so frames of two flows that
//! alternate wait longer than the target with no queue standing. "One frame" is the leaving
//! frame's own length, so the rule scales from 1.5 KB frames to 64 KB super-frames. The
//! caller reports arrivals ([`Codel::on_arrive`]) and frames that leave unsent
//! ([`Codel::forget`]) so the per-flow backlog stays exact.
//!
//! Every operation is O(1); the per-flow table is swept of flows idle for [`IDLE_NS`] once per
//! [`IDLE_NS`], so it stays the size of the set of recently active flows.

use std::collections::HashMap;

/// A flow not seen for this long forgets its state.
pub const IDLE_NS: u64 = 1_000_000_000;

/// CoDel's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Sojourn time a queue may keep, ns.
    pub target_ns: u64,
    /// How long the sojourn may stay above the target before the first mark, ns (about a
    /// round-trip time).
    pub interval_ns: u64,
}

/// One flow's CoDel state (RFC 8289 §5.5 names in comments).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct State {
    /// `first_above_time`: when the sojourn will have been above target for an interval (0:
    /// it is not above).
    first_above: u64,
    /// `drop_next`: when the next mark is due while marking.
    next_mark: u64,
    /// `count`: marks in this marking spell.
    count: u32,
    /// `lastcount`: `count` at the start of the previous spell.
    last_count: u32,
    /// `dropping`: in a marking spell.
    marking: bool,
    /// Last frame of the flow, ns (for the idle sweep).
    seen: u64,
}

impl State {
    fn control_law(&self, t: u64, p: Params) -> u64 {
        t.saturating_add((p.interval_ns as f64 / f64::from(self.count.max(1)).sqrt()) as u64)
    }

    /// A frame of this flow leaves at `now` after waiting `sojourn`, `standing` if more than
    /// one frame's worth of the flow stays queued behind it: mark it?
    fn on_leave(&mut self, now: u64, sojourn: u64, standing: bool, p: Params) -> bool {
        self.seen = now;
        let ok_to_mark = if sojourn < p.target_ns || !standing {
            self.first_above = 0;
            false
        } else if self.first_above == 0 {
            self.first_above = now.saturating_add(p.interval_ns);
            false
        } else {
            now >= self.first_above
        };
        if self.marking {
            if !ok_to_mark {
                self.marking = false;
                return false;
            }
            if now >= self.next_mark {
                self.count = self.count.saturating_add(1);
                self.next_mark = self.control_law(self.next_mark, p);
                return true;
            }
            return false;
        }
        if ok_to_mark {
            self.marking = true;
            // Start where the last spell left off if it ended recently (RFC 8289 §5.6).
            let delta = self.count.saturating_sub(self.last_count);
            self.count = if delta > 1 && now.saturating_sub(self.next_mark) < 16 * p.interval_ns {
                delta
            } else {
                1
            };
            self.last_count = self.count;
            self.next_mark = self.control_law(now, p);
            return true;
        }
        false
    }
}

/// CoDel state for every flow of one link.
#[derive(Debug)]
pub struct Codel {
    params: Params,
    flows: HashMap<u64, State>,
    /// Bytes queued per flow (flows with none have no entry).
    backlog: HashMap<u64, u64>,
    next_sweep: u64,
}

impl Codel {
    /// No flows yet.
    pub fn new(params: Params) -> Self {
        Codel {
            params,
            flows: HashMap::new(),
            backlog: HashMap::new(),
            next_sweep: 0,
        }
    }

    /// A frame of `flow`, `bytes` long, joined the link's queues.
    pub fn on_arrive(&mut self, flow: u64, bytes: u64) {
        *self.backlog.entry(flow).or_insert(0) += bytes;
    }

    /// A frame of `flow`, `bytes` long, left the queues without being sent (rejected).
    pub fn forget(&mut self, flow: u64, bytes: u64) {
        self.take_backlog(flow, bytes);
    }

    /// Take `bytes` off `flow`'s backlog; what is left.
    fn take_backlog(&mut self, flow: u64, bytes: u64) -> u64 {
        let Some(b) = self.backlog.get_mut(&flow) else {
            return 0;
        };
        *b = b.saturating_sub(bytes);
        let left = *b;
        if left == 0 {
            self.backlog.remove(&flow);
        }
        left
    }

    /// A frame of `flow`, `bytes` long, leaves at `now` after waiting `sojourn` ns: should it
    /// be marked?
    pub fn on_leave(&mut self, flow: u64, now: u64, sojourn: u64, bytes: u64) -> bool {
        let standing = self.take_backlog(flow, bytes) > bytes;
        if now >= self.next_sweep {
            self.flows
                .retain(|_, s| now.saturating_sub(s.seen) < IDLE_NS);
            self.next_sweep = now.saturating_add(IDLE_NS);
        }
        if sojourn < self.params.target_ns && !self.flows.contains_key(&flow) {
            return false; // the common case of a short queue: no state needed
        }
        self.flows
            .entry(flow)
            .or_default()
            .on_leave(now, sojourn, standing, self.params)
    }

    /// Flows with state now.
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    /// Flows with frames queued now.
    pub fn backlogged(&self) -> usize {
        self.backlog.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Params = Params {
        target_ns: 2_000_000,
        interval_ns: 20_000_000,
    };
    const MS: u64 = 1_000_000;
    const FRAME: u64 = 1514;

    /// One frame of `flow` leaves at `t` after `sojourn`, and one arrives: the flow's backlog
    /// stays where it is (start it with [`standing_queue`]).
    fn step(c: &mut Codel, flow: u64, t: u64, sojourn: u64) -> bool {
        c.on_arrive(flow, FRAME);
        c.on_leave(flow, t, sojourn, FRAME)
    }

    /// Give `flow` a standing queue of `frames` frames.
    fn standing_queue(c: &mut Codel, flow: u64, frames: u64) {
        for _ in 0..frames {
            c.on_arrive(flow, FRAME);
        }
    }

    #[test]
    fn short_queues_are_never_marked_and_keep_no_state() {
        let mut c = Codel::new(P);
        standing_queue(&mut c, 7, 10);
        for t in 0..10_000 {
            assert!(!step(&mut c, 7, t * MS / 10, MS));
        }
        assert_eq!(c.flows(), 0);
    }

    #[test]
    fn a_standing_queue_is_marked_after_an_interval_then_at_a_rising_pace() {
        let mut c = Codel::new(P);
        // A frame leaves every 0.1 ms, each after 5 ms in the queue.
        standing_queue(&mut c, 1, 50);
        let marks: Vec<u64> = (0..2000u64)
            .map(|i| i * MS / 10)
            .filter(|&t| step(&mut c, 1, t, 5 * MS))
            .collect();
        assert_eq!(
            marks[0],
            20 * MS,
            "first mark one interval after the queue rose"
        );
        // Then interval / sqrt(count): 20 / 1 = 20 ms, 20 / sqrt 2 = 14.1 ms, 20 / sqrt 3 = 11.5 ms.
        let gaps: Vec<u64> = marks.windows(2).map(|w| w[1] - w[0]).collect();
        // (Frames leave every 0.1 ms, so a mark comes up to 0.1 ms after it is due.)
        for (gap, want) in gaps.iter().zip([20 * MS, 14_142_136, 11_547_005]) {
            assert!(gap.abs_diff(want) <= MS / 10, "gap {gap} want {want}");
        }
        assert!(
            gaps.windows(2).all(|g| g[1] <= g[0]),
            "marks come faster while the queue stands: {gaps:?}"
        );
    }

    #[test]
    fn marking_stops_as_soon_as_the_queue_drains() {
        let mut c = Codel::new(P);
        standing_queue(&mut c, 1, 50);
        let mut t = 0;
        while !step(&mut c, 1, t, 5 * MS) {
            t += MS / 10;
        }
        assert!(
            !step(&mut c, 1, t + MS, MS),
            "below target: out of the marking spell"
        );
        assert!(
            !step(&mut c, 1, t + 2 * MS, 5 * MS),
            "above again: wait an interval first"
        );
    }

    #[test]
    fn flows_are_judged_apart() {
        let mut c = Codel::new(P);
        standing_queue(&mut c, 1, 50);
        standing_queue(&mut c, 2, 3);
        let mut heavy = 0;
        for i in 0..2000u64 {
            let t = i * MS / 10;
            heavy += u32::from(step(&mut c, 1, t, 5 * MS));
            assert!(!step(&mut c, 2, t, MS / 2), "a light flow is never marked");
        }
        assert!(heavy > 5);
    }

    #[test]
    fn idle_flows_are_forgotten() {
        let mut c = Codel::new(P);
        standing_queue(&mut c, 1, 3);
        standing_queue(&mut c, 2, 3);
        step(&mut c, 1, 0, 5 * MS);
        step(&mut c, 2, 0, 5 * MS);
        assert_eq!(c.flows(), 2);
        step(&mut c, 2, IDLE_NS / 2, 5 * MS);
        step(&mut c, 3, IDLE_NS + 1, MS);
        assert_eq!(
            c.flows(),
            1,
            "flow 1 idle for a second is gone, flow 2 stays"
        );
    }

    #[test]
    fn a_flow_with_one_frame_left_is_not_marked_however_long_it_waited() {
        let mut c = Codel::new(P);
        // Two 64 KB super-frames alternate with another flow's: each waits 3 ms, more than the
        // target, behind the other flow's frame, but at most one more of its own is queued.
        const SUPER: u64 = 65_000;
        c.on_arrive(1, SUPER);
        for i in 0..1000u64 {
            c.on_arrive(1, SUPER);
            assert!(
                !c.on_leave(1, i * 3 * MS, 3 * MS, SUPER),
                "no standing queue, no mark"
            );
        }
        // The same waits with a queue of its own standing are marked.
        standing_queue(&mut c, 1, 100);
        let marked = (1000..2000u64).any(|i| {
            c.on_arrive(1, SUPER);
            c.on_leave(1, i * 3 * MS, 3 * MS, SUPER)
        });
        assert!(marked);
    }

    #[test]
    fn the_backlog_is_exact_and_forgets_drained_flows() {
        let mut c = Codel::new(P);
        c.on_arrive(1, 100);
        c.on_arrive(1, 200);
        c.on_arrive(2, 300);
        assert_eq!(c.backlogged(), 2);
        c.forget(2, 300);
        assert_eq!(c.backlogged(), 1, "a rejected frame leaves the backlog");
        c.on_leave(1, 0, 0, 100);
        c.on_leave(1, 0, 0, 200);
        assert_eq!(c.backlogged(), 0);
        c.on_leave(9, 0, 0, 100);
        c.forget(9, 100);
        assert_eq!(c.backlogged(), 0, "unknown flows are harmless");
    }
}
