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

    /// A frame of this flow leaves at `now` after waiting `sojourn`: mark it?
    fn on_leave(&mut self, now: u64, sojourn: u64, p: Params) -> bool {
        self.seen = now;
        let ok_to_mark = if sojourn < p.target_ns {
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
    next_sweep: u64,
}

impl Codel {
    /// No flows yet.
    pub fn new(params: Params) -> Self {
        Codel {
            params,
            flows: HashMap::new(),
            next_sweep: 0,
        }
    }

    /// A frame of `flow` leaves at `now` after waiting `sojourn` ns: should it be marked?
    pub fn on_leave(&mut self, flow: u64, now: u64, sojourn: u64) -> bool {
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
            .on_leave(now, sojourn, self.params)
    }

    /// Flows with state now.
    pub fn flows(&self) -> usize {
        self.flows.len()
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

    #[test]
    fn short_queues_are_never_marked_and_keep_no_state() {
        let mut c = Codel::new(P);
        for t in 0..10_000 {
            assert!(!c.on_leave(7, t * MS / 10, MS));
        }
        assert_eq!(c.flows(), 0);
    }

    #[test]
    fn a_standing_queue_is_marked_after_an_interval_then_at_a_rising_pace() {
        let mut c = Codel::new(P);
        // A frame leaves every 0.1 ms, each after 5 ms in the queue.
        let marks: Vec<u64> = (0..2000u64)
            .map(|i| i * MS / 10)
            .filter(|&t| c.on_leave(1, t, 5 * MS))
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
        let mut t = 0;
        while !c.on_leave(1, t, 5 * MS) {
            t += MS / 10;
        }
        assert!(
            !c.on_leave(1, t + MS, MS),
            "below target: out of the marking spell"
        );
        assert!(
            !c.on_leave(1, t + 2 * MS, 5 * MS),
            "above again: wait an interval first"
        );
    }

    #[test]
    fn flows_are_judged_apart() {
        let mut c = Codel::new(P);
        let mut heavy = 0;
        for i in 0..2000u64 {
            let t = i * MS / 10;
            heavy += u32::from(c.on_leave(1, t, 5 * MS));
            assert!(!c.on_leave(2, t, MS / 2), "a light flow is never marked");
        }
        assert!(heavy > 5);
    }

    #[test]
    fn idle_flows_are_forgotten() {
        let mut c = Codel::new(P);
        c.on_leave(1, 0, 5 * MS);
        c.on_leave(2, 0, 5 * MS);
        assert_eq!(c.flows(), 2);
        c.on_leave(2, IDLE_NS / 2, 5 * MS);
        c.on_leave(3, IDLE_NS + 1, MS);
        assert_eq!(
            c.flows(),
            1,
            "flow 1 idle for a second is gone, flow 2 stays"
        );
    }
}
