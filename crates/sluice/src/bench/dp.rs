//! `sluice bench dp`: live TCP traffic between two namespaces shaped to an aggregate target by
//! the Sluice daemon, by kernel HTB and by kernel TBF, side by side (issue 5, item 6).
//!
//! For each target rate the bench starts the daemon on a fresh namespace pair and adds a veth
//! pair between the same namespaces (see [`topo`]); then for each flow count, each shaper in
//! turn carries the same traffic: N cubic TCP flows from iperf3 ([`traffic`]), a warm-up, then
//! a measurement window during which the bench samples the receiving interface every 100 ms
//! ([`measure`]), pings through the same shaper, and reads CPU time. The figures
//! ([`figures`]):
//!
//! | figure | how |
//! |---|---|
//! | achieved Mbit/s | wire bytes (every segment's Ethernet frame) at the receiver over the window |
//! | conformance error | mean \|rate - target\| / target of the 100 ms samples (each weighted by its length), percent |
//! | Jain's index | over the flows' received bytes (iperf3, after its omitted warm-up) |
//! | retransmissions | iperf3 senders' total |
//! | RTT p50 / p99 | `ping -i 0.01` round trips during the window |
//! | CPU s/Gbit | Sluice: the daemon's utime + stime; HTB, TBF: all CPUs' softirq time (`/proc/stat`) |
//!
//! The last is the issue's definition and compares different things: the daemon's time
//! includes the tap reads and writes (the kernel work of its system calls, and, since this
//! kernel has no `CONFIG_IRQ_TIME_ACCOUNTING`, the receiving namespace's TCP processing that a
//! tap write runs in the daemon's context), softirq time is the machine's packet processing
//! outside process context (the kernel shapers' own work mostly runs in the senders' system
//! calls, so it is not counted). The table therefore also shows softirq time for every shaper
//! and, as the like-for-like figure, "all cpu": every CPU's busy time during the window per
//! Gbit, for every shaper the same (senders, receivers and shaper together).
//!
//! Everything the bench starts runs in its own process group; Ctrl-C (or SIGTERM) stops the
//! traffic, then the daemon, which removes its namespaces and with them the veth; the bench
//! removes any namespace left over. Logs and iperf3 output go to a temporary directory, removed
//! at the end unless the bench failed.

mod figures;
mod measure;
pub(crate) mod procs;
mod topo;
mod traffic;

use super::common::parse_count;
use crate::report::Table;
use anyhow::{Context, anyhow, bail};
use clap::Args;
use figures::{Sample, round_to};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use topo::{Names, Shaper, SluiceSetup, Topology};

/// Options of `sluice bench dp`.
#[derive(Args, Debug)]
pub struct DpArgs {
    /// Flow counts, comma separated. Default: 1,10,100,1000 (1,100 with --quick).
    #[arg(long, value_delimiter = ',', value_parser = parse_flows, allow_negative_numbers = true)]
    flows: Vec<usize>,
    /// Aggregate target rates, comma separated. Default: 100mbit,1gbit,5gbit (100mbit,1gbit
    /// with --quick).
    #[arg(long, value_delimiter = ',', value_parser = parse_rate)]
    targets: Vec<u64>,
    /// Shapers, comma separated: sluice, htb, tbf. Default: all three.
    #[arg(long, value_delimiter = ',', value_parser = parse_shaper)]
    shapers: Vec<Shaper>,
    /// Measurement window of each run, whole seconds. Default: 10s (4s with --quick).
    #[arg(long, value_parser = parse_seconds)]
    duration: Option<u64>,
    /// Warm-up before each window, whole seconds (at most 60s: iperf3 omits at most 60).
    #[arg(long, value_parser = parse_warmup, default_value = "2s")]
    warmup: u64,
    /// A few minutes: 1 and 100 flows at 100 Mbit/s and 1 Gbit/s, 4 s windows.
    #[arg(long)]
    quick: bool,
    /// One JSON object per run on stdout instead of tables.
    #[arg(long)]
    json: bool,
    /// The `sluice` binary to run as the daemon. Default: this executable.
    #[arg(long)]
    sluice: Option<PathBuf>,
    /// Sluice's policy over the flows: fq, drr or wfq. Default: fq.
    #[arg(long, value_parser = ["fq", "drr", "wfq"])]
    leaf: Option<String>,
    /// Sluice's burst at the root (a size). Default: TBF's, 256 KiB per Gbit/s of the target
    /// (2.1 ms of traffic; at least 96 KiB).
    #[arg(long, value_parser = parse_burst)]
    burst: Option<u64>,
    /// Extra `[daemon]` settings, KEY=VALUE, repeatable (e.g. --daemon ecn=off
    /// --daemon mode=busy --daemon memory=1GiB).
    #[arg(long = "daemon", value_parser = parse_key_value)]
    daemon: Vec<(String, String)>,
    /// Also write every run's 100 ms rate samples to DIR/dp-samples.csv (shaper, flows,
    /// target_mbit, t_s, mbit).
    #[arg(long, value_name = "DIR")]
    samples: Option<PathBuf>,
}

/// Sampling interval of the achieved rate.
const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// Most flows (iperf3 pairs use ports 5201 upwards).
const MAX_FLOWS: usize = 4096;

/// Longest warm-up, seconds: iperf3's `-O` takes at most 60.
const MAX_WARMUP_S: u64 = 60;

/// How long all flows may take to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// iperf3 keeps sending this long past the window, so the last sample is still under load.
const TAIL: Duration = Duration::from_secs(1);

/// How long past the window each of `clients` iperf3 clients is told to send, from its own
/// start. With one, [`TAIL`]. With several, the window starts when the last client's
/// connections are up, which may be up to [`CONNECT_TIMEOUT`] after the first's (each client
/// connects its streams one by one, an RTT each under the others' load): each sends that much
/// longer, so that all of them are still sending when the window ends.
fn client_tail(clients: usize) -> Duration {
    if clients > 1 {
        TAIL + CONNECT_TIMEOUT
    } else {
        TAIL
    }
}

/// TCP counters of the sender (A) and receiver (B) shown after each run when they move:
/// retransmissions by cause, reordering, ECN.
const TCP_COUNTERS: [(&str, &str); 11] = [
    ("A", "Tcp.RetransSegs"),
    ("A", "TcpExt.TCPFastRetrans"),
    ("A", "TcpExt.TCPTimeouts"),
    ("A", "TcpExt.TCPLossProbes"),
    ("A", "TcpExt.TCPSpuriousRTOs"),
    ("A", "TcpExt.TCPSACKReorder"),
    ("A", "TcpExt.TCPTSReorder"),
    ("A", "TcpExt.TCPDSACKRecv"),
    ("B", "TcpExt.TCPOFOQueue"),
    ("B", "TcpExt.TCPDSACKOldSent"),
    ("B", "IpExt.InCEPkts"),
];

/// Pause between runs (sockets close, queues drain).
const SETTLE: Duration = Duration::from_millis(500);

/// The programs the bench runs.
const TOOLS: [(&str, &str); 6] = [
    ("ip", "iproute2"),
    ("tc", "iproute2"),
    ("ss", "iproute2"),
    ("iperf3", "iperf3"),
    ("ping", "iputils-ping"),
    ("sysctl", "procps"),
];

fn parse_flows(s: &str) -> Result<usize, String> {
    let n = parse_count(s)?;
    if n > MAX_FLOWS {
        return Err(format!("at most {MAX_FLOWS} flows"));
    }
    Ok(n)
}

fn parse_rate(s: &str) -> Result<u64, String> {
    let r = sluice_sched::units::Rate::parse(s).map_err(|e| e.to_string())?;
    if !(1_000_000..=100_000_000_000).contains(&r.bps()) {
        return Err(format!("`{s}`: a target between 1mbit and 100gbit"));
    }
    Ok(r.bps())
}

fn parse_shaper(s: &str) -> Result<Shaper, String> {
    Shaper::ALL
        .into_iter()
        .find(|sh| sh.name() == s.trim())
        .ok_or_else(|| format!("`{s}`: expected sluice, htb or tbf"))
}

fn parse_seconds(s: &str) -> Result<u64, String> {
    let ns = sluice_sched::units::parse_duration(s).map_err(|e| e.to_string())?;
    if ns % 1_000_000_000 != 0 || ns == 0 || ns > 3_600_000_000_000 {
        return Err(format!(
            "`{s}`: whole seconds from 1s to 3600s (iperf3 counts whole seconds)"
        ));
    }
    Ok(ns / 1_000_000_000)
}

/// The warm-up: iperf3 omits it from its totals (`-O`), and refuses more than 60 s; the
/// clients would then fail at once, and each run only after waiting for connections.
fn parse_warmup(s: &str) -> Result<u64, String> {
    let secs = parse_seconds(s)?;
    if secs > MAX_WARMUP_S {
        return Err(format!(
            "`{s}`: at most {MAX_WARMUP_S}s (iperf3 omits at most 60 s)"
        ));
    }
    Ok(secs)
}

/// A burst as the daemon takes one (at most 4 GiB - 1 B), and at least 1 byte.
fn parse_burst(s: &str) -> Result<u64, String> {
    let b = sluice_dp::daemon::engine::parse_burst(s)?;
    if b == 0 {
        return Err("a burst of at least 1 byte".into());
    }
    Ok(b)
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected KEY=VALUE"))?;
    let k = k.trim();
    if k.is_empty() || !k.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
        return Err(format!("`{k}`: a [daemon] key like ecn or mode"));
    }
    if k == "control" {
        return Err("`control` is set by the bench".into());
    }
    Ok((k.to_string(), v.trim().to_string()))
}

/// The runs to make, after defaults.
#[derive(Debug, PartialEq)]
struct Plan {
    flows: Vec<usize>,
    targets: Vec<u64>,
    shapers: Vec<Shaper>,
    window: Duration,
    warmup: Duration,
}

fn plan(args: &DpArgs) -> anyhow::Result<Plan> {
    let pick = |given: &[usize], full: &[usize], quick: &[usize]| -> Vec<usize> {
        if !given.is_empty() {
            given.to_vec()
        } else if args.quick {
            quick.to_vec()
        } else {
            full.to_vec()
        }
    };
    let flows = pick(&args.flows, &[1, 10, 100, 1000], &[1, 100]);
    let targets = if !args.targets.is_empty() {
        args.targets.clone()
    } else if args.quick {
        vec![100_000_000, 1_000_000_000]
    } else {
        vec![100_000_000, 1_000_000_000, 5_000_000_000]
    };
    let mut shapers = if args.shapers.is_empty() {
        Shaper::ALL.to_vec()
    } else {
        args.shapers.clone()
    };
    // Sluice's own options would do nothing without a Sluice run: refused, not ignored.
    if !shapers.contains(&Shaper::Sluice) {
        let given: Vec<&str> = [
            ("--leaf", args.leaf.is_some()),
            ("--burst", args.burst.is_some()),
            ("--daemon", !args.daemon.is_empty()),
            ("--sluice", args.sluice.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, set)| set.then_some(flag))
        .collect();
        if !given.is_empty() {
            bail!(
                "{} set(s) Sluice's daemon, but --shapers does not include sluice",
                given.join(", ")
            );
        }
    }
    // Each run once, whatever the command line repeats.
    shapers.sort();
    shapers.dedup();
    let (mut flows, mut targets) = (flows, targets);
    flows.sort_unstable();
    flows.dedup();
    targets.sort_unstable();
    targets.dedup();
    let window = args.duration.unwrap_or(if args.quick { 4 } else { 10 });
    Ok(Plan {
        flows,
        targets,
        shapers,
        window: Duration::from_secs(window),
        warmup: Duration::from_secs(args.warmup),
    })
}

/// One run's figures.
#[derive(Clone, Debug)]
struct Outcome {
    shaper: Shaper,
    flows: usize,
    target_bps: u64,
    achieved_bps: f64,
    /// What the shaper itself counted as sent, bit/s.
    self_bps: f64,
    conformance_err_pct: f64,
    jain: f64,
    retrans: u64,
    drops: u64,
    marks: Option<u64>,
    rtt_p50_us: Option<f64>,
    rtt_p99_us: Option<f64>,
    /// The daemon's CPU (Sluice only), s/Gbit.
    daemon_s_per_gbit: Option<f64>,
    /// Softirq time of all CPUs, s/Gbit.
    softirq_s_per_gbit: f64,
    /// All busy time of all CPUs (user, system, irq, softirq), s/Gbit: the whole cost of the
    /// run, senders and receivers included, counted the same way for every shaper.
    busy_s_per_gbit: f64,
    /// TCP counters that moved during the run (diagnostics, printed on stderr).
    tcp: String,
    /// The 100 ms rates, bit/s, and when each interval ended (s into the window).
    rates: Vec<(f64, f64)>,
}

impl Outcome {
    /// The issue's CPU figure: the daemon's for Sluice, softirq for the kernel shapers.
    fn cpu_s_per_gbit(&self) -> f64 {
        self.daemon_s_per_gbit.unwrap_or(self.softirq_s_per_gbit)
    }
}

/// The JSON line, exactly these keys in this order.
#[derive(Serialize)]
struct JsonLine {
    bench: &'static str,
    shaper: &'static str,
    flows: usize,
    target_mbit: serde_json::Number,
    achieved_mbit: f64,
    conformance_err_pct: f64,
    jain: f64,
    retrans: u64,
    rtt_p99_us: Option<u64>,
    cpu_s_per_gbit: f64,
}

fn mbit_number(bps: u64) -> serde_json::Number {
    if bps % 1_000_000 == 0 {
        serde_json::Number::from(bps / 1_000_000)
    } else {
        serde_json::Number::from_f64(bps as f64 / 1e6).unwrap_or_else(|| 0.into())
    }
}

fn json_line(o: &Outcome) -> JsonLine {
    JsonLine {
        bench: "dp",
        shaper: o.shaper.name(),
        flows: o.flows,
        target_mbit: mbit_number(o.target_bps),
        achieved_mbit: round_to(o.achieved_bps / 1e6, 1),
        conformance_err_pct: round_to(o.conformance_err_pct, 2),
        jain: round_to(o.jain, 4),
        retrans: o.retrans,
        rtt_p99_us: o.rtt_p99_us.map(|us| us.round() as u64),
        cpu_s_per_gbit: round_to(o.cpu_s_per_gbit(), 3),
    }
}

/// Refuse to start without root or a needed program, before creating anything.
fn preflight(binary: &Path) -> anyhow::Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "sluice bench dp must run as root (it creates namespaces, taps and qdiscs); \
             try `sudo sluice bench dp`"
        );
    }
    let missing: Vec<String> = TOOLS
        .iter()
        .filter(|(tool, _)| !procs::on_path(tool))
        .map(|(tool, package)| format!("{tool} (package {package})"))
        .collect();
    if !missing.is_empty() {
        bail!(
            "missing programs: {}; install them (scripts/setup.sh does)",
            missing.join(", ")
        );
    }
    if !Path::new("/dev/net/tun").exists() {
        bail!("/dev/net/tun does not exist: the daemon's tap ports need the tun module");
    }
    if !binary.is_file() {
        bail!("--sluice {}: no such file", binary.display());
    }
    Ok(())
}

/// Run `sluice bench dp`.
pub fn run(args: &DpArgs) -> anyhow::Result<()> {
    let plan = plan(args)?;
    let binary = match &args.sluice {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("cannot find this executable")?,
    };
    preflight(&binary)?;
    if let Some(out) = &args.samples {
        crate::report::prepare_out(out, "--samples")?;
    }
    procs::install_handlers()?;
    let pid = std::process::id();
    let dir = std::env::temp_dir().join(format!("sluice-bench-dp-{pid}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let setup = SluiceSetup {
        binary,
        leaf: args.leaf.clone().unwrap_or_else(|| "fq".into()),
        burst_bytes: args.burst,
        daemon_keys: args.daemon.clone(),
    };
    let load_before = load_average();
    let result = run_all(&plan, &setup, &Names::for_pid(pid), &dir, args.json);
    match &result {
        Err(e) if e.downcast_ref::<procs::Interrupted>().is_none() => {
            eprintln!("sluice bench dp: logs kept in {}", dir.display());
        }
        Ok((_, failed)) if !failed.is_empty() => {
            eprintln!("sluice bench dp: logs kept in {}", dir.display());
        }
        _ => {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    let (outcomes, failed) = result?;
    let load = format!(
        "load average {load_before} before, {} after",
        load_average()
    );
    if args.json {
        eprintln!("sluice bench dp: {load}");
    } else {
        print_report(&outcomes, &plan, &load);
    }
    // After the report, so that a file error never loses the measurements.
    if let Some(out) = &args.samples {
        write_samples(out, &outcomes)?;
    }
    if !failed.is_empty() {
        for f in &failed {
            eprintln!("sluice bench dp: failed: {f}");
        }
        bail!(
            "{} of {} runs failed (each is listed above, with its logs)",
            failed.len(),
            failed.len() + outcomes.len()
        );
    }
    Ok(())
}

/// A run that ended in an error (a connection that died, a missing report): the other runs go
/// on, and the bench lists it and exits non-zero at the end.
struct FailedRun {
    shaper: Shaper,
    flows: usize,
    target_bps: u64,
    reason: String,
}

impl std::fmt::Display for FailedRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} with {} flow(s) at {}: {}",
            self.shaper.name(),
            self.flows,
            mbit(self.target_bps),
            self.reason
        )
    }
}

/// Every run's 100 ms rates as CSV.
fn write_samples(dir: &Path, outcomes: &[Outcome]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .flat_map(|o| {
            o.rates.iter().map(move |(t, bps)| {
                vec![
                    o.shaper.name().to_string(),
                    o.flows.to_string(),
                    (o.target_bps as f64 / 1e6).to_string(),
                    format!("{t:.3}"),
                    format!("{:.2}", bps / 1e6),
                ]
            })
        })
        .collect();
    let path = dir.join("dp-samples.csv");
    crate::report::write_csv(
        &path,
        &["shaper", "flows", "target_mbit", "t_s", "mbit"],
        &rows,
    )?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// The 1, 5 and 15 minute load averages (other work on the machine skews every figure).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".into(),
        |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

fn run_all(
    plan: &Plan,
    setup: &SluiceSetup,
    names: &Names,
    dir: &Path,
    json: bool,
) -> anyhow::Result<(Vec<Outcome>, Vec<FailedRun>)> {
    let total = plan.targets.len() * plan.flows.len() * plan.shapers.len();
    let per_run = plan.warmup + plan.window + TAIL + SETTLE;
    eprintln!(
        "sluice bench dp: {total} runs of {} s + {} s warm-up, about {} min",
        plan.window.as_secs(),
        plan.warmup.as_secs(),
        (per_run.as_secs_f64() * total as f64 / 60.0).ceil()
    );
    let mut outcomes = Vec::with_capacity(total);
    let mut failed = Vec::new();
    for &target in &plan.targets {
        let tdir = dir.join(format!("{}mbit", target / 1_000_000));
        std::fs::create_dir_all(&tdir)
            .with_context(|| format!("cannot create {}", tdir.display()))?;
        let mut topo = Topology::start(names, &tdir, target, setup)
            .with_context(|| format!("setting up for {}", mbit(target)))?;
        for &flows in &plan.flows {
            for &shaper in &plan.shapers {
                eprintln!(
                    "[{}/{total}] {} {flows} flow(s) at {}",
                    outcomes.len() + failed.len() + 1,
                    shaper.name(),
                    mbit(target)
                );
                let rdir = tdir.join(format!("{}-{flows}", shaper.name()));
                std::fs::create_dir_all(&rdir)
                    .with_context(|| format!("cannot create {}", rdir.display()))?;
                let o = match run_one(&mut topo, shaper, flows, target, plan, &rdir) {
                    Ok(o) => o,
                    Err(e) if e.downcast_ref::<procs::Interrupted>().is_some() => return Err(e),
                    Err(e) => {
                        let reason = format!("{e:#}");
                        eprintln!("    failed: {reason}");
                        failed.push(FailedRun {
                            shaper,
                            flows,
                            target_bps: target,
                            reason,
                        });
                        procs::sleep_until(Instant::now() + SETTLE)?;
                        continue;
                    }
                };
                eprintln!(
                    "    {:.1} Mbit/s, err {:.2}%, {} retransmitted; tcp: {}",
                    o.achieved_bps / 1e6,
                    o.conformance_err_pct,
                    o.retrans,
                    if o.tcp.is_empty() { "-" } else { &o.tcp }
                );
                if json {
                    let line =
                        serde_json::to_string(&json_line(&o)).context("encoding a JSON line")?;
                    println!("{line}");
                }
                outcomes.push(o);
                procs::sleep_until(Instant::now() + SETTLE)?;
            }
        }
    }
    Ok((outcomes, failed))
}

fn mbit(bps: u64) -> String {
    sluice_sched::units::Rate::new(bps).map_or_else(|| format!("{bps} bit/s"), |r| format!("{r}/s"))
}

/// Everything running during one run; dropped (stopped) in reverse order on any error.
fn run_one(
    topo: &mut Topology,
    shaper: Shaper,
    flows: usize,
    target: u64,
    plan: &Plan,
    dir: &Path,
) -> anyhow::Result<Outcome> {
    topo.check_daemon()?;
    if let Err(e) = topo.install(shaper, target) {
        // HTB's qdisc may be in place without its class: the next run's starts clean.
        return Err(match topo.uninstall() {
            Ok(()) => e,
            Err(u) => e.context(format!("and removing it: {u:#}")),
        });
    }
    let result = measure_run(topo, shaper, flows, target, plan, dir);
    let removed = topo.uninstall();
    let outcome = result?;
    removed?;
    Ok(outcome)
}

fn measure_run(
    topo: &mut Topology,
    shaper: Shaper,
    flows: usize,
    target: u64,
    plan: &Plan,
    dir: &Path,
) -> anyhow::Result<Outcome> {
    let names = topo.names().clone();
    let (dst, rx_if) = topo.path_of(shaper);
    let rx_if = rx_if.to_string();
    let mtu = Topology::mtu(&names.ns_b, &rx_if)?;
    let mss = mtu
        .checked_sub(figures::HEADER_BYTES - 14)
        .filter(|&m| m > 0)
        .ok_or_else(|| anyhow!("MTU {mtu} of {rx_if} is too small"))?;
    let split = traffic::split_flows(flows);
    let ports = traffic::ports(split.len());
    let tcp0 = [
        measure::tcp_counters(&names.ns_a)?,
        measure::tcp_counters(&names.ns_b)?,
    ];
    let _servers = traffic::start_servers(&names.ns_b, &ports, dir)?;
    let pairs: Vec<(u16, usize)> = ports.iter().copied().zip(split.iter().copied()).collect();
    let tail = client_tail(pairs.len());
    let mut clients = traffic::start_clients(
        &names.ns_a,
        dst,
        &pairs,
        plan.warmup,
        plan.window + tail,
        dir,
    )?;
    // The warm-up starts when every flow and each client's control connection is up, or (one
    // socket can linger in another state) when at least the flows are up and the count has
    // not grown for STABLE.
    const STABLE: Duration = Duration::from_millis(500);
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    let want = flows + ports.len();
    let (mut last, mut since) = (0, Instant::now());
    loop {
        procs::check()?;
        let up = measure::established(&names.ns_a, &ports)?;
        if up != last {
            (last, since) = (up, Instant::now());
        }
        if up >= want || (up >= flows && since.elapsed() >= STABLE) {
            break;
        }
        if Instant::now() >= deadline {
            bail!(
                "only {up} of {want} connections up after {CONNECT_TIMEOUT:?}; see {}",
                dir.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let start = Instant::now() + plan.warmup;
    let sampler = measure::Sampler::start(&names.ns_b, &rx_if, start, SAMPLE_INTERVAL, plan.window);
    procs::sleep_until(start)?;
    let tick = measure::tick_s()?;
    let daemon_pid = topo.daemon_pid();
    let cpu0 = measure::system_cpu()?;
    let daemon0 = measure::process_cpu(daemon_pid)?;
    let counted0 = topo.counters(shaper)?;
    let ping = traffic::start_ping(&names.ns_a, dst, dir)?;
    procs::sleep_until(start + plan.window)?;
    traffic::still_sending(&mut clients)?;
    let cpu1 = measure::system_cpu()?;
    let daemon1 = measure::process_cpu(daemon_pid)?;
    let counted = topo.counters(shaper)?.since(&counted0);
    let rtts = ping.finish()?;
    let samples: Vec<Sample> = sampler.finish()?;
    let iperf = traffic::finish_clients(
        clients,
        plan.warmup + plan.window + tail + Duration::from_secs(30),
    )?;
    let tcp1 = [
        measure::tcp_counters(&names.ns_a)?,
        measure::tcp_counters(&names.ns_b)?,
    ];
    let tcp = TCP_COUNTERS
        .iter()
        .filter_map(|&(side, key)| {
            let i = usize::from(side == "B");
            let d = tcp1[i].get(key)?.saturating_sub(*tcp0[i].get(key)?);
            let name = key.split_once('.').map_or(key, |(_, n)| n);
            (d > 0).then(|| format!("{side}:{name}={d}"))
        })
        .collect::<Vec<_>>()
        .join(" ");
    if iperf.stream_bytes.len() != flows {
        bail!(
            "iperf3 reported {} streams, expected {flows}",
            iperf.stream_bytes.len()
        );
    }
    let window_s = samples
        .last()
        .zip(samples.first())
        .map_or(0.0, |(b, a)| (b.t_ns - a.t_ns) as f64 / 1e9);
    if window_s <= 0.0 {
        bail!("no samples of {rx_if}");
    }
    let achieved_bps = figures::mean_rate(&samples, mss);
    let timed = figures::interval_rates(&samples, mss);
    let wire_bits = achieved_bps * window_s;
    let per_gbit = |ticks: u64| figures::cpu_s_per_gbit(ticks as f64 * tick, wire_bits);
    let bytes: Vec<f64> = iperf.stream_bytes.iter().map(|&b| b as f64).collect();
    Ok(Outcome {
        shaper,
        flows,
        target_bps: target,
        achieved_bps,
        self_bps: counted.sent_bytes as f64 * 8.0
            / counted
                .at_ns
                .map_or(window_s, |ns| ns as f64 / 1e9)
                .max(1e-9),
        conformance_err_pct: figures::conformance_err_pct(&samples, mss, target as f64),
        jain: figures::jain(&bytes),
        retrans: iperf.retrans,
        drops: counted.drops,
        marks: counted.marks,
        rtt_p50_us: figures::percentile(&rtts, 50.0),
        rtt_p99_us: figures::percentile(&rtts, 99.0),
        daemon_s_per_gbit: (shaper == Shaper::Sluice)
            .then(|| per_gbit(daemon1.saturating_sub(daemon0))),
        softirq_s_per_gbit: per_gbit(cpu1.softirq.saturating_sub(cpu0.softirq)),
        busy_s_per_gbit: per_gbit(cpu1.busy.saturating_sub(cpu0.busy)),
        tcp,
        rates: timed
            .iter()
            .map(|&(t, bps)| (t as f64 / 1e9, bps))
            .collect(),
    })
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.digits$}"))
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "-".into()
    }
}

fn print_report(outcomes: &[Outcome], plan: &Plan, load: &str) {
    let mut t = Table::new(
        [
            "target", "flows", "shaper", "Mbit/s", "self", "err %", "Jain", "retrans", "drops",
            "CE", "p50 us", "p99 us", "cpu s/Gb", "softirq", "all cpu",
        ]
        .map(String::from)
        .to_vec(),
        3,
    );
    for o in outcomes {
        t.row(vec![
            mbit(o.target_bps),
            o.flows.to_string(),
            o.shaper.name().into(),
            format!("{:.1}", o.achieved_bps / 1e6),
            format!("{:.1}", o.self_bps / 1e6),
            format!("{:.2}", o.conformance_err_pct),
            format!("{:.4}", o.jain),
            o.retrans.to_string(),
            o.drops.to_string(),
            o.marks.map_or_else(|| "-".into(), |m| m.to_string()),
            opt(o.rtt_p50_us, 0),
            opt(o.rtt_p99_us, 0),
            format!("{:.3}", o.cpu_s_per_gbit()),
            format!("{:.3}", o.softirq_s_per_gbit),
            format!("{:.3}", o.busy_s_per_gbit),
        ]);
    }
    println!(
        "sluice bench dp: {} s windows after {} s warm-up; rates on the wire (Ethernet frames \
         of every segment); {load}",
        plan.window.as_secs(),
        plan.warmup.as_secs()
    );
    println!("{}", t.render());
    println!(
        "self: what the shaper counted as sent. err: mean |rate - target| / target over 100 ms \
         samples. cpu: the daemon's CPU for sluice,\nsoftirq time (all CPUs) for htb and tbf; \
         softirq: all CPUs' softirq time, every shaper. all cpu: all CPUs' busy time (senders,\n\
         receivers, shaper; the same measure for every shaper), s/Gbit. CE: frames the daemon marked."
    );
    let find = |s: Shaper, f: usize, r: u64| {
        outcomes
            .iter()
            .find(|o| o.shaper == s && o.flows == f && o.target_bps == r)
    };
    let mut ratios = Table::new(
        [
            "target", "flows", "err/htb", "err/tbf", "p99/htb", "p99/tbf", "cpu/htb", "cpu/tbf",
            "all/htb", "all/tbf",
        ]
        .map(String::from)
        .to_vec(),
        2,
    );
    let mut any = false;
    for &r in &plan.targets {
        for &f in &plan.flows {
            let Some(s) = find(Shaper::Sluice, f, r) else {
                continue;
            };
            let (h, b) = (find(Shaper::Htb, f, r), find(Shaper::Tbf, f, r));
            if h.is_none() && b.is_none() {
                continue;
            }
            any = true;
            let cell = |o: Option<&Outcome>, get: &dyn Fn(&Outcome) -> Option<f64>| match (
                get(s),
                o.and_then(get),
            ) {
                (Some(a), Some(b)) => ratio(a, b),
                _ => "-".into(),
            };
            let err = |o: &Outcome| Some(o.conformance_err_pct);
            let p99 = |o: &Outcome| o.rtt_p99_us;
            let cpu = |o: &Outcome| Some(o.cpu_s_per_gbit());
            let all = |o: &Outcome| Some(o.busy_s_per_gbit);
            ratios.row(vec![
                mbit(r),
                f.to_string(),
                cell(h, &err),
                cell(b, &err),
                cell(h, &p99),
                cell(b, &p99),
                cell(h, &cpu),
                cell(b, &cpu),
                cell(h, &all),
                cell(b, &all),
            ]);
        }
    }
    if any {
        println!("\nSluice / kernel (below 1x: Sluice is lower)");
        println!("{}", ratios.render());
    }
    if let Some(s) = find(Shaper::Sluice, 100, 1_000_000_000) {
        print_target_check(
            s,
            find(Shaper::Htb, 100, 1_000_000_000),
            find(Shaper::Tbf, 100, 1_000_000_000),
        );
    }
}

/// The issue's performance target at 1 Gbit/s with 100 flows.
fn print_target_check(s: &Outcome, htb: Option<&Outcome>, tbf: Option<&Outcome>) {
    let mark = |ok: bool| if ok { "met" } else { "MISSED" };
    println!("Performance target, 1 Gbit/s with 100 flows:");
    println!(
        "  conformance error <= 1%: {:.2}% ({})",
        s.conformance_err_pct,
        mark(s.conformance_err_pct <= 1.0)
    );
    for (name, k) in [("HTB", htb), ("TBF", tbf)] {
        if let Some(k) = k {
            println!(
                "  better than {name}: {:.2}% vs {:.2}% ({})",
                s.conformance_err_pct,
                k.conformance_err_pct,
                mark(s.conformance_err_pct < k.conformance_err_pct)
            );
        }
    }
    println!("  Jain >= 0.99: {:.4} ({})", s.jain, mark(s.jain >= 0.99));
    println!(
        "  zero retransmissions caused by the daemon: {} retransmitted, {} dropped by the daemon \
         or its taps ({})",
        s.retrans,
        s.drops,
        mark(s.retrans == 0 && s.drops == 0)
    );
    if let Some(h) = htb {
        println!(
            "  CPU s/Gbit no worse than HTB's: {:.3} vs {:.3} ({})",
            s.cpu_s_per_gbit(),
            h.cpu_s_per_gbit(),
            mark(s.cpu_s_per_gbit() <= h.cpu_s_per_gbit())
        );
        println!(
            "  (all CPUs' busy time, the same measure for both: {:.3} vs {:.3} s/Gbit, {})",
            s.busy_s_per_gbit,
            h.busy_s_per_gbit,
            ratio(s.busy_s_per_gbit, h.busy_s_per_gbit)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: DpArgs,
    }

    fn args(a: &[&str]) -> Result<DpArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("dp").chain(a.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn defaults_and_quick() {
        let p = plan(&args(&[]).unwrap()).unwrap();
        assert_eq!(p.flows, vec![1, 10, 100, 1000]);
        assert_eq!(p.targets, vec![100_000_000, 1_000_000_000, 5_000_000_000]);
        assert_eq!(p.shapers, Shaper::ALL.to_vec());
        assert_eq!(p.window, Duration::from_secs(10));
        assert_eq!(p.warmup, Duration::from_secs(2));
        let q = plan(&args(&["--quick"]).unwrap()).unwrap();
        assert_eq!(q.flows, vec![1, 100]);
        assert_eq!(q.targets, vec![100_000_000, 1_000_000_000]);
        assert_eq!(q.window, Duration::from_secs(4));
        let given = plan(
            &args(&[
                "--quick",
                "--flows",
                "10,10",
                "--targets",
                "2.5gbit,200mbit,200mbit",
                "--shapers",
                "tbf,sluice,tbf",
                "--duration",
                "3s",
                "--warmup",
                "1s",
            ])
            .unwrap(),
        )
        .unwrap();
        assert_eq!(given.flows, vec![10]);
        assert_eq!(given.targets, vec![200_000_000, 2_500_000_000]);
        assert_eq!(given.shapers, vec![Shaper::Sluice, Shaper::Tbf]);
        assert_eq!(given.window, Duration::from_secs(3));
        assert_eq!(given.warmup, Duration::from_secs(1));
    }

    /// Sluice's own options without a Sluice run would do nothing: refused, naming them.
    #[test]
    fn sluice_options_without_sluice_are_refused() {
        for (extra, flag) in [
            (&["--leaf", "drr"][..], "--leaf"),
            (&["--burst", "64KiB"], "--burst"),
            (&["--daemon", "ecn=off"], "--daemon"),
            (&["--sluice", "/bin/true"], "--sluice"),
        ] {
            let mut a = vec!["--shapers", "htb,tbf"];
            a.extend_from_slice(extra);
            let e = plan(&args(&a).unwrap()).unwrap_err().to_string();
            assert!(
                e.contains(flag) && e.contains("does not include sluice"),
                "{e}"
            );
            a[1] = "htb,sluice";
            assert!(plan(&args(&a).unwrap()).is_ok(), "{a:?}");
        }
        assert!(plan(&args(&["--shapers", "tbf"]).unwrap()).is_ok());
    }

    #[test]
    fn bad_options_are_refused() {
        for bad in [
            &["--shapers", "cake"][..],
            &["--targets", "100MB"],
            &["--targets", "10kbit"],
            &["--flows", "0"],
            &["--flows", "5000"],
            &["--duration", "1.5s"],
            &["--duration", "10"],
            // iperf3 omits at most 60 s (`-O 61`: "bogus value for --omit").
            &["--warmup", "61s"],
            &["--leaf", "prio"],
            &["--daemon", "ecn"],
            &["--daemon", "control=/x"],
        ] {
            assert!(args(bad).is_err(), "{bad:?} accepted");
        }
        let a = args(&[
            "--daemon",
            "ecn=off",
            "--daemon",
            "mode = busy",
            "--burst",
            "64KiB",
        ])
        .unwrap();
        assert_eq!(
            a.daemon,
            vec![
                ("ecn".to_string(), "off".to_string()),
                ("mode".to_string(), "busy".to_string())
            ]
        );
        assert_eq!(a.burst, Some(64 * 1024));
        assert_eq!(args(&[]).unwrap().burst, None);
    }

    #[test]
    fn json_lines_have_exactly_the_issues_keys() {
        let o = Outcome {
            shaper: Shaper::Sluice,
            flows: 100,
            target_bps: 1_000_000_000,
            achieved_bps: 995.04e6,
            self_bps: 995e6,
            conformance_err_pct: 0.5012,
            jain: 0.99004,
            retrans: 0,
            drops: 0,
            marks: Some(3),
            rtt_p50_us: Some(120.0),
            rtt_p99_us: Some(850.4),
            daemon_s_per_gbit: Some(0.3104),
            softirq_s_per_gbit: 0.2,
            busy_s_per_gbit: 1.5,
            tcp: String::new(),
            rates: Vec::new(),
        };
        assert_eq!(
            serde_json::to_string(&json_line(&o)).unwrap(),
            r#"{"bench":"dp","shaper":"sluice","flows":100,"target_mbit":1000,"achieved_mbit":995.0,"conformance_err_pct":0.5,"jain":0.99,"retrans":0,"rtt_p99_us":850,"cpu_s_per_gbit":0.31}"#
        );
        let k = Outcome {
            shaper: Shaper::Htb,
            target_bps: 2_500_000,
            daemon_s_per_gbit: None,
            ..o.clone()
        };
        let line = serde_json::to_string(&json_line(&k)).unwrap();
        assert!(line.contains(r#""target_mbit":2.5,"#), "{line}");
        assert!(line.ends_with(r#""cpu_s_per_gbit":0.2}"#), "{line}");
    }
}
