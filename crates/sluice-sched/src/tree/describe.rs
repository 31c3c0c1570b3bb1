//! The compiled tree as text, as `sluice policy check` prints it: each node with its policy,
//! mode, queues, rate limit and place in its parent, then the classifier and the shaper, with
//! notes on settings that will not do what they seem to.

use super::{NodeId, Scheduler};
use crate::builder::Horizon;
use crate::classify::shadowing;
use crate::policy::{AnyPolicy, MemberCfg, Mode, Policy};
use crate::units::Rate;
use sluice_queue::Overflow;

impl Scheduler {
    /// The compiled tree as text: each node with its policy, mode, queue(s), rate limit and
    /// place in its parent; then the classifier and the shaper.
    pub fn describe(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        self.describe_node(0, "", "", &mut out);
        let name = |l: u16| self.nodes[l as usize].name.as_str();
        let rules = &self.classifier.rules;
        let shadowed = shadowing(rules);
        for (i, r) in rules.iter().enumerate() {
            let conds: Vec<String> = r.all.iter().map(|m| format!("{m}")).collect();
            let conds = if conds.is_empty() {
                "any".to_string()
            } else {
                conds.join(" and ")
            };
            let _ = writeln!(out, "classify: {conds} -> {}", name(r.leaf));
            // Rules that can never send a packet: said right under them (numbered from 1).
            if let Some(why) = r.never_matches() {
                let _ = writeln!(out, "note: rule {} matches no packet: {why}", i + 1);
            } else if let Some(j) = shadowed[i] {
                let _ = writeln!(
                    out,
                    "note: rule {} is never reached: rule {} before it matches all it would",
                    i + 1,
                    j + 1
                );
            }
        }
        match self.classifier.default {
            Some(d) => {
                let _ = writeln!(out, "classify: default -> {}", name(d));
                // A rule with no condition matches every packet: none is left for the default.
                if let Some(k) = rules.iter().position(|r| r.all.is_empty()) {
                    let _ = writeln!(
                        out,
                        "note: the default is never used: rule {} before it has no condition \
                         and matches every packet",
                        k + 1
                    );
                }
            }
            None if self.classifier.rules.is_empty() => out.push_str(
                "classify: default -> reject (no_class); note: with no rule and no default, \
                 every packet is rejected\n",
            ),
            None => out.push_str("classify: default -> reject (no_class)\n"),
        }
        // A leaf that no rule names and that is not the default never receives a packet (all of
        // them, said once above, when there is neither).
        if self.classifier.default.is_some() || !rules.is_empty() {
            // Marked once for all rules (asked of every rule for each leaf, 65 535 leaves and
            // 200 000 rules took 6 s).
            let mut reached = vec![false; self.nodes.len()];
            for l in rules.iter().map(|r| r.leaf).chain(self.classifier.default) {
                if let Some(r) = reached.get_mut(usize::from(l)) {
                    *r = true;
                }
            }
            for (i, n) in self.nodes.iter().enumerate().filter(|(_, n)| n.leaf) {
                if !reached[i] {
                    let _ = writeln!(
                        out,
                        "note: leaf `{}` receives no packet: no rule sends to it and it is not \
                         the default",
                        n.name
                    );
                }
            }
        }
        self.describe_node_notes(&mut out);
        let s = &self.shaper_spec;
        let shape = if self.horizon.ns == u64::MAX {
            format!("{} (exact: no horizon)", s.kind)
        } else {
            let beyond = if self.beyond_horizon == Overflow::Reject {
                "reject"
            } else {
                "clamp"
            };
            // Seconds to the millisecond, or nanoseconds for a horizon below it.
            let horizon = if self.horizon.ns >= 1_000_000 {
                format!("{:.3} s", self.horizon.ns as f64 / 1e9)
            } else {
                format!("{} ns", self.horizon.ns)
            };
            format!(
                "{} {} slots x {} ns (horizon {horizon}), beyond horizon: {beyond}",
                s.kind, s.buckets, s.granularity,
            )
        };
        let _ = writeln!(
            out,
            "shaper: {shape}; capacity {} packets, {} flows",
            self.capacity(),
            self.flow_capacity(),
        );
        out
    }

    /// Notes on settings that build but cannot do what they seem to say.
    fn describe_node_notes(&self, out: &mut String) {
        use std::fmt::Write as _;
        for note in &self.ignored {
            let _ = writeln!(out, "note: {note}");
        }
        for (i, n) in self.nodes.iter().enumerate() {
            // Strict priority on buckets of several levels: those levels leave in arrival order.
            let q = &n.queue_specs[0];
            if n.policy.name() == "prio" && !q.kind.exact() && q.granularity > 1 {
                let _ = writeln!(
                    out,
                    "note: node `{}`: its queue holds {} priority levels per bucket, and those \
                     leave in arrival order",
                    n.name,
                    q.granularity.min(n.rank_spans[0])
                );
            }
            // A queue (sized in the file) narrower than its ranks: those beyond its range
            // are filed at its edge, where their order is lost.
            for (which, (q, &span)) in n.queue_specs.iter().zip(&n.rank_spans).enumerate() {
                let covers = (q.buckets as u64).saturating_mul(q.granularity);
                if !q.kind.exact() && covers < span {
                    let _ = writeln!(
                        out,
                        "note: node `{}`: its queue `{}` covers {covers} rank units and policy \
                         `{}` ranks over {span}: ranks beyond it are filed at its edge, out of \
                         order (counted as `ranks_clamped`); more `buckets` or `granularity`, \
                         or `queue = \"auto\"`",
                        n.name,
                        q.kind,
                        n.policy.name()
                    );
                }
                // Buckets so coarse that the ranks a policy keeps apart share one or two of
                // them (for wfq, a bucket wider than one largest packet's step at weight 1):
                // entries in a bucket leave in arrival order, so the policy's order is lost.
                // Not for prio, said above, nor a single level (fifo).
                if !q.kind.exact()
                    && n.policy.name() != "prio"
                    && span > 1
                    && q.granularity.saturating_mul(2) > span
                {
                    // A dual policy's first queue holds reservation tags (times), its second
                    // share tags.
                    let reservations = n.policy.dual() && which == 0;
                    let (queue, lost) = if reservations {
                        (
                            "reservation queue",
                            "reservations are met in arrival order, not by when they fall due,",
                        )
                    } else if n.policy.weighs() {
                        ("queue", "its members take turns whatever their weights")
                    } else {
                        ("queue", "its policy's order is lost")
                    };
                    let _ = writeln!(
                        out,
                        "note: node `{}`: its {queue} `{}` has buckets of {} rank units, more \
                         than half the {span} that policy `{}` ranks over: its ranks share one \
                         or two buckets, whose entries leave in arrival order, so {lost} until \
                         their ranks reach the next bucket; a smaller `granularity`, or \
                         `queue = \"auto\"`",
                        n.name,
                        q.kind,
                        q.granularity,
                        n.policy.name()
                    );
                }
            }
            // Rates the wheel's slot cannot space: their packets take less than a slot.
            if self.horizon.ns != u64::MAX {
                let gated = [
                    (
                        "its rate",
                        n.gate.filter(|_| n.parent.is_some()).map(|g| g.rate()),
                    ),
                    ("its flows' rate", n.flow_rate.map(|f| f.0)),
                ];
                let refused = self.beyond_horizon == Overflow::Reject;
                for (k, (what, rate)) in gated.into_iter().enumerate() {
                    let Some(rate) = rate else { continue };
                    let notes = [
                        slot_note(rate, self.horizon.slot_ns),
                        horizon_note(rate, self.horizon, refused && k == 1),
                    ];
                    for note in notes.into_iter().flatten() {
                        let _ = writeln!(out, "note: node `{}`: {what} {note}", n.name);
                    }
                }
            }
            // Children's reservations that the limit above them cannot all carry: each alone,
            // or together.
            if n.policy.dual() && !n.leaf {
                self.describe_reservation_notes(i, out);
            }
            // A reservation above the node's own limit: the limit wins.
            let Some(p) = n.parent else { continue };
            let parent = &self.nodes[p as usize];
            let reservation = parent.member_cfg[n.slot as usize].reservation;
            if let (Some(r), Some(g), true) = (reservation, n.gate, parent.policy.dual()) {
                if r > g.rate() {
                    let _ = writeln!(
                        out,
                        "note: node `{}`: its reservation {r} is above its own rate limit {}, \
                         which it never exceeds",
                        n.name,
                        g.rate()
                    );
                }
            }
        }
    }

    /// Notes for the children of dual node `i` (hclock, htb) whose reservations are above the
    /// lowest rate limit on the way up from it (its own or an ancestor's), which caps
    /// everything the children send: one child's alone, or all of them together.
    fn describe_reservation_notes(&self, i: usize, out: &mut String) {
        use std::fmt::Write as _;
        let n = &self.nodes[i];
        let mut limit: Option<(Rate, usize)> = None;
        let mut at = Some(i);
        while let Some(a) = at {
            let node = &self.nodes[a];
            if let Some(g) = node.gate {
                if limit.is_none_or(|(r, _)| g.rate() < r) {
                    limit = Some((g.rate(), a));
                }
            }
            at = node.parent.map(usize::from);
        }
        let Some((limit, by)) = limit else { return };
        let whose = if by == i {
            format!("the rate limit {limit} of `{}`, its parent", n.name)
        } else {
            format!(
                "the rate limit {limit} of `{}` above it",
                self.nodes[by].name
            )
        };
        let reserved: Vec<(usize, Rate)> = n
            .member_cfg
            .iter()
            .enumerate()
            .filter_map(|(slot, m)| m.reservation.map(|r| (slot, r)))
            .collect();
        let mut one_above = false;
        for &(slot, r) in &reserved {
            if r > limit {
                one_above = true;
                let child = &self.nodes[usize::from(n.children[slot])];
                let _ = writeln!(
                    out,
                    "note: node `{}`: its reservation {r} is above {whose}, which it never \
                     exceeds",
                    child.name
                );
            }
        }
        let sum: u128 = reserved.iter().map(|&(_, r)| u128::from(r.bps())).sum();
        if reserved.len() > 1 && !one_above && sum > u128::from(limit.bps()) {
            let sum = u64::try_from(sum)
                .ok()
                .and_then(Rate::new)
                .map_or(format!("{sum}bit"), |r| r.to_string());
            let whose = if by == i {
                format!("its rate limit {limit}")
            } else {
                whose
            };
            let _ = writeln!(
                out,
                "note: node `{}`: its children's reservations add up to {sum}, above {whose}: \
                 they cannot all be met at once",
                n.name
            );
        }
    }

    fn describe_node(&self, n: NodeId, lead: &str, child_lead: &str, out: &mut String) {
        use std::fmt::Write as _;
        let node = &self.nodes[n as usize];
        let mode = match node.mode {
            Mode::PerPacket => "per-packet",
            Mode::PerMember if node.leaf => "per-flow",
            Mode::PerMember => "per-child",
        };
        let queues: Vec<String> = node
            .queue_specs
            .iter()
            .map(|q| {
                if q.kind.exact() {
                    q.kind.to_string()
                } else {
                    format!("{}({} x {})", q.kind, q.buckets, q.granularity)
                }
            })
            .collect();
        let _ = write!(
            out,
            "{lead}{} [{} {mode}, queue {}]",
            node.name,
            node.policy.name(),
            queues.join(" + ")
        );
        if let Some(p) = node.parent {
            let m = &self.nodes[p as usize].member_cfg[node.slot as usize];
            out.push_str(&member_params(&self.nodes[p as usize].policy, m, false));
        }
        if let Some(g) = node.gate {
            let _ = write!(out, " rate {} burst {}B", g.rate(), g.burst());
        }
        if node.leaf {
            if let Some((r, b)) = node.flow_rate {
                let _ = write!(out, " flow_rate {r} burst {b}B");
            }
            let flows = member_params(&node.policy, &node.member_cfg[0], true);
            if !flows.is_empty() {
                let _ = write!(out, " flows:{flows}");
            }
        }
        out.push('\n');
        for (i, &c) in node.children.iter().enumerate() {
            let last = i + 1 == node.children.len();
            let (l, cl) = if last {
                ("└─ ", "   ")
            } else {
                ("├─ ", "│  ")
            };
            self.describe_node(
                c,
                &format!("{child_lead}{l}"),
                &format!("{child_lead}{cl}"),
                out,
            );
        }
    }
}

/// What of a member's configuration its node's `policy` uses, as ` weight 2 reservation
/// 10Mbit`: only that, so that the compiled tree shows what takes effect. For a leaf's
/// `flows`, which all share one weight, the weight only if it is not the default 1.
fn member_params(policy: &AnyPolicy, m: &MemberCfg, flows: bool) -> String {
    let mut out = String::new();
    let uses = Uses::of(policy);
    if uses.weight && !(flows && m.weight == 1) {
        out += &format!(" weight {}", m.weight);
    }
    if uses.quantum {
        out += &format!(" quantum {}B", m.quantum);
    }
    if let (true, Some(p)) = (uses.priority, m.priority) {
        out += &format!(" priority {p}");
    }
    if let (true, Some(r)) = (uses.reservation, m.reservation) {
        out += &format!(" reservation {r}");
    }
    out
}

/// Which parts of a member's configuration ([`MemberCfg`]) a node's policy uses: a child's
/// (`weight`, `quantum`, `priority`, `reservation` in a policy file) at an internal node, a
/// flow's (`flow_weight`, ...) at a leaf.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Uses {
    /// Shares by weight (wfq, hclock, htb).
    pub weight: bool,
    /// Shares by quantum (drr, fq).
    pub quantum: bool,
    /// Orders by a child's priority (prio).
    pub priority: bool,
    /// Guarantees reservations: the dual policies (hclock, htb).
    pub reservation: bool,
}

impl Uses {
    pub(crate) fn of(policy: &AnyPolicy) -> Uses {
        let name = policy.name();
        Uses {
            weight: policy.weighs(),
            quantum: matches!(name, "drr" | "fq"),
            priority: name == "prio",
            reservation: policy.dual(),
        }
    }
}

/// Why `rate` is spaced only per shaper slot of `slot_ns`, if it is: the shaper releases a
/// slot's packets together, so a gate whose 1500 B packets take less than a slot lets out a
/// slot's worth at once (its rate still holds over time). The root's gate is exact: it is
/// checked at each dequeue, not filed in the wheel.
fn slot_note(rate: Rate, slot_ns: u64) -> Option<String> {
    let packet_ns = rate.tx_time_ns(1500);
    if packet_ns == 0 {
        // Above 12 Tbit/s a packet takes under a nanosecond, and no slot is that fine: the
        // count is of fractional packet times (fixed point, 2^-32 ns), the slot no help.
        let per_slot = (u128::from(slot_ns) << 32).div_ceil(rate.tx_time_fp(1500).max(1));
        return Some(format!(
            "{rate} sends 1500 B in under 1 ns, less than the shaper's {slot_ns} ns slot: up to \
             {per_slot} such packets leave at once beyond its burst, and no `slot` spaces them \
             (the finest is 1 ns)"
        ));
    }
    (packet_ns < slot_ns).then(|| {
        format!(
            "{rate} sends 1500 B in {packet_ns} ns, less than the shaper's {slot_ns} ns slot: \
             up to {} such packets leave at once beyond its burst; a `slot` of {} ns or less \
             spaces them",
            slot_ns.div_ceil(packet_ns),
            packet_ns
        )
    })
}

/// Why `rate` waits beyond the shaper's `horizon`, if it does: a 1500 B packet takes longer
/// than that at it. Its releases wait outside the wheel until they are within the horizon; a
/// flow's packets are refused instead under `beyond_horizon = "reject"` (`refused`) while its
/// gate is that far ahead. The horizon that avoids it is rounded up to the millisecond, and
/// comes with the `slot` it needs if 2^24 slots of the present one fall short.
fn horizon_note(rate: Rate, horizon: Horizon, refused: bool) -> Option<String> {
    let packet_ns = rate.tx_time_ns(1500);
    let secs = |ns: u64| ns as f64 / 1e9;
    (packet_ns > horizon.ns).then(|| {
        let what = if refused {
            "a flow's packets are refused while its gate is that far ahead (`beyond_horizon = \
             \"reject\"`)"
        } else {
            "each release waits outside the wheel until it is within the horizon (counted as \
             `clamped`)"
        };
        let needed = packet_ns.div_ceil(1_000_000).saturating_mul(1_000_000);
        let mut fix = format!("a `horizon` of {:.3} s or more avoids it", secs(needed));
        let max_slots = crate::config::MAX_BUCKETS;
        if needed.div_ceil(horizon.slot_ns.max(1)) > max_slots {
            let slot = needed.div_ceil(max_slots);
            fix += &format!(", with a `slot` of {slot} ns or more (2^24 slots at most)");
        }
        format!(
            "{rate} takes {:.3} s to send 1500 B, longer than the shaper's {:.3} s horizon: \
             {what}; {fix}",
            secs(packet_ns),
            secs(horizon.ns),
        )
    })
}
