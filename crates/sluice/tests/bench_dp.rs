//! `sluice bench dp` as a user runs it: one flow at 100 Mbit/s for 2 s through each shaper, its
//! JSON lines, and that nothing is left behind, also after Ctrl-C. Needs root, iperf3, ping,
//! tc and a tun device; without them the tests print why and pass. Bounds on measured values
//! are loose sanity bounds: CI machines are slow and shared.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Why the live tests cannot run here, if they cannot.
fn cannot_run() -> Option<String> {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(str::to_string))
        })
        .unwrap_or_default();
    if uid != "0" {
        return Some("not root".into());
    }
    for tool in ["ip", "tc", "ss", "iperf3", "ping", "sysctl"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Some(format!("{tool} is not installed"));
        }
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun".into());
    }
    None
}

fn skip(test: &str) -> bool {
    match cannot_run() {
        Some(why) => {
            eprintln!("note: {test} skipped: {why} (needs root, iperf3, ping, iproute2, tun)");
            true
        }
        None => false,
    }
}

fn bench(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", "dp"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sluice bench dp")
}

fn namespace_exists(name: &str) -> bool {
    Path::new("/var/run/netns").join(name).exists()
}

/// The namespaces a bench process with this pid creates.
fn namespaces_of(pid: u32) -> [String; 2] {
    [format!("slb{pid}a"), format!("slb{pid}b")]
}

const KEYS: [&str; 10] = [
    "bench",
    "shaper",
    "flows",
    "target_mbit",
    "achieved_mbit",
    "conformance_err_pct",
    "jain",
    "retrans",
    "rtt_p99_us",
    "cpu_s_per_gbit",
];

#[test]
fn one_flow_through_each_shaper_gives_the_exact_json_lines() {
    if skip("one_flow_through_each_shaper_gives_the_exact_json_lines") {
        return;
    }
    let child = bench(&[
        "--json",
        "--flows",
        "1",
        "--targets",
        "100mbit",
        "--duration",
        "2s",
        "--warmup",
        "1s",
    ]);
    let pid = child.id();
    let out: Output = child.wait_with_output().expect("wait for the bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "one line per shaper:\n{stdout}\n{stderr}");
    for (line, shaper) in lines.iter().zip(["sluice", "htb", "tbf"]) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v.as_object().unwrap().len(), KEYS.len(), "{line}");
        // Exactly the keys, in its order: the line rebuilt from its values, key by key.
        let rebuilt = KEYS
            .iter()
            .map(|k| format!("\"{k}\":{}", v[k]))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(*line, format!("{{{rebuilt}}}"));
        assert_eq!(v["bench"], "dp");
        assert_eq!(v["shaper"], shaper, "{line}");
        assert_eq!(v["flows"], 1);
        assert_eq!(v["target_mbit"], 100, "{line}");
        let achieved = v["achieved_mbit"].as_f64().unwrap();
        // A shaper that does not shape would show gigabits; a working one at most the target
        // (plus its burst over 2 s) and, even on a slow machine, a good part of it.
        assert!((10.0..=110.0).contains(&achieved), "{line}");
        let err = v["conformance_err_pct"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&err), "{line}");
        assert_eq!(v["jain"].as_f64(), Some(1.0), "one flow is fair: {line}");
        assert!(v["retrans"].is_u64(), "{line}");
        let p99 = v["rtt_p99_us"].as_u64().expect("ping replies");
        assert!((1..=5_000_000).contains(&p99), "{line}");
        let cpu = v["cpu_s_per_gbit"].as_f64().unwrap();
        assert!(cpu.is_finite() && (0.0..=100.0).contains(&cpu), "{line}");
    }
    for ns in namespaces_of(pid) {
        assert!(!namespace_exists(&ns), "namespace {ns} left behind");
    }
}

#[test]
fn ctrl_c_stops_everything_and_removes_the_namespaces() {
    if skip("ctrl_c_stops_everything_and_removes_the_namespaces") {
        return;
    }
    let mut child = bench(&[
        "--json",
        "--flows",
        "10",
        "--targets",
        "100mbit",
        "--shapers",
        "sluice",
        "--duration",
        "60s",
    ]);
    let pid = child.id();
    let [ns_a, ns_b] = namespaces_of(pid);
    // Wait until traffic runs: iperf3 clients in the sending namespace.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut traffic = Vec::new();
    while traffic.is_empty() {
        assert!(Instant::now() < deadline, "no traffic after 30 s");
        assert!(child.try_wait().unwrap().is_none(), "the bench ended early");
        std::thread::sleep(Duration::from_millis(200));
        if namespace_exists(&ns_a) {
            let out = Command::new("ip")
                .args(["netns", "pids", &ns_a])
                .output()
                .unwrap();
            traffic = String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(str::to_string)
                .collect();
        }
    }
    std::thread::sleep(Duration::from_secs(1));
    let sent = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(30), "slow to stop");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an interrupted bench fails");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(out.stdout.is_empty(), "no result for an interrupted run");
    assert!(
        !namespace_exists(&ns_a) && !namespace_exists(&ns_b),
        "{stderr}"
    );
    for p in traffic {
        assert!(
            !Path::new(&format!("/proc/{p}")).exists()
                || std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .is_ok_and(|s| s.split_whitespace().nth(2) == Some("Z")),
            "process {p} of the run still lives"
        );
    }
}

#[test]
fn bad_options_fail_before_anything_is_created() {
    for args in [
        &["--shapers", "cake"][..],
        &["--targets", "100MB"],
        &["--duration", "1.5s"],
        &["--flows", "0"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["bench", "dp"])
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(args[0]), "{args:?}: {stderr}");
    }
}

#[test]
fn without_root_it_says_so() {
    // `setpriv` (util-linux) drops to an unprivileged user; without it there is nothing to do.
    let Ok(out) = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", "dp", "--quick"])
        .output()
    else {
        eprintln!("note: without_root_it_says_so skipped: no setpriv");
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("setpriv:") {
        eprintln!("note: without_root_it_says_so skipped: {stderr}");
        return;
    }
    assert!(!out.status.success());
    assert!(stderr.contains("must run as root"), "{stderr}");
}
