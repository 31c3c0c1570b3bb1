//! The namespace pair of `sluice bench dp`, the daemon that creates it and the kernel shapers.
//!
//! ```text
//!   namespace slb<pid>a                                  namespace slb<pid>b
//!   10.77.0.1  tap slb<pid>ta ==> sluice daemon ==> tap slb<pid>tb  10.77.0.2   (Sluice)
//!   10.78.0.1  veth slb<pid>va [HTB or TBF] ======> veth slb<pid>vb 10.78.0.2   (kernel)
//! ```
//!
//! One pair of namespaces for all three shapers, per target rate. The daemon (`sluice run`)
//! creates both namespaces with its taps, so that it owns and removes them; the bench then adds
//! a veth pair straight into them (`ip link add ... netns A type veth peer ... netns B`), so the
//! veth vanishes with the namespaces. Senders are in A, receivers in B; traffic to 10.77.0.2
//! crosses the daemon (scheduled by a one-node policy: the target rate over per-flow fair
//! queueing), traffic to 10.78.0.2 crosses the veth, whose egress in A holds HTB or TBF while
//! those run (and no qdisc otherwise: veths default to `noqueue`). The reverse direction (ACKs)
//! is unshaped on both paths: the daemon's b -> a link is a FIFO without a rate.
//!
//! Both namespaces get `net.ipv4.tcp_ecn = 1` (the daemon marks CE instead of dropping;
//! fifos never mark, so HTB and TBF runs are unaffected). Each veth receive queue is pinned to
//! CPU 0 by RPS, since two veths on two vCPUs reorder packets otherwise; the taps are left as
//! the daemon sets them up.
//!
//! Dropping a [`Topology`] stops the daemon (SIGTERM: it removes its taps and namespaces, and
//! with them the veth) and deletes the namespaces itself if the daemon could not.

use super::procs::{self, Proc};
use anyhow::{Context, anyhow, bail};
use sluice_dp::control::{Reply, Request};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long the daemon may take to answer its control socket after starting.
const DAEMON_START: Duration = Duration::from_secs(15);

/// HTB's explicit burst and cburst, bytes (`burst 100k cburst 100k`; tc's `k` is 1024).
pub const HTB_BURST_BYTES: u64 = 100 * 1024;

/// TBF's burst at 1 Gbit/s, bytes (`burst 256kb`); scaled with the rate.
pub const TBF_BURST_AT_1G_BYTES: u64 = 256 * 1024;

/// TBF's smallest burst, bytes (above one 64 KiB GSO frame plus headers).
pub const TBF_MIN_BURST_BYTES: u64 = 96 * 1024;

/// TBF's `latency` (the queue holds what drains in this time).
pub const TBF_LATENCY: &str = "10ms";

/// A shaper under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Shaper {
    /// The Sluice daemon.
    Sluice,
    /// Kernel HTB with an explicit burst.
    Htb,
    /// Kernel TBF.
    Tbf,
}

impl Shaper {
    /// All, in report order.
    pub const ALL: [Shaper; 3] = [Shaper::Sluice, Shaper::Htb, Shaper::Tbf];

    /// Its name in options and output.
    pub fn name(self) -> &'static str {
        match self {
            Shaper::Sluice => "sluice",
            Shaper::Htb => "htb",
            Shaper::Tbf => "tbf",
        }
    }
}

/// TBF's burst for `rate_bps`: 256 KiB at 1 Gbit/s, in proportion to the rate (the same 2.1 ms
/// of traffic), at least [`TBF_MIN_BURST_BYTES`].
pub fn tbf_burst_bytes(rate_bps: u64) -> u64 {
    let scaled = (TBF_BURST_AT_1G_BYTES as u128 * rate_bps as u128 / 1_000_000_000) as u64;
    scaled.max(TBF_MIN_BURST_BYTES)
}

/// How the daemon is configured, besides its ports.
#[derive(Clone, Debug)]
pub struct SluiceSetup {
    /// The `sluice` binary to run as the daemon.
    pub binary: PathBuf,
    /// The leaf policy over flows (`fq`, `drr` or `wfq`).
    pub leaf: String,
    /// The root's burst, bytes; `None`: TBF's for the rate ([`tbf_burst_bytes`]). A userspace
    /// shaper needs a burst that covers its own scheduling delays: a gate drops the time it
    /// spends idle beyond its burst, and the daemon, sharing two cores with the senders and
    /// receivers, is preempted for milliseconds. With HTB's 100 KiB (0.8 ms at 1 Gbit/s) the
    /// daemon delivered 0.1-1% below 1 Gbit/s and 26% below 5 Gbit/s with 100 flows; with
    /// TBF's 2.1 ms, within 0.02% and 0.5% (docs/benchmarks.md).
    pub burst_bytes: Option<u64>,
    /// Extra `[daemon]` keys, `key=value`.
    pub daemon_keys: Vec<(String, String)>,
}

impl SluiceSetup {
    /// The root's burst at `rate_bps`, bytes.
    pub fn root_burst(&self, rate_bps: u64) -> u64 {
        self.burst_bytes
            .unwrap_or_else(|| tbf_burst_bytes(rate_bps))
    }
}

/// The policy file of the daemon's a -> b link.
pub fn policy_text(rate_bps: u64, leaf: &str, burst_bytes: u64) -> String {
    format!(
        "# sluice bench dp: one node at the target rate; its flows share it by {leaf}.\n\
         [scheduler]\ndefault = \"root\"\n\n\
         [[node]]\nname = \"root\"\npolicy = \"{leaf}\"\nrate = \"{rate_bps}bit\"\n\
         burst = \"{burst_bytes}B\"\n"
    )
}

/// A `[daemon]` value as TOML: integers bare, everything else quoted.
fn toml_value(v: &str) -> String {
    if v.parse::<i64>().is_ok() {
        v.to_string()
    } else {
        format!("{:?}", v)
    }
}

/// Names of everything one bench process creates (unique by its pid).
#[derive(Clone, Debug)]
pub struct Names {
    /// Sending namespace.
    pub ns_a: String,
    /// Receiving namespace.
    pub ns_b: String,
    /// Taps (daemon ports).
    pub tap_a: String,
    /// Receiving tap.
    pub tap_b: String,
    /// Veth end in A (where HTB and TBF sit).
    pub veth_a: String,
    /// Veth end in B.
    pub veth_b: String,
}

impl Names {
    /// The names for process `pid`.
    pub fn for_pid(pid: u32) -> Names {
        let p = format!("slb{pid}");
        Names {
            ns_a: format!("{p}a"),
            ns_b: format!("{p}b"),
            tap_a: format!("{p}ta"),
            tap_b: format!("{p}tb"),
            veth_a: format!("{p}va"),
            veth_b: format!("{p}vb"),
        }
    }
}

/// Addresses of the two paths.
pub const SLUICE_SRC: &str = "10.77.0.1";
/// Receiver behind the daemon.
pub const SLUICE_DST: &str = "10.77.0.2";
/// Sender on the veth.
pub const VETH_SRC: &str = "10.78.0.1";
/// Receiver behind the veth.
pub const VETH_DST: &str = "10.78.0.2";

/// The daemon's configuration file.
pub fn daemon_config(names: &Names, control: &Path, setup: &SluiceSetup) -> String {
    let mut s = String::from("# sluice bench dp\n[daemon]\n");
    let _ = writeln!(s, "control = {:?}", control.display().to_string());
    if !setup.daemon_keys.iter().any(|(k, _)| k == "mode") {
        s.push_str("mode = \"event\"\n");
    }
    for (k, v) in &setup.daemon_keys {
        let _ = writeln!(s, "{k} = {}", toml_value(v));
    }
    for (port, ifname, netns, addr) in [
        ("a", &names.tap_a, &names.ns_a, SLUICE_SRC),
        ("b", &names.tap_b, &names.ns_b, SLUICE_DST),
    ] {
        let _ = write!(
            s,
            "\n[[port]]\nname = \"{port}\"\nkind = \"tap\"\nifname = \"{ifname}\"\n\
             netns = \"{netns}\"\naddress = \"{addr}/24\"\n"
        );
    }
    s.push_str(
        "\n[[link]]\nfrom = \"a\"\nto = \"b\"\npolicy = \"policy.toml\"\n\n\
         [[link]]\nfrom = \"b\"\nto = \"a\"\n",
    );
    s
}

/// What a shaper counted itself over a window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShaperCounters {
    /// Wire bytes it sent.
    pub sent_bytes: u64,
    /// Frames it (or the port before it) dropped.
    pub drops: u64,
    /// Frames marked CE (Sluice only).
    pub marks: Option<u64>,
    /// When the shaper took these counts, ns on its own clock (Sluice: the daemon's uptime,
    /// which tells how long a window was for it, however late it answered); `None` for tc,
    /// which reads the counters the moment it is asked.
    pub at_ns: Option<u64>,
}

impl ShaperCounters {
    /// `self - earlier`.
    pub fn since(&self, earlier: &ShaperCounters) -> ShaperCounters {
        ShaperCounters {
            sent_bytes: self.sent_bytes.saturating_sub(earlier.sent_bytes),
            drops: self.drops.saturating_sub(earlier.drops),
            marks: match (self.marks, earlier.marks) {
                (Some(a), Some(b)) => Some(a.saturating_sub(b)),
                _ => None,
            },
            at_ns: match (self.at_ns, earlier.at_ns) {
                (Some(a), Some(b)) => Some(a.saturating_sub(b)),
                _ => None,
            },
        }
    }
}

/// The namespace pair with the daemon running on it.
pub struct Topology {
    names: Names,
    dir: PathBuf,
    control: PathBuf,
    daemon: Option<Proc>,
    /// The kernel shaper installed now, if any.
    installed: Option<Shaper>,
}

impl Topology {
    /// Write the policy and config into `dir`, start the daemon, wait until it answers, and
    /// add the veth pair.
    pub fn start(
        names: &Names,
        dir: &Path,
        rate_bps: u64,
        setup: &SluiceSetup,
    ) -> anyhow::Result<Topology> {
        for ns in [&names.ns_a, &names.ns_b] {
            if sluice_dp::netns::netns_exists(ns) {
                bail!(
                    "namespace `{ns}` already exists (left by another run?); remove it with `ip netns del {ns}`"
                );
            }
        }
        let policy = dir.join("policy.toml");
        std::fs::write(
            &policy,
            policy_text(rate_bps, &setup.leaf, setup.root_burst(rate_bps)),
        )
        .with_context(|| format!("cannot write {}", policy.display()))?;
        let control = dir.join("control.sock");
        let config = dir.join("daemon.toml");
        std::fs::write(&config, daemon_config(names, &control, setup))
            .with_context(|| format!("cannot write {}", config.display()))?;
        let log_path = dir.join("daemon.log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("cannot create {}", log_path.display()))?;
        let mut cmd = Command::new(&setup.binary);
        cmd.arg("run")
            .arg("--config")
            .arg(&config)
            .stdout(log.try_clone().context("cannot share the daemon log")?)
            .stderr(log);
        let daemon = Proc::spawn(&mut cmd, format!("the daemon ({})", setup.binary.display()))?;
        let mut topo = Topology {
            names: names.clone(),
            dir: dir.to_path_buf(),
            control,
            daemon: Some(daemon),
            installed: None,
        };
        topo.wait_ready(&log_path)?;
        topo.add_veth()?;
        Ok(topo)
    }

    fn wait_ready(&mut self, log: &Path) -> anyhow::Result<()> {
        let deadline = Instant::now() + DAEMON_START;
        loop {
            procs::check()?;
            let daemon = self
                .daemon
                .as_mut()
                .ok_or_else(|| anyhow!("the daemon is gone"))?;
            if let Some(status) = daemon.try_wait()? {
                bail!("the daemon exited ({status}) at start:\n{}", tail(log, 20));
            }
            let ready = self.control.exists()
                && matches!(
                    sluice_dp::control_socket::request(
                        &self.control,
                        &Request::Stats {},
                        Duration::from_secs(1)
                    ),
                    Ok(Reply::Stats(_))
                );
            if ready {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "the daemon did not answer on {} within {DAEMON_START:?}:\n{}",
                    self.control.display(),
                    tail(log, 20)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn add_veth(&self) -> anyhow::Result<()> {
        let n = &self.names;
        procs::output(
            "ip",
            &[
                "link", "add", &n.veth_a, "netns", &n.ns_a, "type", "veth", "peer", "name",
                &n.veth_b, "netns", &n.ns_b,
            ],
        )?;
        for (ns, dev, addr) in [
            (&n.ns_a, &n.veth_a, VETH_SRC),
            (&n.ns_b, &n.veth_b, VETH_DST),
        ] {
            let cidr = format!("{addr}/24");
            procs::output("ip", &["-n", ns, "addr", "add", &cidr, "dev", dev])?;
            procs::output("ip", &["-n", ns, "link", "set", "dev", dev, "up"])?;
            let queues = procs::output_in(ns, "ls", &[&format!("/sys/class/net/{dev}/queues")])?;
            for q in queues.split_whitespace().filter(|q| q.starts_with("rx-")) {
                let path = format!("/sys/class/net/{dev}/queues/{q}/rps_cpus");
                procs::output_in(ns, "sh", &["-c", &format!("echo 1 > {path}")])?;
            }
        }
        for ns in [&n.ns_a, &n.ns_b] {
            procs::output_in(ns, "sysctl", &["-q", "-w", "net.ipv4.tcp_ecn=1"])?;
            let ts = procs::output_in(ns, "sysctl", &["-n", "net.ipv4.tcp_timestamps"])?;
            if ts.trim() != "1" {
                bail!(
                    "net.ipv4.tcp_timestamps is {} in `{ns}`; the wire-byte accounting assumes 1",
                    ts.trim()
                );
            }
        }
        Ok(())
    }

    /// The names.
    pub fn names(&self) -> &Names {
        &self.names
    }

    /// The daemon's pid.
    pub fn daemon_pid(&self) -> u32 {
        self.daemon.as_ref().map_or(0, Proc::pid)
    }

    /// An error if the daemon has exited.
    pub fn check_daemon(&mut self) -> anyhow::Result<()> {
        if let Some(d) = self.daemon.as_mut() {
            if let Some(status) = d.try_wait()? {
                bail!(
                    "the daemon exited ({status}):\n{}",
                    tail(&self.dir.join("daemon.log"), 20)
                );
            }
        }
        Ok(())
    }

    /// Destination address, receiving interface and MTU for `shaper`'s path.
    pub fn path_of(&self, shaper: Shaper) -> (&'static str, &str) {
        match shaper {
            Shaper::Sluice => (SLUICE_DST, &self.names.tap_b),
            Shaper::Htb | Shaper::Tbf => (VETH_DST, &self.names.veth_b),
        }
    }

    /// The MTU of interface `dev` in namespace `ns`.
    pub fn mtu(ns: &str, dev: &str) -> anyhow::Result<u64> {
        let out = procs::output("ip", &["-n", ns, "-o", "link", "show", "dev", dev])?;
        let mut words = out.split_whitespace();
        words
            .find(|w| *w == "mtu")
            .and_then(|_| words.next())
            .and_then(|m| m.parse().ok())
            .ok_or_else(|| anyhow!("no mtu in `ip link show {dev}`: {}", out.trim()))
    }

    /// Install `shaper` at `rate_bps` on the veth's egress in A (nothing for Sluice).
    pub fn install(&mut self, shaper: Shaper, rate_bps: u64) -> anyhow::Result<()> {
        let (ns, dev) = (&self.names.ns_a, &self.names.veth_a);
        let rate = format!("{rate_bps}bit");
        match shaper {
            Shaper::Sluice => return Ok(()),
            Shaper::Htb => {
                procs::output_in(
                    ns,
                    "tc",
                    &[
                        "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1",
                    ],
                )?;
                self.installed = Some(shaper);
                let burst = HTB_BURST_BYTES.to_string();
                procs::output_in(
                    ns,
                    "tc",
                    &[
                        "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
                        "rate", &rate, "ceil", &rate, "burst", &burst, "cburst", &burst,
                    ],
                )?;
            }
            Shaper::Tbf => {
                let burst = tbf_burst_bytes(rate_bps).to_string();
                procs::output_in(
                    ns,
                    "tc",
                    &[
                        "qdisc",
                        "add",
                        "dev",
                        dev,
                        "root",
                        "tbf",
                        "rate",
                        &rate,
                        "burst",
                        &burst,
                        "latency",
                        TBF_LATENCY,
                    ],
                )?;
                self.installed = Some(shaper);
            }
        }
        Ok(())
    }

    /// Remove the kernel shaper, if one is installed.
    pub fn uninstall(&mut self) -> anyhow::Result<()> {
        if self.installed.take().is_some() {
            let (ns, dev) = (&self.names.ns_a, &self.names.veth_a);
            procs::output_in(ns, "tc", &["qdisc", "del", "dev", dev, "root"])?;
        }
        Ok(())
    }

    /// What `shaper` has counted so far.
    pub fn counters(&self, shaper: Shaper) -> anyhow::Result<ShaperCounters> {
        match shaper {
            Shaper::Sluice => self.sluice_counters(),
            Shaper::Htb | Shaper::Tbf => {
                let out = procs::output_in(
                    &self.names.ns_a,
                    "tc",
                    &["-s", "-j", "qdisc", "show", "dev", &self.names.veth_a],
                )?;
                parse_tc_root(&out)
            }
        }
    }

    fn sluice_counters(&self) -> anyhow::Result<ShaperCounters> {
        let reply = sluice_dp::control_socket::request(
            &self.control,
            &Request::Stats {},
            Duration::from_secs(5),
        )
        .context("asking the daemon for its counters")?;
        let Reply::Stats(snap) = reply else {
            bail!("the daemon answered a stats request with {reply:?}");
        };
        let link = snap
            .links
            .iter()
            .find(|l| l.from == "a")
            .ok_or_else(|| anyhow!("the daemon reports no link from port a"))?;
        let sent_bytes = link.classes.iter().map(|c| c.sent_bytes).sum();
        let drops = snap.drops.values().sum::<u64>()
            + snap.ports.iter().map(|p| p.kernel_drops).sum::<u64>()
            + self.tap_drops()?;
        Ok(ShaperCounters {
            sent_bytes,
            drops,
            marks: Some(snap.ecn_marked),
            at_ns: Some(snap.uptime_ns),
        })
    }

    /// Frames the kernel dropped at the taps because the daemon did not read them in time (a
    /// tap's queue toward the daemon is its TX side: `tx dropped`), counted since they were
    /// created. The daemon cannot see these; they are losses all the same.
    fn tap_drops(&self) -> anyhow::Result<u64> {
        let n = &self.names;
        let mut total = 0;
        for (ns, tap) in [(&n.ns_a, &n.tap_a), (&n.ns_b, &n.tap_b)] {
            let json = procs::output("ip", &["-n", ns, "-s", "-j", "link", "show", "dev", tap])?;
            total += parse_tx_dropped(&json)?;
        }
        Ok(total)
    }
}

/// `tx dropped` of the one interface `ip -s -j link show dev X` shows.
pub fn parse_tx_dropped(json: &str) -> anyhow::Result<u64> {
    let v: serde_json::Value = serde_json::from_str(json).context("ip printed no valid JSON")?;
    v.get(0)
        .and_then(|l| l.pointer("/stats64/tx/dropped"))
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| anyhow!("ip shows no stats64.tx.dropped: {json}"))
}

/// The root qdisc's counters from `tc -s -j qdisc show`.
pub fn parse_tc_root(json: &str) -> anyhow::Result<ShaperCounters> {
    let v: serde_json::Value = serde_json::from_str(json).context("tc printed no valid JSON")?;
    let root = v
        .as_array()
        .and_then(|qs| {
            qs.iter()
                .find(|q| q.get("root").and_then(serde_json::Value::as_bool) == Some(true))
        })
        .ok_or_else(|| anyhow!("tc shows no root qdisc: {json}"))?;
    let field = |k: &str| {
        root.get(k)
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| anyhow!("tc's root qdisc has no `{k}`: {json}"))
    };
    Ok(ShaperCounters {
        sent_bytes: field("bytes")?,
        drops: field("drops")?,
        marks: None,
        at_ns: None,
    })
}

/// The last `lines` lines of file `path` (for error messages).
fn tail(path: &Path, lines: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        if let Some(daemon) = self.daemon.take() {
            if daemon.stop().is_none() {
                eprintln!("sluice bench dp: the daemon had to be killed");
            }
        }
        for ns in [&self.names.ns_a, &self.names.ns_b] {
            if sluice_dp::netns::netns_exists(ns) {
                if let Err(e) = procs::output("ip", &["netns", "del", ns]) {
                    eprintln!("sluice bench dp: cannot remove namespace `{ns}`: {e:#}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tbf_burst_scales_with_the_rate() {
        assert_eq!(tbf_burst_bytes(1_000_000_000), 256 * 1024);
        assert_eq!(tbf_burst_bytes(5_000_000_000), 5 * 256 * 1024);
        assert_eq!(tbf_burst_bytes(100_000_000), TBF_MIN_BURST_BYTES);
    }

    #[test]
    fn the_policy_and_config_the_daemon_gets() {
        let p = policy_text(1_000_000_000, "fq", 102_400);
        let compiled = sluice_sched::config::build_str(&p, "bench.toml");
        assert!(compiled.is_ok(), "{p}");
        assert!(p.contains("rate = \"1000000000bit\"") && p.contains("burst = \"102400B\""));
        let names = Names::for_pid(4242);
        assert_eq!(names.ns_a, "slb4242a");
        assert!(names.veth_b.len() <= 15);
        let setup = SluiceSetup {
            binary: "sluice".into(),
            leaf: "fq".into(),
            burst_bytes: Some(102_400),
            daemon_keys: vec![
                ("ecn".into(), "off".into()),
                ("engines".into(), "1".into()),
                ("mode".into(), "busy".into()),
            ],
        };
        assert_eq!(setup.root_burst(5_000_000_000), 102_400);
        let default = SluiceSetup {
            burst_bytes: None,
            ..setup.clone()
        };
        assert_eq!(default.root_burst(5_000_000_000), 5 * 256 * 1024);
        let text = daemon_config(&names, Path::new("/tmp/x/control.sock"), &setup);
        assert!(
            text.contains("ecn = \"off\"\nengines = 1\nmode = \"busy\"\n"),
            "{text}"
        );
        let cfg = sluice_dp::config::Config::parse(&text, "daemon.toml", Path::new("/tmp/x"))
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(cfg.ports.len(), 2);
        assert_eq!(cfg.ports[1].ifname, "slb4242tb");
        assert_eq!(
            cfg.links[0].policy.as_deref(),
            Some(Path::new("/tmp/x/policy.toml"))
        );
        assert_eq!(cfg.ecn, None);
        assert_eq!(cfg.mode, sluice_dp::config::Mode::Busy);
        let plain = SluiceSetup {
            daemon_keys: Vec::new(),
            ..setup
        };
        let cfg = sluice_dp::config::Config::parse(
            &daemon_config(&names, Path::new("/tmp/x/control.sock"), &plain),
            "daemon.toml",
            Path::new("/tmp/x"),
        )
        .unwrap();
        assert_eq!(cfg.mode, sluice_dp::config::Mode::Event);
        assert!(cfg.ecn.is_some(), "ECN marking as the daemon defaults");
    }

    #[test]
    fn tc_json_root_counters() {
        let json = r#"[{"kind":"htb","handle":"1:","root":true,"options":{},"bytes":628228943,"packets":414996,"drops":3,"overlimits":9367,"requeues":0,"backlog":0,"qlen":0},
                      {"kind":"pfifo","handle":"8001:","parent":"1:1","bytes":5,"packets":1,"drops":0}]"#;
        assert_eq!(
            parse_tc_root(json).unwrap(),
            ShaperCounters {
                sent_bytes: 628228943,
                drops: 3,
                marks: None,
                at_ns: None
            }
        );
        assert!(parse_tc_root("[]").is_err());
        assert!(parse_tc_root("nope").is_err());
    }

    #[test]
    fn ip_json_tx_dropped() {
        let json = r#"[{"ifindex":7,"ifname":"slb1ta","stats64":{"rx":{"bytes":9,"packets":1,"dropped":2},"tx":{"bytes":744531,"packets":5135,"errors":0,"dropped":41}}}]"#;
        assert_eq!(parse_tx_dropped(json).unwrap(), 41);
        assert!(parse_tx_dropped("[]").is_err());
        assert!(parse_tx_dropped("nope").is_err());
    }
}
