//! zD admission under random sources, backlogs and departures: the buffer never exceeds its
//! capacity, nothing deadlocks (every backlog drains), and resumes follow the paused order.

use proptest::prelude::*;
use sluice_flow::admission::{Admission, AdmissionConfig, PausedOrder, Probe, Verdict};
use std::collections::VecDeque;

/// A host driving the regulator: sources with backlogs, a buffer that departs in FIFO order.
struct Host {
    adm: Admission,
    backlog: Vec<u32>,
    rank: Vec<u64>,
    buffer: VecDeque<u32>,
    /// Sources to offer next (resumed or otherwise woken), in order.
    todo: VecDeque<u32>,
    resumed_order: Vec<u32>,
}

impl Host {
    fn new(cfg: AdmissionConfig, backlog: Vec<u32>, rank: Vec<u64>) -> Self {
        let adm = Admission::new(cfg).unwrap();
        let todo = (0..backlog.len() as u32).collect();
        Host {
            adm,
            backlog,
            rank,
            buffer: VecDeque::new(),
            todo,
            resumed_order: Vec::new(),
        }
    }

    /// Offer from `src` until it cannot place more.
    fn pump(&mut self, src: u32) {
        loop {
            if self.backlog[src as usize] == 0 {
                // A resumed source with nothing to send hands its slot on.
                if let Some(r) = self.adm.idle(src) {
                    self.resumed_order.push(r);
                    self.todo.push_back(r);
                }
                return;
            }
            match self.adm.offer(src, self.rank[src as usize]) {
                Verdict::Admit => {
                    self.backlog[src as usize] -= 1;
                    self.buffer.push_back(src);
                }
                Verdict::Throttled | Verdict::Paused => return,
            }
        }
    }

    fn depart(&mut self) -> bool {
        let Some(src) = self.buffer.pop_front() else {
            return false;
        };
        if let Some(r) = self.adm.departed(src) {
            self.resumed_order.push(r);
            self.todo.push_back(r);
        }
        // Its own throttle may have lifted.
        self.todo.push_back(src);
        true
    }

    fn settle(&mut self) {
        while let Some(s) = self.todo.pop_front() {
            self.pump(s);
            self.adm.check();
            assert!(self.buffer.len() <= self.adm.capacity());
        }
    }
}

fn config(capacity: usize, sources: usize, fair: bool, order: u8) -> AdmissionConfig {
    AdmissionConfig {
        probe: if fair { Probe::FairShare } else { Probe::Fifo },
        order: match order % 3 {
            0 => PausedOrder::Fifo,
            1 => PausedOrder::Priority,
            _ => PausedOrder::Time {
                horizon_ns: 1 << 30,
            },
        },
        ..AdmissionConfig::new(capacity, sources)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    /// Deadlock freedom: with any capacity, sources, backlogs and interleaving of departures
    /// and new data, every packet is eventually admitted and departs.
    #[test]
    fn every_backlog_drains(
        capacity in 1usize..8,
        backlog in prop::collection::vec(0u32..20, 1..40),
        ranks in prop::collection::vec(0u64..200, 40),
        fair in any::<bool>(),
        order in any::<u8>(),
        events in prop::collection::vec((0u8..3, 0usize..40, 0u32..5), 0..200),
    ) {
        let n = backlog.len();
        let mut h = Host::new(config(capacity, n, fair, order), backlog, ranks[..n].to_vec());
        h.settle();
        for (kind, src, more) in events {
            if kind == 0 {
                h.depart();
            } else if kind == 1 {
                // The application withdraws a source's data (a flow closes): a paused source
                // may be resumed with nothing to send, and must hand its slot on.
                h.backlog[src % n] = 0;
            } else {
                // New data for a source: it is offered (if paused, it keeps waiting).
                let src = src % n;
                h.backlog[src] += more;
                h.todo.push_back(src as u32);
            }
            h.settle();
        }
        // Drain: departures only. Everything must get through.
        let mut steps = 0;
        while h.depart() {
            h.settle();
            steps += 1;
            prop_assert!(steps < 100_000, "no progress");
        }
        prop_assert!(h.backlog.iter().all(|&b| b == 0), "stuck backlog {:?}, paused {}", h.backlog, h.adm.paused());
        prop_assert_eq!(h.adm.paused(), 0);
        prop_assert_eq!(h.adm.occupancy(), 0);
    }
}

#[test]
fn strict_priority_resumes_high_before_low() {
    // One slot; many sources with priorities; all get paused behind the first.
    let prio = [5u64, 3, 7, 0, 3, 1, 6, 2];
    let n = prio.len();
    let mut h = Host::new(config(1, n, false, 1), vec![3; n], prio.to_vec());
    h.settle();
    while h.depart() {
        h.settle();
    }
    // Each time a source is resumed it is the most urgent one paused at that moment; with every
    // source paused once up front, the first resumes come in priority order.
    let first: Vec<u64> = h
        .resumed_order
        .iter()
        .take(n - 1)
        .map(|&s| prio[s as usize])
        .collect();
    let mut sorted = first.clone();
    sorted.sort();
    assert_eq!(first, sorted, "resume order {:?}", h.resumed_order);
    assert!(h.backlog.iter().all(|&b| b == 0));
}

#[test]
fn a_resumed_source_places_two_before_it_can_be_paused() {
    // Capacity 3, per-source limit 2. Source 0 is resumed while others wait: it may place two.
    let mut adm = Admission::new(AdmissionConfig::new(3, 4)).unwrap();
    for s in 0..3 {
        assert_eq!(adm.offer(s, 0), Verdict::Admit);
    }
    assert_eq!(adm.offer(3, 0), Verdict::Paused);
    assert_eq!(adm.departed(0), Some(3));
    assert_eq!(
        adm.departed(1),
        None,
        "one resume per freed slot; nobody else is paused"
    );
    assert_eq!(adm.offer(3, 0), Verdict::Admit, "its reserved slot");
    assert_eq!(
        adm.offer(3, 0),
        Verdict::Admit,
        "second packet of its resume credit"
    );
    assert_eq!(adm.offer(3, 0), Verdict::Throttled, "per-source limit");
    adm.check();
}

#[test]
fn active_sources_wait_behind_paused_ones() {
    // zD Algorithm 1, line 10: a source that is not spending resume credit may not jump ahead
    // of paused sources, even when a slot is free.
    let mut adm = Admission::new(AdmissionConfig::new(2, 4)).unwrap();
    assert_eq!(adm.offer(0, 0), Verdict::Admit);
    assert_eq!(adm.offer(1, 0), Verdict::Admit);
    assert_eq!(adm.offer(2, 0), Verdict::Paused);
    assert_eq!(
        adm.departed(0),
        Some(2),
        "the free slot goes to the paused source"
    );
    assert_eq!(
        adm.offer(3, 0),
        Verdict::Paused,
        "no room: the slot is reserved for source 2"
    );
    assert_eq!(adm.offer(2, 0), Verdict::Admit);
    assert_eq!(adm.departed(1), Some(3));
    assert_eq!(adm.offer(3, 0), Verdict::Admit);
    // Now source 0 comes back while 1 is paused behind a full buffer: it must queue too.
    assert_eq!(adm.offer(1, 0), Verdict::Paused);
    assert_eq!(adm.departed(2), Some(1));
    assert_eq!(
        adm.offer(0, 0),
        Verdict::Paused,
        "the freed slot is reserved for source 1"
    );
    adm.check();
}

#[test]
fn no_jumping_ahead_of_paused_sources_when_a_slot_is_free() {
    // Fair share: source 0 is paused for holding its share although the buffer has room. A new
    // source with no resume credit then finds a free slot, but queues behind source 0 (zD
    // Algorithm 1, line 10) instead of taking it.
    let cfg = AdmissionConfig {
        per_source: 4,
        probe: Probe::FairShare,
        ..AdmissionConfig::new(4, 4)
    };
    let mut adm = Admission::new(cfg).unwrap();
    assert_eq!(adm.offer(0, 0), Verdict::Admit);
    assert_eq!(adm.offer(0, 0), Verdict::Admit);
    assert_eq!(adm.offer(1, 0), Verdict::Admit);
    assert_eq!(
        adm.offer(0, 0),
        Verdict::Paused,
        "two sources want room: its share is 2"
    );
    assert_eq!(adm.occupancy(), 3);
    assert_eq!(
        adm.offer(2, 0),
        Verdict::Paused,
        "room, but source 0 waits ahead of it"
    );
    assert_eq!(adm.departed(1), Some(0));
    adm.check();
}

#[test]
fn capacity_does_not_grow_with_sources() {
    let mut adm = Admission::new(AdmissionConfig::new(64, 100_000)).unwrap();
    let mut admitted = 0;
    for s in 0..100_000 {
        if adm.offer(s, 0) == Verdict::Admit {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 64);
    assert_eq!(adm.paused(), 100_000 - 64);
    adm.check();
}

#[test]
fn bad_configuration_and_bad_calls() {
    assert!(Admission::new(AdmissionConfig::new(0, 4)).is_err());
    assert!(
        Admission::new(AdmissionConfig {
            per_source: 0,
            ..AdmissionConfig::new(4, 4)
        })
        .is_err()
    );
    let mut adm = Admission::new(AdmissionConfig::new(4, 4)).unwrap();
    assert_eq!(adm.offer(99, 0), Verdict::Paused);
    assert_eq!(
        adm.departed(2),
        None,
        "a departure that never entered is ignored"
    );
    assert_eq!(adm.stats().bad_source, 2);
    adm.check();
}
