//! The `sluice` command as a user runs it.

mod common;

use common::{assert_rejected, scratch_dir, sluice, sluice_ok};

#[test]
fn bench_queues_json_lines_have_the_exact_shape_and_every_structure() {
    let dir = scratch_dir("cli");
    let stdout = sluice_ok(&[
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
    let dir = scratch_dir("cli-t");
    let stdout = sluice_ok(&[
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
    assert!(stdout.contains("times faster than binary_heap"));
    assert!(stdout.contains("machine now: a random load"), "{stdout}");
    assert!(
        stdout.contains("cffs") && stdout.contains("timing_wheel") && stdout.contains("(1.0x)")
    );
    std::fs::remove_dir_all(dir).ok();
}

/// Without binary_heap there are no speedups: the header said "in parentheses: times faster
/// than binary_heap" over a table without parentheses.
#[test]
fn bench_queues_without_the_heap_promises_no_speedups() {
    let dir = scratch_dir("cli-no-heap");
    let stdout = sluice_ok(&[
        "bench",
        "queues",
        "--n",
        "100",
        "--ops",
        "200",
        "--repeats",
        "1",
        "--workload",
        "hold",
        "--structure",
        "ffs,cffs",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        !stdout.contains("times faster") && !stdout.contains("x)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("(no speedups: --structure leaves binary_heap out)"),
        "{stdout}"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// At N above `--ops` a drain timing is one fill and empty of N items, and there are fewer
/// rounds (about `--repeats * --ops` items in all): the header must say so for those cells
/// instead of the `--ops` and `--repeats` the other cells use.
#[test]
fn bench_queues_says_how_drain_cells_above_ops_were_timed() {
    let dir = scratch_dir("cli-drain");
    let stdout = sluice_ok(&[
        "bench",
        "queues",
        "--n",
        "100,1000",
        "--ops",
        "500",
        "--repeats",
        "3",
        "--workload",
        "hold,drain",
        "--structure",
        "cffs,binary_heap",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        stdout.contains("500 operations per timing, median of 3"),
        "{stdout}"
    );
    // n=100: 5 fills and empties of 100 per timing, 3 rounds, as the header says; n=1000:
    // 1000 operations per timing and (3 * 500 / 1000) = 1 round.
    assert!(
        stdout.contains("drain n=1e3: one fill and empty of 1000 items per timing, median of 1"),
        "{stdout}"
    );
    assert!(!stdout.contains("drain n=100:"), "{stdout}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_options_are_clear_errors_with_a_nonzero_exit() {
    assert_rejected(&[
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
        (
            &["bench", "queues", "--n", "0"][..],
            "whole number, at least 1",
        ),
        (
            &["bench", "queues", "--n", "1e3,1e3"][..],
            "--n names `1000` twice",
        ),
        (
            &["bench", "queues", "--n", "1e3,1e8"][..],
            "--n 100000000 is more than the 33554432 supported",
        ),
        (&["bench", "queues", "--repeats", "0"][..], "at least 1"),
    ]);
}

#[test]
fn a_closed_stdout_ends_the_output_quietly() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    let dir = scratch_dir("pipe");
    let policy = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/policies/fifo.toml"
    );
    let runs: [&[&str]; 2] = [
        &["policy", "check", policy],
        &[
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
            dir.to_str().unwrap(),
        ],
    ];
    for args in runs {
        // A pipe whose reader is gone before sluice writes, as after `| head -1`.
        let (reader, writer) = nix::unistd::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .stdout(Stdio::from(writer))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.signal(), Some(libc_sigpipe()), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(dir).ok();
}

/// SIGPIPE's number, which is 13 on every Linux architecture.
fn libc_sigpipe() -> i32 {
    nix::sys::signal::Signal::SIGPIPE as i32
}

/// A report's output file that cannot be written (here a directory where the plot goes) fails
/// the run before anything is measured, as an unusable `--out` does: it failed after every
/// measurement (10-12 minutes for a full run), with the CSV of the new run beside no plot.
#[test]
fn an_output_file_that_cannot_be_written_fails_before_anything_is_measured() {
    let bench = |dir: &std::path::Path, args: &[&str]| {
        let mut all = vec!["bench"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--json", "--repeats", "1", "--out", dir.to_str().unwrap()]);
        sluice(&all)
    };
    for (name, args, files) in [
        (
            "queues",
            &["queues", "--n", "100", "--ops", "100", "--structure", "ffs"][..],
            &["bench-queues.csv", "bench-queues.svg"][..],
        ),
        (
            "sched",
            &[
                "sched",
                "--flows",
                "10",
                "--packets",
                "100",
                "--case",
                "pfabric",
            ][..],
            &["bench-sched.csv", "bench-sched.svg"][..],
        ),
        (
            "flow",
            &[
                "flow",
                "--case",
                "admission",
                "--flows",
                "10",
                "--packets",
                "100",
            ][..],
            &["bench-flow.csv", "bench-flow.svg"][..],
        ),
    ] {
        for blocked in files {
            let dir = scratch_dir(&format!("out-file-{name}"));
            std::fs::create_dir_all(dir.join(blocked)).unwrap();
            let run = bench(&dir, args);
            let err = String::from_utf8_lossy(&run.stderr);
            assert!(!run.status.success(), "{name} {blocked}: {err}");
            // Nothing measured, nothing printed or written; the error names the file.
            assert!(
                run.stdout.is_empty(),
                "{name} {blocked}: {}",
                String::from_utf8_lossy(&run.stdout)
            );
            assert!(
                err.contains(&format!("--out {}", dir.join(blocked).display())),
                "{name} {blocked}: {err}"
            );
            let left: Vec<_> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(left, [*blocked], "{name}");
            std::fs::remove_dir_all(dir).ok();
        }
    }
    // A memory run writes neither of those two files, so they do not stand in its way.
    let dir = scratch_dir("out-file-memory");
    std::fs::create_dir_all(dir.join("bench-flow.svg")).unwrap();
    let run = bench(&dir, &["flow", "--case", "memory", "--quick"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    std::fs::remove_dir_all(dir).ok();
}
