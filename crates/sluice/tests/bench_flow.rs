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
    let (memory, lines): (Vec<&str>, Vec<&str>) = stdout
        .lines()
        .partition(|l| l.starts_with(r#"{"bench":"flow","case":"memory","#));
    assert_eq!(lines.len(), 2 * QUEUES.len() + FLOWS.len(), "{stdout}");
    // One line per row of the memory table, with its keys in order.
    assert!(memory.len() >= 2, "{stdout}");
    for line in &memory {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let state = v["state"].as_str().unwrap();
        assert_eq!(v["flows"].as_u64(), Some(65536), "{line}");
        let idle = &v["bytes_per_idle_flow"];
        assert!(
            idle.is_null() || idle.as_f64().is_some_and(|b| b >= 0.0),
            "{line}"
        );
        let expected = format!(
            r#"{{"bench":"flow","case":"memory","state":{},"flows":65536,"bytes_per_idle_flow":{},"bytes_per_active_flow":{}}}"#,
            serde_json::to_string(state).unwrap(),
            idle,
            v["bytes_per_active_flow"]
        );
        assert_eq!(*line, expected);
    }
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
        // The exact shape: these keys in this order, nothing else; ns with one decimal,
        // Mpps with three significant digits.
        assert_eq!(*line, expected);
        let number = number_text(line, key);
        if key == "mpps" {
            let digits = number.trim_start_matches(['0', '.']).replace('.', "");
            assert!(digits.len() <= 3, "three significant digits: {line}");
        } else {
            let decimals = number.split_once('.').map_or(0, |(_, d)| d.len());
            assert!(decimals <= 1, "one decimal: {line}");
        }
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
fn a_memory_run_alone_prints_its_json_and_leaves_other_results_in_place() {
    let dir = scratch_dir("flow-mem");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("bench-flow.csv"), "an earlier run").unwrap();
    let stdout = sluice_ok(&[
        "bench",
        "flow",
        "--json",
        "--quick",
        "--case",
        "memory",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(!stdout.is_empty());
    assert!(
        stdout
            .lines()
            .all(|l| l.starts_with(r#"{"bench":"flow","case":"memory","#)),
        "{stdout}"
    );
    let kept = std::fs::read_to_string(dir.join("bench-flow.csv")).unwrap();
    assert_eq!(kept, "an earlier run");
    assert!(!dir.join("bench-flow.svg").exists());
    assert!(dir.join("bench-flow-memory.csv").exists());
    std::fs::remove_dir_all(dir).ok();
}

/// A cell is the median of its rounds' ns per packet; its Mpps is the reciprocal. For an even
/// count that is the upper of the middle two times, so the lower of the middle two Mpps: the
/// help must not call it "the upper" of a table that shows Mpps.
#[test]
fn bench_flow_help_says_which_median_an_even_count_reports() {
    let help = sluice_ok(&["bench", "flow", "--help"]);
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        help.contains("the slower of the middle two for an even count"),
        "{help}"
    );
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
            "whole number, at least 1",
        ),
        (
            &["bench", "flow", "--queues", "16,16"][..],
            "--queues names `16` twice",
        ),
        (
            &["bench", "flow", "--repeats", "1e9"][..],
            "more than the 1000",
        ),
        (&["bench", "flow", "--repeats", "0"][..], "at least 1"),
        (&["bench", "flow", "--flows", "1e9"][..], "supported"),
        // A list for a case the run leaves out did nothing: `--case memory --flows 1e6` still
        // measured the memory at 2^20 flows, without a word.
        (
            &["bench", "flow", "--case", "memory", "--flows", "1e6"][..],
            "--flows sets the admission case's flow counts, and --case leaves admission out",
        ),
        (
            &["bench", "flow", "--case", "admission", "--queues", "16"][..],
            "--queues sets the doorbell and poll_all cases' queue counts, and --case leaves both out",
        ),
    ]);
}
