//! Fair sharing: WFQ (start-time fair queuing), DRR, and FQ (Linux fq's flow scheduling).

use super::{
    ABSENT, Clock, MemberCfg, Mode, Policy, RankShape, Service, ShapeCx, Tags, reweighed, vt,
    vt_carried,
};
use crate::packet::Meta;
use sluice_queue::Rank;

/// Weighted fair queuing as start-time fair queuing (Goyal et al.): a member's start tag is
/// `S = max(V, F)` when it becomes backlogged, where `F` is its last finish tag, and `S = F`
/// while it stays backlogged; `F = S + len / w` once it sends a packet of `len` bytes, and
/// members leave by S; the virtual time V is the largest start tag served while the node is
/// busy, and the largest finish tag served once it was idle ([`Policy::busy`]: a member that
/// sent alone is not held back for it when others come). Fair to within one packet per member
/// on an exact queue, one bucket on a bucketed one, with no per-round scan and no floating
/// point (tags are integers, [`VT_PER_BYTE`](super::VT_PER_BYTE) per byte at weight 1, what a
/// charge leaves below a unit carried to the member's next).
///
/// Per member at every node (flows at a leaf, children above): one entry per member with
/// packets, its start tag computed when its head changes, charging the length of the packet
/// actually sent. Tags therefore never run more than a packet or two ahead of V, whatever a
/// member's backlog, which keeps them inside a bucketed queue's window (tags: `a` = S, `b` = F,
/// `c` = the charges' carry below a unit).
/// V only grows; the scheduler lowers it, and every tag with it, before it nears overflow
/// ([`Policy::rebase`]).
#[derive(Debug, Default)]
pub struct Wfq {
    /// Virtual time.
    clock: Clock,
}

impl Policy for Wfq {
    fn name(&self) -> &'static str {
        "wfq"
    }
    fn weighs(&self) -> bool {
        true
    }
    fn mode(&self, _at_leaf: bool) -> Mode {
        Mode::PerMember
    }
    fn shape(&self, cx: &ShapeCx, _which: usize) -> RankShape {
        RankShape::Moving {
            // Sized for weight 1, the lowest, whatever the members' weights now: `set_weight`
            // may give it to any member at run time, and a window sized for heavier weights
            // filed every tag of such a member at its edge (a third of the link for a 1/2001
            // share).
            span: 2 * vt(cx.max_len, 1),
            dense: false,
        }
    }
    fn busy(&mut self) {
        self.clock.busy();
    }
    fn activate(&mut self, tags: &mut Tags, _: &MemberCfg, _: &Meta, _: u64) -> [Rank; 2] {
        tags.a = self.clock.v.max(tags.b);
        [tags.a, ABSENT]
    }
    fn served(&mut self, tags: &mut Tags, cfg: &MemberCfg, s: &Service<'_>) -> [Rank; 2] {
        let (units, carry) = vt_carried(s.sent.len, cfg.weight, tags.c);
        (tags.b, tags.c) = (tags.a + units, carry);
        self.clock.start(tags.a);
        if s.available == 0 {
            self.clock.finish(tags.b);
        }
        // Still backlogged: its next packet arrived while V was at most F, so S = F. Taking
        // max(V, F) here, as `activate` does, pulled every member up to the largest start tag
        // served: in a bucketed queue members of one bucket leave in arrival order, not by
        // start tag, so V jumps within the bucket, and members whose packets move their tags
        // by less than a bucket (heavy weights) lost the lead their weight earned, down to
        // round robin (weights 3 : 1 shared 1.9 : 1).
        tags.a = tags.b;
        [tags.a, ABSENT]
    }
    fn set_param(&mut self, name: &str, value: u64) -> bool {
        self.clock.set(name, value)
    }
    fn virtual_time(&self) -> Option<u64> {
        Some(self.clock.v)
    }
    fn owes(&self, tags: &Tags, _: &MemberCfg) -> bool {
        // Back, it starts at max(V, F); a new member at V.
        tags.b > self.clock.v
    }
    fn rebase(&mut self) -> u64 {
        self.clock.rebase()
    }
    fn shifted(&self, tags: &mut Tags, _: &MemberCfg, d: u64) -> [Rank; 2] {
        tags.a = tags.a.saturating_sub(d);
        tags.b = tags.b.saturating_sub(d);
        [tags.a, ABSENT]
    }
    /// A new weight holds from its member's next packet, and its lead over V (at most the
    /// packet it last sent) is paid at the new weight. (Kept, a member raised from weight 1 to
    /// 4 beside one of weight 7 waited out its last 1500 B packet at weight 1: eight of the
    /// other's packets of 1500 B instead of two.)
    fn reconfigured(
        &self,
        tags: &mut Tags,
        was: &MemberCfg,
        cfg: &MemberCfg,
        _now: u64,
    ) -> Option<[Rank; 2]> {
        let v = self.clock.v;
        tags.a = reweighed(tags.a, v, was.weight, cfg.weight);
        tags.b = reweighed(tags.b, v, was.weight, cfg.weight);
        tags.c = 0; // a carry in units of the old weight's
        Some([tags.a, ABSENT])
    }
}

/// Deficit round robin (Shreedhar and Varghese), as ranks: a member's rank is the round it will
/// be served in. Each turn a member spends its deficit; when it is used up the member gets
/// `quantum` more per round until the deficit is positive again, and moves that many rounds
/// ahead: a packet larger than the quantum may overdraw (as Linux fq allows), and its member
/// then sits out the rounds it owes, so shares stay fair in bytes whatever the packet sizes.
/// (Shreedhar and Varghese send a packet only if it fits the deficit, which needs its size
/// before the member's turn: a child node's next packet is not known until it chooses one.
/// The overdraft form sends up to a quantum plus a packet per visit; the shares are the same.)
/// Members in one round leave in the order they joined it. Per member everywhere
/// (tags: `a` = round, `b` = deficit, `c` = 1 once it was active).
#[derive(Debug, Default)]
pub struct Drr {
    /// The round being served.
    round: u64,
}

/// Charge `len` bytes to `deficit`: the rounds to move ahead (0 while the deficit stays
/// positive) and the deficit after them, positive and at most one quantum above what was left.
fn charge(deficit: u64, len: u32, quantum: u32) -> (u64, u64) {
    let left = deficit as i64 - i64::from(len);
    if left > 0 {
        return (0, left as u64);
    }
    let q = i64::from(quantum.max(1));
    let rounds = -left / q + 1;
    (rounds as u64, (left + rounds * q) as u64)
}

/// Rounds a member can move ahead in one charge: what a packet of twice the largest length
/// overdraws. The slack keeps packets a little over `max_len` (GSO super-frames counted in
/// wire bytes) inside the window, as WFQ's span of two packets does.
fn max_rounds(cx: &ShapeCx) -> u64 {
    (2 * u64::from(cx.max_len))
        .div_ceil(u64::from(cx.min_quantum.max(1)))
        .max(1)
}

impl Drr {
    fn spend(&mut self, tags: &mut Tags, cfg: &MemberCfg, sent: &Meta) {
        self.round = self.round.max(tags.a);
        let (rounds, deficit) = charge(tags.b, sent.len, cfg.quantum);
        tags.a += rounds;
        tags.b = deficit;
    }
}

impl Policy for Drr {
    fn name(&self) -> &'static str {
        "drr"
    }
    fn mode(&self, _at_leaf: bool) -> Mode {
        Mode::PerMember
    }
    fn shape(&self, cx: &ShapeCx, _which: usize) -> RankShape {
        // Members sit between the round being served and the furthest a charge moves one.
        RankShape::Moving {
            span: max_rounds(cx) + 2,
            dense: true,
        }
    }
    fn activate(&mut self, tags: &mut Tags, cfg: &MemberCfg, _: &Meta, _: u64) -> [Rank; 2] {
        // A member that becomes active joins the tail of the round robin: the next round, with
        // a fresh quantum (DRR resets an emptied member's deficit). One that emptied while it
        // still owed rounds for an overdraft (`c`: it was active before) keeps its place and
        // deficit: going idle does not clear a debt.
        if tags.c == 0 || tags.a <= self.round {
            tags.a = self.round + 1;
            tags.b = u64::from(cfg.quantum.max(1));
        }
        tags.c = 1;
        [tags.a, ABSENT]
    }
    fn served(&mut self, tags: &mut Tags, cfg: &MemberCfg, s: &Service<'_>) -> [Rank; 2] {
        self.spend(tags, cfg, s.sent);
        [tags.a, ABSENT]
    }
    fn owes(&self, tags: &Tags, cfg: &MemberCfg) -> bool {
        // Back, it keeps its round and deficit if it is still ahead (`activate`); a new
        // member joins the next round with a quantum.
        let next = self.round + 1;
        tags.c != 0 && (tags.a > next || tags.a == next && tags.b < u64::from(cfg.quantum.max(1)))
    }
}

/// fq's `flow_refill_delay`: a flow idle longer than this is new again (40 ms).
const FQ_REFILL_DELAY_NS: u64 = 40_000_000;

/// Linux fq's flow scheduling (net/sched/sch_fq.c) as ranks: a flow that becomes active joins
/// the *new* flows with `initial quantum` credit and is served before *old* flows of the same
/// round; when its credit is spent it moves to the old flows of a later round, `quantum` more
/// per round, as many rounds as it takes for the credit to be positive again (fq skips a flow
/// with no credit in each round it visits it, adding a quantum each time). Rank = 2 * round +
/// (old ? 1 : 0). One difference: a flow that owes nothing and returns after rounds ended
/// gets a quantum for each round it missed, banked up to `initial quantum` (fq refreshes
/// credit only after `flow_refill_delay` idle), so a flow below its share is not held for a
/// round, even when one round lasts several times as long as the others. Per-flow pacing (fq's `maxrate`, or the packet's own
/// pacing rate) is the scheduler's flow gate in the shaper, not part of the ranking.
/// Tags: `a` = rank, `b` = credit, `c` = when it was last served + 1 (0: never).
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
        let (rounds, credit) = charge(tags.b, sent.len, cfg.quantum);
        if rounds > 0 {
            tags.a = 2 * (tags.a / 2 + rounds) + 1;
        }
        tags.b = credit;
    }
}

impl Policy for Fq {
    fn name(&self) -> &'static str {
        "fq"
    }
    fn mode(&self, _at_leaf: bool) -> Mode {
        Mode::PerMember
    }
    fn shape(&self, cx: &ShapeCx, _which: usize) -> RankShape {
        // Two ranks per round (new, old), from the round being served to the furthest a
        // charge moves a flow.
        RankShape::Moving {
            span: 2 * (max_rounds(cx) + 2),
            dense: true,
        }
    }
    fn activate(&mut self, tags: &mut Tags, cfg: &MemberCfg, _: &Meta, now: u64) -> [Rank; 2] {
        // As fq_enqueue: a flow that was never served starts with `initial_quantum` among the
        // new flows. One that emptied keeps its credit and, if it owes rounds for an overdraft,
        // comes back in the round it owes, however long it was idle (fq keeps a flow with
        // negative credit on its old list, empty or not, until a quantum per round pays it;
        // only a flow detached with credit left gets the refill). Forgiving the debt after
        // 40 ms idle, as before, gave a flow sending a 64 KB frame every 41 ms twice its share.
        let Some(last_served) = tags.c.checked_sub(1) else {
            tags.b = u64::from(self.initial_quantum);
            tags.a = 2 * self.round;
            return [tags.a, ABSENT];
        };
        let owes = tags.a / 2 > self.round;
        let idle_long = now.saturating_sub(last_served) > FQ_REFILL_DELAY_NS;
        let quantum = u64::from(cfg.quantum.max(1));
        if idle_long && !owes {
            tags.b = tags.b.max(quantum);
        }
        // A flow whose round ended before the current one missed that many visits of the
        // round robin, each of which gives a flow with no debt a quantum: it gets them now,
        // banked up to `initial_quantum` (fq's allowance for a new flow), so a flow gathers no
        // more burst than a new one and, over time, no more than a quantum per round. Without
        // this a sparse flow, below its share but never queued when a round begins, kept
        // spending its first credit across rounds and then waited out a whole round for each
        // quantum (tests/sparse.rs in sluice-flow: a ping among 1000 bulk flows at 100 Mbit/s
        // waited 82 ms at the median). With one quantum at most and no bank, it still waited
        // a round whenever a round lasted long enough for it to spend more than a quantum:
        // live, 1000 TCP flows at 100 Mbit/s, rounds of big GSO frames, ping p99 0.9-1.3 s;
        // with the bank, 4-14 ms (`sluice bench dp --flows 1000 --targets 100mbit`).
        let behind = self.round.saturating_sub(tags.a / 2);
        if behind > 0 {
            let cap = u64::from(self.initial_quantum).max(quantum).max(tags.b);
            tags.b = tags
                .b
                .saturating_add(behind.saturating_mul(quantum))
                .min(cap);
        }
        if !owes {
            tags.a = 2 * self.round;
        }
        [tags.a, ABSENT]
    }
    fn served(&mut self, tags: &mut Tags, cfg: &MemberCfg, s: &Service<'_>) -> [Rank; 2] {
        tags.c = s.now.saturating_add(1);
        self.spend(tags, cfg, s.sent);
        [tags.a, ABSENT]
    }
    fn owes(&self, tags: &Tags, _: &MemberCfg) -> bool {
        // Rounds still owed for an overdraft (`activate` keeps them).
        tags.c != 0 && tags.a / 2 > self.round
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

#[cfg(test)]
mod tests {
    use super::{FQ_REFILL_DELAY_NS, Fq, charge};
    use crate::packet::Meta;
    use crate::policy::{MemberCfg, NoBacklog, Policy, Service, Tags};

    fn packet(len: u32) -> Meta {
        Meta {
            len,
            ..Meta::default()
        }
    }

    /// Serve one packet of `len` bytes of the member with `tags` at `now`: its new rank.
    fn serve(fq: &mut Fq, tags: &mut Tags, len: u32, now: u64) -> u64 {
        let sent = packet(len);
        let s = Service {
            sent: &sent,
            available: 0,
            backlog: &NoBacklog,
            from: 0,
            now,
        };
        fq.served(tags, &MemberCfg::default(), &s)[0]
    }

    /// Move the round robin to `round`: serve a bulk member whose turn is in that round.
    fn reach_round(fq: &mut Fq, round: u64, now: u64) {
        let mut bulk = Tags {
            a: 2 * round + 1,
            b: 1_000_000,
            c: 1,
        };
        serve(fq, &mut bulk, 1514, now);
        assert_eq!(fq.round, round);
    }

    #[test]
    fn a_sparse_flow_below_its_share_keeps_its_turn_through_a_long_round() {
        // A ping (98 B every 10 ms, never queued behind itself) while the round robin moves on:
        // thirty short rounds of 10 pings (980 B each, a third of a quantum; long enough to
        // spend a new flow's first allowance), then one round as long as 60 pings (5880 B,
        // about two quanta). Its use stays below a quantum per round on average, so it must
        // always be served as a new flow of the current round (rank 2 * round), never pushed
        // to a later round. (With one quantum per missed round and no bank, it was pushed
        // in the long round.)
        let (mut fq, cfg, ping) = (Fq::default(), MemberCfg::default(), packet(98));
        let mut tags = Tags::default();
        let mut now = 1_000_000_000;
        let rounds = [10u32; 30].into_iter().chain([60]);
        for (r, pings) in (1u64..).zip(rounds) {
            reach_round(&mut fq, r, now);
            for _ in 0..pings {
                now += 10_000_000;
                let rank = fq.activate(&mut tags, &cfg, &ping, now)[0];
                assert_eq!(rank, 2 * r, "round {r}: the ping waits for a later round");
                let after = serve(&mut fq, &mut tags, 98, now);
                assert_eq!(after, 2 * r, "round {r}: the ping was charged a round");
            }
        }
    }

    #[test]
    fn a_sparse_flow_banks_no_more_than_a_new_flows_allowance() {
        // Idle through 100 rounds (but not long enough in time to count as idle): it comes
        // back with `initial_quantum`, not 100 quanta.
        let (mut fq, cfg, pkt) = (Fq::default(), MemberCfg::default(), packet(1514));
        let mut tags = Tags::default();
        fq.activate(&mut tags, &cfg, &pkt, 1_000);
        serve(&mut fq, &mut tags, 1514, 1_000);
        reach_round(&mut fq, 100, 2_000);
        fq.activate(&mut tags, &cfg, &pkt, 3_000);
        assert_eq!(tags.b, u64::from(fq.initial_quantum));
    }

    #[test]
    fn a_charge_moves_as_many_rounds_as_the_overdraft_takes() {
        assert_eq!(
            charge(3028, 100, 3028),
            (0, 2928),
            "credit left: same round"
        );
        assert_eq!(
            charge(100, 100, 3028),
            (1, 3028),
            "spent exactly: next round"
        );
        // 65536 - 3028 = 62508 owed: 21 quanta bring the credit back above zero.
        assert_eq!(charge(3028, 65536, 3028), (21, 21 * 3028 - 62508));
        for (credit, len, q) in [(1u64, 1u32, 1u32), (5, 9000, 1500), (1, 1_000_000, 7)] {
            let (rounds, left) = charge(credit, len, q);
            let owed = i64::from(len) - credit as i64;
            assert!(rounds >= 1 && left >= 1 && left <= u64::from(q));
            assert_eq!(rounds as i64 * i64::from(q) - owed, left as i64);
        }
    }

    #[test]
    fn an_owing_flow_idle_long_keeps_the_credit_its_overdraft_left() {
        // fq refills a detached flow's credit after `flow_refill_delay`, but a flow that owes
        // rounds for an overdraft is on the old list, not detached: back after 10 s, it is
        // in the round it owes with the credit the overdraft left (65 000 B against 15 140 B
        // of credit: 17 rounds ahead, 1616 B left).
        let (mut fq, cfg) = (Fq::default(), MemberCfg::default());
        let mut tags = Tags::default();
        fq.activate(&mut tags, &cfg, &packet(65_000), 1_000);
        let rank = serve(&mut fq, &mut tags, 65_000, 1_000);
        assert_eq!((rank, tags.b), (2 * 17 + 1, 1616));
        let back = fq.activate(&mut tags, &cfg, &packet(1514), 10_000_000_000)[0];
        assert_eq!((back, tags.b), (rank, 1616));
    }

    #[test]
    fn a_flow_is_refilled_only_once_idle_longer_than_the_refill_delay() {
        // As fq's time_after(): idle exactly 40 ms it keeps what it had (140 B), a ns more
        // and it gets a quantum.
        for (idle, credit) in [(FQ_REFILL_DELAY_NS, 140), (FQ_REFILL_DELAY_NS + 1, 3028)] {
            let (mut fq, cfg) = (Fq::default(), MemberCfg::default());
            let mut tags = Tags::default();
            fq.activate(&mut tags, &cfg, &packet(15_000), 0);
            assert_eq!(serve(&mut fq, &mut tags, 15_000, 0), 0);
            fq.activate(&mut tags, &cfg, &packet(100), idle);
            assert_eq!(tags.b, credit, "idle {idle} ns");
        }
    }

    #[test]
    fn banking_missed_rounds_never_takes_credit_away() {
        // A flow behind the round robin banks a quantum per missed round up to
        // `initial_quantum`; one that already has more (the initial quantum was lowered
        // since) keeps it.
        let (mut fq, cfg) = (Fq::default(), MemberCfg::default());
        let mut tags = Tags::default();
        fq.activate(&mut tags, &cfg, &packet(100), 1_000);
        serve(&mut fq, &mut tags, 100, 1_000);
        assert_eq!(tags.b, 15_040);
        assert!(fq.set_param("initial_quantum", 3028));
        reach_round(&mut fq, 5, 2_000);
        fq.activate(&mut tags, &cfg, &packet(100), 3_000);
        assert_eq!(tags.b, 15_040);
    }
}
