//! `Gate`: one rate limit, enforced by Carousel timestamping (§3.4.1).
//!
//! A gate keeps its last timestamp (LTS): the virtual time at which everything it has passed so
//! far has been sent at its rate. A packet of `len` bytes arriving at `now` starts at
//! `max(LTS, now - burst/R)` and advances LTS by `len / R`; the start is the packet's release
//! time. So a gate behaves like a token bucket of depth `burst`: after an idle period at most
//! `burst` bytes (plus the packet that crosses it) leave at once, then packets are spaced at the
//! rate, at low rates as at high. Times are 32.32 fixed-point nanoseconds and `len / R` is a
//! multiplication by the rate's reciprocal, rounded up ([`Rate::tx_time_fp_of`]): the rate is
//! exact to 2^-32 ns per 1500-byte packet from 6 kbit/s up to 2^63 bit/s, and never exceeded.
//! Release times saturate at `u64::MAX` ns, 584 years after time 0: what a gate would release
//! later than that all goes at `u64::MAX` (hosts count time from their own start, or from the
//! epoch, far from the end).
//!
//! Those are the release times; the shaper keeps them to one slot of its timing wheel
//! (Carousel's granularity), so a node's or flow's gate whose packets take less than a slot
//! lets a slot's worth out at once, its rate holding over time (`sluice policy check` notes
//! such rates). The root's gate is exact: it is checked at each dequeue.
//!
//! A packet on a path through several gates (a flow's pacing rate, its leaf's limit, a parent's
//! limit) visits them one after the other, each stamping from the time the previous released it;
//! it leaves no earlier than the latest of their times, Carousel's "maximum over the policies".

use crate::units::Rate;

/// A rate limit with burst allowance; see the module note.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gate {
    rate: Rate,
    /// `rate.per_byte()`, kept so that stamping a packet multiplies instead of dividing: a
    /// 128-bit division per packet and gate cost hclock at 1e6 flows in `sluice bench sched`
    /// about 5% of its time (`sched_probe`, alternating runs, 94.5 -> 89.8 ns).
    per_byte: u64,
    burst_bytes: u64,
    /// Last timestamp, 32.32 fixed-point ns, low and high halves: two u64s keep the gate
    /// 8-aligned and 40 bytes, so that it fits a flow's second cache line (a u128 is
    /// 16-aligned and would round it up to 48).
    lts: [u64; 2],
}

impl Gate {
    /// A gate at `rate` letting `burst_bytes` through at once after idle periods.
    pub fn new(rate: Rate, burst_bytes: u64) -> Self {
        Gate {
            rate,
            per_byte: rate.per_byte(),
            burst_bytes,
            lts: [0; 2],
        }
    }

    #[inline]
    fn lts(&self) -> u128 {
        u128::from(self.lts[1]) << 64 | u128::from(self.lts[0])
    }

    #[inline]
    fn set_lts(&mut self, lts: u128) {
        self.lts = [lts as u64, (lts >> 64) as u64];
    }

    /// The rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// The burst allowance in bytes.
    pub fn burst(&self) -> u64 {
        self.burst_bytes
    }

    /// Change the rate from `now` on: what the gate still owes at `now` (its last timestamp
    /// ahead of `now`: the packets it stamped that have not had their time yet) is owed in
    /// bytes, and paid at the new rate, raised or lowered, as a token bucket whose rate
    /// changes would. (Kept as a time, a packet in flight at a low rate held the gate for its
    /// whole time at that rate after a raise: 7 s for 9000 B at 10 kbit/s raised to 10 Gbit/s.
    /// And kept as a time when lowered while paid in bytes when raised, the debt shrank at
    /// each fall and rise: a gate at 1 Mbit/s let 815 B and then 64 B through within a
    /// millisecond, lowered to 100 kbit/s and raised back meanwhile.) `now` is the host's
    /// time: a `now` that lags it (a host that slept waiting for the gate) counts more owed,
    /// and a lowering then stretches the excess too (it took 3% off a 200 Mbit/s limit that
    /// two daemon engines share, whose allocator moves their rates up and down, when the
    /// scheduler used the last time it had been given). Release times already given keep
    /// their place.
    pub fn set_rate(&mut self, rate: Rate, now: u64) {
        // Hosts pass a flow's pacing rate with every packet: only a change costs a division.
        if rate == self.rate {
            return;
        }
        let now_fp = u128::from(now) << 32;
        let lts = self.lts();
        if lts > now_fp {
            let owed = self.rate.retime(lts - now_fp, rate);
            self.set_lts(now_fp.saturating_add(owed).min(u128::MAX >> 1));
        }
        self.rate = rate;
        self.per_byte = rate.per_byte();
    }

    /// Change the burst allowance.
    pub fn set_burst(&mut self, burst_bytes: u64) {
        self.burst_bytes = burst_bytes;
    }

    /// Stamp a packet of `len` bytes arriving at `now`: its release time in ns (<= `now` means
    /// it may go at once).
    // Always inlined: enqueue stamps every packet at its flow's gate, and as a call (its
    // register saves) it cost callgrind, hclock at 1e3 flows, 1269.6 -> 1261.7 instructions
    // per packet, 1145.8 -> 1135.8 at 1e6.
    #[inline(always)]
    pub fn stamp(&mut self, now: u64, len: u32) -> u64 {
        let now_fp = u128::from(now) << 32;
        // A backlogged gate (its last timestamp at or past now) starts from it whatever the
        // burst: the floor below now need not be computed (a 128-bit division).
        let lts = self.lts();
        let start = if lts >= now_fp {
            lts
        } else {
            lts.max(now_fp.saturating_sub(self.rate.tx_time_fp(self.burst_bytes)))
        };
        self.set_lts(start + self.rate.tx_time_fp_of(len, self.per_byte));
        // Saturated: within a packet's time of u64::MAX ns, a wrapped stamp lay in the past
        // and the gate let a burst through.
        u64::try_from(start >> 32).unwrap_or(u64::MAX)
    }

    /// The gate's packet in flight, of `len` bytes, is released at `now`: the next one goes
    /// no sooner than its time at the current rate after it. (A raise since paid the gate's
    /// debt at the new rate, [`Gate::set_rate`], and left the last timestamp before the
    /// release time the packet kept: the next one left with it, two at once with no burst.)
    pub fn released(&mut self, now: u64, len: u32) {
        let min = (u128::from(now) << 32) + self.rate.tx_time_fp_of(len, self.per_byte);
        if self.lts() < min {
            self.set_lts(min);
        }
    }

    /// Whether the gate has been idle long enough at `now` to hold its whole burst again: then
    /// it is as a new gate at its rate would be, and forgetting it changes nothing.
    pub fn full(&self, now: u64) -> bool {
        self.lts()
            .saturating_add(self.rate.tx_time_fp(self.burst_bytes))
            <= u128::from(now) << 32
    }

    /// The earliest time the next packet could be released (ns, rounded down; saturated at
    /// u64::MAX, as [`Gate::stamp`] is).
    pub fn next_free(&self) -> u64 {
        u64::try_from(self.lts() >> 32).unwrap_or(u64::MAX)
    }
}

/// The rate of a flow's gate for its own pacing rate `own` (a packet's `pacing_bps`, as a
/// transport sets it, or [`crate::Scheduler::set_flow_rate`]) at a leaf whose `flow_rate` is
/// `cap`: the lower of the two, as a packet leaves no sooner than the latest of the times its
/// policies give it (Carousel), and as Linux fq's `maxrate` caps a socket's pacing rate.
#[inline]
pub fn capped(own: Rate, cap: Option<Rate>) -> Rate {
    cap.map_or(own, |c| own.min(c))
}

/// What a packet's `pacing_bps` asks of its flow's gate ([`own_rate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pacing {
    /// Not given (0): the flow keeps the gate it has; a new flow gets its leaf's `flow_rate`.
    Keep,
    /// The flow's gate goes at this rate, or goes away (`None`: no pacing of the flow's own
    /// and no `flow_rate` at its leaf, so no gate, as a flow that never had one).
    Set(Option<Rate>),
}

impl Pacing {
    /// The rate of a new flow's gate at a leaf whose `flow_rate` is `cap`.
    #[inline]
    pub fn for_new_flow(self, cap: Option<Rate>) -> Option<Rate> {
        match self {
            Pacing::Keep => cap,
            Pacing::Set(rate) => rate,
        }
    }

    /// A flow's `gate` as this pacing, applied at `now`, leaves it (`None`: taken away).
    #[inline]
    pub fn applied(self, mut gate: Gate, now: u64) -> Option<Gate> {
        match self {
            Pacing::Keep => {}
            Pacing::Set(Some(r)) => gate.set_rate(r, now),
            Pacing::Set(None) => return None,
        }
        Some(gate)
    }
}

/// What a packet's `pacing_bps` asks of its flow's gate at a leaf whose `flow_rate` is `cap`:
/// nothing for 0 (not given: the flow keeps the rate it has), else a rate of at most `cap`. A
/// rate beyond the largest (2^63 bit/s or more, such as Linux's `~0UL` for a socket not
/// paced) asks for no pacing of the flow's own: the leaf's `flow_rate`, or no gate at all if
/// it has none. (Read as not given, it kept the rate the flow's packets had given before; as
/// a gate at the largest rate, it still held all but two of the flow's packets at the gate
/// until one of those left, so that a FIFO leaf sent a later flow's packet ahead of them.)
#[inline]
pub fn own_rate(pacing_bps: u64, cap: Option<Rate>) -> Pacing {
    match Rate::new(pacing_bps) {
        Some(r) => Pacing::Set(Some(capped(r, cap))),
        None if pacing_bps == 0 => Pacing::Keep,
        None => Pacing::Set(cap),
    }
}

/// Give a flow's `gate` the rate `rate` from `now` on ([`Gate::set_rate`]: what it owes is
/// paid at the new rate), a new gate with `burst` if it had none, or take it away (`None`).
#[inline]
pub fn retune(gate: &mut Option<Gate>, rate: Option<Rate>, burst: u64, now: u64) {
    // In place: hosts pass a flow's rate with every packet, and a copy of the gate out and
    // back cost fq_pacing 10 instructions a packet (callgrind, `sched_probe`).
    match (rate, gate.as_mut()) {
        (Some(r), Some(g)) => g.set_rate(r, now),
        (Some(r), None) => *gate = Some(Gate::new(r, burst)),
        (None, _) => *gate = None,
    }
}

/// A leaf's `flow_rate` (rate and burst) split into the cap [`capped`] takes and the burst a
/// flow's gate gets there (0 without one).
#[inline]
pub fn leaf_cap(flow_rate: Option<(Rate, u64)>) -> (Option<Rate>, u64) {
    flow_rate.map_or((None, 0), |(r, b)| (Some(r), b))
}

/// The packets waiting at one gate: at most one of them is in the shaper (its packet in
/// flight, `waiting`); the others wait in line, in arrival order, and each is stamped only when
/// the one before it leaves. A gate with a deep backlog at a low rate therefore never asks the
/// shaper to look further ahead than one packet's time, and spacing is unchanged: a backlogged
/// gate's next stamp is its last timestamp either way. The line is a linked list through the
/// scheduler's records (`head`, `tail`: record ids, `u32::MAX` when empty).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateLine {
    /// First waiting record.
    pub head: u32,
    /// Last waiting record.
    pub tail: u32,
    /// Whether the gate has a packet in the shaper.
    pub waiting: bool,
}

impl Default for GateLine {
    fn default() -> Self {
        GateLine {
            head: u32::MAX,
            tail: u32::MAX,
            waiting: false,
        }
    }
}

impl GateLine {
    /// Nothing in flight and nothing in line: an arriving packet is stamped at once.
    pub fn is_idle(&self) -> bool {
        !self.waiting && self.head == u32::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paces_at_the_rate_after_the_first_packet() {
        let mut g = Gate::new(Rate::gbit(1), 0);
        assert_eq!(g.stamp(1_000_000, 1500), 1_000_000);
        assert_eq!(g.stamp(1_000_000, 1500), 1_012_000);
        assert_eq!(g.stamp(1_000_000, 1500), 1_024_000);
    }

    #[test]
    fn full_once_the_whole_burst_is_gathered_again() {
        // 1 Mbit/s: 1500 B take 12 ms, a 3000 B burst 24 ms.
        let mut g = Gate::new(Rate::mbit(1), 3000);
        assert!(g.full(24_000_000), "a new gate, from time 0");
        g.stamp(100_000_000, 1500);
        assert_eq!(g.next_free(), 100_000_000 - 24_000_000 + 12_000_000);
        assert!(!g.full(g.next_free()), "free for a packet, but not whole");
        assert!(!g.full(112_000_000 - 1));
        assert!(g.full(112_000_000));
        let mut g = Gate::new(Rate::mbit(1), 0);
        g.stamp(0, 1500);
        assert!(!g.full(12_000_000 - 1));
        assert!(
            g.full(12_000_000),
            "no burst: whole once the packet's time has passed"
        );
    }

    #[test]
    fn burst_after_idle_is_bounded() {
        let mut g = Gate::new(Rate::mbit(10), 15_000);
        g.stamp(0, 1500);
        // Idle for a long time, then a train of 100 packets at once.
        let now = 10_000_000_000;
        let at_once = (0..100).filter(|_| g.stamp(now, 1500) <= now).count();
        // 15 000 bytes of credit: ten packets, plus the one that starts within it.
        assert_eq!(at_once, 11);
    }

    #[test]
    fn a_new_rate_pays_what_the_gate_owes_in_bytes() {
        let mut g = Gate::new(Rate::mbit(1), 0);
        g.stamp(0, 60_000);
        g.stamp(0, 60_000);
        assert_eq!(g.next_free(), 960_000_000);
        // At 480 ms half is paid: 60 000 B owed, 48 us at 10 Gbit/s.
        g.set_rate(Rate::gbit(10), 480_000_000);
        assert_eq!(g.next_free(), 480_048_000);
        // Lowered, the same 60 000 B: 480 ms at 1 Mbit/s. A fall and a rise at one time
        // leave the debt as it was, in either order.
        g.set_rate(Rate::mbit(1), 480_000_000);
        assert_eq!(g.next_free(), 960_000_000);
        g.set_rate(Rate::from_bps(100_000).unwrap(), 480_000_000);
        g.set_rate(Rate::mbit(1), 480_000_000);
        assert_eq!(g.next_free(), 960_000_000);
        assert_eq!(g.stamp(480_000_000, 1500), 960_000_000);
        assert_eq!(g.next_free(), 972_000_000);
        // Nothing owed: nothing changes but the rate.
        g.set_rate(Rate::gbit(1), 2_000_000_000);
        assert_eq!(g.next_free(), 972_000_000);
        assert_eq!(g.stamp(2_000_000_000, 1500), 2_000_000_000);
        // The extremes: 4 GiB owed at 1 bit/s (beyond the end of time) is 8 ns at 2^62.
        let mut g = Gate::new(Rate::from_bps(1).unwrap(), 0);
        g.stamp(u64::MAX / 2, u32::MAX);
        assert_eq!(g.next_free(), u64::MAX);
        g.set_rate(Rate::from_bps(1 << 62).unwrap(), u64::MAX / 2);
        assert_eq!(g.next_free(), u64::MAX / 2 + 7);
    }

    #[test]
    fn no_burst_at_low_rates_without_credit() {
        let mut g = Gate::new(Rate::from_bps(64_000).unwrap(), 0);
        let now = 5_000_000_000;
        assert_eq!(g.stamp(now, 100), now);
        assert_eq!(g.stamp(now, 100), now + 12_500_000);
    }
}
