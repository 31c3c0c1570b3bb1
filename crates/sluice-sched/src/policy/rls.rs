//! Reservations, limits and shares: hClock (Bhattacharya et al., Eiffel Fig. 4.11) and an
//! HTB-like hierarchy. Both keep each member in two queues: a *reservation* queue ranked by
//! time (the member's reservation tag `r`) and a *share* queue ranked by start-time fair queuing
//! tags. A node serves the reservation queue's first member if its tag is due (`r <= now`),
//! otherwise the share queue's first: reservations are met first, the rest is shared by weight.
//! Limits are not ranks at all: a member's limit is its gate (a flow's pacing rate, a child's
//! `rate`), enforced by the one shaper.
//!
//! Tags: `a` = r (ns), `b` = share start S, `c` = share finish F.

use super::{
    ABSENT, MemberCfg, Mode, Policy, RankShape, Service, ShapeCx, Tags, VT_PER_BYTE, rebase_clock,
    set_clock,
};
use crate::packet::Meta;
use crate::units::Rate;
use sluice_queue::Rank;

/// A reservation's charge for a packet of `len` bytes: its time at `res` in ns, rounded to
/// the nearest and at least 1. Truncating, as before, charged a 1-byte packet at 10 Gbit/s
/// nothing, and its member took the whole link from the reservation queue; rounded, the charge
/// is within half a nanosecond per packet (0.4% for 64-byte packets at 30 Gbit/s).
fn charge_ns(res: Rate, len: u32) -> u64 {
    let fp = res.tx_time_fp(u64::from(len)).saturating_add(1 << 31);
    u64::try_from(fp >> 32).unwrap_or(u64::MAX).max(1)
}

fn vt(len: u32, weight: u32) -> u64 {
    u64::from(len) * VT_PER_BYTE / u64::from(weight.max(1))
}

/// The shared arithmetic. `charge_shares_to_reservation`: whether service from the share
/// queue also advances the reservation tag (HTB: a class's rate counts all it sends) or not
/// (hClock / mClock: reservations come on top of shares).
#[derive(Debug, Default)]
struct Rls {
    /// Share virtual time.
    v: u64,
}

impl Rls {
    fn ranks(tags: &Tags, cfg: &MemberCfg) -> [Rank; 2] {
        let r = if cfg.reservation.is_some() {
            tags.a
        } else {
            ABSENT
        };
        [r, tags.b]
    }

    fn activate(&mut self, tags: &mut Tags, cfg: &MemberCfg, now: u64) -> [Rank; 2] {
        tags.a = tags.a.max(now);
        tags.b = self.v.max(tags.c);
        Self::ranks(tags, cfg)
    }

    /// Charge a member for `sent` at `now`: its share tags always; its reservation tag if
    /// `reservation_too`; and the share queue's virtual time only if the share queue served it
    /// (`from` = 1): SFQ's virtual time is the start tag of what the *share* phase serves, and
    /// letting reservation service move it would reset everyone's tags to the reserved member's.
    ///
    /// The reservation tag runs at most one packet ahead of `now`: a member served while it is
    /// ahead (HTB charging bytes it borrowed) owes nothing beyond the packet just sent. Without
    /// that bound an HTB class that borrowed the link for hours lost its guaranteed rate for
    /// hours once others came (Linux HTB charges borrowed bytes to the lender, not to the
    /// class's rate), and a tiny rate's tag overflowed. A reservation served when due (`a <=
    /// now`, all of hClock's) is charged in full.
    ///
    /// A member without a reservation keeps its tag at the time it was last served, so that a
    /// reservation given to it at run time (`set_reservation`) starts from then: before, the
    /// tag was the time the member became backlogged, and a member backlogged for 2 s took
    /// the whole link for 0.86 s to "catch up" on a reservation it never had.
    fn charge(&mut self, tags: &mut Tags, cfg: &MemberCfg, s: &Service<'_>, reservation_too: bool) {
        let sent = s.sent;
        match (cfg.reservation, reservation_too) {
            (Some(res), true) => {
                tags.a = tags.a.min(s.now).saturating_add(charge_ns(res, sent.len));
            }
            (Some(_), false) => {}
            (None, _) => tags.a = tags.a.max(s.now),
        }
        tags.c = tags.b + vt(sent.len, cfg.weight);
        if s.from == 1 {
            self.v = self.v.max(tags.b);
        }
        // The next share start: F while the member stays backlogged, as in WFQ (fair.rs's
        // `served` says why not max(V, F)); `activate` takes max(V, F) when it comes back.
        tags.b = tags.c;
    }

    /// A member's weight or reservation changed: the share service it was charged beyond its
    /// weighted share is forgiven, its share tags brought back to the virtual time if they
    /// ran ahead. A reservation is a floor, so all a reserved member sends counts against its
    /// share, and while the reservation gives it more than its share its share tags run ahead
    /// of the others' without bound. Kept after the reservation went (or its weight rose),
    /// that lead held it for twice as long as the reservation had been in force: removed
    /// after 2 s, a 300 Mbit/s reservation left its member 3 Mbit/s of its 100 for 4 s.
    fn forgive(&self, tags: &mut Tags, cfg: &MemberCfg) -> [Rank; 2] {
        tags.b = tags.b.min(self.v);
        tags.c = tags.c.min(self.v);
        Self::ranks(tags, cfg)
    }

    /// Share tags only: the reservation tag is a time.
    fn shifted(tags: &mut Tags, cfg: &MemberCfg, d: u64) -> [Rank; 2] {
        tags.b = tags.b.saturating_sub(d);
        tags.c = tags.c.saturating_sub(d);
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
        fn set_param(&mut self, name: &str, value: u64) -> bool {
            set_clock(&mut self.0.v, name, value)
        }
        fn virtual_time(&self) -> Option<u64> {
            Some(self.0.v)
        }
        fn rebase(&mut self) -> u64 {
            rebase_clock(&mut self.0.v)
        }
        fn shifted(&self, tags: &mut Tags, cfg: &MemberCfg, d: u64) -> [Rank; 2] {
            Rls::shifted(tags, cfg, d)
        }
        fn reconfigured(&self, tags: &mut Tags, cfg: &MemberCfg) -> Option<[Rank; 2]> {
            Some(self.0.forgive(tags, cfg))
        }
    };
}

/// hClock: per member reservation (guaranteed rate, served first while behind), limit (the
/// member's gate) and share (weight for the rest). As in mClock, service from the share queue
/// does not use up the reservation.
#[derive(Debug, Default)]
pub struct HClock(Rls);

impl Policy for HClock {
    fn name(&self) -> &'static str {
        "hclock"
    }
    rls_common!();
    fn served(&mut self, tags: &mut Tags, cfg: &MemberCfg, s: &Service<'_>) -> [Rank; 2] {
        self.0.charge(tags, cfg, s, s.from == 0);
        Rls::ranks(tags, cfg)
    }
    fn keeps(&self, from: usize) -> Option<usize> {
        // Share service does not use up the reservation.
        (from == 1).then_some(0)
    }
}

/// HTB-like: each child has a `rate` it is guaranteed (its reservation), a `ceil` it may not
/// exceed (its gate) and a weight for borrowing spare bandwidth. A child under its rate is
/// served first; above it, it borrows by weight up to its ceil. Everything a child sends counts
/// against its rate, so a child that gets its rate by borrowing is not served from it too; but
/// a child never owes more than the packet it just sent, so its rate is guaranteed again as
/// soon as borrowing gives it less (as Linux HTB, which does not charge borrowed bytes to it).
#[derive(Debug, Default)]
pub struct Htb(Rls);

impl Policy for Htb {
    fn name(&self) -> &'static str {
        "htb"
    }
    rls_common!();
    fn served(&mut self, tags: &mut Tags, cfg: &MemberCfg, s: &Service<'_>) -> [Rank; 2] {
        self.0.charge(tags, cfg, s, true);
        Rls::ranks(tags, cfg)
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
    fn reservation_tags_advance_within_half_a_nanosecond_per_packet() {
        // Truncated to whole ns, 1 byte at 10 Gbit/s (0.8 ns) charged nothing: the member
        // was due forever and took the whole link from the reservation queue.
        for policy in [
            &mut HClock::default() as &mut dyn Policy,
            &mut Htb::default(),
        ] {
            assert_eq!(tag_after(policy, Rate::gbit(10), 1, 1000), 1000);
            // 64 B at 30 Gbit/s: 17.07 ns, charged 17 (0.4%), not 0 or 18.
            assert_eq!(tag_after(policy, Rate::gbit(30), 64, 1000), 17_000);
            assert_eq!(tag_after(policy, Rate::gbit(1), 1500, 1000), 12_000_000);
        }
    }
}
