//! `sluice bench sched` as a user runs it: a tiny run, its JSON lines, CSV and plot.

mod common;

use common::{assert_rejected, number_text, scratch_dir, sluice, sluice_ok};
use std::collections::HashMap;

const CASES: [&str; 4] = ["hclock", "pfabric", "fq_pacing", "eiffel_fig47"];
const IMPLS: [&str; 2] = ["sluice", "baseline"];

#[test]
fn bench_sched_json_lines_have_the_exact_shape_and_every_case_and_impl() {
    let dir = scratch_dir("sched");
    let stdout = sluice_ok(&[
        "bench",
        "sched",
        "--json",
        "--flows",
        "100,200",
        "--packets",
        "2000",
        "--repeats",
        "2",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), CASES.len() * IMPLS.len() * 2, "{stdout}");
    let mut seen = HashMap::new();
    for line in &lines {
        // The exact shape: these five keys in this order, nothing else.
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let (case, imp) = (v["case"].as_str().unwrap(), v["impl"].as_str().unwrap());
        let (flows, ns) = (
            v["flows"].as_u64().unwrap(),
            v["ns_per_packet"].as_f64().unwrap(),
        );
        let expected = format!(
            r#"{{"bench":"sched","case":"{case}","impl":"{imp}","flows":{flows},"ns_per_packet":{}}}"#,
            serde_json::to_string(&ns).unwrap()
        );
        assert_eq!(*line, expected);
        assert!(CASES.contains(&case) && IMPLS.contains(&imp), "{line}");
        assert!([100, 200].contains(&flows), "{line}");
        let decimals = number_text(line, "ns_per_packet")
            .split_once('.')
            .map_or(0, |(_, d)| d.len());
        assert!(ns > 0.0 && decimals <= 1, "one decimal: {line}");
        *seen.entry((case.to_string(), imp.to_string())).or_insert(0) += 1;
    }
    for case in CASES {
        for imp in IMPLS {
            assert_eq!(
                seen.get(&(case.into(), imp.into())),
                Some(&2),
                "{case} {imp}"
            );
        }
    }

    // The CSV counts the packets each implementation sent: the same for both, and at least
    // the warm-up (2 per flow) plus every timed round; and gives the checksum of what each
    // sent, 16 hex digits.
    let csv = std::fs::read_to_string(dir.join("bench-sched.csv")).unwrap();
    let mut rows = csv.lines();
    assert_eq!(
        rows.next(),
        Some("case,impl,flows,ns_per_packet,speedup_vs_baseline,packets,checksum")
    );
    let mut packets: HashMap<(String, String), Vec<u64>> = HashMap::new();
    let mut sums: HashMap<(String, String), Vec<String>> = HashMap::new();
    for row in rows {
        let f: Vec<&str> = row.split(',').collect();
        assert_eq!(f.len(), 7, "{row}");
        assert!(
            f[6].len() == 16 && u64::from_str_radix(f[6], 16).is_ok(),
            "{row}"
        );
        sums.entry((f[0].into(), f[2].into()))
            .or_default()
            .push(f[6].into());
        let flows: u64 = f[2].parse().unwrap();
        let sent: u64 = f[5].parse().unwrap();
        assert!(sent >= 2 * flows + 2 * 2000, "{row}");
        packets
            .entry((f[0].into(), f[2].into()))
            .or_default()
            .push(sent);
        if f[1] == "baseline" {
            assert_eq!(f[4], "1.000", "{row}");
        }
    }
    assert_eq!(packets.len(), CASES.len() * 2);
    for (cell, sent) in &packets {
        assert_eq!(sent.len(), 2, "{cell:?}");
        assert_eq!(
            sent[0], sent[1],
            "both implementations sent the same: {cell:?}"
        );
    }
    // Over runs this short, hclock and pfabric send the same packets in the same order on
    // the heaps as on Sluice's queues.
    for ((case, flows), sum) in &sums {
        if case == "hclock" || case == "pfabric" {
            assert_eq!(sum[0], sum[1], "{case} at {flows} flows");
        }
    }
    let svg = std::fs::read_to_string(dir.join("bench-sched.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("fq_pacing"));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bench_sched_tables_have_a_speedup_column_per_case() {
    let dir = scratch_dir("sched-t");
    let stdout = sluice_ok(&[
        "bench",
        "sched",
        "--flows",
        "100",
        "--packets",
        "1000",
        "--repeats",
        "1",
        "--case",
        "pfabric,fq_pacing",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(stdout.contains("pfabric flows") && stdout.contains("fq_pacing flows"));
    assert!(stdout.contains("baseline (Linux fq port)") && stdout.contains("speedup"));
    // Whether the two sides sent alike: said for pfabric (alike, over a run this short), not
    // for the fq port, another scheduler.
    assert_eq!(stdout.matches("in the same order").count(), 1, "{stdout}");
    assert!(
        stdout.contains(
            "the same packets in the same order on both sides (equal checksums) at every flow count"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("hclock"));
    // The machine's speed just before, to compare runs by.
    assert!(
        stdout.contains("machine now: a random load") && stdout.contains("an integer step"),
        "{stdout}"
    );
    // The targets are judged at 1e6 flows (and from 1e3): a run without them judges nothing.
    assert!(!stdout.contains("targets"));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn an_unusable_out_dir_fails_before_anything_is_measured() {
    let dir = scratch_dir("sched-out");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = file.join("results");
    let run = sluice(&[
        "bench",
        "sched",
        "--json",
        "--flows",
        "100",
        "--case",
        "hclock",
        "--packets",
        "1000",
        "--repeats",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!run.status.success());
    // Nothing measured, nothing printed; the error names the flag and the directory.
    assert!(
        run.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains(&format!("--out {}", out.display())), "{err}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bench_sched_rejects_bad_options() {
    assert_rejected(&[
        (
            &["bench", "sched", "--case", "wfq"][..],
            "unknown case `wfq`",
        ),
        (
            &["bench", "sched", "--flows", "0"][..],
            "whole number, at least 1",
        ),
        (
            &["bench", "sched", "--flows", "-5"][..],
            "`-5` must be a whole number, at least 1",
        ),
        (
            &["bench", "sched", "--flows", "100,100"][..],
            "--flows names `100` twice",
        ),
        (
            &["bench", "sched", "--case", "hclock,hclock"][..],
            "--case names `hclock` twice",
        ),
        (
            &["bench", "sched", "--repeats", "18446744073709551615"][..],
            "is more than 1e10",
        ),
        (
            &["bench", "sched", "--repeats", "2000"][..],
            "more than the 1000 repeats supported",
        ),
        (&["bench", "sched", "--repeats", "-1"][..], "at least 1"),
        (&["bench", "sched", "--repeats", "0"][..], "at least 1"),
        (&["bench", "sched", "--flows", "1e9"][..], "supported"),
    ]);
}
