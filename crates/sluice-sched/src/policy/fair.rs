//! Fair sharing: WFQ (start-time fair queuing), DRR, and FQ (Linux fq's flow scheduling).

use super::{ABSENT, MemberCfg, Mode, Policy, RankShape, Service, ShapeCx, Tags, VT_PER_BYTE};
use crate::packet::Meta;
use sluice_queue::Rank;

/// Virtual-time length of `len` bytes at `weight`.
fn vt(len: u32, weight: u32) -> u64 {
    u64::from(len) * VT_PER_BYTE / u64::from(weight.max(1))
}

/// Weighted fair queuing as start-time fair queuing (Goyal et al.): a member's start tag is
/// `S = max(V, F)` where `F` is its last finish tag, `F = S + len / w` once it sends a packet of
/// `len` bytes, and members leave by S; the virtual time V is the start tag of the member last
/// served. Fair to within one packet per member, with no per-round scan and no floating point
/// (tags are integers, [`VT_PER_BYTE`] per byte at weight 1, so weights up to 2^16 keep whole
/// units).
///
/// Per member at every node (flows at a leaf, children above): one entry per member with
/// packets, its start tag computed when its head changes, charging the length of the packet
/// actually sent. Tags therefore never run more than a packet or two ahead of V, whatever a
/// member's backlog, which keeps them inside a bucketed queue's window (tags: `a` = S, `b` = F).
#[derive(Debug, Default)]
pub struct Wfq {
    /// Virtual time.
    v: u64,
}

impl Policy for Wfq {
    fn name(&self) -> &'static str {
        "wfq"
    }
    fn mode(&self, _at_leaf: bool) -> Mode {
        Mode::PerMember
    }
    fn shape(&self, cx: &ShapeCx, _which: usize) -> RankShape {
        RankShape::Moving {
            span: 2 * vt(cx.max_len, cx.min_weight),
            dense: false,
        }
    }
    fn activate(&mut self, tags: &mut Tags, _: &MemberCfg, _: &Meta, _: u64) -> [Rank; 2] {
        tags.a = self.v.max(tags.b);
        [tags.a, ABSENT]
    }
    fn served(&mut self, tags: &mut Tags, cfg: &MemberCfg, s: &Service<'_>) -> [Rank; 2] {
        tags.b = tags.a + vt(s.sent.len, cfg.weight);
        self.v = self.v.max(tags.a);
        tags.a = self.v.max(tags.b);
        [tags.a, ABSENT]
    }
}

/// Deficit round robin (Shreedhar and Varghese), as ranks: a member's rank is the round it will
/// be served in. Each turn a member spends its deficit; when it is used up the member moves to
/// the next round with `quantum` more (so it may overdraw by one packet, as Linux fq does).
/// Members in one round leave in the order they joined it. Per member everywhere
/// (tags: `a` = round, `b` = deficit, signed).
#[derive(Debug, Default)]
pub struct Drr {
    /// The round being served.
    round: u64,
}

impl Drr {
    fn spend(&mut self, tags: &mut Tags, cfg: &MemberCfg, sent: &Meta) {
        self.round = self.round.max(tags.a);
        let deficit = tags.b as i64 - i64::from(sent.len);
        if deficit <= 0 {
            tags.b = (deficit + i64::from(cfg.quantum.max(1))) as u64;
            tags.a += 1;
        } else {
            tags.b = deficit as u64;
        }
    }
}

impl Policy for Drr {
    fn name(&self) -> &'static str {
        "drr"
    }
    fn mode(&self, _at_leaf: bool) -> Mode {
        Mode::PerMember
    }
    fn shape(&self, _cx: &ShapeCx, _which: usize) -> RankShape {
        RankShape::Moving {
            span: 4,
            dense: true,
        }
    }
    fn activate(&mut self, tags: &mut Tags, cfg: &MemberCfg, _: &Meta, _: u64) -> [Rank; 2] {
        tags.a = self.round;
        tags.b = u64::from(cfg.quantum.max(1));
        [tags.a, ABSENT]
    }
    fn served(&mut self, tags: &mut Tags, cfg: &MemberCfg, s: &Service<'_>) -> [Rank; 2] {
        self.spend(tags, cfg, s.sent);
        [tags.a, ABSENT]
    }
}

/// Linux fq's flow scheduling (net/sched/sch_fq.c) as ranks: a flow that becomes active joins
/// the *new* flows with `initial quantum` credit and is served before *old* flows of the same
/// round; when its credit is spent it moves to the old flows of the next round with `quantum`
/// more. Rank = 2 * round + (old ? 1 : 0). Per-flow pacing (fq's `maxrate`, or the packet's own
/// pacing rate) is the scheduler's flow gate in the shaper, not part of the ranking.
/// Tags: `a` = rank, `b` = credit (signed).
#[derive(Debug)]
pub struct Fq {
    /// Half the rank of the flow last served: the current round.
    round: u64,
    /// Credit of a newly active flow (fq: 10 MTU).
    initial_quantum: u32,
}

impl Default for Fq {
    fn default() -> Self {
        Fq {
            round: 0,
            initial_quantum: 10 * 1514,
        }
    }
}

impl Fq {
    fn spend(&mut self, tags: &mut Tags, cfg: &MemberCfg, sent: &Meta) {
        self.round = self.round.max(tags.a / 2);
        let credit = tags.b as i64 - i64::from(sent.len);
        if credit <= 0 {
            tags.b = (credit + i64::from(cfg.quantum.max(1))) as u64;
            tags.a = 2 * (tags.a / 2 + 1) + 1;
        } else {
            tags.b = credit as u64;
        }
    }
}

impl Policy for Fq {
    fn name(&self) -> &'static str {
        "fq"
    }
    fn mode(&self, _at_leaf: bool) -> Mode {
        Mode::PerMember
    }
    fn shape(&self, _cx: &ShapeCx, _which: usize) -> RankShape {
        RankShape::Moving {
            span: 8,
            dense: true,
        }
    }
    fn activate(&mut self, tags: &mut Tags, _: &MemberCfg, _: &Meta, _: u64) -> [Rank; 2] {
        tags.a = 2 * self.round;
        tags.b = u64::from(self.initial_quantum);
        [tags.a, ABSENT]
    }
    fn served(&mut self, tags: &mut Tags, cfg: &MemberCfg, s: &Service<'_>) -> [Rank; 2] {
        self.spend(tags, cfg, s.sent);
        [tags.a, ABSENT]
    }
    fn set_param(&mut self, name: &str, value: u64) -> bool {
        match name {
            "initial_quantum" => {
                self.initial_quantum = value.clamp(1, u64::from(u32::MAX)) as u32;
                true
            }
            _ => false,
        }
    }
}
