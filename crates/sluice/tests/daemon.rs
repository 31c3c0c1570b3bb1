//! `sluice run` end to end, as root, on real namespaces and taps: traffic passes, a rate limit
//! holds, strict priority holds under contention, malformed frames are counted while traffic
//! keeps flowing, SIGTERM takes everything down, daemons never collide on names, bad input is
//! refused with nothing left behind, the control socket and metrics endpoint answer, and
//! `af_packet` ports forward again after their interface is deleted and created again.
//!
//! Every test builds the same small lab (see `daemon_lab`): two namespaces the daemon creates,
//! a tap in each (`a` at 10.77.0.1/24, `b` at 10.77.0.2/24), link `a -> b` scheduled by the
//! test's policy and `b -> a` FIFO (the `af_packet` tests make namespaces and veths of their
//! own, the daemon running in one). Names carry the test process's pid and the test's tag.
//! Tests skip (printing `skipped: ...`) when not run as root or when a tool is missing.
//!
//! The tests that measure rates run alone (no other test of this file runs meanwhile) and
//! measure over 5 s after 2 s of warm-up: a rate over seconds does not depend on the machine's
//! speed, only on the daemon getting the CPU to keep up with it, so the time the kernel kept
//! the daemon waiting for a CPU (or the hypervisor stole) is allowed for below a target
//! ([`CpuDenied`]), never above it. The data path is built optimized even in test builds
//! (the workspace's `Cargo.toml`): unoptimized, the daemon spent two thirds of a core at 200
//! Mbit/s and fell short of the limit on a slow hour. The whole file takes about a minute.

mod daemon_lab;

use daemon_lab::{
    ADDR_A, ADDR_B, CpuDenied, Lab, assert_nothing_left, assert_ping, class, class_rate_bps,
    free_port, http_get, iperf_mss, iperf_received, measured_again_if_off, ns_addresses,
    ns_has_interface, process_ticks, tcp_wire_bytes, thread_ticks, wait_for,
};
use sluice_dp::control::{Reply, Request};
use sluice_dp::netns::{in_netns, netns_exists};
use sluice_dp::port::af_packet::AfPacket;
use sluice_dp::port::{Port, VNET_HDR_LEN};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Warm-up before a rate measurement (slow start, the shaper's burst), s.
const WARMUP_S: f64 = 2.0;
/// Length of a rate measurement, s.
const WINDOW_S: f64 = 5.0;
/// Length of an iperf3 run that holds a measurement: warm-up, window and a second of slack, s.
const RUN_S: &str = "8";

/// A policy of one FIFO class `root` limited to `rate`.
fn limit_policy(rate: &str) -> String {
    format!(
        "[scheduler]\ndefault = \"root\"\n\n\
         [[node]]\nname = \"root\"\npolicy = \"fifo\"\nrate = \"{rate}\"\nburst = \"30KB\"\n"
    )
}

/// Sleep until `secs` after `t0`.
fn sleep_until(t0: Instant, secs: f64) {
    let at = t0 + Duration::from_secs_f64(secs);
    if let Some(d) = at.checked_duration_since(Instant::now()) {
        sleep(d);
    }
}

fn pct(x: f64, of: f64) -> f64 {
    100.0 * x / of
}

/// Bytes of the TCP transfer in [`traffic_passes_and_is_counted`].
const TRANSFER_BYTES: u64 = 20 << 20;

/// Byte `i` of the transferred pattern.
fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 9)) as u8
}

/// FNV-1a over the first `n` bytes of the pattern.
fn pattern_digest(n: u64) -> u64 {
    (0..n).fold(0xcbf2_9ce4_8422_2325, |h, i| {
        (h ^ u64::from(pattern(i))).wrapping_mul(0x100_0000_01b3)
    })
}

/// Send `n` bytes of the pattern over TCP from namespace `from` to [`ADDR_B`] in namespace
/// `to`; returns how many bytes the receiver read before the sender's FIN, and their FNV-1a.
fn tcp_transfer(from: &str, to: &str, n: u64) -> (u64, u64) {
    let listener = in_netns(to, || TcpListener::bind((ADDR_B, 0)))
        .expect("enter the receiver's namespace")
        .expect("listen");
    let addr = listener.local_addr().unwrap();
    let receiver = std::thread::spawn(move || {
        listener.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + daemon_lab::PATIENCE;
        let mut conn = loop {
            match listener.accept() {
                Ok((c, _)) => break c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline, "no connection");
                    sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("accept: {e}"),
            }
        };
        conn.set_nonblocking(false).unwrap();
        conn.set_read_timeout(Some(daemon_lab::PATIENCE)).unwrap();
        let (mut len, mut digest) = (0u64, 0xcbf2_9ce4_8422_2325u64);
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let k = conn.read(&mut buf).expect("read the transfer");
            if k == 0 {
                return (len, digest);
            }
            for &byte in &buf[..k] {
                digest = (digest ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3);
            }
            len += k as u64;
        }
    });
    let mut conn = in_netns(from, || {
        TcpStream::connect_timeout(&addr, daemon_lab::PATIENCE)
    })
    .expect("enter the sender's namespace")
    .expect("connect across the daemon");
    conn.set_write_timeout(Some(daemon_lab::PATIENCE)).unwrap();
    let mut sent = 0u64;
    while sent < n {
        let chunk: Vec<u8> = (sent..n.min(sent + (1 << 16))).map(pattern).collect();
        conn.write_all(&chunk).expect("send the transfer");
        sent += chunk.len() as u64;
    }
    conn.shutdown(std::net::Shutdown::Write).unwrap();
    receiver.join().expect("the receiver")
}

/// Frames cross the daemon both ways: a ping gets its replies, a 20 MiB TCP transfer arrives
/// whole and intact, and the daemon's counters (ports, both links' classes) account for those
/// frames; `sluice top --once` shows the link's class.
#[test]
fn traffic_passes_and_is_counted() {
    let Some(mut lab) = Lab::new("pass", false, &[]) else {
        return;
    };
    let (a, b) = (lab.ns("a"), lab.ns("b"));
    let ctl = lab.control(0);
    let mut d = lab.start("d.toml", &lab.pair_config(&a, &b, None, &ctl, ""), &ctl);

    assert_ping(&a, ADDR_B);
    let (received, digest) = tcp_transfer(&a, &b, TRANSFER_BYTES);
    assert_eq!(received, TRANSFER_BYTES, "the whole transfer arrived");
    assert_eq!(digest, pattern_digest(TRANSFER_BYTES), "and intact");

    let s = d.stats();
    let port = |n: &str| s.ports.iter().find(|p| p.name == n).unwrap();
    assert!(
        port("a").rx_frames >= 3 && port("b").tx_frames >= 3,
        "{s:?}"
    );
    assert!(
        port("b").rx_frames >= 3 && port("a").tx_frames >= 3,
        "{s:?}"
    );
    assert!(
        port("b").tx_bytes >= TRANSFER_BYTES,
        "port b wrote the transfer: {s:?}"
    );
    let forward = class(&s, "a", "fifo");
    assert!(
        forward.sent_bytes >= TRANSFER_BYTES,
        "the a -> b class carried the transfer: {forward:?}"
    );
    assert!(class(&s, "b", "fifo").sent >= 3, "replies and ACKs: {s:?}");
    assert_eq!(s.drops.values().sum::<u64>(), 0, "no drops: {s:?}");

    // The tap queues 20 000 frames toward the daemon (the kernel's default 500 overflows
    // with 1000 TCP flows, each allowed two frames there by TSQ).
    let links = Command::new("ip")
        .args(["-n", &a, "-o", "link", "show"])
        .output()
        .unwrap();
    let links = String::from_utf8_lossy(&links.stdout);
    assert!(
        links
            .lines()
            .any(|l| !l.contains("LOOPBACK") && l.contains("qlen 20000")),
        "the tap in {a} has txqueuelen 20000:\n{links}"
    );

    let top = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["top", "--once", "--interval", "100ms", "--socket"])
        .arg(&ctl)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&top.stderr)
    );
    assert!(text.contains("fifo"), "sluice top shows the class:\n{text}");

    // A live top outlasts the daemon going away: it says so and polls on (it used to quit on
    // the first failed poll, "try again" included).
    let mut top = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["top", "--interval", "50ms", "--socket"])
        .arg(&ctl)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(top.stdout.take().unwrap()).lines();
    let saw = |lines: &mut std::io::Lines<BufReader<std::process::ChildStdout>>, what: &str| {
        lines.any(|l| l.is_ok_and(|l| l.contains(what)))
    };
    assert!(saw(&mut lines, "fifo"), "a first frame");
    d.stop().expect("the daemon stops");
    assert!(
        saw(&mut lines, "trying again every 50ms"),
        "the failed poll is shown"
    );
    assert!(top.try_wait().unwrap().is_none(), "top is still running");
    top.kill().unwrap();
    top.wait().unwrap();
}

/// Run TCP cubic flows (`flows` of them, senders with ECN on) through a daemon whose link
/// `a -> b` is limited to 200 Mbit/s, with `ecn` as the daemon's `[daemon] ecn` setting (None:
/// the default, CoDel marking with a 2 ms target), and
/// measure the achieved rate over [`WINDOW_S`] after [`WARMUP_S`] twice: from the bytes the
/// iperf3 receiver got, converted to wire bytes with the connection's MSS, and from the
/// daemon's class counter over the same window. Returns both, the share of the window the
/// daemon was denied the CPU, and the CPU ticks each engine thread used, and prints them.
fn measure_200_mbit_limit(
    tag: &str,
    ecn: Option<&str>,
    flows: u32,
    engines: u32,
) -> Option<LimitRun> {
    let mut lab = Lab::new(tag, true, &["iperf3"])?;
    let (a, b) = (lab.ns("a"), lab.ns("b"));
    let ctl = lab.control(0);
    let policy = lab.write("limit.toml", &limit_policy("200Mbit"));
    let mut extra = format!("engines = {engines}\n");
    if let Some(e) = ecn {
        extra += &format!("ecn = \"{e}\"\n");
    }
    let ecn = ecn.unwrap_or("default");
    let d = lab.start(
        "d.toml",
        &lab.pair_config(&a, &b, Some(&policy), &ctl, &extra),
        &ctl,
    );
    lab.sysctl(&a, "ipv4/tcp_ecn", "1");
    lab.sysctl(&a, "ipv4/tcp_timestamps", "1");
    lab.sysctl(&b, "ipv4/tcp_timestamps", "1");
    if engines > 1 {
        // A request the allocator refuses (a rate below the engines' headroom) changes
        // nothing: its huge burst (4 GB, the most a burst may be), once sent to the engines
        // before the refusal, lifted the limit for good.
        let reply = d.request(&Request::SetRate {
            link: "a".into(),
            node: "root".into(),
            rate: "1bit".into(),
            burst: Some("4000000000B".into()),
        });
        assert!(
            matches!(&reply, Reply::Error(e) if e.contains("headroom")),
            "{reply:?}"
        );
    }

    let server = lab.iperf_server(&b, 5201);
    let t0 = Instant::now();
    let client = lab.iperf_client(&a, ADDR_B, 5201, &["-t", RUN_S, "-P", &flows.to_string()]);
    sleep_until(t0, WARMUP_S);
    let s0 = d.stats();
    let ticks0 = thread_ticks(d.pid(), "sluice-engine");
    let denied0 = CpuDenied::sample(d.pid());
    sleep_until(t0, WARMUP_S + WINDOW_S);
    let s1 = d.stats();
    let denied = CpuDenied::sample(d.pid()).share_since(&denied0, WINDOW_S);
    let mut ticks = thread_ticks(d.pid(), "sluice-engine");
    for (thread, t) in ticks.iter_mut() {
        *t -= ticks0.get(thread).copied().unwrap_or(0);
    }
    let mss = iperf_mss(&client.finish());
    let (payload, secs) = iperf_received(&server.finish(), WARMUP_S, WARMUP_S + WINDOW_S);
    let iperf_bps = tcp_wire_bytes(payload, mss) * 8.0 / secs;
    let daemon_bps = class_rate_bps(&s0, &s1, "a", "root");
    println!(
        "200 Mbit/s limit, ecn {ecn}, {flows} flows, {engines} engines: receiver {:.2} Mbit/s on the wire \
         ({:.2}%), daemon {:.2} Mbit/s ({:.2}%), mss {mss}, ECN marks {}, CPU denied {:.2}%",
        iperf_bps / 1e6,
        pct(iperf_bps, 200e6),
        daemon_bps / 1e6,
        pct(daemon_bps, 200e6),
        s1.ecn_marked - s0.ecn_marked,
        100.0 * denied
    );
    println!("CPU ticks per engine thread (several engines): {ticks:?}");
    Some(LimitRun {
        rates: [("iperf3 receiver", iperf_bps), ("daemon class", daemon_bps)],
        denied,
        ecn_marks: s1.ecn_marked - s0.ecn_marked,
        ticks,
    })
}

/// What [`measure_200_mbit_limit`] measured.
struct LimitRun {
    /// The achieved rate by each measure, bit/s.
    rates: [(&'static str, f64); 2],
    /// The share of the window the daemon was kept from running ([`CpuDenied`]).
    denied: f64,
    /// Frames the daemon marked Congestion Experienced in the window.
    ecn_marks: u64,
    /// CPU ticks each engine thread used in the window, by name (none with one engine, which
    /// runs on the daemon's main thread).
    ticks: HashMap<String, u64>,
}

impl LimitRun {
    /// Why the run is off target, if it is: a rate above 200 Mbit/s by more than 2% (the
    /// limit does not hold), or below it by more than 2% plus the share of the window the
    /// daemon was denied the CPU (a software shaper cannot send while it is not running).
    fn off(&self) -> Option<String> {
        let floor = 0.98 - self.denied;
        self.rates.iter().find_map(|&(what, bps)| {
            (bps > 1.02 * 200e6 || bps < floor * 200e6).then(|| {
                format!(
                    "{what}: {:.2} Mbit/s is not between {:.2} and 204 Mbit/s (the daemon was \
                     denied the CPU for {:.2}% of the window)",
                    bps / 1e6,
                    floor * 200.0,
                    100.0 * self.denied
                )
            })
        })
    }
}

/// [`measure_200_mbit_limit`] through [`measured_again_if_off`]: again if the run is off
/// ([`LimitRun::off`]), and then a failure if it is off again.
fn assert_200_mbit_limit_holds(
    tag: &str,
    ecn: Option<&str>,
    flows: u32,
    engines: u32,
) -> Option<LimitRun> {
    let run = measured_again_if_off(
        tag,
        |tag| measure_200_mbit_limit(tag, ecn, flows, engines),
        |run| run.off().is_none(),
    )?;
    if let Some(off) = run.off() {
        panic!("{off}");
    }
    Some(run)
}

/// A 200 Mbit/s limit holds within 2% over 5 s with the daemon's default settings (ECN marks
/// by CoDel) and ECN-capable cubic senders: by the iperf3 receiver (wire bytes from its payload
/// and MSS) and by the daemon's class counter. Marking slows the senders down (frames are
/// marked) without leaving the link idle.
#[test]
fn a_200_mbit_limit_holds_within_2_percent() {
    if let Some(run) = assert_200_mbit_limit_holds("rate", None, 2, 1) {
        assert!(run.ecn_marks > 0, "the default marks ECN-capable frames");
    }
}

/// The same limit with ECN marking off (nothing marked), so that the senders keep the link
/// backlogged: the shaper's conformance alone (if only the test above fails, look at marking,
/// not shaping).
#[test]
fn a_200_mbit_limit_holds_within_2_percent_without_ecn() {
    if let Some(run) = assert_200_mbit_limit_holds("rate-noecn", Some("off"), 2, 1) {
        assert_eq!(run.ecn_marks, 0, "ecn = \"off\" marks nothing");
    }
}

/// With two per-core engines, eight flows spread over both by the multi-queue taps (both
/// engine threads do work), the engines' shares of the 200 Mbit/s limit (redistributed by the
/// bandwidth allocator every 100 ms) add up to it within 2% over 5 s, after a refused request
/// to change it.
#[test]
fn a_200_mbit_limit_shared_by_two_engines_holds_within_2_percent() {
    if let Some(LimitRun { ticks, .. }) = assert_200_mbit_limit_holds("rate-2e", None, 8, 2) {
        assert_eq!(ticks.len(), 2, "two engine threads: {ticks:?}");
        assert!(
            ticks.values().all(|&t| t > 0),
            "both engines carried traffic: {ticks:?}"
        );
    }
}

/// In event mode (the default) an idle daemon sleeps: over 3 s without traffic it uses at
/// most 3 clock ticks of CPU (1% of a core at the usual 100 Hz), all threads together.
#[test]
fn an_idle_daemon_uses_almost_no_cpu() {
    let Some(mut lab) = Lab::new("idle", false, &[]) else {
        return;
    };
    let (a, b) = (lab.ns("a"), lab.ns("b"));
    let ctl = lab.control(0);
    let policy = lab.write("limit.toml", &limit_policy("20Mbit"));
    let d = lab.start(
        "d.toml",
        &lab.pair_config(&a, &b, Some(&policy), &ctl, ""),
        &ctl,
    );
    // Let the start-up and the kernel's first neighbour and router solicitations pass.
    sleep(Duration::from_secs(1));
    let before = process_ticks(d.pid());
    sleep(Duration::from_secs(3));
    let used = process_ticks(d.pid()) - before;
    println!("idle daemon: {used} ticks in 3 s");
    assert!(used <= 3, "an idle daemon used {used} clock ticks in 3 s");
}

/// Strict priority under a 100 Mbit/s root, both classes loaded by a TCP flow each: the high
/// class (dport 5001, priority 0, capped at 60 Mbit/s) gets its whole 60 Mbit/s, more than a
/// fair half, and the low class (everything else, priority 1) gets the rest, 40 Mbit/s; by the
/// receivers (wire bytes) and by the daemon's class counters, each within 5% (2% for the
/// root's total; below, less the time the daemon was denied the CPU). ECN marking is off so
/// that both senders keep their classes backlogged.
#[test]
fn strict_priority_gives_the_high_class_its_rate() {
    let Some(rates) = measured_again_if_off("prio", measure_strict_priority, |r| {
        prio_rates_off(r).is_none()
    }) else {
        return;
    };
    if let Some(off) = prio_rates_off(&rates) {
        panic!("{off}");
    }
}

/// What [`strict_priority_gives_the_high_class_its_rate`] measured.
struct PrioRates {
    /// The high and low classes' rates, bit/s, by the receivers (wire bytes), then by the
    /// daemon's class counters.
    rates: [(&'static str, f64, f64); 2],
    /// The share of the window the daemon was kept from running ([`CpuDenied`]).
    denied: f64,
}

/// What is off in `r`, if anything: high within 5% of 60 Mbit/s, low within 5% of 40, the two
/// within 2% of 100, by each measure. The time the daemon was denied the CPU is the low
/// class's (strict priority serves the high one first) and the total's, below their targets.
fn prio_rates_off(r: &PrioRates) -> Option<String> {
    let lost = r.denied * 100e6;
    for &(what, high, low) in &r.rates {
        if (high - 60e6).abs() > 0.05 * 60e6 {
            return Some(format!(
                "{what}: the high class got {:.2} Mbit/s, not its 60",
                high / 1e6
            ));
        }
        if low > 1.05 * 40e6 || low < 0.95 * 40e6 - lost {
            return Some(format!(
                "{what}: the low class got {:.2} Mbit/s, not the 40 left",
                low / 1e6
            ));
        }
        if high + low > 1.02 * 100e6 || high + low < 0.98 * 100e6 - lost {
            return Some(format!(
                "{what}: {:.2} Mbit/s in all, not the root's 100",
                (high + low) / 1e6
            ));
        }
    }
    None
}

/// One run of [`strict_priority_gives_the_high_class_its_rate`]'s traffic, in a lab tagged
/// `tag`.
fn measure_strict_priority(tag: &str) -> Option<PrioRates> {
    let mut lab = Lab::new(tag, true, &["iperf3"])?;
    let (a, b) = (lab.ns("a"), lab.ns("b"));
    let ctl = lab.control(0);
    let policy = lab.write(
        "prio.toml",
        "[scheduler]\ndefault = \"low\"\n\n\
         [[node]]\nname = \"root\"\npolicy = \"prio\"\nrate = \"100Mbit\"\nburst = \"30KB\"\n\n\
         [[node]]\nname = \"high\"\nparent = \"root\"\npolicy = \"fifo\"\npriority = 0\n\
         rate = \"60Mbit\"\nburst = \"30KB\"\n\n\
         [[node]]\nname = \"low\"\nparent = \"root\"\npolicy = \"fifo\"\npriority = 1\n\n\
         [[classify]]\nto = \"high\"\ndport = 5001\n",
    );
    let d = lab.start(
        "d.toml",
        &lab.pair_config(&a, &b, Some(&policy), &ctl, "ecn = \"off\""),
        &ctl,
    );

    let high_server = lab.iperf_server(&b, 5001);
    let low_server = lab.iperf_server(&b, 5002);
    let t0 = Instant::now();
    // The low flow first, so the high one arrives at a busy link.
    let low = lab.iperf_client(&a, ADDR_B, 5002, &["-t", RUN_S]);
    let high = lab.iperf_client(&a, ADDR_B, 5001, &["-t", RUN_S]);
    sleep_until(t0, WARMUP_S);
    let s0 = d.stats();
    let denied0 = CpuDenied::sample(d.pid());
    sleep_until(t0, WARMUP_S + WINDOW_S);
    let s1 = d.stats();
    let denied = CpuDenied::sample(d.pid()).share_since(&denied0, WINDOW_S);
    let mss = iperf_mss(&high.finish());
    low.finish();
    let wire_bps = |json: String| {
        let (payload, secs) = iperf_received(&json, WARMUP_S, WARMUP_S + WINDOW_S);
        tcp_wire_bytes(payload, mss) * 8.0 / secs
    };
    let high_bps = wire_bps(high_server.finish());
    let low_bps = wire_bps(low_server.finish());
    let high_daemon = class_rate_bps(&s0, &s1, "a", "high");
    let low_daemon = class_rate_bps(&s0, &s1, "a", "low");
    println!(
        "prio under 100 Mbit/s, high capped at 60: high {:.2} Mbit/s (daemon {:.2}), \
         low {:.2} Mbit/s (daemon {:.2}), CPU denied {:.2}%",
        high_bps / 1e6,
        high_daemon / 1e6,
        low_bps / 1e6,
        low_daemon / 1e6,
        100.0 * denied
    );
    Some(PrioRates {
        rates: [
            ("receivers", high_bps, low_bps),
            ("daemon", high_daemon, low_daemon),
        ],
        denied,
    })
}

/// An Ethernet frame from a fixed source to broadcast, with `ethertype` and `payload`.
fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An IPv4 header (no options) of `total` bytes carrying `proto`, then `rest`.
fn ipv4(first: u8, total: u16, proto: u8, rest: &[u8]) -> Vec<u8> {
    let mut h = vec![first, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, 0, 64, proto, 0, 0, 10, 77, 0, 1, 10, 77, 0, 2]);
    h.extend_from_slice(rest);
    h
}

/// One frame per malformed reason the parser names (those a packet socket can send), with
/// the reason it must be counted under.
fn malformed_frames() -> Vec<(&'static str, Vec<u8>)> {
    let mut tcp = vec![0u8; 20];
    tcp[12] = 0x20; // data offset 2 words
    let mut ipv6 = vec![0x60, 0, 0, 0, 0x01, 0xf4, 59, 64]; // payload length 500
    ipv6.extend_from_slice(&[0u8; 32]);
    let mut ipv6_v4 = ipv6.clone();
    ipv6_v4[0] = 0x40;
    vec![
        ("truncated_vlan", eth(0x8100, &[0x00])),
        (
            "too_many_vlan_tags",
            eth(
                0x8100,
                &[0, 1, 0x81, 0, 0, 2, 0x81, 0, 0, 3, 0x08, 0, 0x45, 0],
            ),
        ),
        ("truncated_ipv4", eth(0x0800, &ipv4(0x45, 20, 6, &[])[..10])),
        ("ipv4_version", eth(0x0800, &ipv4(0x65, 20, 6, &[]))),
        ("ipv4_ihl", eth(0x0800, &ipv4(0x44, 20, 6, &[]))),
        ("ipv4_total_length", eth(0x0800, &ipv4(0x45, 1000, 6, &[]))),
        ("truncated_tcp", eth(0x0800, &ipv4(0x45, 24, 6, &[0; 4]))),
        ("tcp_data_offset", eth(0x0800, &ipv4(0x45, 40, 6, &tcp))),
        ("truncated_udp", eth(0x0800, &ipv4(0x45, 24, 17, &[0; 4]))),
        (
            "udp_length",
            eth(0x0800, &ipv4(0x45, 28, 17, &[0, 1, 0, 2, 0, 4, 0, 0])),
        ),
        ("truncated_ipv6", eth(0x86dd, &ipv6[..20])),
        ("ipv6_version", eth(0x86dd, &ipv6_v4)),
        ("ipv6_payload_length", eth(0x86dd, &ipv6)),
    ]
}

/// `n` frames of random content (a fixed seed) under IP, VLAN and arbitrary ethertypes.
fn garbage_frames(n: usize) -> Vec<Vec<u8>> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|_| {
            let r = next();
            let ethertype = [0x0800, 0x86dd, 0x8100, 0x88a8, (r >> 16) as u16][(r % 5) as usize];
            let len = (r >> 32) as usize % 200;
            let mut payload: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if ethertype == 0x0800 && len > 0 && r & (1 << 8) != 0 {
                payload[0] = 0x45; // get past the version check often
            }
            eth(ethertype, &payload)
        })
        .collect()
}

/// Malformed and random frames written into port `a`'s tap (from a packet socket inside its
/// namespace) are counted per reason, exactly as the parser names them, and dropped; the
/// daemon keeps running and a ping still crosses it afterwards.
#[test]
fn malformed_frames_are_counted_and_forwarding_goes_on() {
    let Some(mut lab) = Lab::new("bad", false, &[]) else {
        return;
    };
    let (a, b) = (lab.ns("a"), lab.ns("b"));
    let ctl = lab.control(0);
    let mut d = lab.start("d.toml", &lab.pair_config(&a, &b, None, &ctl, ""), &ctl);
    assert_ping(&a, ADDR_B);

    let mut frames: Vec<Vec<u8>> = Vec::new();
    let mut expected: HashMap<String, u64> = HashMap::new();
    for (reason, frame) in malformed_frames() {
        match sluice_dp::parse::parse(&frame) {
            Err(m) => assert_eq!(m.name(), reason, "the test's frame for {reason}"),
            Ok(p) => panic!("the test's frame for {reason} parses: {p:?}"),
        }
        for _ in 0..4 {
            frames.push(frame.clone());
        }
    }
    frames.extend(garbage_frames(400));
    for f in &frames {
        if let Err(m) = sluice_dp::parse::parse(f) {
            *expected.entry(m.name().to_string()).or_insert(0) += 1;
        }
    }
    let total: u64 = expected.values().sum();
    // Fewer frames than the tap's queue holds (1000), so none is lost even if the daemon
    // were slow to read.
    assert!(frames.len() < 1000);

    let before = d.stats();
    let ifname = before.ports[0].ifname.clone();
    in_netns(&a, || {
        let mut port = AfPacket::open(&ifname).expect("a packet socket on the tap");
        for f in &frames {
            let mut buf = vec![0u8; VNET_HDR_LEN];
            buf.extend_from_slice(f);
            let deadline = Instant::now() + daemon_lab::PATIENCE;
            loop {
                match port.send(&buf) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        assert!(Instant::now() < deadline, "the packet socket stays full");
                        sleep(Duration::from_millis(1));
                    }
                    Err(e) => panic!("sending a frame of {} bytes: {e}", f.len()),
                }
            }
        }
    })
    .expect("enter namespace a");

    let deadline = Instant::now() + daemon_lab::PATIENCE;
    let after = loop {
        let s = d.stats();
        if s.malformed.values().sum::<u64>() >= total || Instant::now() > deadline {
            break s;
        }
        sleep(Duration::from_millis(50));
    };
    let counted: HashMap<String, u64> = after
        .malformed
        .iter()
        .filter(|&(_, &n)| n > 0)
        .map(|(k, &n)| (k.clone(), n))
        .collect();
    assert_eq!(counted, expected, "malformed frames by reason");
    assert_eq!(after.drops.get("malformed").copied(), Some(total));
    println!(
        "malformed: {total} of {} frames counted in {} reasons",
        frames.len(),
        counted.len()
    );
    assert!(d.try_wait().is_none(), "the daemon is still running");
    assert_ping(&a, ADDR_B);
}

/// SIGTERM while a shaped TCP flow holds frames in the daemon: it exits with status 0 well
/// within the timeout, says it stopped cleanly, and its namespaces, taps and control socket
/// are gone.
#[test]
fn sigterm_exits_cleanly_and_removes_what_the_daemon_created() {
    let Some(mut lab) = Lab::new("term", false, &["iperf3"]) else {
        return;
    };
    let (a, b) = (lab.ns("a"), lab.ns("b"));
    let ctl = lab.control(0);
    let policy = lab.write("limit.toml", &limit_policy("20Mbit"));
    let mut d = lab.start(
        "d.toml",
        &lab.pair_config(&a, &b, Some(&policy), &ctl, ""),
        &ctl,
    );
    let pid = d.pid();
    let s = d.stats();
    let ifnames: Vec<String> = s.ports.iter().map(|p| p.ifname.clone()).collect();
    assert!(ns_has_interface(&a, &ifnames[0]) && ns_has_interface(&b, &ifnames[1]));
    assert_eq!(
        std::fs::metadata(&ctl).unwrap().permissions().mode() & 0o777,
        0o600,
        "the control socket is mode 0600"
    );

    let _server = lab.iperf_server(&b, 5201);
    let _client = lab.iperf_client(&a, ADDR_B, 5201, &["-t", "60"]);
    wait_for("the flow to be shaped", || {
        class(&d.stats(), "a", "root").shaped > 0
    });

    let t = Instant::now();
    let status = d.stop().expect("the daemon exits on SIGTERM");
    println!("stopped in {:?} with {status}", t.elapsed());
    assert!(status.success(), "exit status {status}:\n{}", d.log());
    assert!(d.log().contains("stopped cleanly"), "{}", d.log());
    assert_nothing_left("after SIGTERM", pid, &[&a, &b], &ctl);
}

/// The daemon's process, in a process group of its own (as a shell puts a job in the
/// foreground), killed with its group if the test ends first.
struct Group(std::process::Child);

impl Drop for Group {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let pgid = nix::unistd::Pid::from_raw(self.0.id() as i32);
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
            let _ = self.0.wait();
        }
    }
}

/// Whether process `pid` blocks SIGINT (`SigBlk` in /proc/PID/status, its main thread's).
fn blocks_sigint(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (nix::sys::signal::Signal::SIGINT as i32 - 1)) != 0)
}

/// Ctrl-C in a terminal sends SIGINT to the whole foreground process group: to the daemon,
/// which blocks it and reads it from its signalfd once started, and to any `ip` it runs at that
/// moment to set up or take down its namespaces and taps. Those inherit the blocked signals, so
/// none dies of it half-way (which would fail the start, or leave behind what it was removing).
/// Here SIGINT goes to the daemon's group again and again, from the moment it blocks the signal
/// until it exits: it starts, stops on the signal with status 0, and nothing is left.
#[test]
fn sigint_to_the_process_group_during_start_up_stops_the_daemon_cleanly() {
    use std::os::unix::process::CommandExt;
    let Some(mut lab) = Lab::new("pgrp", false, &[]) else {
        return;
    };
    let (a, b) = (lab.ns("a"), lab.ns("b"));
    let ctl = lab.control(0);
    let config = lab.write("d.toml", &lab.pair_config(&a, &b, None, &ctl, ""));
    let log_path = lab.dir.join("d.log");
    let log_file = std::fs::File::create(&log_path).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--config"])
        .arg(&config)
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .process_group(0)
        .spawn()
        .unwrap();
    let mut daemon = Group(child);
    let pid = daemon.0.id();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    // Before it blocks SIGINT the signal would end it at once: wait for that (looked at
    // without a pause, so that the signals come from the start of its start-up).
    let deadline = Instant::now() + daemon_lab::PATIENCE;
    while !blocks_sigint(pid) && daemon.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the daemon never blocked SIGINT");
    }
    let status = loop {
        if let Some(status) = daemon.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon did not stop on SIGINT:\n{}",
            log()
        );
        let pgid = nix::unistd::Pid::from_raw(pid as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGINT);
        sleep(Duration::from_micros(200));
    };
    assert!(status.success(), "exit status {status}:\n{}", log());
    assert!(
        log().contains("stopped cleanly") && log().contains("SIGINT"),
        "{}",
        log()
    );
    assert_nothing_left("after SIGINT to the group", pid, &[&a, &b], &ctl);
}

/// An `af_packet` port reading a frame longer than the buffer it is given (BIG TCP's
/// super-frames over 64 KiB, here a 1000-byte frame into a 200-byte buffer) skips it and counts
/// it in `kernel_drops`. Before, the frame was lost with a warning and no counter.
#[test]
fn an_af_packet_frame_too_big_for_its_buffer_is_counted() {
    let Some(mut lab) = Lab::new("big", false, &[]) else {
        return;
    };
    let ns = lab.ns("a");
    for args in [
        &["netns", "add", &ns][..],
        &["-n", &ns, "link", "set", "lo", "up"],
    ] {
        assert!(Command::new("ip").args(args).status().unwrap().success());
    }
    in_netns(&ns, || {
        let mut rx = AfPacket::open("lo").expect("a packet socket on lo");
        let mut tx = AfPacket::open("lo").expect("a second one to send with");
        let mut frame = vec![0u8; VNET_HDR_LEN];
        frame.extend_from_slice(&eth(0x88b5, &[7u8; 1000])); // local experimental ethertype
        tx.send(&frame).expect("send on lo");
        let mut small = [0u8; 200];
        let deadline = Instant::now() + daemon_lab::PATIENCE;
        while rx.counters().kernel_drops == 0 {
            assert!(
                rx.recv(&mut small)
                    .expect("a skipped frame is no error")
                    .is_none(),
                "nothing fits 200 bytes"
            );
            assert!(Instant::now() < deadline, "the frame never showed up");
            sleep(Duration::from_millis(1));
        }
        assert_eq!(rx.counters().kernel_drops, 1);
        assert_eq!(rx.counters().rx_frames, 0);
    })
    .expect("enter the namespace");
}

/// A tap deleted under the running daemon: it stops with an error naming the port, within a
/// few seconds, and removes everything else it created. Before, every read failed, the loop
/// spun at 100% CPU and logged thousands of warnings a second, forever.
#[test]
fn a_tap_deleted_under_the_daemon_stops_it_with_an_error_and_a_clean_slate() {
    let Some(mut lab) = Lab::new("gone", false, &[]) else {
        return;
    };
    let (a, b) = (lab.ns("a"), lab.ns("b"));
    let ctl = lab.control(0);
    let mut d = lab.start("d.toml", &lab.pair_config(&a, &b, None, &ctl, ""), &ctl);
    let pid = d.pid();
    let tap = d.stats().ports[0].ifname.clone();
    let del = Command::new("ip")
        .args(["-n", &a, "link", "del", &tap])
        .status()
        .unwrap();
    assert!(del.success());
    wait_for("the daemon to stop", || d.try_wait().is_some());
    let status = d.try_wait().unwrap();
    assert!(!status.success(), "exit status {status}:\n{}", d.log());
    let log = d.log();
    assert!(log.contains("port `a`: its device is gone"), "{log}");
    assert!(
        log.matches("read failed").count() < 10,
        "a failed read is not logged in a loop:\n{log}"
    );
    assert_nothing_left("after its tap was deleted", pid, &[&a, &b], &ctl);
}

/// The index of interface `ifname` in namespace `ns` (the number `ip -o link show` starts
/// its line with).
fn ifindex(ns: &str, ifname: &str) -> u32 {
    let out = Command::new("ip")
        .args(["-n", ns, "-o", "link", "show", "dev", ifname])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.split(':')
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no index for {ifname} in {ns}: {text}"))
}

/// Run `ip ARGS`, which must succeed.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The veth pair `b` (in `t`) | `a` (in `n`, at `addr`/24), both up.
fn veth_pair(t: &str, b: &str, n: &str, a: &str, addr: &str) {
    ip(&[
        "-n", t, "link", "add", b, "type", "veth", "peer", "name", a, "netns", n,
    ]);
    ip(&["-n", n, "addr", "add", &format!("{addr}/24"), "dev", a]);
    ip(&["-n", n, "link", "set", a, "up"]);
    ip(&["-n", t, "link", "set", b, "up"]);
}

/// X -- xa|xb -- [T: `sluice run`, af_packet ports `x` on xb and `y` on yb] -- yb|ya -- Y.
/// The pair yb|ya is deleted under the running daemon and created again (yb at a new index):
/// each engine logs the outage once, counts the datagrams it cannot send toward Y as
/// `tx_error`, logs "interface `yb` back, re-bound to index N", and pings cross again. yb set
/// down and up is a second outage, logged again, and traffic crosses after it. With two
/// engines, their sockets in a fanout group are re-created. Before, port `y` stayed bound to
/// the deleted interface until the daemon was restarted, and only the first outage was logged.
#[test]
fn af_packet_ports_forward_again_after_their_interface_is_created_again() {
    for engines in [1, 2] {
        let Some(mut lab) = Lab::new(&format!("veth{engines}"), false, &[]) else {
            return;
        };
        let (t, x, y) = (lab.ns("t"), lab.ns("x"), lab.ns("y"));
        for n in [&t, &x, &y] {
            ip(&["netns", "add", n]);
        }
        veth_pair(&t, "xb", &x, "xa", ADDR_A);
        veth_pair(&t, "yb", &y, "ya", ADDR_B);
        let ctl = lab.control(0);
        let config = format!(
            "[daemon]\ncontrol = \"{}\"\nengines = {engines}\n\n\
             [[port]]\nname = \"x\"\nkind = \"af_packet\"\nifname = \"xb\"\n\n\
             [[port]]\nname = \"y\"\nkind = \"af_packet\"\nifname = \"yb\"\n\n\
             [[link]]\nfrom = \"x\"\nto = \"y\"\n\n\
             [[link]]\nfrom = \"y\"\nto = \"x\"\n",
            ctl.display()
        );
        let mut d = lab.start_in(&t, "d.toml", &config, &ctl);
        assert_ping(&x, ADDR_B);
        let tx_errors = || d.stats().drops.get("tx_error").copied().unwrap_or(0);
        let said = |what: &str| d.log().matches(what).count();
        let lost = "interface `yb` is down or gone";

        // Gone: datagrams toward Y cannot be sent (counted), and each engine says so once.
        ip(&["-n", &t, "link", "del", "yb"]);
        let sock = in_netns(&x, || std::net::UdpSocket::bind((ADDR_A, 0)))
            .expect("enter X")
            .expect("bind");
        wait_for("datagrams toward Y counted as tx_error", || {
            sock.send_to(b"lost", (ADDR_B, 9)).expect("send");
            tx_errors() > 0
        });
        wait_for("the outage logged", || said(lost) == engines);

        // Created again: bound to the new yb, pings cross again.
        veth_pair(&t, "yb", &y, "ya", ADDR_B);
        let index = ifindex(&t, "yb");
        let rebound = format!("interface `yb` back, re-bound to index {index}");
        wait_for("the port bound to the new interface", || {
            said(&rebound) == engines
        });
        // X still knows Y's old Ethernet address; the new ya has another.
        ip(&["-n", &x, "neigh", "flush", "dev", "xa"]);
        let sent = d.stats().ports[1].tx_frames;
        assert_ping(&x, ADDR_B);
        assert!(d.stats().ports[1].tx_frames > sent, "{:?}", d.stats().ports);

        // Down and up: a second outage, logged again; traffic after it.
        ip(&["-n", &t, "link", "set", "yb", "down"]);
        wait_for("the second outage logged", || said(lost) == 2 * engines);
        ip(&["-n", &t, "link", "set", "yb", "up"]);
        wait_for("the interface up again", || {
            said(&format!("interface `yb` back, up again at index {index}")) == engines
        });
        assert_ping(&x, ADDR_B);
        let log = d.log();
        assert_eq!(said(lost), 2 * engines, "each outage logged once:\n{log}");
        assert_eq!(said(&rebound), engines, "{log}");
        let status = d.stop().expect("the daemon exits on SIGTERM");
        assert!(status.success(), "exit status {status}:\n{log}");
        for n in [&t, &x, &y] {
            ip(&["netns", "del", n]);
        }
    }
}

/// Two daemons with default interface names and their own namespaces run at once and both
/// forward. A third given a namespace the first created fails with a "busy namespace" message
/// and a non-zero exit, creates nothing, and leaves the first daemon and its namespace as they
/// were.
#[test]
fn two_daemons_never_collide_on_names() {
    let Some(mut lab) = Lab::new("two", false, &[]) else {
        return;
    };
    let (a1, b1, a2, b2, a3) = (
        lab.ns("a1"),
        lab.ns("b1"),
        lab.ns("a2"),
        lab.ns("b2"),
        lab.ns("a3"),
    );
    let (c1, c2, c3) = (lab.control(1), lab.control(2), lab.control(3));
    let d1 = lab.start("d1.toml", &lab.pair_config(&a1, &b1, None, &c1, ""), &c1);
    let d2 = lab.start("d2.toml", &lab.pair_config(&a2, &b2, None, &c2, ""), &c2);
    let names = |d: &daemon_lab::Daemon| {
        d.stats()
            .ports
            .iter()
            .map(|p| p.ifname.clone())
            .collect::<Vec<_>>()
    };
    let (n1, n2) = (names(&d1), names(&d2));
    assert!(n1.iter().all(|n| !n2.contains(n)), "{n1:?} and {n2:?}");
    assert_ping(&a1, ADDR_B);
    assert_ping(&a2, ADDR_B);
    assert_ping(&b2, ADDR_A);
    let b1_before = ns_addresses(&b1);
    assert!(
        b1_before.contains(&format!("{ADDR_B}/24")) && b1_before.contains(&n1[1]),
        "{b1_before}"
    );

    let (status, pid3, log) = lab.run_failing("d3.toml", &lab.pair_config(&a3, &b1, None, &c3, ""));
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("busy namespace") && log.contains(&b1),
        "the message names the busy namespace:\n{log}"
    );
    assert_nothing_left("the third daemon", pid3, &[&a3], &c3);

    assert_eq!(
        ns_addresses(&b1),
        b1_before,
        "the first daemon's namespace is untouched"
    );
    assert!(ns_has_interface(&b1, &n1[1]));
    assert_ping(&a1, ADDR_B);
    assert_ping(&a2, ADDR_B);
}

/// Bad input is refused with a clear message and a non-zero exit, and nothing is left
/// half-created (no namespace, no tap): a missing `af_packet` interface, a busy namespace
/// (which the daemon then leaves alone), a bad policy, a missing policy file, bad TOML.
#[test]
fn bad_input_is_refused_and_leaves_nothing_behind() {
    let Some(mut lab) = Lab::new("input", false, &[]) else {
        return;
    };
    let (a, b) = (lab.ns("a"), lab.ns("b"));
    let busy = lab.ns("busy");
    let ctl = lab.control(0);
    let good = lab.pair_config(&a, &b, None, &ctl, "");
    let missing_if = format!("slx{}", std::process::id());
    let bad_policy = lab.write(
        "bad-policy.toml",
        "[[node]]\nname = \"root\"\npolicy = \"nope\"\n",
    );
    let status = Command::new("ip")
        .args(["netns", "add", &busy])
        .status()
        .unwrap();
    assert!(status.success(), "create the busy namespace");

    let cases: Vec<(&str, String, Vec<String>)> = vec![
        (
            "missing-interface.toml",
            format!(
                "{good}\n[[port]]\nname = \"up\"\nkind = \"af_packet\"\nifname = \"{missing_if}\"\n"
            )
            .replace(
                "[[link]]\nfrom = \"b\"\nto = \"a\"\n",
                "[[link]]\nfrom = \"b\"\nto = \"up\"\n",
            ),
            vec![format!("interface `{missing_if}` does not exist")],
        ),
        (
            "busy.toml",
            lab.pair_config(&a, &busy, None, &ctl, ""),
            vec![busy.clone(), "busy namespace".into()],
        ),
        (
            "bad-policy-daemon.toml",
            lab.pair_config(&a, &b, Some(&bad_policy), &ctl, ""),
            vec![bad_policy.display().to_string(), "nope".into()],
        ),
        (
            "missing-policy.toml",
            lab.pair_config(&a, &b, Some(&lab.dir.join("none.toml")), &ctl, ""),
            vec![lab.dir.join("none.toml").display().to_string()],
        ),
        (
            "bad-syntax.toml",
            good.replace("[daemon]", "[daemon"),
            vec!["bad-syntax.toml:".into(), ": unclosed table".into()],
        ),
    ];
    // `--check` says a policy's error once (the chain of causes repeated it).
    let path = lab.write(
        "check.toml",
        &lab.pair_config(&a, &b, Some(&bad_policy), &ctl, ""),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.matches("nope").count(), 1, "{err}");
    for (name, text, needles) in cases {
        let (status, pid, log) = lab.run_failing(name, &text);
        println!("{name}: {status}: {}", log.trim());
        assert!(!status.success(), "{name}: exit status {status}:\n{log}");
        for needle in &needles {
            assert!(
                log.contains(needle.as_str()),
                "{name}: {needle:?} not in:\n{log}"
            );
        }
        assert!(
            !log.contains("panicked"),
            "{name}: an error, not a panic:\n{log}"
        );
        assert_nothing_left(name, pid, &[&a, &b], &ctl);
        assert!(
            netns_exists(&busy),
            "{name}: the busy namespace is left alone"
        );
    }
}

/// Ports the daemon has no permission for: run as root but with every capability dropped
/// (`setpriv`, from util-linux), it cannot create a tap (CAP_NET_ADMIN) or open an AF_PACKET
/// socket (CAP_NET_RAW). Each is a message naming the port and the missing capability, a
/// non-zero exit, and nothing created.
#[test]
fn a_port_without_permission_is_refused_and_leaves_nothing_behind() {
    let Some(mut lab) = Lab::new("perm", false, &["setpriv"]) else {
        return;
    };
    let (a, b) = (lab.ns("a"), lab.ns("b"));
    let ctl = lab.control(0);
    let no_caps = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"];
    let raw = "[[port]]\nname = \"a\"\nkind = \"af_packet\"\nifname = \"lo\"\n\n\
               [[port]]\nname = \"b\"\nkind = \"tap\"\n\n\
               [[link]]\nfrom = \"a\"\nto = \"b\"\n";
    let cases = [
        (
            "no-admin.toml",
            lab.pair_config(&a, &b, None, &ctl, ""),
            "need CAP_NET_ADMIN",
        ),
        ("no-raw.toml", raw.to_string(), "need CAP_NET_RAW"),
    ];
    for (name, text, needle) in cases {
        let (status, pid, log) = lab.run_failing_under(&no_caps, name, &text);
        println!("{name}: {status}: {}", log.trim());
        assert!(!status.success(), "{name}: exit status {status}:\n{log}");
        assert!(
            log.contains("port `a`") && log.contains(needle),
            "{name}: the message names the port and the capability:\n{log}"
        );
        assert!(!log.contains("panicked"), "{name}: {log}");
        assert_nothing_left(name, pid, &[&a, &b], &ctl);
    }
}

/// One request line on `stream` and its parsed reply.
fn exchange(stream: &mut UnixStream, line: &str) -> serde_json::Value {
    stream.write_all(line.as_bytes()).unwrap();
    stream.write_all(b"\n").unwrap();
    let mut reply = String::new();
    BufReader::new(&*stream).read_line(&mut reply).unwrap();
    serde_json::from_str(&reply).unwrap_or_else(|e| panic!("reply to {line}: {e}: {reply:?}"))
}

/// The control socket answers malformed requests (bad JSON, an unknown command, an unknown
/// field, an unknown node, a bad rate) with an error reply on a connection that stays usable,
/// and a good `set_rate` changes the class's rate, as the stats then show.
#[test]
fn the_control_socket_rejects_bad_requests_and_sets_rates() {
    let Some(mut lab) = Lab::new("ctl", false, &[]) else {
        return;
    };
    let (a, b) = (lab.ns("a"), lab.ns("b"));
    let ctl = lab.control(0);
    let policy = lab.write("limit.toml", &limit_policy("100Mbit"));
    let d = lab.start(
        "d.toml",
        &lab.pair_config(&a, &b, Some(&policy), &ctl, ""),
        &ctl,
    );
    let mut s = UnixStream::connect(&ctl).unwrap();
    s.set_read_timeout(Some(daemon_lab::PATIENCE)).unwrap();
    for bad in [
        r#"{"cmd":"nope"}"#,
        "not json",
        r#"{"cmd":"stats","extra":1}"#,
        r#"{"cmd":"set_rate","link":"a","node":"nosuch","rate":"50Mbit"}"#,
        r#"{"cmd":"set_rate","link":"zz","node":"root","rate":"50Mbit"}"#,
        r#"{"cmd":"set_rate","link":"a","node":"root","rate":"fast"}"#,
        r#"{"cmd":"set_weight","link":"a","node":"root"}"#,
    ] {
        let reply = exchange(&mut s, bad);
        assert_eq!(reply["ok"], false, "{bad} -> {reply}");
        assert!(
            reply["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{bad} -> {reply}"
        );
    }
    let stats = exchange(&mut s, r#"{"cmd":"stats"}"#);
    assert_eq!(stats["ok"], true, "the connection is still usable: {stats}");
    assert_eq!(class(&d.stats(), "a", "root").rate_bps, Some(100_000_000));

    let set = exchange(
        &mut s,
        r#"{"cmd":"set_rate","link":"a","node":"root","rate":"50Mbit","burst":"15KB"}"#,
    );
    assert_eq!(set, serde_json::json!({"ok": true}));
    assert_eq!(class(&d.stats(), "a", "root").rate_bps, Some(50_000_000));
    match d.request(&Request::SetRate {
        link: "a".into(),
        node: "root".into(),
        rate: "none".into(),
        burst: None,
    }) {
        Reply::Ok => {}
        other => panic!("removing the limit: {other:?}"),
    }
    assert_eq!(class(&d.stats(), "a", "root").rate_bps, None);
    assert_ping(&a, ADDR_B);
}

/// The metrics endpoint answers `GET /metrics` with 200 and Prometheus text carrying
/// `sluice_class_sent_bytes_total` for each link's classes, counting the frames that crossed.
#[test]
fn the_metrics_endpoint_serves_class_counters() {
    let Some(mut lab) = Lab::new("metr", false, &[]) else {
        return;
    };
    let (a, b) = (lab.ns("a"), lab.ns("b"));
    let ctl = lab.control(0);
    // The port is free when chosen; another process could take it before the daemon binds,
    // so a refused bind is tried again on another port.
    let mut attempts = 0;
    let (_d, addr) = loop {
        let addr = format!("127.0.0.1:{}", free_port());
        let text = lab.pair_config(&a, &b, None, &ctl, &format!("metrics = \"{addr}\""));
        match lab.try_start(&format!("d{attempts}.toml"), &text, &ctl) {
            Ok(d) => break (d, addr),
            Err(log) if attempts < 3 && log.contains(&addr) => attempts += 1,
            Err(log) => panic!("the daemon did not start:\n{log}"),
        }
    };
    assert_ping(&a, ADDR_B);

    let (status, body) = http_get(&addr, "/metrics");
    assert!(status.contains(" 200"), "{status}\n{body}");
    let lines: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("sluice_class_sent_bytes_total{"))
        .collect();
    assert_eq!(lines.len(), 2, "one per link's class:\n{body}");
    for l in &lines {
        let value: f64 = l.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(value > 0.0, "the pings crossed both links: {l}");
    }
    let (status, _) = http_get(&addr, "/nope");
    assert!(status.contains(" 404"), "{status}");
}

/// A rate as `sluice top` prints it (`598.3 Mbit/s`), in bit/s.
fn printed_rate(value: &str, unit: &str) -> f64 {
    let v: f64 = value.parse().unwrap();
    v * match unit {
        "Gbit/s" => 1e9,
        "Mbit/s" => 1e6,
        "kbit/s" => 1e3,
        _ => 1.0,
    }
}

/// The README's main job: `sluice demo` carries traffic in its three classes, drops nothing,
/// exits 0 and leaves no namespace, process or scratch directory behind. (Not the
/// 600 / 300 / 100 Mbit/s, nor even their order: the tests' debug build of the daemon cannot
/// forward 1 Gbit/s on a 2-core machine, and a link it cannot fill is shared by TCP, not by
/// weight; `scripts/main.sh` runs the release build, which fills it.)
#[test]
fn the_demo_carries_its_three_classes_and_leaves_nothing_behind() {
    let Some(_lab) = Lab::new("demo", true, &["iperf3"]) else {
        return;
    };
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["demo", "--duration", "4s", "--plain"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}\n{err}");
    let rate = |class: &str| {
        let line = text
            .lines()
            .rev()
            .find(|l| l.starts_with(&format!("{class} ")))
            .unwrap_or_else(|| panic!("no {class} row:\n{text}"));
        let w: Vec<&str> = line.split_whitespace().collect();
        printed_rate(w[w.len() - 2], w[w.len() - 1])
    };
    let (gold, silver, bronze) = (rate("gold"), rate("silver"), rate("bronze"));
    println!("demo: gold {gold:.0}, silver {silver:.0}, bronze {bronze:.0} bit/s");
    assert!(gold > 0.0 && silver > 0.0 && bronze > 0.0, "{text}");
    assert!(text.contains("drops 0,"), "{text}");
    let pid = out_pid_from(&text);
    assert_demo_gone(pid);
}

/// `sluice demo` killed outright (SIGKILL, no clean-up of its own): its children follow it
/// (a parent-death signal), so the daemon removes the namespaces and no iperf3 or daemon is
/// left running. Before, both stayed for good, and the iperf3 servers waited forever.
#[test]
fn a_demo_killed_outright_takes_its_children_with_it() {
    let Some(_lab) = Lab::new("demo-kill", true, &["iperf3"]) else {
        return;
    };
    let mut demo = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["demo", "--duration", "60s", "--plain"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = demo.id();
    let mut lines = BufReader::new(demo.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.starts_with("link a -> b"))),
        "a first frame"
    );
    demo.kill().unwrap();
    demo.wait().unwrap();
    assert_demo_gone(pid);
}

/// A namespace with one of the demo's names (`sldemo<pid>a`: a demo killed outright whose
/// daemon was killed too, and a process id used again) is not the demo's to delete: the demo
/// refuses before it creates anything and leaves it. It used to start the daemon, which
/// refused the busy namespace, and then its guard deleted it as a last resort. (No traffic:
/// the demo stops at once.)
#[test]
fn a_demo_whose_namespace_name_is_taken_leaves_it_alone() {
    let Some(_lab) = Lab::new("demo-taken", false, &["iperf3"]) else {
        return;
    };
    // The shell creates the name with its own pid, then becomes the demo with that pid.
    let out = Command::new("sh")
        .args([
            "-c",
            r#"ip netns add "sldemo$$"a && exec "$0" demo --duration 3s --plain"#,
            env!("CARGO_BIN_EXE_sluice"),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = out.id();
    let name = format!("sldemo{pid}a");
    let out = out.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let left = netns_exists(&name);
    let _ = Command::new("ip").args(["netns", "del", &name]).status();
    assert!(!out.status.success(), "{err}");
    assert!(
        left,
        "the demo deleted {name}, which it did not create: {err}"
    );
    assert!(
        err.contains(&format!("namespace {name} already exists")),
        "{err}"
    );
    assert!(!netns_exists(&format!("sldemo{pid}b")), "{err}");
    let scratch = std::env::temp_dir().join(format!("sluice-demo-{pid}"));
    assert!(!scratch.exists(), "{} is left", scratch.display());
}

/// The demo's process id, from the namespace names it prints first (`sldemo<pid>a`).
fn out_pid_from(text: &str) -> u32 {
    let start = text.find("sldemo").expect("the namespaces are named") + "sldemo".len();
    let digits: String = text[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap()
}

/// Nothing of the demo with process id `pid` is left: namespaces, scratch directory, and no
/// process whose command line names its files (the daemon) or its iperf3 ports.
fn assert_demo_gone(pid: u32) {
    let names = [format!("sldemo{pid}a"), format!("sldemo{pid}b")];
    wait_for("the demo's namespaces to go", || {
        names.iter().all(|n| !netns_exists(n))
    });
    let dir = format!("sluice-demo-{pid}");
    wait_for("the demo's processes to go", || {
        let procs = std::fs::read_dir("/proc").unwrap();
        !procs.flatten().any(|p| {
            let cmd = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            cmd.contains(&dir) || (cmd.starts_with("iperf3 ") && cmd.contains(" 6001"))
        })
    });
}
