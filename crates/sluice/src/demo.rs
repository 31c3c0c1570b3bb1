//! `sluice demo`: the software NIC in one command.
//!
//! It creates two namespaces joined by the daemon (each gets a tap), starts `sluice run` on
//! them with `examples/policies/three-classes.toml` (a 1 Gbit/s root shared 6 : 3 : 1 by gold,
//! silver and bronze, each with a ceiling), runs one iperf3 flow per class through it, shows
//! the live view (`sluice top`'s) every second, and at the end compares what each class got
//! with what the policy promises. Everything it created goes away at the end, on an error and
//! on Ctrl-C: the daemon removes its namespaces and taps when it gets SIGTERM, and a guard
//! here stops the daemon and the iperf3 processes whatever happens.
//!
//! ```text
//!  namespace A (10.77.0.1)                         namespace B (10.77.0.2)
//!  iperf3 -c  ──tap──> sluice run (three classes) ──tap──> iperf3 -s
//!   gold: DSCP 46 (EF)   silver: port 5201   bronze: port 7001
//! ```

use crate::top::{self, View};
use anyhow::{Context, bail};
use clap::Args;
use sluice_dp::stats::Snapshot;
use std::io::{IsTerminal, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The demo's policy, compiled in so the demo works from any directory.
const POLICY: &str = include_str!("../../../examples/policies/three-classes.toml");

/// One iperf3 flow per class: name, server port, TOS byte (DSCP << 2), expected share of the
/// 1 Gbit/s root (WFQ weights 6 : 3 : 1, each under its ceiling).
const FLOWS: [(&str, u16, u8, f64); 3] = [
    ("gold", 6001, 46 << 2, 0.6),
    ("silver", 5201, 0, 0.3),
    ("bronze", 7001, 0, 0.1),
];

/// `sluice demo` options.
#[derive(Args)]
pub struct DemoArgs {
    /// How long the traffic runs (`20s`, `1m`, ...).
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Print one plain frame per second instead of redrawing the screen.
    #[arg(long)]
    pub plain: bool,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let ns = sluice_sched::units::parse_duration(text).map_err(|e| e.to_string())?;
    let d = Duration::from_nanos(ns);
    if !(Duration::from_secs(3)..=Duration::from_secs(3600)).contains(&d) {
        return Err(format!("`{text}`: the demo runs between 3 s and 1 h"));
    }
    Ok(d)
}

/// What the demo started; dropping it stops them (iperf3 first, then the daemon, which removes
/// its namespaces), so nothing outlives the demo.
struct Lab {
    dir: PathBuf,
    daemon: Option<Child>,
    iperf: Vec<Child>,
    netns: [String; 2],
}

impl Lab {
    fn stop_iperf(&mut self) {
        for mut c in self.iperf.drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM the daemon and wait for it to take everything down.
    fn stop_daemon(&mut self) -> anyhow::Result<()> {
        let Some(mut daemon) = self.daemon.take() else {
            return Ok(());
        };
        let pid = nix::unistd::Pid::from_raw(daemon.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = daemon.try_wait()? {
                if !status.success() {
                    bail!(
                        "the daemon exited with {status}; its log: {}",
                        self.dir.join("daemon.log").display()
                    );
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = daemon.kill();
                let _ = daemon.wait();
                bail!("the daemon did not stop within 10 s of SIGTERM; killed it");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.stop_iperf();
        if let Err(e) = self.stop_daemon() {
            eprintln!("sluice demo: {e:#}");
        }
        // Last resort, if the daemon died without cleaning up: its namespaces by name.
        for ns in &self.netns {
            if Path::new("/var/run/netns").join(ns).exists() {
                let _ = Command::new("ip").args(["netns", "del", ns]).status();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn require_tools() -> anyhow::Result<()> {
    if !nix::unistd::Uid::effective().is_root() {
        bail!("the demo creates namespaces and taps: run it as root");
    }
    for tool in ["ip", "iperf3"] {
        let found = Command::new(tool)
            .arg("-v")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
            || Command::new(tool)
                .arg("-V")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok();
        if !found {
            bail!(
                "`{tool}` is not installed (scripts/setup.sh installs it: apt-get install iproute2 iperf3)"
            );
        }
    }
    Ok(())
}

/// `program args` inside namespace `ns`, in a process group of its own: Ctrl-C reaches only
/// the demo, which then stops everything in order.
fn in_netns(ns: &str, program: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, program])
        .args(args)
        .stdin(Stdio::null())
        .process_group(0);
    c
}

/// Wait until the daemon answers on its control socket.
fn wait_ready(lab: &mut Lab, socket: &Path) -> anyhow::Result<Snapshot> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(s) = top::fetch(socket) {
            return Ok(s);
        }
        if let Some(daemon) = lab.daemon.as_mut() {
            if let Some(status) = daemon.try_wait()? {
                lab.daemon = None;
                let log = std::fs::read_to_string(lab.dir.join("daemon.log")).unwrap_or_default();
                bail!("the daemon exited with {status} before it was ready:\n{log}");
            }
        }
        if Instant::now() > deadline {
            bail!(
                "the daemon did not answer on {} within 20 s",
                socket.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Run the demo.
pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    require_tools()?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .context("cannot handle Ctrl-C")?;
    }
    let pid = std::process::id();
    let dir = std::env::temp_dir().join(format!("sluice-demo-{pid}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let netns = [format!("sldemo{pid}a"), format!("sldemo{pid}b")];
    let mut lab = Lab {
        dir: dir.clone(),
        daemon: None,
        iperf: Vec::new(),
        netns: netns.clone(),
    };
    let socket = dir.join("control.sock");
    std::fs::write(dir.join("three-classes.toml"), POLICY)?;
    let config = format!(
        "# Written by `sluice demo`.\n[daemon]\nmode = \"event\"\ncontrol = \"{}\"\n\n\
         [[port]]\nname = \"a\"\nkind = \"tap\"\nnetns = \"{}\"\naddress = \"10.77.0.1/24\"\n\n\
         [[port]]\nname = \"b\"\nkind = \"tap\"\nnetns = \"{}\"\naddress = \"10.77.0.2/24\"\n\n\
         [[link]]\nfrom = \"a\"\nto = \"b\"\npolicy = \"three-classes.toml\"\n\n\
         [[link]]\nfrom = \"b\"\nto = \"a\"\n",
        socket.display(),
        netns[0],
        netns[1]
    );
    let config_path = dir.join("daemon.toml");
    std::fs::write(&config_path, &config)?;

    println!(
        "sluice demo: namespaces {} and {}, joined by sluice run ({})",
        netns[0],
        netns[1],
        config_path.display()
    );
    let log = std::fs::File::create(dir.join("daemon.log"))?;
    let exe = std::env::current_exe().context("cannot find the sluice executable")?;
    let daemon = Command::new(exe)
        .args(["run", "--config"])
        .arg(&config_path)
        .args(["--log-level", "warn"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("cannot start the daemon")?;
    lab.daemon = Some(daemon);
    let first = wait_ready(&mut lab, &socket)?;

    // ECN: the daemon marks instead of dropping; the sender must ask for it.
    let ecn = in_netns(&netns[0], "sysctl", &["-q", "-w", "net.ipv4.tcp_ecn=1"]).status()?;
    if !ecn.success() {
        bail!("cannot enable ECN in {}", netns[0]);
    }
    for (_, port, _, _) in FLOWS {
        let server = in_netns(&netns[1], "iperf3", &["-s", "-1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start iperf3")?;
        lab.iperf.push(server);
    }
    std::thread::sleep(Duration::from_millis(300));
    let secs = args.duration.as_secs().to_string();
    for (_, port, tos, _) in FLOWS {
        let client = in_netns(
            &netns[0],
            "iperf3",
            &[
                "-c",
                "10.77.0.2",
                "-p",
                &port.to_string(),
                "-t",
                &secs,
                "-C",
                "cubic",
                "-S",
                &tos.to_string(),
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start iperf3")?;
        lab.iperf.push(client);
    }

    let live = std::io::stdout().is_terminal() && !args.plain;
    let view = View {
        flows: 5,
        width: None,
    };
    let start = Instant::now();
    let mut prev = first;
    let mut warm: Option<Snapshot> = None;
    let mut out = std::io::stdout();
    while start.elapsed() < args.duration && !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_secs(1));
        let cur = top::fetch(&socket)?;
        let frame = top::render(Some(&prev), &cur, &view);
        if live {
            write!(out, "\x1b[H\x1b[2J{frame}")?;
        } else {
            writeln!(out, "{frame}")?;
        }
        out.flush()?;
        // Measure after two seconds of warm-up (TCP's slow start).
        if warm.is_none() && start.elapsed() >= Duration::from_secs(2) {
            warm = Some(cur.clone());
        }
        prev = cur;
    }
    let interrupted = stop.load(Ordering::SeqCst);
    lab.stop_iperf();
    if let Some(warm) = warm.filter(|_| !interrupted) {
        print_summary(&warm, &prev);
    }
    lab.stop_daemon()?;
    drop(lab);
    for ns in &netns {
        if Path::new("/var/run/netns").join(ns).exists() {
            bail!("namespace {ns} is still there after the demo");
        }
    }
    println!(
        "sluice demo: {}; the daemon removed its namespaces and taps",
        if interrupted { "interrupted" } else { "done" }
    );
    Ok(())
}

/// What each class got between two snapshots against what the policy promises.
fn print_summary(from: &Snapshot, to: &Snapshot) {
    let secs = to.uptime_ns.saturating_sub(from.uptime_ns) as f64 / 1e9;
    let (Some(a), Some(b)) = (from.links.first(), to.links.first()) else {
        return;
    };
    if secs <= 0.0 {
        return;
    }
    println!("\nclass    share  expected        measured (wire)");
    for (name, _, _, share) in FLOWS {
        let bytes = |l: &sluice_dp::stats::LinkSnapshot| {
            l.classes
                .iter()
                .find(|c| c.name == name)
                .map_or(0, |c| c.sent_bytes)
        };
        let rate = bytes(b).saturating_sub(bytes(a)) as f64 * 8.0 / secs;
        println!(
            "{name:<8} {:>4.0}%  {:>14}  {:>14}",
            share * 100.0,
            top::human_rate(share * 1e9),
            top::human_rate(rate)
        );
    }
    let drops: u64 = to.drops.values().sum();
    println!("drops {drops}, ECN marks {}", to.ecn_marked);
}
