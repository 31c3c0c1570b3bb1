//! The `sluice` command as a user runs it.

use std::process::Command;

fn sluice(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice")
}

#[test]
fn bench_queues_json_lines_have_the_exact_shape_and_every_structure() {
    let dir = std::env::temp_dir().join(format!("sluice-cli-{}", std::process::id()));
    let out = sluice(&[
        "bench",
        "queues",
        "--json",
        "--n",
        "1000",
        "--ops",
        "2000",
        "--repeats",
        "1",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    let names = [
        "timing_wheel",
        "ffs",
        "hffs",
        "cffs",
        "gradient",
        "approx_gradient",
        "binary_heap",
        "btree",
        "bucket_heap",
        "skiplist",
    ];
    assert_eq!(
        lines.len(),
        3 * names.len(),
        "one line per workload and structure"
    );
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 5, "{line}");
        let at: Vec<usize> = [
            "\"bench\":",
            "\"workload\":",
            "\"structure\":",
            "\"n\":",
            "\"ns_per_op\":",
        ]
        .iter()
        .map(|k| {
            line.find(k)
                .unwrap_or_else(|| panic!("{k} missing: {line}"))
        })
        .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "key order: {line}");
        assert_eq!(v["bench"], "queues");
        assert!(["hold", "pacing", "drain"].contains(&v["workload"].as_str().unwrap()));
        assert!(names.contains(&v["structure"].as_str().unwrap()));
        assert_eq!(v["n"], 1000);
        assert!(v["ns_per_op"].as_f64().unwrap() > 0.0);
    }
    let csv = std::fs::read_to_string(dir.join("bench-queues.csv")).unwrap();
    assert!(csv.starts_with("workload,structure,n,ns_per_op,speedup_vs_binary_heap\n"));
    assert_eq!(csv.lines().count(), 1 + lines.len());
    let svg = std::fs::read_to_string(dir.join("bench-queues.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("hold workload"));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bench_queues_table_names_every_structure() {
    let dir = std::env::temp_dir().join(format!("sluice-cli-t-{}", std::process::id()));
    let out = sluice(&[
        "bench",
        "queues",
        "--n",
        "1000",
        "--ops",
        "2000",
        "--repeats",
        "1",
        "--workload",
        "hold",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("times faster than binary_heap"));
    assert!(
        stdout.contains("cffs") && stdout.contains("timing_wheel") && stdout.contains("(1.0x)")
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_options_are_clear_errors_with_a_nonzero_exit() {
    for (args, needle) in [
        (
            &["bench", "queues", "--structure", "nope"][..],
            "unknown structure `nope`",
        ),
        (
            &["bench", "queues", "--workload", "sprint"][..],
            "unknown workload `sprint`",
        ),
        (
            &["bench", "queues", "--buckets", "1000"][..],
            "power of two",
        ),
        (&["bench", "queues", "--n", "0"][..], "between 1 and 1e10"),
        (&["bench", "queues", "--repeats", "0"][..], "at least 1"),
    ] {
        let out = sluice(args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
