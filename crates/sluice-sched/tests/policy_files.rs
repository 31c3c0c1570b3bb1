//! Policy files end to end: every file in `examples/policies` compiles and builds, behaves as
//! the reference interpreter does where the oracle models its queues, and the Eiffel Fig. 4.7
//! example enforces both limits on its rightmost leaf. And `compile_str` never panics, neither
//! on arbitrary text nor on mutated example files.

use proptest::prelude::*;
use sluice_queue::workload::Rng;
use sluice_sched::config::{PolicyError, compile_str};
use sluice_sched::oracle::OracleTree;
use sluice_sched::{Fields, Headers, NodeId, Packet, Rate, Scheduler};
use std::collections::HashSet;
use std::path::PathBuf;

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies")
}

/// Every example: (file name, text), sorted by name.
fn examples() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(examples_dir())
        .expect("examples/policies")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).expect("readable example"))
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_policy_has_an_example_and_every_example_builds() {
    let files = examples();
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    for policy in sluice_sched::PolicyKind::ALL {
        let file = format!("{}.toml", policy.name());
        assert!(names.contains(&file.as_str()), "no example for {policy}");
    }
    for needed in ["eiffel-fig47.toml", "three-classes.toml"] {
        assert!(names.contains(&needed), "missing {needed}");
    }
    for (name, text) in &files {
        let (b, _) = compile_str(text, name).unwrap_or_else(|e| panic!("{e}"));
        let s = b.build().unwrap_or_else(|e| panic!("{name}: {e}"));
        // Each example shows its own policy somewhere in the tree.
        if let Some(stem) = name.strip_suffix(".toml") {
            if sluice_sched::PolicyKind::from_name(stem).is_some() {
                assert!(s.describe().contains(&format!("[{stem} ")), "{name}");
            }
        }
    }
}

/// A packet with header fields that exercise every example's classifier.
fn packet(rng: &mut Rng, token: u64, now: u64) -> Packet {
    let mut pick = |n: u64| rng.next_u64() % n;
    let src = ["10.0.1.5", "10.0.2.9", "10.1.3.4", "192.168.0.1"][pick(4) as usize];
    Packet {
        token,
        len: 64 + pick(1437) as u32,
        flow: pick(12),
        class: Some(pick(6) as u32),
        headers: Headers {
            src: src.parse().ok(),
            dst: "10.9.9.9".parse().ok(),
            sport: Some([22, 1234, 40000][pick(3) as usize]),
            dport: Some([22, 80, 443, 5004, 5500, 9999][pick(6) as usize]),
            proto: Some([6, 17, 1][pick(3) as usize]),
            dscp: Some([0, 46, 48][pick(3) as usize]),
            vlan: [None, Some(10), Some(20), Some(30), Some(101), Some(102)][pick(6) as usize],
        },
        fields: Fields {
            priority: pick(3) as u8,
            deadline: now + pick(1_000_000),
            slack: pick(1_000_000),
            remaining: 1 + pick(1 << 20),
            pacing_bps: 0,
        },
        flow_id: None,
    }
}

#[test]
fn examples_behave_as_the_oracle_where_it_models_their_queues() {
    let mut modelled = 0;
    for (name, text) in examples() {
        let (b, _) = compile_str(&text, &name).unwrap();
        let Ok(mut slow) = OracleTree::new(&b) else {
            continue; // approximate queues have no exact model
        };
        modelled += 1;
        let mut fast = b.build().unwrap();
        let mut rng = Rng::new(0x5EED);
        let mut now = 1_000_000_000u64;
        for token in 0..3000u64 {
            match rng.next_u64() % 4 {
                0 | 1 => {
                    let p = packet(&mut rng, token, now);
                    let a = fast.enqueue(now, &p).map_err(|r| r.reason);
                    assert_eq!(a, slow.enqueue(now, &p), "{name}: enqueue {token}");
                }
                2 => assert_eq!(fast.dequeue(now), slow.dequeue(now), "{name} at {now}"),
                _ => now += rng.next_u64() % 200_000,
            }
            assert_eq!(fast.next_event(now), slow.next_event(now), "{name}");
        }
        for _ in 0..100_000 {
            match fast.next_event(now) {
                None => break,
                Some(t) => now = now.max(t),
            }
            assert_eq!(
                fast.dequeue(now),
                slow.dequeue(now),
                "{name}: drain at {now}"
            );
        }
        assert!(fast.is_empty() && slow.is_empty(), "{name}: drained");
    }
    assert!(
        modelled >= 5,
        "only {modelled} examples checked against the oracle"
    );
}

/// Offer `count` packets of `len` bytes for each class at time 0 and send everything; the
/// departure times of each class's packets.
fn run(s: &mut Scheduler, classes: &[u32], count: u64, len: u32) -> Vec<Vec<u64>> {
    let mut token = 0;
    for &class in classes {
        for _ in 0..count {
            let p = Packet {
                token,
                len,
                flow: u64::from(class),
                class: Some(class),
                ..Packet::default()
            };
            s.enqueue(0, &p).expect("room for every packet");
            token += 1;
        }
    }
    let mut times = vec![Vec::new(); classes.len()];
    let mut now = 0;
    while !s.is_empty() {
        match s.dequeue(now) {
            Some(d) => times[(d.token / count) as usize].push(now),
            None => now = s.next_event(now).expect("packets held, so an event is due"),
        }
    }
    times
}

/// Mbit/s over a class's departures (the first packet is not timed).
fn mbit(times: &[u64], len: u32) -> f64 {
    let (first, last) = (times[0], times[times.len() - 1]);
    (times.len() - 1) as f64 * f64::from(len) * 8.0 / ((last - first) as f64 / 1e9) / 1e6
}

#[test]
fn eiffel_fig47_puts_two_limits_on_the_rightmost_leaf() {
    let text = std::fs::read_to_string(examples_dir().join("eiffel-fig47.toml")).unwrap();
    let build = || {
        let (b, _) = compile_str(&text, "eiffel-fig47.toml").unwrap();
        b.build().unwrap()
    };
    let len = 1000;
    // c2 alone: its own 7 Mbit/s limit is the tighter of the two.
    let c2 = run(&mut build(), &[4], 200, len);
    let r = mbit(&c2[0], len);
    assert!((6.9..=7.01).contains(&r), "c2 alone: {r} Mbit/s");
    // c1 alone: only c's 10 Mbit/s.
    let c1 = run(&mut build(), &[3], 200, len);
    let r = mbit(&c1[0], len);
    assert!((9.9..=10.01).contains(&r), "c1 alone: {r} Mbit/s");
    // a alone: only the root's 100 Mbit/s.
    let a = run(&mut build(), &[1], 400, len);
    let r = mbit(&a[0], len);
    assert!((99.0..=100.1).contains(&r), "a alone: {r} Mbit/s");
    // c1 and c2 together share c's 10 Mbit/s: never more than 10 between them.
    let both = run(&mut build(), &[3, 4], 200, len);
    let end = both[0]
        .last()
        .copied()
        .unwrap()
        .min(both[1].last().copied().unwrap());
    let sent = both.iter().flatten().filter(|&&t| t <= end).count();
    let r = (sent - 1) as f64 * f64::from(len) * 8.0 / (end as f64 / 1e9) / 1e6;
    assert!((9.5..=10.01).contains(&r), "c1 + c2: {r} Mbit/s");
}

/// Compile, and if that succeeds, build (when small enough to build quickly): never a panic,
/// and a file that compiles builds.
fn compile_and_build(text: &str) -> Result<(), TestCaseError> {
    match compile_str(text, "fuzz.toml") {
        Ok((b, cfg)) => {
            if cfg.capacity <= 1 << 20 && cfg.flows <= 1 << 20 {
                prop_assert!(b.build().is_ok(), "compiled but did not build:\n{}", text);
            }
        }
        Err(PolicyError::Invalid { at, .. }) => {
            prop_assert_eq!(at.file.as_str(), "fuzz.toml");
            prop_assert!(at.line >= 1 && at.line <= text.lines().count().max(1) + 1);
        }
        Err(e) => prop_assert!(false, "unexpected error kind: {}", e),
    }
    Ok(())
}

/// Pieces of policy files, to make arbitrary text that gets past the TOML parser.
const TOKENS: &[&str] = &[
    "[[node]]\n",
    "[scheduler]\n",
    "[shaper]\n",
    "[[classify]]\n",
    "[node]\n",
    "name = ",
    "policy = ",
    "parent = ",
    "queue = ",
    "rate = ",
    "burst = ",
    "weight = ",
    "priority = ",
    "quantum = ",
    "reservation = ",
    "flow_rate = ",
    "flow_burst = ",
    "to = ",
    "dscp = ",
    "src = ",
    "dport = ",
    "capacity = ",
    "default = ",
    "slot = ",
    "horizon = ",
    "\"root\"",
    "\"a\"",
    "\"fifo\"",
    "\"wfq\"",
    "\"htb\"",
    "\"fq\"",
    "\"pfabric\"",
    "\"10Mbit\"",
    "\"0bit\"",
    "\"64KiB\"",
    "\"1ns\"",
    "\"1s\"",
    "\"1.5e3kbit\"",
    "\"1e-2147483648B\"",
    "\"25e-1us\"",
    "\"10.0.0.0/8\"",
    "\"5000-5999\"",
    "\"cffs\"",
    "{ kind = \"hffs\", buckets = 0 }",
    "0",
    "1",
    "-1",
    "65536",
    "9223372036854775807",
    "1e9",
    "true",
    "[",
    "]",
    "{",
    "}",
    "=",
    ",",
    "\"",
    "'",
    "#",
    "\n",
    " ",
    "é",
    "\u{0}",
];

/// One edit of a file: delete, insert, or replace a character, or delete, duplicate or swap a
/// line, or insert a token.
#[derive(Clone, Debug)]
enum Edit {
    Delete(usize),
    Insert(usize, char),
    Replace(usize, char),
    DropLine(usize),
    DupLine(usize),
    SwapLines(usize),
    Token(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let c = prop_oneof![any::<char>(), prop::char::range(' ', '~'), Just('\n')];
    prop_oneof![
        any::<usize>().prop_map(Edit::Delete),
        (any::<usize>(), c.clone()).prop_map(|(p, c)| Edit::Insert(p, c)),
        (any::<usize>(), c).prop_map(|(p, c)| Edit::Replace(p, c)),
        any::<usize>().prop_map(Edit::DropLine),
        any::<usize>().prop_map(Edit::DupLine),
        any::<usize>().prop_map(Edit::SwapLines),
        (any::<usize>(), 0..TOKENS.len()).prop_map(|(p, t)| Edit::Token(p, t)),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for e in edits {
        let at = |p: usize, n: usize| if n == 0 { 0 } else { p % n };
        match *e {
            Edit::Delete(p) if !chars.is_empty() => {
                chars.remove(at(p, chars.len()));
            }
            Edit::Insert(p, c) => chars.insert(at(p, chars.len() + 1), c),
            Edit::Replace(p, c) if !chars.is_empty() => {
                let i = at(p, chars.len());
                chars[i] = c;
            }
            Edit::Token(p, t) => {
                let i = at(p, chars.len() + 1);
                chars.splice(i..i, TOKENS[t].chars());
            }
            Edit::DropLine(p) | Edit::DupLine(p) | Edit::SwapLines(p) => {
                let s: String = chars.iter().collect();
                let mut lines: Vec<&str> = s.split('\n').collect();
                let i = at(p, lines.len());
                match e {
                    Edit::DropLine(_) => {
                        lines.remove(i);
                    }
                    Edit::DupLine(_) => lines.insert(i, lines[i]),
                    _ if i + 1 < lines.len() => lines.swap(i, i + 1),
                    _ => {}
                }
                chars = lines.join("\n").chars().collect();
            }
            _ => {}
        }
    }
    chars.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,300}") {
        compile_and_build(&text)?;
    }

    #[test]
    fn arbitrary_tokens_never_panic(tokens in prop::collection::vec(0..TOKENS.len(), 0..80)) {
        let text: String = tokens.iter().map(|&t| TOKENS[t]).collect();
        compile_and_build(&text)?;
    }

    #[test]
    fn mutated_examples_never_panic(
        file in any::<prop::sample::Index>(),
        edits in prop::collection::vec(edit(), 1..5),
    ) {
        let files = examples();
        let (_, text) = &files[file.index(files.len())];
        compile_and_build(&apply(text, &edits))?;
    }
}

/// `text` with its `[scheduler]` table holding `capacity` packets and `flows` flows (any sizes
/// it gave dropped).
fn with_sizes(text: &str, capacity: usize, flows: usize) -> String {
    let sizes = format!("capacity = {capacity}\nflows = {flows}\n");
    let mut out = String::new();
    if !text.contains("[scheduler]") {
        out = format!("[scheduler]\n{sizes}");
    }
    for line in text.lines() {
        let key = line.trim_start();
        if key.starts_with("capacity") || key.starts_with("flows") {
            continue;
        }
        out += line;
        out.push('\n');
        if key.starts_with("[scheduler]") {
            out += &sizes;
        }
    }
    out
}

/// Every example, shrunk to tables of one to 64 packets and one to 8 flows (so that packets
/// are refused, and idle flows reclaimed, all the time), as a careless host drives it: times
/// from 0 to the end of time (`u64::MAX` ns) and stepping back by up to 18 minutes, lengths
/// of 0, 1 and `u32::MAX` bytes, any ranking fields and pacing rates, flow-id hints right or
/// wrong, and run-time changes of rates, bursts, weights, reservations and flows' rates to
/// any values. After every call the bookkeeping holds ([`Scheduler::check`]), `next_event`
/// names a time exactly while a packet is held, and a host that wakes before it finds
/// nothing to send; each accepted packet leaves once, and all of them once time runs on.
#[test]
fn every_example_keeps_its_books_for_a_careless_host_at_any_time() {
    for (name, text) in examples() {
        for seed in 0..24u64 {
            let mut rng = Rng::new(0xB00C ^ seed << 8 ^ name.len() as u64);
            let mut pick = |n: u64| rng.next_u64() % n;
            let capacity = [1usize, 2, 3, 8, 64][pick(5) as usize];
            let flows = [1usize, 2, 3, 8][pick(4) as usize];
            let (b, _) = compile_str(&with_sizes(&text, capacity, flows), &name)
                .unwrap_or_else(|e| panic!("{e}"));
            let mut s = b.build().unwrap_or_else(|e| panic!("{name}: {e}"));
            let nodes = s.node_count() as u64;
            let leaves: Vec<NodeId> = (0..nodes as NodeId)
                .filter(|&n| (0..nodes as NodeId).all(|c| s.parent(c) != Some(n)))
                .collect();
            let case = format!("{name}, seed {seed}");
            // From time 0, halfway to the end of time, or a second before it.
            let mut latest = pick(3) * (u64::MAX / 2 - 1_000_000_000);
            let mut accepted = HashSet::new();
            let rate = |pick: &mut dyn FnMut(u64) -> u64| match pick(4) {
                0 => None,
                1 => Rate::new(1),
                2 => Rate::new(sluice_sched::units::MAX_RATE_BPS),
                _ => Rate::new(1 + pick(1 << 36)),
            };
            for token in 0..400u64 {
                let now = match pick(10) {
                    0 => latest.saturating_sub(pick(1 << 40)),
                    _ => latest,
                };
                let step = format!("{case}, step {token} at {now}");
                match pick(12) {
                    0..=4 => {
                        let time = |pick: &mut dyn FnMut(u64) -> u64| match pick(4) {
                            0 => u64::MAX,
                            1 => 0,
                            _ => now.wrapping_add(pick(1 << 30)),
                        };
                        // Its headers; its fields are replaced.
                        let mut p = packet(&mut Rng::new(pick(u64::MAX)), token, 0);
                        p.len = [0, 1, u32::MAX, 65_536, 64 + pick(9000) as u32][pick(5) as usize];
                        p.flow = pick(6);
                        p.fields = Fields {
                            priority: pick(256) as u8,
                            deadline: time(&mut pick),
                            slack: time(&mut pick),
                            remaining: time(&mut pick),
                            pacing_bps: [0, 0, 0, 1, u64::MAX, 1 << 63, pick(1 << 40)]
                                [pick(7) as usize],
                        };
                        p.flow_id = [None, Some(pick(8) as u32), Some(u32::MAX)][pick(3) as usize];
                        if s.enqueue(now, &p).is_ok() {
                            accepted.insert(token);
                        }
                    }
                    5..=7 => {
                        if let Some(d) = s.dequeue(now) {
                            assert!(accepted.remove(&d.token), "{step}: {} again", d.token);
                        }
                    }
                    8 => {
                        let dt = [u64::MAX, pick(1 << 50), pick(10_000_000)][pick(3) as usize];
                        latest = latest.saturating_add(dt);
                    }
                    9 => {
                        let burst = [0, u64::MAX, pick(100_000)][pick(3) as usize];
                        let r = rate(&mut pick);
                        s.set_rate(now, pick(nodes) as NodeId, r, burst);
                    }
                    10 => {
                        let weight = [0, u32::MAX, pick(10) as u32][pick(3) as usize];
                        s.set_weight(pick(nodes) as NodeId, weight);
                    }
                    _ if pick(2) == 0 => {
                        let r = rate(&mut pick);
                        s.set_reservation(now, pick(nodes) as NodeId, r);
                    }
                    _ => {
                        let leaf = leaves[pick(leaves.len() as u64) as usize];
                        let r = rate(&mut pick);
                        s.set_flow_rate(now, leaf, pick(6), r);
                    }
                }
                s.check();
                let _ = s.describe();
                let next = s.next_event(now);
                assert_eq!(next.is_some(), !s.is_empty(), "{step}: told {next:?}");
                // Woken before the time it was told, the host finds nothing to send: a
                // nanosecond before it, or halfway there.
                if let Some(t) = next.filter(|&t| t > now.saturating_add(1) && token % 2 == 0) {
                    let early = if token % 4 == 0 {
                        t - 1
                    } else {
                        now + (t - now) / 2
                    };
                    let d = s.dequeue(early);
                    assert_eq!(d, None, "{step}: told {t}, but a packet left at {early}");
                    latest = latest.max(early);
                    s.check();
                }
            }
            let mut now = latest;
            for _ in 0..100_000 {
                let Some(t) = s.next_event(now) else { break };
                assert!(t >= now, "{case}: told {t} at {now}");
                now = t;
                if let Some(d) = s.dequeue(now) {
                    assert!(accepted.remove(&d.token), "{case}: {} again", d.token);
                }
                s.check();
            }
            assert!(accepted.is_empty(), "{case}: never left: {accepted:?}");
            assert!(s.is_empty(), "{case}: {} held", s.len());
        }
    }
}
