//! Statistics: the counters the datapath keeps, and the [`Snapshot`] it publishes for the
//! control socket, the Prometheus endpoint and `sluice top`.
//!
//! Every way a frame can fail to leave has its own counter (sch_fq's habit): malformed frames
//! by reason, frames no class takes, frames dropped at the memory bound, write errors. Rates are
//! not computed here: a snapshot carries cumulative byte counts and a timestamp, and readers
//! divide differences, so a slow reader never skews what the datapath counts.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Why a frame did not leave.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// It did not parse (see `malformed` for the reason).
    Malformed,
    /// No class of the link's policy takes it.
    NoClass,
    /// No frame buffer or source buffer was free and the daemon is lossy at the bound.
    AtBound,
    /// Writing it failed.
    TxError,
    /// Refused by the scheduler after admission (a hard limit beyond the shaper's horizon).
    Rejected,
    /// A zero-length frame.
    Empty,
}

impl DropReason {
    /// Every reason.
    pub const ALL: [DropReason; 6] = [
        DropReason::Malformed,
        DropReason::NoClass,
        DropReason::AtBound,
        DropReason::TxError,
        DropReason::Rejected,
        DropReason::Empty,
    ];

    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::NoClass => "no_class",
            DropReason::AtBound => "at_bound",
            DropReason::TxError => "tx_error",
            DropReason::Rejected => "rejected",
            DropReason::Empty => "empty",
        }
    }
}

/// Malformed frames the datapath counts itself, beside the parser's reasons
/// ([`crate::parse::Malformed`]): a read too short for its virtio-net header.
pub const TRUNCATED_VNET_HEADER: &str = "truncated_vnet_header";

/// ... and a frame read but not usable (a tap's frame cut at the buffer's end).
pub const UNREADABLE_FRAME: &str = "unreadable_frame";

/// The malformed reasons the datapath counts itself.
pub const DATAPATH_MALFORMED: [&str; 2] = [TRUNCATED_VNET_HEADER, UNREADABLE_FRAME];

/// One port in a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortSnapshot {
    /// Its configured name.
    pub name: String,
    /// Its interface.
    pub ifname: String,
    /// Frames read.
    pub rx_frames: u64,
    /// Bytes read.
    pub rx_bytes: u64,
    /// Frames written.
    pub tx_frames: u64,
    /// Bytes written.
    pub tx_bytes: u64,
    /// Frames the kernel dropped before the daemon read them (where known).
    pub kernel_drops: u64,
    /// Frames waiting in its delay line.
    pub delayed: u64,
}

/// One class (node) of a link's policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassSnapshot {
    /// Node name.
    pub name: String,
    /// Its rate limit, bit/s (None: unlimited).
    pub rate_bps: Option<u64>,
    /// Packets that left through it.
    pub sent: u64,
    /// Bytes on the wire that left through it.
    pub sent_bytes: u64,
    /// Packets that arrived at it and have not left.
    pub queued: u64,
    /// Packets its rate limit held in the shaper so far.
    pub shaped: u64,
}

/// One of the busiest flows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowSnapshot {
    /// Flow key.
    pub key: u64,
    /// A readable 5-tuple, when known.
    pub label: String,
    /// Bytes sent.
    pub bytes: u64,
    /// Packets sent.
    pub packets: u64,
}

/// One link in a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkSnapshot {
    /// Port frames are read from.
    pub from: String,
    /// Port they leave through.
    pub to: String,
    /// Policy file, if any.
    pub policy: Option<String>,
    /// Its classes, root first.
    pub classes: Vec<ClassSnapshot>,
    /// Frames held in source buffers and the scheduler.
    pub held: u64,
    /// Frames in the scheduled buffer.
    pub scheduled: u64,
    /// Sources paused by admission now.
    pub paused: u64,
    /// Frames refused with backpressure (lossless at the bound).
    pub backpressure: u64,
    /// The busiest flows by bytes since they were first seen.
    pub top_flows: Vec<FlowSnapshot>,
}

/// Everything the daemon publishes, at one instant.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Nanoseconds since the daemon started.
    pub uptime_ns: u64,
    /// Frame buffers in use and in all.
    pub buffers_used: u64,
    /// Frame buffers in all.
    pub buffers_total: u64,
    /// Ports.
    pub ports: Vec<PortSnapshot>,
    /// Links.
    pub links: Vec<LinkSnapshot>,
    /// Drops by reason.
    pub drops: HashMap<String, u64>,
    /// Malformed frames by parser reason.
    pub malformed: HashMap<String, u64>,
    /// Times reading stopped because no buffer was free (lossless pause).
    pub read_pauses: u64,
    /// Frames marked Congestion Experienced (ECN) because they waited past the target.
    #[serde(default)]
    pub ecn_marked: u64,
}

impl Snapshot {
    /// One snapshot of several engines running the same configuration: counters, queues and
    /// rate limits added up (each engine's limit of a class is its share of the class's
    /// aggregate), ports and links matched by position, the busiest flows of all engines. The
    /// uptime is the oldest engine's.
    pub fn merge(parts: Vec<Snapshot>) -> Snapshot {
        let mut parts = parts.into_iter();
        let Some(mut all) = parts.next() else {
            return Snapshot::default();
        };
        for s in parts {
            all.uptime_ns = all.uptime_ns.max(s.uptime_ns);
            all.buffers_used += s.buffers_used;
            all.buffers_total += s.buffers_total;
            all.read_pauses += s.read_pauses;
            all.ecn_marked += s.ecn_marked;
            for (k, v) in s.drops {
                *all.drops.entry(k).or_insert(0) += v;
            }
            for (k, v) in s.malformed {
                *all.malformed.entry(k).or_insert(0) += v;
            }
            for (a, b) in all.ports.iter_mut().zip(s.ports) {
                a.rx_frames += b.rx_frames;
                a.rx_bytes += b.rx_bytes;
                a.tx_frames += b.tx_frames;
                a.tx_bytes += b.tx_bytes;
                a.kernel_drops += b.kernel_drops;
                a.delayed += b.delayed;
            }
            for (a, b) in all.links.iter_mut().zip(s.links) {
                a.held += b.held;
                a.scheduled += b.scheduled;
                a.paused += b.paused;
                a.backpressure += b.backpressure;
                for (x, y) in a.classes.iter_mut().zip(b.classes) {
                    x.rate_bps = match (x.rate_bps, y.rate_bps) {
                        (Some(p), Some(q)) => Some(p.saturating_add(q)),
                        (p, q) => p.or(q),
                    };
                    x.sent += y.sent;
                    x.sent_bytes += y.sent_bytes;
                    x.queued += y.queued;
                    x.shaped += y.shaped;
                }
                a.top_flows.extend(b.top_flows);
            }
        }
        for l in &mut all.links {
            l.top_flows
                .sort_unstable_by(|a, b| b.bytes.cmp(&a.bytes).then(a.key.cmp(&b.key)));
            l.top_flows.truncate(TOP_FLOWS);
        }
        all
    }
}

/// Busiest flows a link's snapshot lists.
pub const TOP_FLOWS: usize = 10;

/// The datapath's own counters (the rest is read from ports and schedulers at snapshot time).
#[derive(Clone, Debug, Default)]
pub struct Counters {
    /// Drops by reason.
    pub drops: HashMap<DropReason, u64>,
    /// Malformed frames by parser reason name.
    pub malformed: HashMap<&'static str, u64>,
    /// Times reading stopped because no buffer was free.
    pub read_pauses: u64,
    /// Frames marked Congestion Experienced.
    pub ecn_marked: u64,
}

impl Counters {
    /// Count a drop.
    pub fn drop(&mut self, why: DropReason) {
        *self.drops.entry(why).or_insert(0) += 1;
    }

    /// Count a malformed frame.
    pub fn malformed(&mut self, reason: &'static str) {
        *self.malformed.entry(reason).or_insert(0) += 1;
    }

    /// Drops for `why`.
    pub fn drops_for(&self, why: DropReason) -> u64 {
        self.drops.get(&why).copied().unwrap_or(0)
    }
}

/// Per-flow byte counts of one link, for the top-flows view. Bounded: when it tracks
/// `capacity` flows, the quietest half is forgotten.
#[derive(Debug)]
pub struct FlowCounts {
    counts: HashMap<u64, (u64, u64, String)>,
    capacity: usize,
}

impl FlowCounts {
    /// Track at most `capacity` flows.
    pub fn new(capacity: usize) -> Self {
        FlowCounts {
            counts: HashMap::with_capacity(capacity),
            capacity,
        }
    }

    /// A packet of `bytes` left for `key` (`label` computed lazily for new flows).
    pub fn add(&mut self, key: u64, bytes: u64, label: impl FnOnce() -> String) {
        if !self.counts.contains_key(&key) && self.counts.len() >= self.capacity {
            let mut all: Vec<(u64, u64)> = self.counts.iter().map(|(k, v)| (*k, v.0)).collect();
            all.sort_unstable_by_key(|&(_, b)| b);
            for (k, _) in all.iter().take(self.capacity / 2) {
                self.counts.remove(k);
            }
        }
        let e = self.counts.entry(key).or_insert_with(|| (0, 0, label()));
        e.0 += bytes;
        e.1 += 1;
    }

    /// The `n` flows with the most bytes (ties: the lower key first). The `n` are chosen
    /// before they are sorted and their labels copied: a `stats` request of a link that tracks
    /// 4096 flows copied every label and sorted them all, on the datapath's thread.
    pub fn top(&self, n: usize) -> Vec<FlowSnapshot> {
        if n == 0 {
            return Vec::new();
        }
        let order = |a: &(u64, u64, _), b: &(u64, u64, _)| b.1.cmp(&a.1).then(a.0.cmp(&b.0));
        let mut v: Vec<(u64, u64, &(u64, u64, String))> = self
            .counts
            .iter()
            .map(|(&key, counts)| (key, counts.0, counts))
            .collect();
        if n < v.len() {
            v.select_nth_unstable_by(n - 1, order);
            v.truncate(n);
        }
        v.sort_unstable_by(order);
        v.into_iter()
            .map(|(key, bytes, (_, packets, label))| FlowSnapshot {
                key,
                label: label.clone(),
                bytes,
                packets: *packets,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `top` chooses the flows a full sort would, in its order, whatever `n` and the ties.
    #[test]
    fn top_flows_are_those_a_full_sort_gives() {
        // xorshift64: numbers below `n`, the same on every run.
        let mut state = 7u64;
        let mut below = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for round in 0..200 {
            let mut f = FlowCounts::new(1 << 12);
            for _ in 0..below(300) {
                let (key, bytes) = (below(100), 1 + below(4));
                f.add(key, bytes, || format!("flow {key}"));
            }
            let mut all: Vec<(u64, u64, u64)> =
                f.counts.iter().map(|(&k, v)| (k, v.0, v.1)).collect();
            all.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            for n in [0, 1, 2, 5, 50, 99, 100, 101, 1000] {
                let got: Vec<(u64, u64, u64)> = f
                    .top(n)
                    .iter()
                    .map(|s| (s.key, s.bytes, s.packets))
                    .collect();
                let want: Vec<_> = all.iter().copied().take(n).collect();
                assert_eq!(got, want, "round {round}, n {n}");
                assert!(
                    f.top(n)
                        .iter()
                        .all(|s| s.label == format!("flow {}", s.key))
                );
            }
        }
    }

    #[test]
    fn top_flows_and_bounded_tracking() {
        let mut f = FlowCounts::new(4);
        for (k, b) in [(1, 100), (2, 500), (3, 50), (4, 900)] {
            f.add(k, b, || format!("flow {k}"));
        }
        f.add(2, 1000, || unreachable!());
        let top = f.top(2);
        assert_eq!(top.iter().map(|x| x.key).collect::<Vec<_>>(), vec![2, 4]);
        assert_eq!(top[0].bytes, 1500);
        f.add(5, 1, String::new);
        assert!(f.top(10).len() <= 4, "the quietest flows were forgotten");
        assert!(f.top(10).iter().any(|x| x.key == 2));
    }

    #[test]
    fn engines_snapshots_merge_by_adding_up() {
        let one = |sent: u64, rate: u64, flow: u64| Snapshot {
            uptime_ns: sent,
            buffers_used: 1,
            buffers_total: 10,
            ecn_marked: 2,
            drops: [("malformed".to_string(), 1)].into(),
            ports: vec![PortSnapshot {
                name: "a".into(),
                rx_frames: sent,
                ..Default::default()
            }],
            links: vec![LinkSnapshot {
                classes: vec![ClassSnapshot {
                    name: "root".into(),
                    rate_bps: Some(rate),
                    sent,
                    sent_bytes: sent * 100,
                    ..Default::default()
                }],
                held: 3,
                top_flows: vec![FlowSnapshot {
                    key: flow,
                    bytes: sent,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let m = Snapshot::merge(vec![one(5, 600, 1), one(7, 400, 2)]);
        assert_eq!(
            (m.uptime_ns, m.buffers_used, m.buffers_total, m.ecn_marked),
            (7, 2, 20, 4)
        );
        assert_eq!(m.drops["malformed"], 2);
        assert_eq!(m.ports[0].rx_frames, 12);
        let c = &m.links[0].classes[0];
        assert_eq!(
            (c.rate_bps, c.sent, c.sent_bytes),
            (Some(1000), 12, 1200),
            "the shares add up to the aggregate"
        );
        assert_eq!(m.links[0].held, 6);
        assert_eq!(
            m.links[0]
                .top_flows
                .iter()
                .map(|f| f.key)
                .collect::<Vec<_>>(),
            vec![2, 1]
        );
        assert_eq!(Snapshot::merge(vec![]), Snapshot::default());
        assert_eq!(
            Snapshot::merge(vec![one(1, 1, 1)]),
            one(1, 1, 1),
            "one engine: unchanged"
        );
    }

    #[test]
    fn snapshots_serialize() {
        let s = Snapshot {
            uptime_ns: 5,
            ..Snapshot::default()
        };
        let j = serde_json::to_string(&s).unwrap();
        let back: Snapshot = serde_json::from_str(&j).unwrap();
        assert_eq!(back, s);
    }
}
