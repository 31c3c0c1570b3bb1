//! `sluice top [--socket PATH] [--interval 1s] [--once] [--flows N]`: a live view of a running
//! daemon, from its control socket (see `sluice_dp::control_socket`).
//!
//! Every interval it asks for a [`Snapshot`] and prints a frame: a header (uptime, buffers,
//! non-zero drops and malformed frames by reason), then per link a row per class (limit,
//! measured rate, percent of the limit, queued, shaped), the link's held / scheduled / paused /
//! backpressure counts and its busiest flows by rate. Rates are differences of cumulative byte
//! counters over the difference of the daemon's own uptime stamps, so a slow or late poll never
//! skews them; a frame without a previous sample (the first one), or after the daemon restarted
//! (its uptime went backwards, or moved on by less than the time that passed between the two
//! polls, which one run's cannot: see [`same_run`]), shows `-`. `--once` takes two samples one
//! interval apart and prints one frame, so its rates are real. A daemon that cannot be reached at the start is an error;
//! once a frame is shown, a failed poll (the daemon busy, restarting or gone) is said under the
//! last frame and polling goes on.
//!
//! On a terminal each frame replaces the last (ANSI clear-screen; the cursor is never hidden,
//! so Ctrl-C leaves the terminal as it was); otherwise frames are printed one after another,
//! separated by a blank line. [`render`] is a pure function of two snapshots; the loop around it
//! does the I/O. Cost per frame: linear in classes and flows.

use anyhow::{Context, bail};
use clap::Args;
use sluice_dp::control::{Reply, Request};
use sluice_dp::control_socket;
use sluice_dp::stats::{LinkSnapshot, Snapshot};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// The socket asked when `--socket` is not given: the `control` path of docs/daemon.md's
/// example. `sluice run` opens no control socket unless its file sets `control`.
pub const DEFAULT_SOCKET: &str = "/run/sluice/sluice.sock";
/// How long one poll waits for the daemon (its own wait on the datapath is 5 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Shortest interval accepted.
const MIN_INTERVAL: Duration = Duration::from_millis(10);
/// ANSI: cursor home, clear screen.
const CLEAR: &str = "\x1b[H\x1b[2J";

/// `sluice top` options.
#[derive(Args)]
pub struct TopArgs {
    /// The daemon's control socket.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Time between frames (`1s`, `500ms`, ...).
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Print one frame and exit (two samples one interval apart, so rates are measured).
    #[arg(long)]
    pub once: bool,
    /// Busiest flows shown per link.
    #[arg(long, default_value_t = 5)]
    pub flows: usize,
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    let ns = sluice_sched::units::parse_duration(text).map_err(|e| e.to_string())?;
    let d = Duration::from_nanos(ns);
    if d < MIN_INTERVAL {
        return Err(format!(
            "`{text}` is too short; the interval is at least {MIN_INTERVAL:?}"
        ));
    }
    Ok(d)
}

/// How a frame is laid out.
#[derive(Clone, Copy, Debug)]
pub struct View {
    /// Busiest flows shown per link.
    pub flows: usize,
    /// Lines are cut to this many terminal columns (None: never).
    pub width: Option<usize>,
}

/// Poll the daemon and print frames until interrupted (or once, with `--once`).
pub fn run(args: TopArgs) -> anyhow::Result<()> {
    let tty = std::io::stdout().is_terminal();
    let view = View {
        flows: args.flows,
        width: if tty { terminal_width() } else { None },
    };
    let mut out = std::io::stdout();
    if args.once {
        let first = fetch(&args.socket)?;
        let answered = Instant::now();
        std::thread::sleep(args.interval);
        let asked = Instant::now();
        let second = fetch(&args.socket)?;
        let first = Some(&first)
            .filter(|f| same_run(f, &second, asked.saturating_duration_since(answered)));
        return emit(&mut out, &render(first, &second, &view));
    }
    // The last sample, and when the poll that returned it ended.
    let mut prev: Option<(Snapshot, Instant)> = None;
    let mut last_frame = String::new();
    loop {
        let asked = Instant::now();
        let cur = match fetch(&args.socket) {
            Ok(s) => s,
            // Once it has shown a frame, top outlasts a daemon that is busy ("try again"),
            // restarting or gone for a while: it says so under the last frame and polls on.
            Err(e) if prev.is_some() => {
                let note = format!(
                    "{e:#}; trying again every {}\n",
                    humantime_interval(args.interval)
                );
                let text = if tty {
                    format!("{CLEAR}{last_frame}\n{note}")
                } else {
                    format!("\n{note}")
                };
                emit(&mut out, &text)?;
                std::thread::sleep(args.interval);
                continue;
            }
            Err(e) => return Err(e),
        };
        let answered = Instant::now();
        let before = prev
            .as_ref()
            .filter(|(p, at)| same_run(p, &cur, asked.saturating_duration_since(*at)))
            .map(|(p, _)| p);
        let frame = render(before, &cur, &view);
        let text = match (tty, prev.is_some()) {
            (true, _) => format!("{CLEAR}{frame}"),
            (false, true) => format!("\n{frame}"),
            (false, false) => frame.clone(),
        };
        emit(&mut out, &text)?;
        last_frame = frame;
        prev = Some((cur, answered));
        std::thread::sleep(args.interval);
    }
}

/// Whether `cur` can come from the same daemon run as `prev`, when `gap` passed on this
/// process's clock between the end of the poll that returned `prev` and the start of the one
/// that returned `cur`. One run's uptime moves on by at least that much (the daemon's clock is
/// CLOCK_MONOTONIC, as [`Instant`] is): a smaller step means the daemon restarted in between,
/// even when its new run is already older than the old one was, and the counters of the two
/// runs must not be subtracted.
fn same_run(prev: &Snapshot, cur: &Snapshot, gap: Duration) -> bool {
    let gap_ns = u64::try_from(gap.as_nanos()).unwrap_or(u64::MAX);
    cur.uptime_ns
        .checked_sub(prev.uptime_ns)
        .is_some_and(|step| step > 0 && step >= gap_ns)
}

/// An interval as the command line spells it: `1s`, `250ms`.
fn humantime_interval(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Write a frame; a closed pipe (`sluice top | head`) ends the program quietly.
fn emit(out: &mut impl Write, text: &str) -> anyhow::Result<()> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(e).context("cannot write to stdout"),
    }
}

/// The terminal's width: `COLUMNS` when the shell exports it (a user's override), else what
/// the terminal on stdout says (shells rarely export `COLUMNS`).
fn terminal_width() -> Option<usize> {
    width_of(std::env::var("COLUMNS").ok().as_deref(), std::io::stdout())
}

/// [`terminal_width`], from `columns` (`COLUMNS`) or the terminal `tty`.
fn width_of(columns: Option<&str>, tty: impl std::os::fd::AsFd) -> Option<usize> {
    let exported = columns
        .and_then(|c| c.trim().parse().ok())
        .filter(|&w| w > 0);
    exported.or_else(|| {
        terminal_size::terminal_size_of(tty)
            .map(|(terminal_size::Width(w), _)| usize::from(w))
            .filter(|&w| w > 0)
    })
}

/// One snapshot from the daemon at `socket`.
pub(crate) fn fetch(socket: &Path) -> anyhow::Result<Snapshot> {
    // The error names the socket ("no daemon at PATH: ..."); nothing to add.
    match control_socket::request(socket, &Request::Stats {}, REQUEST_TIMEOUT) {
        Ok(Reply::Stats(s)) => Ok(*s),
        Ok(Reply::Error(e)) => bail!("the daemon at {} refused: {e}", socket.display()),
        Ok(Reply::Ok) => bail!(
            "the daemon at {} answered without statistics",
            socket.display()
        ),
        Err(e) => match not_a_socket(socket) {
            Some(what) => bail!(
                "{} is {what}, not a socket: --socket takes the daemon's control socket, the \
                 `control` path of its configuration file",
                socket.display()
            ),
            None => bail!("{e}"),
        },
    }
}

/// What `path` is, if it is there and is not a socket (connecting to it is refused as if a
/// daemon had left a socket there).
fn not_a_socket(path: &Path) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let kind = std::fs::metadata(path).ok()?.file_type();
    if kind.is_socket() {
        None
    } else if kind.is_dir() {
        Some("a directory")
    } else if kind.is_file() {
        Some("a regular file")
    } else {
        Some("a device or a named pipe")
    }
}

/// A rate in bit/s, human-readable: `950 bit/s`, `198.4 Mbit/s`.
pub fn human_rate(bps: f64) -> String {
    human(bps, "bit/s")
}

/// A size in bytes, human-readable (SI, like policy files' `MB`): `1.2 GB`.
pub fn human_bytes(bytes: u64) -> String {
    human(bytes as f64, "B")
}

fn human(v: f64, unit: &str) -> String {
    const PREFIXES: [&str; 5] = ["", "k", "M", "G", "T"];
    if v.round() < 1000.0 {
        return format!("{v:.0} {unit}");
    }
    // Round first, then pick the prefix, so 999.96e6 shows as 1.0 G, not 1000.0 M.
    let mut scaled = v / 1000.0;
    let mut i = 1;
    while i + 1 < PREFIXES.len() && (scaled * 10.0).round() >= 10_000.0 {
        scaled /= 1000.0;
        i += 1;
    }
    format!("{scaled:.1} {}{unit}", PREFIXES[i])
}

/// `d HH:MM:SS` from nanoseconds.
fn uptime(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    let (d, h, m, s) = (s / 86_400, s / 3_600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d {h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// Bits per second between two cumulative byte counts `dt_ns` apart (None: unknown).
fn rate(prev: Option<u64>, cur: u64, dt_ns: Option<u64>) -> Option<f64> {
    let (prev, dt) = (prev?, dt_ns?);
    let bytes = cur.checked_sub(prev)?;
    Some(bytes as f64 * 8.0 * 1e9 / dt as f64)
}

/// Non-zero counters by reason, sorted by name: `a 1, b 2`, or `none`.
fn reasons(counts: &HashMap<String, u64>) -> String {
    let mut v: Vec<(&String, &u64)> = counts.iter().filter(|(_, n)| **n > 0).collect();
    if v.is_empty() {
        return "none".into();
    }
    v.sort();
    v.iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Right-aligned table: the first column left-aligned, the rest right-aligned. Cells are
/// measured in terminal columns, not characters: a node name may hold letters two columns
/// wide (CJK) or none (combining vowel signs).
fn table(out: &mut String, indent: &str, rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.width())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::from(indent);
        for (c, cell) in row.iter().enumerate() {
            let pad = " ".repeat(widths[c].saturating_sub(cell.width()));
            if c == 0 {
                line.push_str(cell);
                line.push_str(&pad);
            } else {
                line.push_str("  ");
                line.push_str(&pad);
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// `line` cut to at most `width` terminal columns.
fn cut(line: &str, width: usize) -> &str {
    let mut used = 0;
    for (i, ch) in line.char_indices() {
        used += ch.width().unwrap_or(0);
        if used > width {
            return &line[..i];
        }
    }
    line
}

/// One frame: `cur`, with rates measured since `prev` when given.
pub fn render(prev: Option<&Snapshot>, cur: &Snapshot, view: &View) -> String {
    // Rates only between two samples of the same daemon run, some time apart.
    let prev = prev.filter(|p| p.uptime_ns < cur.uptime_ns);
    let dt_ns = prev.map(|p| cur.uptime_ns - p.uptime_ns);
    let mut out = String::new();

    let _ = write!(
        out,
        "sluice top   up {}   buffers {}/{}",
        uptime(cur.uptime_ns),
        cur.buffers_used,
        cur.buffers_total
    );
    if cur.buffers_total > 0 {
        let _ = write!(
            out,
            " ({:.1}%)",
            cur.buffers_used as f64 * 100.0 / cur.buffers_total as f64
        );
    }
    match dt_ns {
        Some(dt) => {
            let _ = writeln!(out, "   rates over {:.2} s", dt as f64 / 1e9);
        }
        None => out.push_str("   rates: need a second sample\n"),
    }
    let _ = writeln!(out, "drops: {}", reasons(&cur.drops));
    let _ = writeln!(out, "malformed: {}", reasons(&cur.malformed));

    for link in &cur.links {
        let before = prev.and_then(|p| {
            p.links
                .iter()
                .find(|l| l.from == link.from && l.to == link.to)
        });
        render_link(&mut out, before, link, dt_ns, view.flows);
    }

    match view.width {
        Some(w) => out.lines().map(|l| cut(l, w).to_string() + "\n").collect(),
        None => out,
    }
}

fn render_link(
    out: &mut String,
    prev: Option<&LinkSnapshot>,
    link: &LinkSnapshot,
    dt_ns: Option<u64>,
    flows: usize,
) {
    out.push('\n');
    let _ = write!(out, "link {} -> {}", link.from, link.to);
    match &link.policy {
        Some(p) => {
            let _ = writeln!(out, "   policy {p}");
        }
        None => out.push_str("   fifo\n"),
    }

    let mut rows = vec![
        ["class", "limit", "rate", "%limit", "queued", "shaped"]
            .map(String::from)
            .to_vec(),
    ];
    for c in &link.classes {
        let before = prev
            .and_then(|l| l.classes.iter().find(|p| p.name == c.name))
            .map(|p| p.sent_bytes);
        let measured = rate(before, c.sent_bytes, dt_ns);
        let percent = match (measured, c.rate_bps) {
            (Some(m), Some(limit)) if limit > 0 => format!("{:.1}%", m * 100.0 / limit as f64),
            _ => "-".into(),
        };
        rows.push(vec![
            c.name.clone(),
            c.rate_bps.map_or("-".into(), |r| human_rate(r as f64)),
            measured.map_or("-".into(), human_rate),
            percent,
            c.queued.to_string(),
            c.shaped.to_string(),
        ]);
    }
    table(out, "  ", &rows);
    let _ = writeln!(
        out,
        "  held {}   scheduled {}   paused sources {}   backpressure {}",
        link.held, link.scheduled, link.paused, link.backpressure
    );

    if flows == 0 || link.top_flows.is_empty() {
        return;
    }
    // Flows by measured rate; flows new since the last sample (no rate) after them, by bytes.
    let mut ranked: Vec<(Option<f64>, &sluice_dp::stats::FlowSnapshot)> = link
        .top_flows
        .iter()
        .map(|f| {
            let before = prev
                .and_then(|l| l.top_flows.iter().find(|p| p.key == f.key))
                .map(|p| p.bytes);
            (rate(before, f.bytes, dt_ns), f)
        })
        .collect();
    ranked.sort_by(|(ra, a), (rb, b)| match (ra, rb) {
        (Some(x), Some(y)) => y.total_cmp(x).then(a.key.cmp(&b.key)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => b.bytes.cmp(&a.bytes).then(a.key.cmp(&b.key)),
    });
    let mut rows = vec![
        ["top flows", "rate", "total", "flow"]
            .map(String::from)
            .to_vec(),
    ];
    for (r, f) in ranked.into_iter().take(flows) {
        let label = if f.label.is_empty() {
            format!("{:#018x}", f.key)
        } else {
            f.label.clone()
        };
        rows.push(vec![
            String::new(),
            r.map_or("-".into(), human_rate),
            human_bytes(f.bytes),
            label,
        ]);
    }
    // The flow label is free text: left-align it after the numbers.
    let labels: Vec<String> = rows
        .iter_mut()
        .map(|r| r.pop().unwrap_or_default())
        .collect();
    let mut numbers = String::new();
    table(&mut numbers, "  ", &rows);
    for (line, label) in numbers.lines().zip(labels) {
        let _ = writeln!(out, "{line}  {label}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_dp::stats::{ClassSnapshot, FlowSnapshot};

    /// The width comes from `COLUMNS` when it is a positive number, else from the terminal
    /// (a pseudo-terminal 77 columns wide here), else there is none (not a terminal).
    #[test]
    fn the_width_is_columns_or_the_terminals() {
        let size = nix::pty::Winsize {
            ws_row: 24,
            ws_col: 77,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = nix::pty::openpty(Some(&size), None).unwrap();
        assert_eq!(width_of(None, &pty.slave), Some(77));
        assert_eq!(width_of(Some("120"), &pty.slave), Some(120));
        for ignored in ["0", "", "wide"] {
            assert_eq!(width_of(Some(ignored), &pty.slave), Some(77), "{ignored:?}");
        }
        let file = std::fs::File::open("/dev/null").unwrap();
        assert_eq!(width_of(None, &file), None);
    }

    fn class(
        name: &str,
        rate_bps: Option<u64>,
        sent_bytes: u64,
        queued: u64,
        shaped: u64,
    ) -> ClassSnapshot {
        ClassSnapshot {
            name: name.into(),
            rate_bps,
            sent: sent_bytes / 1500,
            sent_bytes,
            queued,
            shaped,
        }
    }

    fn flow(key: u64, label: &str, bytes: u64) -> FlowSnapshot {
        FlowSnapshot {
            key,
            label: label.into(),
            bytes,
            packets: bytes / 1500,
        }
    }

    /// Two samples one second apart (by the daemon's clock): gold sends 198.4 Mbit/s against
    /// a 200 Mbit/s limit, bronze 39.7 Mbit/s unlimited.
    fn samples() -> (Snapshot, Snapshot) {
        let link = |t: u64, gold: u64, bronze: u64, flows: Vec<FlowSnapshot>| LinkSnapshot {
            from: "a".into(),
            to: "b".into(),
            policy: Some("three.toml".into()),
            classes: vec![
                class("root", None, gold + bronze, 3, 0),
                class("gold", Some(200_000_000), gold, 2, 340 * t),
                class("bronze", None, bronze, 1, 0),
            ],
            held: 6,
            scheduled: 4,
            paused: 1,
            backpressure: 9,
            top_flows: flows,
        };
        let prev = Snapshot {
            uptime_ns: 3_661_000_000_000,
            buffers_used: 120,
            buffers_total: 4096,
            links: vec![link(
                1,
                1_000_000,
                500_000,
                vec![
                    flow(1, "10.0.0.1:5001 > 10.0.0.2:80 tcp", 600_000),
                    flow(2, "10.0.0.3:7 > 10.0.0.2:80 udp", 900_000),
                ],
            )],
            drops: [("no_class".into(), 12), ("at_bound".into(), 0)]
                .into_iter()
                .collect(),
            ..Snapshot::default()
        };
        let cur = Snapshot {
            uptime_ns: 3_662_000_000_000,
            buffers_used: 128,
            buffers_total: 4096,
            links: vec![link(
                2,
                1_000_000 + 24_800_000,
                500_000 + 4_962_500,
                vec![
                    flow(1, "10.0.0.1:5001 > 10.0.0.2:80 tcp", 600_000 + 12_262_500),
                    flow(2, "10.0.0.3:7 > 10.0.0.2:80 udp", 900_000 + 1_000),
                    flow(3, "", 2_000_000),
                ],
            )],
            drops: [
                ("no_class".into(), 15),
                ("at_bound".into(), 2),
                ("tx_error".into(), 0),
            ]
            .into_iter()
            .collect(),
            malformed: [("truncated_tcp".into(), 1)].into_iter().collect(),
            ..Snapshot::default()
        };
        (prev, cur)
    }

    #[test]
    fn a_frame_with_measured_rates() {
        let (prev, cur) = samples();
        let got = render(
            Some(&prev),
            &cur,
            &View {
                flows: 5,
                width: None,
            },
        );
        let expected = "\
sluice top   up 01:01:02   buffers 128/4096 (3.1%)   rates over 1.00 s
drops: at_bound 2, no_class 15
malformed: truncated_tcp 1

link a -> b   policy three.toml
  class          limit          rate  %limit  queued  shaped
  root               -  238.1 Mbit/s       -       3       0
  gold    200.0 Mbit/s  198.4 Mbit/s   99.2%       2     680
  bronze             -   39.7 Mbit/s       -       1       0
  held 6   scheduled 4   paused sources 1   backpressure 9
  top flows         rate     total  flow
             98.1 Mbit/s   12.9 MB  10.0.0.1:5001 > 10.0.0.2:80 tcp
              8.0 kbit/s  901.0 kB  10.0.0.3:7 > 10.0.0.2:80 udp
                       -    2.0 MB  0x0000000000000003
";
        for (i, (g, e)) in got.lines().zip(expected.lines()).enumerate() {
            assert_eq!(g, e, "line {}", i + 1);
        }
        assert_eq!(got, expected);
    }

    #[test]
    fn the_first_frame_and_a_restart_show_no_rates() {
        let (prev, cur) = samples();
        for frame in [
            render(
                None,
                &cur,
                &View {
                    flows: 5,
                    width: None,
                },
            ),
            // The daemon restarted: its uptime went backwards.
            render(
                Some(&cur),
                &prev,
                &View {
                    flows: 5,
                    width: None,
                },
            ),
        ] {
            assert!(
                frame
                    .lines()
                    .next()
                    .unwrap()
                    .ends_with("rates: need a second sample"),
                "{frame}"
            );
            let gold = frame
                .lines()
                .find(|l| l.trim_start().starts_with("gold"))
                .unwrap();
            assert_eq!(
                gold.split_whitespace().collect::<Vec<_>>(),
                [
                    "gold",
                    "200.0",
                    "Mbit/s",
                    "-",
                    "-",
                    "2",
                    gold.split_whitespace().last().unwrap()
                ]
            );
            assert!(!frame.contains("kbit/s"), "no flow rates: {frame}");
        }
        // Flows without rates are ranked by bytes.
        let first = render(
            None,
            &cur,
            &View {
                flows: 1,
                width: None,
            },
        );
        assert!(first.contains("12.9 MB  10.0.0.1:5001"), "{first}");
        assert!(!first.contains("udp"), "--flows 1 shows one: {first}");
    }

    #[test]
    fn a_run_is_the_same_only_if_its_uptime_kept_up_with_the_polls() {
        let at = |uptime_ns| Snapshot {
            uptime_ns,
            ..Snapshot::default()
        };
        let ms = Duration::from_millis;
        assert!(same_run(&at(1_000_000_000), &at(2_000_000_000), ms(900)));
        assert!(same_run(&at(1_000_000_000), &at(2_000_000_000), ms(1000)));
        // Restarted: up 1 s, then 10 ms more although a second passed between the polls.
        assert!(!same_run(&at(1_000_000_000), &at(1_010_000_000), ms(1000)));
        // Restarted: the uptime went backwards, or did not move.
        assert!(!same_run(&at(5), &at(4), Duration::ZERO));
        assert!(!same_run(&at(5), &at(5), Duration::ZERO));
    }

    #[test]
    fn lines_are_cut_to_the_width_and_zero_flows_hides_them() {
        let (prev, cur) = samples();
        let frame = render(
            Some(&prev),
            &cur,
            &View {
                flows: 0,
                width: Some(20),
            },
        );
        assert!(frame.lines().all(|l| l.chars().count() <= 20), "{frame}");
        assert!(!frame.contains("top flows"));
        assert!(frame.ends_with('\n'));
    }

    /// Policy node names may be any letters (`sluice policy check` takes `金牌`), and a CJK
    /// letter takes two columns of a terminal. Columns were padded by characters, so every
    /// column after such a name moved right, and a line cut to the width by characters ran
    /// past it.
    #[test]
    fn wide_letters_in_names_keep_the_columns_aligned_and_within_the_width() {
        use unicode_width::UnicodeWidthStr;
        let (mut prev, mut cur) = samples();
        for s in [&mut prev, &mut cur] {
            s.links[0].classes[1].name = "金牌".into();
            s.links[0].classes[2].name = "हिंदी".into();
        }
        let frame = render(
            Some(&prev),
            &cur,
            &View {
                flows: 5,
                width: None,
            },
        );
        let rows: Vec<&str> = frame
            .lines()
            .skip_while(|l| !l.starts_with("  class"))
            .take(4)
            .collect();
        assert!(rows[1].trim_start().starts_with("root"), "{frame}");
        // Every column is right-aligned after the name: all rows end in the same column.
        let widths: Vec<usize> = rows.iter().map(|r| r.width()).collect();
        assert!(
            widths.iter().all(|&w| w == widths[0]),
            "{widths:?}\n{frame}"
        );
        assert!(rows[2].trim_start().starts_with("金牌"), "{frame}");

        for width in [12, 13, 40] {
            let cut = render(
                Some(&prev),
                &cur,
                &View {
                    flows: 5,
                    width: Some(width),
                },
            );
            assert!(
                cut.lines().all(|l| l.width() <= width),
                "width {width}:\n{cut}"
            );
            // Cut where the next letter would not fit, not earlier.
            let gold = cut.lines().find(|l| l.contains("金牌")).unwrap();
            assert!(gold.width() >= width - 1, "width {width}: {gold:?}");
        }
    }

    #[test]
    fn no_drops_and_no_links() {
        let frame = render(
            None,
            &Snapshot::default(),
            &View {
                flows: 5,
                width: None,
            },
        );
        assert_eq!(
            frame,
            "sluice top   up 00:00:00   buffers 0/0   rates: need a second sample\ndrops: none\nmalformed: none\n"
        );
    }

    #[test]
    fn human_units() {
        assert_eq!(human_rate(0.0), "0 bit/s");
        assert_eq!(human_rate(950.0), "950 bit/s");
        assert_eq!(human_rate(999.6), "1.0 kbit/s");
        assert_eq!(human_rate(198_400_000.0), "198.4 Mbit/s");
        assert_eq!(human_rate(999_960_000.0), "1.0 Gbit/s");
        assert_eq!(human_rate(40e9), "40.0 Gbit/s");
        assert_eq!(human_rate(4e15), "4000.0 Tbit/s");
        assert_eq!(human_bytes(1_234_567_890), "1.2 GB");
        assert_eq!(uptime(90_061_000_000_000), "1d 01:01:01");
    }

    #[test]
    fn intervals_parse_and_tiny_ones_are_refused() {
        assert_eq!(parse_interval("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_interval("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_interval("1us").is_err());
        assert!(parse_interval("soon").is_err());
    }
}
