//! `sluice demo`: the software NIC in one command.
//!
//! It creates two namespaces joined by the daemon (each gets a tap), starts `sluice run` on
//! them with `examples/policies/three-classes.toml` (a 1 Gbit/s root shared 6 : 3 : 1 by gold,
//! silver and bronze, each with a ceiling), runs one iperf3 flow per class through it, shows
//! the live view (`sluice top`'s) every second, and at the end compares what each class got
//! with what the policy promises. Everything it created goes away at the end, on an error and
//! on Ctrl-C: the daemon removes its namespaces and taps when it gets SIGTERM, and a guard
//! here stops the daemon and the iperf3 processes whatever happens. Killed outright, the demo
//! still takes its children with it (they get SIGTERM when it dies). It watches them: an
//! iperf3 or a daemon that stops early ends the demo with what it said, and an interrupted
//! demo exits non-zero. A reader that closes its output (`| head`) ends it quietly.
//!
//! ```text
//!  namespace A (10.77.0.1)                         namespace B (10.77.0.2)
//!  iperf3 -c  ──tap──> sluice run (three classes) ──tap──> iperf3 -s
//!   gold: DSCP 46 (EF)   silver: port 5201   bronze: port 7001
//! ```

use crate::bench::dp::procs::die_with_parent;
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
    /// How long the traffic runs, whole seconds from 3 to 3600 (`20s`, `60s`, `3600s`).
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Print one plain frame per second instead of redrawing the screen.
    #[arg(long)]
    pub plain: bool,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let ns = sluice_sched::units::parse_duration(text).map_err(|e| e.to_string())?;
    let d = Duration::from_nanos(ns);
    // Whole seconds: iperf3 runs whole seconds, and a fraction left a second without traffic
    // in the measured window (3.5s measured half the rates).
    if !(Duration::from_secs(3)..=Duration::from_secs(3600)).contains(&d) || d.subsec_nanos() != 0 {
        return Err(format!(
            "`{text}`: the demo runs whole seconds from 3s to 3600s"
        ));
    }
    Ok(d)
}

/// What the demo started; dropping it stops them (iperf3 first, then the daemon, which removes
/// its namespaces), so nothing outlives the demo.
struct Lab {
    dir: PathBuf,
    daemon: Option<Child>,
    /// Each iperf3 with what it is (`gold client`) and the file its messages go to.
    iperf: Vec<(String, Child, PathBuf)>,
    netns: [String; 2],
}

impl Lab {
    fn stop_iperf(&mut self) {
        for (_, mut c, _) in self.iperf.drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start iperf3 with `args` in namespace `ns`, as `what`, its messages to a file.
    fn start_iperf(&mut self, what: String, ns: &str, args: &[&str]) -> anyhow::Result<()> {
        let file = self
            .dir
            .join(format!("iperf3-{}.log", what.replace(' ', "-")));
        let log = std::fs::File::create(&file)
            .with_context(|| format!("cannot create {}", file.display()))?;
        let child = in_netns(ns, "iperf3", args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("cannot start iperf3")?;
        self.iperf.push((what, child, file));
        Ok(())
    }

    /// An iperf3 that ended before its time, as an error with what it said; `done` is true
    /// once the traffic may have ended.
    fn iperf_failure(&mut self, done: bool) -> anyhow::Result<()> {
        for (what, child, file) in &mut self.iperf {
            if let Some(status) = child.try_wait()? {
                if done && status.success() {
                    continue;
                }
                let said = std::fs::read_to_string(file).unwrap_or_default();
                bail!(
                    "iperf3 ({what}) stopped early with {status}: {}",
                    said.trim()
                );
            }
        }
        Ok(())
    }

    /// The daemon's exit and its log, as an error, if it exited.
    fn daemon_failure(&mut self) -> anyhow::Result<()> {
        let Some(daemon) = self.daemon.as_mut() else {
            return Ok(());
        };
        if let Some(status) = daemon.try_wait()? {
            self.daemon = None;
            let log = std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default();
            bail!("the daemon exited with {status}:\n{}", log.trim());
        }
        Ok(())
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
    // `ip netns exec` execs the program, which keeps the signal.
    die_with_parent(&mut c);
    c
}

/// An error if a namespace of one of the demo's `names` exists already (`exists` tells). The
/// daemon would refuse it, and the demo's guard, which removes its namespaces by name if the
/// daemon could not, would then delete a namespace the demo never created.
fn refuse_taken(names: &[String], exists: impl Fn(&str) -> bool) -> anyhow::Result<()> {
    if let Some(ns) = names.iter().find(|ns| exists(ns)) {
        bail!(
            "namespace {ns} already exists (an earlier demo killed outright with this process \
             id, or someone else's); the demo removes only what it created: check it and \
             remove it with `ip netns del {ns}`"
        );
    }
    Ok(())
}

/// What to do when the scratch directory cannot be made or written.
const SCRATCH_HINT: &str = "(set TMPDIR to a writable directory with room)";

/// Create the demo's scratch directory `dir`, private to this user (mode 0700), and refuse
/// one that exists already. It is in the temporary directory, world-writable, under a name
/// anyone can guess: a directory made there in advance may be someone else's, who could change
/// the daemon's configuration in it before the daemon (as root) reads it, and the demo removes
/// its scratch directory when it ends. (Those of earlier demos whose process is gone were
/// removed already: [`report_leftovers`].)
fn make_scratch(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => bail!(
            "{} already exists, and the demo did not make it (its name has this demo's process \
             id); it is left alone: check it and remove it, or set TMPDIR to another directory",
            dir.display()
        ),
        Err(e) => Err(e).with_context(|| format!("cannot create {} {SCRATCH_HINT}", dir.display())),
    }
}

/// Wait until the daemon answers on its control socket.
fn wait_ready(lab: &mut Lab, socket: &Path) -> anyhow::Result<Snapshot> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(s) = top::fetch(socket) {
            return Ok(s);
        }
        lab.daemon_failure()
            .context("the daemon stopped before it was ready")?;
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
    report_leftovers();
    let pid = std::process::id();
    let netns = [format!("sldemo{pid}a"), format!("sldemo{pid}b")];
    // Before anything is created and before the guard, which removes these names when the
    // demo ends: never someone else's.
    refuse_taken(&netns, sluice_dp::netns::netns_exists)?;
    let dir = std::env::temp_dir().join(format!("sluice-demo-{pid}"));
    make_scratch(&dir)?;
    let mut lab = Lab {
        dir: dir.clone(),
        daemon: None,
        iperf: Vec::new(),
        netns: netns.clone(),
    };
    let hint = SCRATCH_HINT;
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text)
            .with_context(|| format!("cannot write {} {hint}", path.display()))
            .map(|()| path)
    };
    let socket = dir.join("control.sock");
    write("three-classes.toml", POLICY)?;
    // Paths as TOML strings, escaped whatever the temporary directory's name holds.
    let quoted = |p: &Path| toml::Value::String(p.display().to_string()).to_string();
    let config = format!(
        "# Written by `sluice demo`.\n[daemon]\nmode = \"event\"\ncontrol = {}\n\n\
         [[port]]\nname = \"a\"\nkind = \"tap\"\nnetns = \"{}\"\naddress = \"10.77.0.1/24\"\n\n\
         [[port]]\nname = \"b\"\nkind = \"tap\"\nnetns = \"{}\"\naddress = \"10.77.0.2/24\"\n\n\
         [[link]]\nfrom = \"a\"\nto = \"b\"\npolicy = \"three-classes.toml\"\n\n\
         [[link]]\nfrom = \"b\"\nto = \"a\"\n",
        quoted(&socket),
        netns[0],
        netns[1]
    );
    let config_path = write("daemon.toml", &config)?;

    let mut out = Output::new();
    out.line(&format!(
        "sluice demo: namespaces {} and {}, joined by sluice run ({})",
        netns[0],
        netns[1],
        config_path.display()
    ));
    let log_path = dir.join("daemon.log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("cannot create {} {hint}", log_path.display()))?;
    let exe = std::env::current_exe().context("cannot find the sluice executable")?;
    let mut daemon = Command::new(exe);
    daemon
        .args(["run", "--config"])
        .arg(&config_path)
        .args(["--log-level", "warn"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0);
    // Killed outright, the demo still takes the daemon down, and the daemon its namespaces.
    die_with_parent(&mut daemon);
    lab.daemon = Some(daemon.spawn().context("cannot start the daemon")?);
    let first = wait_ready(&mut lab, &socket)?;

    // ECN: the daemon marks instead of dropping; the sender must ask for it. Written in the
    // namespace directly: `sysctl` may be missing or off PATH (/usr/sbin after `su`).
    let ecn = sluice_dp::netns::in_netns(&netns[0], || {
        std::fs::write("/proc/sys/net/ipv4/tcp_ecn", "1")
    })?;
    ecn.with_context(|| format!("cannot enable ECN in {}", netns[0]))?;
    for (name, port, _, _) in FLOWS {
        let port = port.to_string();
        lab.start_iperf(
            format!("{name} server"),
            &netns[1],
            &["-s", "-1", "-p", &port],
        )?;
    }
    std::thread::sleep(Duration::from_millis(300));
    let secs = args.duration.as_secs().to_string();
    for (name, port, tos, _) in FLOWS {
        let (port, tos) = (port.to_string(), tos.to_string());
        let client = [
            "-c",
            "10.77.0.2",
            "-p",
            &port,
            "-t",
            &secs,
            "-C",
            "cubic",
            "-S",
            &tos,
        ];
        lab.start_iperf(format!("{name} client"), &netns[0], &client)?;
    }

    let live = std::io::stdout().is_terminal() && !args.plain;
    let view = View {
        flows: 5,
        width: None,
    };
    let start = Instant::now();
    let mut prev = first;
    let mut warm: Option<Snapshot> = None;
    while start.elapsed() < args.duration && !stop.load(Ordering::SeqCst) && out.open() {
        std::thread::sleep(Duration::from_secs(1));
        // Traffic may end in the last second and a half (iperf3 started a little earlier).
        lab.iperf_failure(start.elapsed() + Duration::from_millis(1500) >= args.duration)?;
        let cur = match top::fetch(&socket) {
            Ok(s) => s,
            Err(e) => {
                lab.daemon_failure()?;
                return Err(e);
            }
        };
        let frame = top::render(Some(&prev), &cur, &view);
        if live {
            out.text(&format!("\x1b[H\x1b[2J{frame}"));
        } else {
            out.line(&frame);
        }
        // Measure after two seconds of warm-up (TCP's slow start).
        if warm.is_none() && start.elapsed() >= Duration::from_secs(2) {
            warm = Some(cur.clone());
        }
        prev = cur;
    }
    let interrupted = stop.load(Ordering::SeqCst);
    lab.stop_iperf();
    if let Some(warm) = warm.filter(|_| !interrupted) {
        out.text(&summary(&warm, &prev));
    }
    lab.stop_daemon()?;
    drop(lab);
    for ns in &netns {
        if Path::new("/var/run/netns").join(ns).exists() {
            bail!("namespace {ns} is still there after the demo");
        }
    }
    if interrupted {
        bail!("interrupted; the daemon removed its namespaces and taps");
    }
    out.line("sluice demo: done; the daemon removed its namespaces and taps");
    Ok(())
}

/// Standard output that a reader may close (`sluice demo | head`): once it is closed the
/// demo stops early, cleans up and ends quietly.
struct Output {
    out: std::io::Stdout,
    closed: bool,
}

impl Output {
    fn new() -> Self {
        Output {
            out: std::io::stdout(),
            closed: false,
        }
    }

    fn open(&self) -> bool {
        !self.closed
    }

    fn text(&mut self, text: &str) {
        if !self.closed {
            let written = self
                .out
                .write_all(text.as_bytes())
                .and_then(|()| self.out.flush());
            self.closed = written.is_err();
        }
    }

    fn line(&mut self, line: &str) {
        self.text(&format!("{line}\n"));
    }
}

/// Tidy up after earlier demos that were killed outright (their children follow them now, but
/// not their scratch directories): remove those directories, and say which namespaces are
/// left, if any. Both names carry the demo's process id; only those of gone processes count.
fn report_leftovers() {
    remove_leftover_scratch(&std::env::temp_dir());
    let Ok(entries) = std::fs::read_dir("/var/run/netns") else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix("sldemo")
            .and_then(|r| r.strip_suffix(['a', 'b']));
        if pid.is_some_and(gone) {
            eprintln!(
                "sluice demo: namespace {name} is left from an earlier demo whose process is \
                 gone; remove it with `ip netns del {name}`"
            );
        }
    }
}

/// Whether the process `pid` (a number) is gone.
fn gone(pid: &str) -> bool {
    pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists()
}

/// Remove the scratch directories in `tmp` of earlier demos whose process is gone, only those
/// this user owns: the temporary directory is everyone's, and a directory of that name made
/// by another user (or a link to one) is theirs to remove, not the demo's as root.
fn remove_leftover_scratch(tmp: &Path) {
    use std::os::unix::fs::MetadataExt;
    let uid = nix::unistd::geteuid().as_raw();
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let ours = std::fs::symlink_metadata(e.path()).is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if ours && name.strip_prefix("sluice-demo-").is_some_and(gone) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// What each class got between two snapshots against what the policy promises.
fn summary(from: &Snapshot, to: &Snapshot) -> String {
    let secs = to.uptime_ns.saturating_sub(from.uptime_ns) as f64 / 1e9;
    let (Some(a), Some(b)) = (from.links.first(), to.links.first()) else {
        return String::new();
    };
    if secs <= 0.0 {
        return String::new();
    }
    let mut text = String::from("\nclass    share  expected        measured (wire)\n");
    for (name, _, _, share) in FLOWS {
        let bytes = |l: &sluice_dp::stats::LinkSnapshot| {
            l.classes
                .iter()
                .find(|c| c.name == name)
                .map_or(0, |c| c.sent_bytes)
        };
        let rate = bytes(b).saturating_sub(bytes(a)) as f64 * 8.0 / secs;
        text += &format!(
            "{name:<8} {:>4.0}%  {:>14}  {:>14}\n",
            share * 100.0,
            top::human_rate(share * 1e9),
            top::human_rate(rate)
        );
    }
    let drops: u64 = to.drops.values().sum();
    text += &format!("drops {drops}, ECN marks {}\n", to.ecn_marked);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A namespace of the demo's names that already existed was refused by the daemon, and
    /// then deleted by the demo's guard, which removes its namespaces by name as a last resort.
    #[test]
    fn a_namespace_name_in_use_is_refused_and_named() {
        let names = ["sldemo77a".to_string(), "sldemo77b".to_string()];
        assert!(refuse_taken(&names, |_| false).is_ok());
        let err = refuse_taken(&names, |ns| ns == "sldemo77b")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("namespace sldemo77b already exists"),
            "{err}"
        );
        assert!(err.contains("`ip netns del sldemo77b`"), "{err}");
    }

    /// Leftover scratch directories of demos whose process is gone are removed only when this
    /// user owns them: one another user made, or a link, is left alone, as are those of a
    /// live process and other names.
    #[test]
    fn only_our_own_leftover_scratch_directories_are_removed() {
        use std::os::unix::fs::symlink;
        let tmp = std::env::temp_dir().join(format!("sluice-leftovers-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        // No process has a pid this large (Linux's pid_max is at most 2^22).
        let dead = 999_999_999u32;
        let ours = tmp.join(format!("sluice-demo-{dead}"));
        let live = tmp.join(format!("sluice-demo-{}", std::process::id()));
        let other_name = tmp.join("sluice-demo-notapid");
        let target = tmp.join("target");
        let link = tmp.join(format!("sluice-demo-{}", dead - 1));
        for d in [&ours, &live, &other_name, &target] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(target.join("keep"), "x").unwrap();
        symlink(&target, &link).unwrap();
        let theirs = tmp.join(format!("sluice-demo-{}", dead - 2));
        std::fs::create_dir(&theirs).unwrap();
        let foreign = nix::unistd::geteuid().is_root();
        if foreign {
            // As root (as CI runs), give it to another user: it must stay.
            let nobody = nix::unistd::Uid::from_raw(65534);
            nix::unistd::chown(&theirs, Some(nobody), None).unwrap();
        }
        remove_leftover_scratch(&tmp);
        assert!(
            !ours.exists(),
            "ours, of a process that is gone, is removed"
        );
        for kept in [&live, &other_name, &target, &link] {
            assert!(kept.exists(), "{} is kept", kept.display());
        }
        assert!(target.join("keep").exists());
        assert_eq!(theirs.exists(), foreign, "another user's is kept");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// The scratch directory is in a world-writable place, under a name anyone can guess
    /// (the process id). One made in advance by someone else was used as it was: the demo,
    /// as root, wrote the daemon's configuration into a directory another user could change it
    /// in before the daemon read it, and removed that directory at the end. Now a directory
    /// of that name is refused and left alone, and the demo's own is private to it.
    #[test]
    fn a_scratch_directory_that_exists_already_is_refused_and_left_alone() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("sluice-demo-test-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        let theirs = base.join("taken");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::write(theirs.join("daemon.toml"), "theirs").unwrap();
        let err = make_scratch(&theirs).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("{} already exists", theirs.display())),
            "{err}"
        );
        assert_eq!(
            std::fs::read_to_string(theirs.join("daemon.toml")).unwrap(),
            "theirs"
        );
        let ours = base.join("ours");
        make_scratch(&ours).unwrap();
        let mode = std::fs::metadata(&ours).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
        let missing = base.join("no-such-dir").join("sluice-demo-1");
        let err = make_scratch(&missing).unwrap_err().to_string();
        assert!(err.contains("set TMPDIR"), "{err}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
