//! `sluice top` against a scripted control socket: no daemon, no root, no traffic. Each
//! connection to the fake socket reads one request line and gets the next scripted reply
//! (raw bytes, so malformed and partial replies can be sent), then is closed.

mod common;

use common::{scratch_dir, sluice};
use sluice_dp::stats::{ClassSnapshot, LinkSnapshot, Snapshot};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

/// A fake daemon at a fresh socket path that answers one connection per reply, in order.
fn fake_daemon(tag: &str, replies: Vec<Vec<u8>>) -> (PathBuf, JoinHandle<()>) {
    let dir = scratch_dir(tag);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ctl.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        for reply in replies {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut reader = BufReader::new(&stream);
            let mut request = String::new();
            let _ = reader.read_line(&mut request);
            let _ = (&stream).write_all(&reply);
        }
    });
    (path, server)
}

/// A stats reply line for a daemon up `uptime_ns` whose class `gold` sent `gold_bytes`.
fn stats(uptime_ns: u64, gold_bytes: u64) -> Vec<u8> {
    let snapshot = Snapshot {
        uptime_ns,
        links: vec![LinkSnapshot {
            from: "a".into(),
            to: "b".into(),
            classes: vec![ClassSnapshot {
                name: "gold".into(),
                rate_bps: Some(200_000_000),
                sent_bytes: gold_bytes,
                ..ClassSnapshot::default()
            }],
            ..LinkSnapshot::default()
        }],
        ..Snapshot::default()
    };
    let mut line = serde_json::to_vec(&serde_json::json!({"ok": true, "stats": snapshot})).unwrap();
    line.push(b'\n');
    line
}

/// Remove the fake daemon's directory.
fn remove(socket: &Path) {
    if let Some(dir) = socket.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn top_once(socket: &Path) -> std::process::Output {
    sluice(&[
        "top",
        "--once",
        "--interval",
        "200ms",
        "--socket",
        socket.to_str().unwrap(),
    ])
}

/// `sluice top --once` against a fake daemon that gives `replies`, one per poll.
fn top_against(tag: &str, replies: Vec<Vec<u8>>) -> std::process::Output {
    let (socket, server) = fake_daemon(tag, replies);
    let out = top_once(&socket);
    server.join().unwrap();
    remove(&socket);
    out
}

/// The frame a successful `top --once` printed, and its row for class `gold`, its words
/// joined by single spaces.
fn frame_and_gold(out: &std::process::Output) -> (String, Option<String>) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let gold = text
        .lines()
        .find(|l| l.trim_start().starts_with("gold"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "));
    (text, gold)
}

#[test]
fn once_measures_a_rate_between_two_samples_of_one_run() {
    // 250 MB in 10 s of the daemon's clock: 200 Mbit/s, 100% of the limit. (Ten seconds, far
    // more than the 200 ms top sleeps, so that however late it polls again, the run could have
    // been up that long.)
    let out = top_against(
        "top-once",
        vec![
            stats(10_000_000_000, 1_000_000),
            stats(20_000_000_000, 251_000_000),
        ],
    );
    let (text, gold) = frame_and_gold(&out);
    assert_eq!(
        gold.as_deref(),
        Some("gold 200.0 Mbit/s 200.0 Mbit/s 100.0% 0 0"),
        "{text}"
    );
}

/// The daemon restarted between the two samples and its new run is already older than the old
/// one was: its uptime moved on by less than the time between the polls (10 ms against at
/// least the 200 ms top slept), which one run cannot do. The counters of two runs must not be
/// subtracted: it used to show 1.6 Gbit/s, 800% of the limit.
#[test]
fn a_restart_whose_uptime_passed_the_old_one_shows_no_rates() {
    let out = top_against(
        "top-restart",
        vec![
            stats(1_000_000_000, 1_000_000),
            stats(1_010_000_000, 3_000_000),
        ],
    );
    let (text, gold) = frame_and_gold(&out);
    assert!(
        text.lines()
            .next()
            .is_some_and(|l| l.ends_with("rates: need a second sample")),
        "{text}"
    );
    assert_eq!(gold.as_deref(), Some("gold 200.0 Mbit/s - - 0 0"), "{text}");
}

#[test]
fn a_missing_socket_is_a_clear_error() {
    let dir = scratch_dir("top-missing");
    let out = top_once(&dir.join("nothing-here.sock"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("no daemon at") && err.contains("nothing-here.sock"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_stale_socket_file_is_a_clear_error() {
    // A socket file nobody listens on any more (a daemon killed outright): refused.
    let (socket, server) = fake_daemon("top-stale", Vec::new());
    server.join().unwrap();
    let out = top_once(&socket);
    remove(&socket);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("no daemon at"), "{err}");
}

/// A path that is there but is no socket (the daemon's configuration file given for its
/// control socket, or a directory) is named as such: it read "no daemon at PATH: Connection
/// refused", as if a daemon had died there.
#[test]
fn a_path_that_is_not_a_socket_is_named_as_such() {
    let dir = scratch_dir("top-not-socket");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("daemon.toml");
    std::fs::write(&file, "[daemon]\n").unwrap();
    for (path, what) in [(&file, "a regular file"), (&dir, "a directory")] {
        let out = top_once(path);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains(&format!("{} is {what}, not a socket", path.display())),
            "{err}"
        );
        assert!(err.contains("`control`"), "{err}");
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn malformed_partial_and_refusing_replies_are_clear_errors() {
    for (reply, said) in [
        (&b"{\"ok\":tru\n"[..], "bad reply from"),
        (
            &b"{\"ok\":true,\"stats\":{\"uptime_ns\":5"[..],
            "closed before a complete reply",
        ),
        (&b"not json at all\n"[..], "bad reply from"),
        (
            &b"{\"ok\":true,\"stats\":{\"uptime_ns\":\"soon\"}}\n"[..],
            "bad reply from",
        ),
        (&b"{\"ok\":false,\"error\":\"busy\"}\n"[..], "refused: busy"),
        (&b"{\"ok\":true}\n"[..], "answered without statistics"),
        (&b""[..], "closed before a complete reply"),
    ] {
        let out = top_against("top-bad", vec![reply.to_vec()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{reply:?}");
        assert!(
            err.starts_with("sluice: error: ") && err.contains(said),
            "{reply:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(
            out.stdout.is_empty(),
            "no frame: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
