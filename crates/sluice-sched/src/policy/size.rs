//! Policies that rank flows by a size that changes on enqueue and dequeue: pFabric / SRPT (least
//! remaining flow size first, Eiffel Fig. 4.14) and LQF (longest queue first, Fig. 4.6). Both
//! are per-member ("per-flow ranking") with on-dequeue re-ranking.

use super::{ABSENT, MemberCfg, Mode, Policy, RankShape, Service, ShapeCx, Tags};
use crate::packet::Meta;
use sluice_queue::Rank;

/// Mantissa bits kept by [`compress`].
const MANTISSA_BITS: u32 = 10;

/// A monotone 16-bit code for a byte count: exact below 1024, then 10 bits of mantissa per
/// power of two (within 0.1%). Orders remaining sizes from one byte to 2^64 in 56 320 buckets,
/// so a fixed-range FFS queue can hold them.
pub fn compress(bytes: u64) -> Rank {
    if bytes < 1 << MANTISSA_BITS {
        return bytes;
    }
    let e = 63 - u64::from(bytes.leading_zeros()); // >= MANTISSA_BITS
    let mantissa = (bytes >> (e - u64::from(MANTISSA_BITS))) & ((1 << MANTISSA_BITS) - 1);
    ((e - u64::from(MANTISSA_BITS) + 1) << MANTISSA_BITS) | mantissa
}

/// pFabric (Alizadeh et al.) / SRPT: flows are ranked by the least remaining size among their
/// queued packets and send their *earliest* packet (no reordering). A packet's `remaining`
/// field is its flow's remaining bytes when it was sent. Tags: `a` = the minimum remaining,
/// `b` = how many queued packets carry it (so the minimum is recomputed only when its last
/// holder leaves), `c` = the rank of `a` (so that a service that leaves `a` as it was, and an
/// arrival, compress no size twice: pfabric at 1e3 flows, callgrind, 870.4 -> 847.6
/// instructions per packet). Ranks are [`compress`]ed remaining sizes, so that a fixed-range
/// bucketed queue holds them (sizes within 0.1% of each other leave in arrival order); on an
/// exact queue they are the sizes themselves ([`Policy::exact_queues`]).
#[derive(Debug, Default)]
pub struct Pfabric {
    /// Rank by the remaining sizes themselves, not compressed.
    exact: bool,
}

impl Pfabric {
    fn rank(&self, bytes: u64) -> Rank {
        if self.exact {
            bytes.min(ABSENT - 1)
        } else {
            compress(bytes)
        }
    }
}

impl Policy for Pfabric {
    fn name(&self) -> &'static str {
        "pfabric"
    }
    fn mode(&self, _at_leaf: bool) -> Mode {
        Mode::PerMember
    }
    fn shape(&self, _cx: &ShapeCx, _which: usize) -> RankShape {
        RankShape::Fixed {
            max: compress(u64::MAX) + 1,
        }
    }
    fn exact_queues(&mut self) {
        self.exact = true;
    }
    fn activate(&mut self, tags: &mut Tags, _: &MemberCfg, head: &Meta, _: u64) -> [Rank; 2] {
        tags.a = head.remaining;
        tags.b = 1;
        tags.c = self.rank(tags.a);
        [tags.c, ABSENT]
    }
    fn arrived(
        &mut self,
        tags: &mut Tags,
        _: &MemberCfg,
        pkt: &Meta,
        _: u32,
        _: u64,
    ) -> Option<[Rank; 2]> {
        if pkt.remaining < tags.a {
            tags.a = pkt.remaining;
            tags.b = 1;
            // Ranks are compressed sizes: a smaller size may keep the rank, and the place.
            let rank = self.rank(tags.a);
            let before = std::mem::replace(&mut tags.c, rank);
            (rank != before).then_some([rank, ABSENT])
        } else {
            if pkt.remaining == tags.a {
                tags.b += 1;
            }
            None
        }
    }
    fn served(&mut self, tags: &mut Tags, _: &MemberCfg, s: &Service<'_>) -> [Rank; 2] {
        if s.sent.remaining == tags.a {
            tags.b -= 1;
        }
        if tags.b == 0 {
            let (mut min, mut count) = (u64::MAX, 0);
            s.backlog.for_each(&mut |m| {
                if m.remaining < min {
                    (min, count) = (m.remaining, 1);
                } else if m.remaining == min {
                    count += 1;
                }
            });
            (tags.a, tags.b) = (min, count);
            tags.c = self.rank(tags.a);
        }
        [tags.c, ABSENT]
    }
}

/// Longest queue first: the flow with the most available packets goes first; ties in the order
/// they reached that length. Rank = L - min(available, L), over `0..L` where L is the
/// scheduler's capacity or [`LQF_LENGTHS`] if that is less: one bucket per length with
/// `auto`, so queues of 4 and 3 packets are never confused, and all queues longer than 2^16
/// packets tie. Tags unused.
#[derive(Debug, Default)]
pub struct Lqf {
    /// The scheduler's capacity in packets (the longest possible queue), set by the tree.
    pub capacity: u64,
}

/// Queue lengths LQF tells apart: as many as `auto` gives one bucket each (an exact cFFS or
/// hierarchical FFS of 2^16 buckets). Ranking every length up to a capacity of 2^16 + 1 or
/// more made `auto` share buckets between adjacent lengths.
pub const LQF_LENGTHS: u64 = 1 << 16;

impl Lqf {
    fn lengths(capacity: u64) -> u64 {
        capacity.clamp(1, LQF_LENGTHS)
    }

    fn rank(&self, available: u32) -> Rank {
        let l = Self::lengths(self.capacity);
        l - u64::from(available).min(l)
    }
}

impl Policy for Lqf {
    fn name(&self) -> &'static str {
        "lqf"
    }
    fn mode(&self, _at_leaf: bool) -> Mode {
        Mode::PerMember
    }
    fn shape(&self, cx: &ShapeCx, _which: usize) -> RankShape {
        RankShape::Fixed {
            max: Self::lengths(u64::from(cx.capacity)),
        }
    }
    fn activate(&mut self, _: &mut Tags, _: &MemberCfg, _: &Meta, _: u64) -> [Rank; 2] {
        [self.rank(1), ABSENT]
    }
    fn arrived(
        &mut self,
        _: &mut Tags,
        _: &MemberCfg,
        _: &Meta,
        available: u32,
        _: u64,
    ) -> Option<[Rank; 2]> {
        Some([self.rank(available), ABSENT])
    }
    fn served(&mut self, _: &mut Tags, _: &MemberCfg, s: &Service<'_>) -> [Rank; 2] {
        [self.rank(s.available), ABSENT]
    }
    fn set_param(&mut self, name: &str, value: u64) -> bool {
        match name {
            "capacity" => {
                self.capacity = value;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Backlog;

    fn sized(remaining: u64) -> Meta {
        Meta {
            remaining,
            ..Meta::default()
        }
    }

    struct Queued(Vec<Meta>);

    impl Backlog for Queued {
        fn for_each(&self, f: &mut dyn FnMut(&Meta)) {
            self.0.iter().for_each(f);
        }
    }

    /// The rank kept in `tags.c` follows every change of the minimum: an arrival below it (to
    /// a new rank or, compressed, the same one), a service of one of several holders of the
    /// minimum (kept) and of the last one (recomputed from the backlog), on either kind of queue.
    #[test]
    fn the_kept_rank_follows_the_minimum() {
        for exact in [false, true] {
            let mut p = Pfabric { exact };
            let cfg = MemberCfg::default();
            let mut t = Tags::default();
            let served = |p: &mut Pfabric, t: &mut Tags, sent: u64, left: &[u64]| {
                let sent = sized(sent);
                let backlog = Queued(left.iter().map(|&r| sized(r)).collect());
                let s = Service {
                    sent: &sent,
                    available: left.len() as u32,
                    backlog: &backlog,
                    from: 0,
                    now: 0,
                };
                p.served(t, &cfg, &s)[0]
            };
            let big = 3_000_000;
            assert_eq!(p.activate(&mut t, &cfg, &sized(big), 0)[0], p.rank(big));
            // 1500 bytes less compresses to the same rank: no move, unless exact.
            let same = p.arrived(&mut t, &cfg, &sized(big - 1500), 2, 0);
            assert_eq!(same, exact.then_some([big - 1500, ABSENT]));
            assert_eq!(compress(big - 1500), compress(big), "the case above");
            assert_eq!(
                p.arrived(&mut t, &cfg, &sized(5000), 3, 0),
                Some([p.rank(5000), ABSENT])
            );
            assert_eq!(
                p.arrived(&mut t, &cfg, &sized(5000), 4, 0),
                None,
                "a second holder"
            );
            // The first packet leaves: the minimum and its rank stay.
            assert_eq!(
                served(&mut p, &mut t, big, &[big - 1500, 5000, 5000]),
                p.rank(5000)
            );
            // One holder of the minimum leaves, then the other: recomputed from the backlog.
            assert_eq!(
                served(&mut p, &mut t, 5000, &[big - 1500, 5000]),
                p.rank(5000)
            );
            assert_eq!(
                served(&mut p, &mut t, 5000, &[big - 1500]),
                p.rank(big - 1500)
            );
            assert_eq!(t.c, p.rank(big - 1500));
            // Below the recomputed minimum again: a move.
            assert_eq!(
                p.arrived(&mut t, &cfg, &sized(700), 2, 0),
                Some([700, ABSENT])
            );
        }
    }

    #[test]
    fn compress_is_monotone_exact_small_and_close_large() {
        let mut last = 0;
        for b in (0..5000u64)
            .chain((13..64).map(|e| 1u64 << e))
            .chain([u64::MAX])
        {
            let r = compress(b);
            assert!(r >= last, "{b}");
            last = r;
        }
        for b in 0..1024 {
            assert_eq!(compress(b), b);
        }
        assert!(compress(u64::MAX) < 1 << 16);
        // Within 0.1%: values differing by more than that never share a code.
        assert!(compress(1_000_000) < compress(1_001_100));
    }
}
