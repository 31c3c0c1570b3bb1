//! Overlay pause frames end to end: the wire format under arbitrary bytes (decode never
//! panics, every valid frame round-trips, any corruption of one byte is caught), a real UDP
//! exchange on 127.0.0.1 with garbage mixed in, and the loop from a congested queue to the
//! upstream scheduler's flow rate.
//!
//! No test depends on wall-clock timing: protocol time is passed in, and socket reads block
//! with a timeout of a few seconds only as a safety net against a lost datagram.

use proptest::prelude::*;
use sluice_flow::opf::{
    Action, DecodeError, DecodeReason, FRAME_LEN, MAX_OPF_PAUSE_NS, MAX_OPF_RATE_BPS, Opf,
    OpfChannel, OpfConfig, OpfReceiver, QueueMonitor, Received, Thresholds, UdpChannel, decode,
    encode, encode_vec,
};
use sluice_sched::classify::Match;
use sluice_sched::{NodeSpec, Packet, PolicyKind, Rate, SchedConfig, TreeBuilder};
use std::time::Duration;

const SAFETY: Duration = Duration::from_secs(5);

fn any_opf() -> impl Strategy<Value = Opf> {
    (
        any::<u64>(),
        prop_oneof![Just(0), Just(MAX_OPF_PAUSE_NS), 0..=MAX_OPF_PAUSE_NS],
        prop_oneof![Just(1), Just(MAX_OPF_RATE_BPS), 1..=MAX_OPF_RATE_BPS],
    )
        .prop_map(|(flow, pause, bps)| {
            Opf::new(flow, pause, Rate::new(bps).expect("1..=max")).expect("in range")
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn decode_never_panics_on_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..128),
    ) {
        let _ = decode(&bytes);
    }

    #[test]
    fn decode_never_panics_on_frame_like_bytes(
        body in proptest::collection::vec(any::<u8>(), 0..64),
        version in prop_oneof![Just(1u8), any::<u8>()],
        kind in prop_oneof![Just(1u8), any::<u8>()],
        len in prop_oneof![Just(FRAME_LEN as u16), any::<u16>()],
    ) {
        // A header that is often right, so that the checks past it are reached too.
        let mut bytes = b"SOPF".to_vec();
        bytes.push(version);
        bytes.push(kind);
        bytes.extend_from_slice(&len.to_be_bytes());
        bytes.extend_from_slice(&body);
        if let Ok(opf) = decode(&bytes) {
            let again = encode(&opf);
            prop_assert_eq!(again.as_slice(), bytes.as_slice());
        }
    }

    #[test]
    fn every_valid_frame_round_trips(opf in any_opf()) {
        let bytes = encode(&opf);
        prop_assert_eq!(bytes.len(), FRAME_LEN);
        prop_assert_eq!(decode(&bytes), Ok(opf));
        prop_assert_eq!(decode(&encode_vec(&opf)), Ok(opf));
    }

    #[test]
    fn any_corrupted_byte_is_rejected(opf in any_opf(), at in 0..FRAME_LEN, flip in 1u8..=255) {
        let mut bytes = encode(&opf);
        bytes[at] ^= flip;
        prop_assert!(decode(&bytes).is_err());
    }

    #[test]
    fn truncated_or_extended_frames_are_rejected(
        opf in any_opf(),
        cut in 0..FRAME_LEN,
        extra in 1usize..64,
    ) {
        let bytes = encode(&opf);
        let short = decode(&bytes[..cut]);
        prop_assert!(matches!(short, Err(DecodeError::TooShort { .. })), "{:?}", short);
        let mut long = bytes.to_vec();
        long.resize(FRAME_LEN + extra, 0);
        prop_assert_eq!(decode(&long), Err(DecodeError::TrailingBytes { len: FRAME_LEN + extra }));
    }
}

/// Two channels on 127.0.0.1, connected to each other.
fn pair() -> (UdpChannel, UdpChannel) {
    let a = UdpChannel::bind("127.0.0.1:0").expect("bind a");
    let b = UdpChannel::bind("127.0.0.1:0").expect("bind b");
    a.connect(b.local_addr().expect("addr b"))
        .expect("connect a");
    b.connect(a.local_addr().expect("addr a"))
        .expect("connect b");
    (a, b)
}

fn recv(ch: &mut UdpChannel) -> Received {
    ch.recv_timeout(SAFETY)
        .expect("recv")
        .expect("a datagram within the safety timeout")
}

#[test]
fn udp_round_trip_rejects_and_counts_garbage() {
    let (mut down, mut up) = pair();
    assert_eq!(down.peer_addr().unwrap(), up.local_addr().unwrap());
    // Nothing waiting: a non-blocking read returns at once.
    assert_eq!(up.try_recv().unwrap(), None);

    let frames = [
        Opf::new(1, 16_000, Rate::gbit(10)).unwrap(),
        Opf::new(
            u64::MAX,
            MAX_OPF_PAUSE_NS,
            Rate::new(MAX_OPF_RATE_BPS).unwrap(),
        )
        .unwrap(),
        Opf::new(0, 0, Rate::new(1).unwrap()).unwrap(),
    ];
    let mut bad_checksum = encode(&frames[0]);
    bad_checksum[12] ^= 0x40;
    let mut bad_version = encode(&frames[0]);
    bad_version[4] = 9;
    let mut long = encode(&frames[0]).to_vec();
    long.extend_from_slice(&[0; 1000]);
    let garbage: Vec<(Vec<u8>, DecodeReason)> = vec![
        (b"hello".to_vec(), DecodeReason::TooShort),
        (b"GET / HTTP/1.1\r\n\r\n".to_vec(), DecodeReason::BadMagic),
        (bad_checksum.to_vec(), DecodeReason::BadChecksum),
        (bad_version.to_vec(), DecodeReason::UnsupportedVersion),
        (long, DecodeReason::TrailingBytes),
        (encode(&frames[0])[..30].to_vec(), DecodeReason::TooShort),
        (Vec::new(), DecodeReason::TooShort),
    ];

    // Interleave: frame, garbage, garbage, frame, ... in one known order (one socket pair on
    // loopback keeps datagram order).
    let mut expect: Vec<Result<Opf, DecodeReason>> = Vec::new();
    let mut g = garbage.iter();
    for f in &frames {
        down.send(f).expect("send frame");
        expect.push(Ok(*f));
        for (bytes, reason) in g.by_ref().take(3) {
            let n = down.socket().send(bytes).expect("send garbage");
            assert_eq!(n, bytes.len());
            expect.push(Err(*reason));
        }
    }
    for (bytes, reason) in g {
        down.socket().send(bytes).expect("send garbage");
        expect.push(Err(*reason));
    }

    for want in &expect {
        match (recv(&mut up), want) {
            (Received::Frame(got), Ok(f)) => assert_eq!(got, *f),
            (Received::Rejected(e), Err(r)) => assert_eq!(e.reason(), *r, "{e}"),
            (got, want) => panic!("got {got:?}, wanted {want:?}"),
        }
    }
    assert_eq!(up.try_recv().unwrap(), None);

    let s = up.stats();
    assert_eq!(s.received, 3);
    assert_eq!(s.rejected_total(), garbage.len() as u64);
    assert_eq!(s.rejected(DecodeReason::TooShort), 3);
    assert_eq!(s.rejected(DecodeReason::BadMagic), 1);
    assert_eq!(s.rejected(DecodeReason::BadChecksum), 1);
    assert_eq!(s.rejected(DecodeReason::UnsupportedVersion), 1);
    assert_eq!(s.rejected(DecodeReason::TrailingBytes), 1);
    assert_eq!(down.stats().sent, 3);
    assert_eq!(down.stats().send_errors, 0);

    // The other direction works too (each instance is both upstream and downstream), and
    // `drain` collects every waiting frame without blocking.
    let back = Opf::new(42, 1_000, Rate::mbit(500)).unwrap();
    up.send(&back).unwrap();
    up.send(&back).unwrap();
    let first = recv(&mut down);
    assert_eq!(first, Received::Frame(back));
    // The second datagram is on its way: wait for it with the safety net, then drain is empty.
    assert_eq!(recv(&mut down), Received::Frame(back));
    let mut out = Vec::new();
    assert_eq!(down.drain(&mut out).unwrap(), 0);
    assert!(out.is_empty());
    assert_eq!(down.stats().received, 2);
}

#[test]
fn udp_drain_collects_frames_and_skips_garbage() {
    let (mut down, mut up) = pair();
    let f = Opf::new(9, 2_000, Rate::gbit(1)).unwrap();
    down.send(&f).unwrap();
    down.socket()
        .send(b"\xff\xff\xff\xff\xff\xff\xff\xff")
        .unwrap();
    down.send(&f).unwrap();
    // Wait for the first with the safety net, then the last; drain what may remain.
    let mut got = Vec::new();
    let mut rejected = 0;
    while got.len() < 2 {
        match recv(&mut up) {
            Received::Frame(x) => got.push(x),
            Received::Rejected(_) => rejected += 1,
        }
    }
    up.drain(&mut got).unwrap();
    assert_eq!(got, vec![f, f]);
    assert_eq!(rejected, 1);
    assert_eq!(up.stats().rejected(DecodeReason::BadMagic), 1);
}

/// The whole loop: a congested receive queue on one instance sends an OPF over UDP; the
/// upstream instance pauses the flow and installs the rate in its scheduler.
#[test]
fn congestion_pauses_and_paces_the_upstream_flow() {
    const FLOW: u64 = 77;
    let (mut down, mut up) = pair();

    // Downstream: a receive queue draining at 1 Gbit/s, filled faster.
    let t = Thresholds::new(48_000, 96_000, 512_000).unwrap();
    let mut mon = QueueMonitor::new(FLOW, OpfConfig::new(t)).unwrap();
    let mut now = 1_000_000u64;
    let mut sent = None;
    for _ in 0..200 {
        mon.on_enqueue(now, 3_000);
        now += 12_000; // 1500 bytes per 12 us = 1 Gbit/s
        mon.on_deliver(now, 1_500);
        if let Some(opf) = mon.poll(now, &mut down).unwrap() {
            sent = Some(opf);
            break;
        }
    }
    let opf = sent.expect("the queue crossed Th_over");
    assert_eq!(opf.flow(), FLOW);
    assert_eq!(opf.rate(), Rate::gbit(1));
    assert!(mon.queued() > 96_000 && !mon.above_net());
    // (Th_curr - Th_goal) at 1 Gbit/s.
    assert_eq!(opf.pause_ns(), (mon.queued() - 48_000) * 8);

    // Upstream: a scheduler with a per-flow leaf that already carries the flow.
    let mut b = TreeBuilder::new(SchedConfig {
        capacity: 64,
        flows: 64,
        ..SchedConfig::default()
    });
    let root = b.root(NodeSpec::new("root", PolicyKind::Prio));
    let leaf = b.child(root, NodeSpec::new("flows", PolicyKind::Fq).priority(0));
    b.rule(vec![Match::Class(0)], leaf);
    b.default_leaf(leaf);
    let mut sched = b.build().unwrap();
    assert_eq!(sched.node_by_name("flows"), Some(leaf));
    let pkt = Packet {
        token: 1,
        len: 1500,
        flow: FLOW,
        class: Some(0),
        ..Packet::default()
    };
    sched.enqueue(0, &pkt).unwrap();
    assert_eq!(sched.flow_next_release(leaf, FLOW), None);

    let mut rx = OpfReceiver::new();
    rx.add_flow(FLOW);
    let Received::Frame(got) = recv(&mut up) else {
        panic!("expected a frame");
    };
    assert_eq!(got, opf);
    let t0 = 5_000_000;
    let actions = rx.on_opf(t0, &got).unwrap();
    assert_eq!(
        actions,
        [
            Action::Pause {
                flow: FLOW,
                until: t0 + opf.pause_ns()
            },
            Action::RateLimit {
                flow: FLOW,
                rate: Rate::gbit(1)
            },
        ]
    );
    assert!(rx.is_paused(FLOW, t0 + opf.pause_ns() - 1));
    assert!(!rx.is_paused(FLOW, t0 + opf.pause_ns()));
    assert!(rx.apply_rate(t0, &mut sched, leaf, FLOW));
    assert!(sched.flow_next_release(leaf, FLOW).is_some());
    // Packets that come while the limit holds: the first passes its gate (due at once);
    // the others wait at it, behind the two of the flow's packets past it (1 and 2), none of
    // them in the shaper yet.
    let at = |token| Packet { token, ..pkt };
    for token in 2..5 {
        sched.enqueue(t0, &at(token)).unwrap();
    }
    assert_eq!(sched.shaped(), 0);
    assert_eq!(sched.len(), 4);
    // Lifting the limit removes the flow's gate; the packets waiting at it still leave first,
    // in order, and the flow's next packet after them.
    assert!(rx.lift(FLOW));
    assert!(rx.apply_rate(t0, &mut sched, leaf, FLOW));
    assert_eq!(sched.flow_next_release(leaf, FLOW), None);
    sched.enqueue(t0, &at(5)).unwrap();
    let mut now = t0;
    let mut order = Vec::new();
    while let Some(t) = sched.next_event(now) {
        now = now.max(t);
        order.extend(sched.dequeue(now).map(|d| d.token));
    }
    assert_eq!(order, [1, 2, 3, 4, 5]);
    // A flow the scheduler has not seen: reported, harmless.
    rx.add_flow(5);
    assert!(!rx.apply_rate(now, &mut sched, leaf, 5));
}

/// A channel that can be plugged in from outside the crate.
#[test]
fn custom_channels_plug_in() {
    struct Counting(u32);
    impl OpfChannel for Counting {
        fn send(&mut self, _: &Opf) -> Result<(), sluice_flow::opf::ChannelError> {
            self.0 += 1;
            Ok(())
        }
    }
    let t = Thresholds::new(1, 2, 3).unwrap();
    let mut m = QueueMonitor::new(1, OpfConfig::new(t)).unwrap();
    m.on_enqueue(0, 3);
    let mut c = Counting(0);
    assert!(m.poll(0, &mut c).unwrap().is_some());
    assert!(m.poll(0, &mut c).unwrap().is_none());
    assert_eq!(c.0, 1);
}
