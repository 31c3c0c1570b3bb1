//! `sluice bench flow` as a user runs it: a tiny run, its JSON lines, CSV files and plot.

mod common;

use common::{assert_rejected, number_text, scratch_dir, sluice_ok};
use std::collections::HashMap;

const QUEUES: [u64; 3] = [1, 16, 64];
const FLOWS: [u64; 2] = [1000, 2000];

#[test]
fn bench_flow_json_lines_have_the_exact_shape_and_every_case() {
    let dir = scratch_dir("flow");
    let stdout = sluice_ok(&[
        "bench",
        "flow",
        "--json",
        "--quick",
        "--queues",
        "1,16,64",
        "--flows",
        "1e3,2e3",
        "--packets",
        "2000",
        "--repeats",
        "2",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2 * QUEUES.len() + FLOWS.len(), "{stdout}");
    let mut seen: HashMap<(String, u64), usize> = HashMap::new();
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let case = v["case"].as_str().unwrap();
        let (size, expected, key) = if case == "admission" {
            let flows = v["flows"].as_u64().unwrap();
            let ns = v["ns_per_packet"].as_f64().unwrap();
            assert!(ns > 0.0, "{line}");
            let text = format!(
                r#"{{"bench":"flow","case":"admission","flows":{flows},"ns_per_packet":{}}}"#,
                serde_json::to_string(&ns).unwrap()
            );
            (flows, text, "ns_per_packet")
        } else {
            assert!(["doorbell", "poll_all"].contains(&case), "{line}");
            let queues = v["queues"].as_u64().unwrap();
            let mpps = v["mpps"].as_f64().unwrap();
            assert!(mpps > 0.0, "{line}");
            let text = format!(
                r#"{{"bench":"flow","case":"{case}","queues":{queues},"mpps":{}}}"#,
                serde_json::to_string(&mpps).unwrap()
            );
            (queues, text, "mpps")
        };
        // The exact shape: these keys in this order, nothing else, one decimal.
        assert_eq!(*line, expected);
        let decimals = number_text(line, key)
            .split_once('.')
            .map_or(0, |(_, d)| d.len());
        assert!(decimals <= 1, "one decimal: {line}");
        *seen.entry((case.to_string(), size)).or_insert(0) += 1;
    }
    for case in ["doorbell", "poll_all"] {
        for q in QUEUES {
            assert_eq!(seen.get(&(case.into(), q)), Some(&1), "{case} {q}");
        }
    }
    for f in FLOWS {
        assert_eq!(
            seen.get(&("admission".into(), f)),
            Some(&1),
            "admission {f}"
        );
    }

    let csv = std::fs::read_to_string(dir.join("bench-flow.csv")).unwrap();
    let mut rows = csv.lines();
    assert_eq!(
        rows.next(),
        Some("case,queues,flows,mpps,ns_per_packet,relative_to_reference,doorbell_over_poll_all")
    );
    assert_eq!(rows.count(), lines.len());
    // The reference of each throughput is its own 16-queue cell.
    assert!(
        csv.lines()
            .any(|r| r.starts_with("doorbell,16,,") && r.contains(",1.000,"))
    );
    let mem = std::fs::read_to_string(dir.join("bench-flow-memory.csv")).unwrap();
    assert!(mem.starts_with("state,flows,bytes_per_idle_flow,bytes_per_active_flow\n"));
    assert!(
        mem.contains("flow record (admission; DPFQ queue; in flight) + paused-queue room,65536,"),
        "{mem}"
    );
    let svg = std::fs::read_to_string(dir.join("bench-flow.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("poll_all") && svg.contains("admission"));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bench_flow_tables_show_ratios_and_memory() {
    let dir = scratch_dir("flow-t");
    let stdout = sluice_ok(&[
        "bench",
        "flow",
        "--quick",
        "--queues",
        "16,32",
        "--flows",
        "500",
        "--packets",
        "1000",
        "--repeats",
        "1",
        "--out",
        dir.to_str().unwrap(),
    ]);
    for needle in [
        "doorbell/poll_all",
        "doorbell vs 16q",
        "poll_all vs 16q",
        "ns/packet",
        "vs 500",
        "per-flow memory",
        "flow record (admission, DPFQ queue, in flight) + paused-queue room",
        "total: pipeline per source",
    ] {
        assert!(stdout.contains(needle), "missing `{needle}`:\n{stdout}");
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bench_flow_rejects_bad_options() {
    assert_rejected(&[
        (
            &["bench", "flow", "--case", "bess"][..],
            "unknown case `bess`",
        ),
        (
            &["bench", "flow", "--queues", "0"][..],
            "between 1 and 1e10",
        ),
        (&["bench", "flow", "--repeats", "0"][..], "at least 1"),
        (&["bench", "flow", "--flows", "1e9"][..], "supported"),
    ]);
}
