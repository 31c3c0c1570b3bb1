//! Reservations, limits and shares: hClock (Bhattacharya et al., Eiffel Fig. 4.11) and an
//! HTB-like hierarchy. Both keep each member in two queues: a *reservation* queue ranked by
//! time (the member's reservation tag `r`) and a *share* queue ranked by start-time fair queuing
//! tags. A node serves the reservation queue's first member if its tag is due (`r <= now`),
//! otherwise the share queue's first: reservations are met first, the rest is shared by weight.
//! The share virtual time is WFQ's ([`super::Wfq`]), moved by share service only, and brought to
//! the largest finish tag when the node was idle ([`Policy::busy`]). Limits are not ranks at
//! all: a member's limit is its gate (a flow's pacing rate, a child's `rate`), enforced by the
//! one shaper.
//!
//! Tags: `a` = r, the reservation tag in whole ns (its rank), `b` = the share start tag S (the
//! last finish tag F while the member stays backlogged: SFQ's F is kept only as the next S,
//! `activate` takes max(V, F) from it), and `c` two halves: its low 32 bits r's fraction of a
//! ns beyond `a`, in 2^-32 ns, its high 32 bits the share charges' carry below a unit (less
//! than the weight, at most 2^16).

use super::{
    ABSENT, Clock, MemberCfg, Mode, Policy, RankShape, Service, ShapeCx, Tags, vt, vt_carried,
};
use crate::packet::Meta;
use crate::units::Rate;
use sluice_queue::Rank;

/// The fraction of a ns kept in `c`.
const FRACTION: u64 = (1 << 32) - 1;

/// Advance a reservation tag at `a` ns and `frac` 2^-32 ns by the time of `len` bytes at
/// `res`: the tag keeps the fraction of a ns below its rank, so that reservations are exact
/// over any run (to 2^-32 ns per packet, in the member's favour). Rounded to whole ns, as
/// before, 64 B at 60 Gbit/s (8.53 ns) was charged 9, and a member reserved 60 Gbit/s got
/// 56.9; rounded down it would get 64.
fn advance(a: u64, frac: u64, res: Rate, len: u32) -> (u64, u64) {
    let t = res
        .tx_time_fp(u64::from(len))
        .saturating_add(u128::from(frac));
    let ns = u64::try_from(t >> 32).unwrap_or(u64::MAX);
    (a.saturating_add(ns), t as u64 & FRACTION)
}

/// The reservation tag's fraction of a ns, from `c`.
fn fraction(c: u64) -> u64 {
    c & FRACTION
}

/// `c` with the reservation tag's fraction `frac` and the share carry `c` held.
fn with_fraction(c: u64, frac: u64) -> u64 {
    c & !FRACTION | frac
}

/// Bring a reservation tag behind `now` up to `now` (its fraction with it).
fn catch_up(tags: &mut Tags, now: u64) {
    if tags.a < now {
        tags.a = now;
        tags.c = with_fraction(tags.c, 0);
    }
}

/// How many of the scheduler's largest packets of reservation a member may be owed.
const OWED_PACKETS: u64 = 4;

/// The shared arithmetic.
#[derive(Debug)]
struct Rls {
    /// Share virtual time.
    clock: Clock,
    /// The most reservation service a member may be owed, bytes: [`OWED_PACKETS`] of the
    /// scheduler's `max_packet` ([`Policy::set_param`]).
    max_owed: u64,
}

impl Default for Rls {
    fn default() -> Self {
        Rls {
            clock: Clock::default(),
            max_owed: OWED_PACKETS * 65_536,
        }
    }
}

impl Rls {
    /// [`Policy::set_param`]: `max_packet` sizes what a member may be owed.
    fn set(&mut self, name: &str, value: u64) -> bool {
        match name {
            "max_packet" => {
                self.max_owed = value.saturating_mul(OWED_PACKETS);
                true
            }
            _ => self.clock.set(name, value),
        }
    }

    /// Whether a reservation tag `a` owes more than `max_owed` bytes at `res` by `now`.
    #[inline]
    fn owes_too_much(&self, a: u64, now: u64, res: Rate) -> bool {
        // lag * bps / 8e9 > max_owed, without a division.
        let lag = u128::from(now.saturating_sub(a));
        lag * u128::from(res.bps()) > u128::from(self.max_owed) * 8_000_000_000
    }

    /// Where a tag that owes too much is brought up to: the time `res` takes to send
    /// `max_owed` before `now`. (Out of line: rare, and its division would crowd the path
    /// every packet takes.)
    #[cold]
    #[inline(never)]
    fn owed_floor(&self, now: u64, res: Rate) -> u64 {
        now.saturating_sub(res.tx_time_ns(self.max_owed))
    }

    fn ranks(tags: &Tags, cfg: &MemberCfg) -> [Rank; 2] {
        let r = if cfg.reservation.is_some() {
            tags.a
        } else {
            ABSENT
        };
        [r, tags.b]
    }

    fn activate(&mut self, tags: &mut Tags, cfg: &MemberCfg, now: u64) -> [Rank; 2] {
        catch_up(tags, now);
        tags.b = self.clock.v.max(tags.b);
        Self::ranks(tags, cfg)
    }

    /// Charge a member for `sent` at `now`: its reservation tag if the reservation queue
    /// served it (`from` = 0), its share tags if the share queue did or `SHARES_COUNT_ALL`
    /// (hClock: a reservation is a floor, so all a member sends counts against its share; a
    /// constant, so that each policy's copy has no test of it), and
    /// the share queue's virtual time only if the share queue served it: SFQ's virtual time is
    /// the start tag of what the *share* phase serves, and letting reservation service move it
    /// would reset everyone's tags to the reserved member's.
    ///
    /// Share service never uses up a reservation (mClock; Linux HTB charges borrowed bytes to
    /// the lender, not to the class's rate): a member served from its reservation is due
    /// (`a <= now`). Should one be served ahead of its tag all the same, it owes nothing
    /// beyond the packet just sent, so that a tiny rate's tag cannot run away.
    ///
    /// Behind `now`, the tag owes the member at most `max_owed` bytes: while the node gets
    /// less than its members' reservations (its own rate lowered below their sum at run time,
    /// a parent that serves it less), the tags of the members that stay backlogged fall
    /// behind, and without a bound they took the node for as long again once it had the rate
    /// back (a 5 s dip to 300 Mbit/s under reservations of 600 and 300 left a third member
    /// of the 1 Gbit/s node nothing for 23 s after). As Linux HTB caps a class's tokens at its
    /// burst, what it could not get beyond that is forgotten.
    fn charge<const SHARES_COUNT_ALL: bool>(
        &mut self,
        tags: &mut Tags,
        cfg: &MemberCfg,
        s: &Service<'_>,
    ) {
        let sent = s.sent;
        if let (Some(res), 0) = (cfg.reservation, s.from) {
            let (a, frac) = if tags.a > s.now {
                (s.now, 0)
            } else if self.owes_too_much(tags.a, s.now, res) {
                (self.owed_floor(s.now, res), 0)
            } else {
                (tags.a, fraction(tags.c))
            };
            let (a, frac) = advance(a, frac, res, sent.len);
            (tags.a, tags.c) = (a, with_fraction(tags.c, frac));
        }
        if s.from == 1 {
            self.clock.start(tags.b);
        }
        if s.from == 1 || SHARES_COUNT_ALL {
            // The finish tag F, and the next share start: F while the member stays
            // backlogged, as in WFQ (fair.rs's `served` says why not max(V, F)); `activate`
            // takes max(V, F) when it comes back.
            let (units, carry) = vt_carried(sent.len, cfg.weight, tags.c >> 32);
            (tags.b, tags.c) = (tags.b + units, carry << 32 | fraction(tags.c));
        }
        if s.available == 0 {
            self.clock.finish(tags.b);
        }
    }

    /// A member's weight or reservation changed at `now` (`was`: as they were).
    ///
    /// The share service it was charged beyond its weighted share is forgiven, its share tags
    /// brought back to the virtual time if they ran ahead. Under hClock a reservation is a
    /// floor, so all a reserved member sends counts against its share, and while the
    /// reservation gives it more than its share its share tags run ahead of the others'
    /// without bound. Kept after
    /// the reservation went (or its weight rose), that lead held it for twice as long as the
    /// reservation had been in force: removed after 2 s, a 300 Mbit/s reservation left its
    /// member 3 Mbit/s of its 100 for 4 s.
    ///
    /// A reservation tag ahead of `now` (the time the member was served ahead of its
    /// reservation, at most a packet's) is owed in bytes and paid at the new reservation, as
    /// a gate's debt ([`crate::gate::Gate::set_rate`]); one behind `now` keeps its time. Kept
    /// as a time, a 1500 B packet served at 10 kbit/s held the tag 1.2 s ahead, and a
    /// reservation raised to 500 Mbit/s gave nothing until then. A reservation removed is
    /// forgotten, and one given to a member that had none starts at `now`: it claims no
    /// service from before (dated from when the member became backlogged, 2 s before, it took
    /// the whole link for 0.86 s to catch up on a reservation it never had).
    fn reconfigured(
        &self,
        tags: &mut Tags,
        was: &MemberCfg,
        cfg: &MemberCfg,
        now: u64,
    ) -> [Rank; 2] {
        tags.b = tags.b.min(self.clock.v);
        tags.c = fraction(tags.c); // the share carry, in units of the old weight's, goes too
        match (was.reservation, cfg.reservation) {
            (Some(old), Some(new)) if tags.a > now => {
                let ahead = (u128::from(tags.a - now) << 32) + u128::from(tags.c);
                let ahead = old.retime(ahead, new);
                tags.a = now.saturating_add(u64::try_from(ahead >> 32).unwrap_or(u64::MAX));
                tags.c = ahead as u64 & FRACTION;
            }
            (None, Some(_)) => catch_up(tags, now),
            (Some(_), None) => (tags.a, tags.c) = (now, 0),
            _ => {}
        }
        Self::ranks(tags, cfg)
    }

    /// Share tags only: the reservation tag is a time.
    fn shifted(tags: &mut Tags, cfg: &MemberCfg, d: u64) -> [Rank; 2] {
        tags.b = tags.b.saturating_sub(d);
        Self::ranks(tags, cfg)
    }

    fn shape(cx: &ShapeCx, which: usize) -> RankShape {
        if which == 0 {
            let slowest = cx
                .min_reservation
                .map_or(1_000_000, |r| r.tx_time_ns(u64::from(cx.max_len)));
            RankShape::Moving {
                span: slowest.max(1).saturating_mul(4),
                dense: false,
            }
        } else {
            RankShape::Moving {
                // Weight 1, the lowest, as WFQ's (`set_weight` may lower any member to it).
                span: 2 * vt(cx.max_len, 1),
                dense: false,
            }
        }
    }
}

/// The [`Policy`] methods hClock and HTB share word for word (they differ in what service
/// charges, [`Policy::served`]).
macro_rules! rls_common {
    () => {
        fn mode(&self, _at_leaf: bool) -> Mode {
            Mode::PerMember
        }
        fn dual(&self) -> bool {
            true
        }
        fn weighs(&self) -> bool {
            true
        }
        fn shape(&self, cx: &ShapeCx, which: usize) -> RankShape {
            Rls::shape(cx, which)
        }
        fn activate(&mut self, tags: &mut Tags, cfg: &MemberCfg, _: &Meta, now: u64) -> [Rank; 2] {
            self.0.activate(tags, cfg, now)
        }
        fn busy(&mut self) {
            self.0.clock.busy();
        }
        fn set_param(&mut self, name: &str, value: u64) -> bool {
            self.0.set(name, value)
        }
        fn virtual_time(&self) -> Option<u64> {
            Some(self.0.clock.v)
        }
        fn rebase(&mut self) -> u64 {
            self.0.clock.rebase()
        }
        fn shifted(&self, tags: &mut Tags, cfg: &MemberCfg, d: u64) -> [Rank; 2] {
            Rls::shifted(tags, cfg, d)
        }
        fn reconfigured(
            &self,
            tags: &mut Tags,
            was: &MemberCfg,
            cfg: &MemberCfg,
            now: u64,
        ) -> Option<[Rank; 2]> {
            Some(self.0.reconfigured(tags, was, cfg, now))
        }
    };
}

/// hClock: per member reservation (guaranteed rate, served first while behind), limit (the
/// member's gate) and share (weight for the rest). A reservation is a floor: all a member
/// sends counts against its share, so it gets the larger of its reservation and its weighted
/// share of the node. As in mClock, service from the share queue does not use up the
/// reservation.
#[derive(Debug, Default)]
pub struct HClock(Rls);

impl Policy for HClock {
    fn name(&self) -> &'static str {
        "hclock"
    }
    rls_common!();
    // Inlined into the scheduler's re-ranking, so that a call, its register saves and the
    // `Service` it reads from memory go: callgrind, hclock at 1e3 flows, 1371 -> 1342
    // instructions per packet.
    #[inline]
    fn served(&mut self, tags: &mut Tags, cfg: &MemberCfg, s: &Service<'_>) -> [Rank; 2] {
        self.0.charge::<true>(tags, cfg, s);
        Rls::ranks(tags, cfg)
    }
    fn keeps(&self, from: usize) -> Option<usize> {
        // Share service does not use up the reservation.
        (from == 1).then_some(0)
    }
}

/// HTB-like, as Linux HTB shares: each child has a `rate` it is guaranteed (its reservation),
/// a `ceil` it may not exceed (its gate) and a weight (HTB's quantum) for borrowing. A child
/// under its rate is served first, from its rate; what the rates leave is lent to the
/// children by weight, up to their ceils. Neither counts against the other: service at its
/// rate does not use up a child's share of the spare, and borrowed service does not use up its
/// rate (Linux charges borrowed bytes to the lender). So a busy child gets its rate plus its
/// weighted share of what the busy children's rates leave.
#[derive(Debug, Default)]
pub struct Htb(Rls);

impl Policy for Htb {
    fn name(&self) -> &'static str {
        "htb"
    }
    rls_common!();
    fn served(&mut self, tags: &mut Tags, cfg: &MemberCfg, s: &Service<'_>) -> [Rank; 2] {
        self.0.charge::<false>(tags, cfg, s);
        Rls::ranks(tags, cfg)
    }
    fn keeps(&self, from: usize) -> Option<usize> {
        // Each queue's service leaves the other queue's tag as it was.
        Some(1 - from)
    }
}

#[cfg(test)]
mod tests {
    use super::{HClock, Htb};
    use crate::packet::Meta;
    use crate::policy::{MemberCfg, NoBacklog, Policy, Service, Tags};
    use crate::units::Rate;

    /// The reservation tag after `n` packets of `len` bytes served from the reservation queue
    /// of `policy`, each when due, starting at 0.
    fn tag_after(policy: &mut dyn Policy, res: Rate, len: u32, n: u64) -> u64 {
        let cfg = MemberCfg {
            reservation: Some(res),
            ..MemberCfg::default()
        };
        let sent = Meta {
            len,
            ..Meta::default()
        };
        let mut tags = Tags::default();
        for _ in 0..n {
            let s = Service {
                sent: &sent,
                available: 1,
                backlog: &NoBacklog,
                from: 0,
                now: tags.a,
            };
            policy.served(&mut tags, &cfg, &s);
        }
        tags.a
    }

    #[test]
    fn reservation_tags_advance_by_the_exact_time_of_what_was_sent() {
        // In whole ns, 1 byte at 10 Gbit/s (0.8 ns) truncated to 0 let the member take the
        // whole link from the reservation queue; 64 B at 60 Gbit/s (8.53 ns) rounded to 9
        // cost it 5% of its reservation. Each charge is exact to 2^-32 ns, rounded down.
        for policy in [
            &mut HClock::default() as &mut dyn Policy,
            &mut Htb::default(),
        ] {
            assert_eq!(tag_after(policy, Rate::gbit(10), 1, 1000), 799); // 800 - 1000 * 2^-32
            assert_eq!(tag_after(policy, Rate::gbit(10), 1, 6), 4); // 4.8
            assert_eq!(tag_after(policy, Rate::gbit(60), 64, 3), 25); // 25.6
            assert_eq!(tag_after(policy, Rate::gbit(60), 64, 1000), 8533);
            assert_eq!(tag_after(policy, Rate::gbit(30), 64, 1000), 17_066);
            assert_eq!(tag_after(policy, Rate::gbit(1), 1500, 1000), 12_000_000);
        }
    }

    /// A member reserved 1 Gbit/s, and a packet of 1500 B it sent.
    fn gigabit_member() -> (MemberCfg, Meta) {
        let cfg = MemberCfg {
            reservation: Some(Rate::gbit(1)),
            ..MemberCfg::default()
        };
        let sent = Meta {
            len: 1500,
            ..Meta::default()
        };
        (cfg, sent)
    }

    /// The tags of a member of `policy` after one packet of [`gigabit_member`] served at
    /// `now` from queue `from`, starting from `tags`.
    fn after_one(policy: &mut dyn Policy, mut tags: Tags, from: usize, now: u64) -> Tags {
        let (cfg, sent) = gigabit_member();
        let s = Service {
            sent: &sent,
            available: 1,
            backlog: &NoBacklog,
            from,
            now,
        };
        policy.served(&mut tags, &cfg, &s);
        tags
    }

    #[test]
    fn htb_charges_each_queue_for_its_own_service_and_hclock_shares_for_all() {
        // 1500 B at 1 Gbit/s are 12 us of reservation; at weight 1, 1500 << 16 share units.
        let now = 1_000_000;
        let start = Tags { a: now, b: 5, c: 0 };
        let share = 5 + (1500 << 16);
        for (policy, from_reservation, from_share) in [
            (
                &mut HClock::default() as &mut dyn Policy,
                (now + 12_000, share),
                (now, share),
            ),
            (&mut Htb::default(), (now + 12_000, 5), (now, share)),
        ] {
            let t = after_one(policy, start, 0, now);
            assert_eq!(
                (t.a, t.b),
                from_reservation,
                "{} reservation",
                policy.name()
            );
            let t = after_one(policy, start, 1, now);
            assert_eq!((t.a, t.b), from_share, "{} share", policy.name());
            // What `keeps` promises the tree: the other queue's rank is as it was.
            for from in [0, 1] {
                if let Some(kept) = policy.keeps(from) {
                    let t = after_one(policy, start, from, now);
                    assert_eq!(
                        [t.a, t.b][kept],
                        [start.a, start.b][kept],
                        "{}",
                        policy.name()
                    );
                }
            }
        }
    }

    #[test]
    fn a_member_served_ahead_of_its_tag_owes_one_packet_at_most() {
        // Not a path the tree takes (it serves a reservation when due), but a tiny rate's
        // tag must not run away if it did: served at one instant 1000 times, the tag is one
        // packet (12 us) ahead.
        let mut htb = Htb::default();
        let mut tags = Tags::default();
        for _ in 0..1000 {
            tags = after_one(&mut htb, tags, 0, 1_000_000);
        }
        assert_eq!(tags.a, 1_000_000 + 12_000);
    }

    #[test]
    fn a_tag_owes_at_most_four_of_the_largest_packets() {
        // 1500 B largest: 6000 B at 1 Gbit/s are 48 us. A tag 1 s behind is served from
        // 48 us behind; one 40 us behind keeps its place (and fraction).
        let (cfg, sent) = gigabit_member();
        let now = 10_000_000_000;
        for policy in [
            &mut HClock::default() as &mut dyn Policy,
            &mut Htb::default(),
        ] {
            assert!(policy.set_param("max_packet", 1500));
            for (behind, after) in [(1_000_000_000, 48_000 - 12_000), (40_000, 40_000 - 12_000)] {
                let mut tags = Tags {
                    a: now - behind,
                    b: 0,
                    c: 7,
                };
                let s = Service {
                    sent: &sent,
                    available: 1,
                    backlog: &NoBacklog,
                    from: 0,
                    now,
                };
                policy.served(&mut tags, &cfg, &s);
                assert_eq!(now - tags.a, after, "{} {behind} ns behind", policy.name());
                assert_eq!(
                    tags.c & u64::from(u32::MAX),
                    if behind == 40_000 { 7 } else { 0 }
                );
            }
        }
    }

    #[test]
    fn a_tag_due_now_keeps_its_fraction_of_a_ns() {
        // Caught up to now only if behind it: a tag at now keeps the fraction it carries.
        let cfg = MemberCfg {
            reservation: Some(Rate::gbit(60)),
            ..MemberCfg::default()
        };
        let head = Meta::default();
        let mut hclock = HClock::default();
        let mut tags = Tags {
            a: 1000,
            b: 0,
            c: 1 << 31,
        };
        hclock.activate(&mut tags, &cfg, &head, 1000);
        assert_eq!((tags.a, tags.c), (1000, 1 << 31));
        hclock.activate(&mut tags, &cfg, &head, 1001);
        assert_eq!((tags.a, tags.c), (1001, 0));
    }
}
