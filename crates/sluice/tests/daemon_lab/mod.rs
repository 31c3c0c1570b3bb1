//! A small lab for driving `sluice run` end to end: network namespaces, the daemon as a child
//! process, iperf3 and ping inside the namespaces, and guards that take all of it down.
//!
//! **Names.** Every name a test creates carries the test process's pid and the test's tag, so
//! tests of this binary and of other binaries run side by side without colliding:
//! namespaces `slt<pid>-<tag>-<x>`, a scratch directory `$TMPDIR/sluice-dt-<pid>-<tag>` (the
//! config, policies, the control socket, logs). The daemon names its taps itself
//! (`sl<daemon pid>-<port index>`), unique among running daemons.
//!
//! **Clean-up, also when a test fails.** Guards drop in reverse order of declaration: a test
//! declares its [`Lab`] first, then its [`Daemon`]s and [`Helper`]s, so on any exit (return or
//! panic) helpers are killed and daemons stopped (SIGTERM, then SIGKILL after
//! [`STOP_PATIENCE`]) before the lab deletes, as a last resort, every namespace it named that
//! still exists, and its scratch directory.
//!
//! **Time.** Nothing here depends on the machine's speed except through generous timeouts
//! ([`PATIENCE`]): readiness and conditions are polled, rates are measured over seconds.
//!
//! **Skipping.** [`Lab::new`] returns `None` after printing `skipped: ...` when the tests cannot
//! run here (not root, no `/dev/net/tun`, a tool missing).

use sluice_dp::control::{Reply, Request};
use sluice_dp::control_socket;
use sluice_dp::stats::{ClassSnapshot, Snapshot};
use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// How long a condition that should hold soon (a daemon ready, a counter reached, a process
/// gone) may take before the test fails. Generous: CI machines are slow and shared.
pub const PATIENCE: Duration = Duration::from_secs(30);
/// How long a daemon may take to exit after SIGTERM before the guard kills it.
pub const STOP_PATIENCE: Duration = Duration::from_secs(20);
/// How often conditions are polled.
const POLL: Duration = Duration::from_millis(50);
/// How long one control request may wait for its reply.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Programs every test runs (iproute2's `ip` and `ss`, `ping`); tests that need more name
/// them in [`Lab::new`].
const TOOLS: [&str; 3] = ["ip", "ss", "ping"];

/// Address of port `a` (namespace `a`) in [`Lab::pair_config`].
pub const ADDR_A: &str = "10.77.0.1";
/// Address of port `b` (namespace `b`) in [`Lab::pair_config`].
pub const ADDR_B: &str = "10.77.0.2";

/// Tests that measure rates hold this exclusively, so that no other test of this binary
/// competes for the two CPUs during their measurement windows; every other test holds it
/// shared.
static MEASURE: RwLock<()> = RwLock::new(());

/// A held share of [`MEASURE`], released when the lab drops.
enum Turn {
    /// A test that measures rates: alone.
    Alone {
        _guard: RwLockWriteGuard<'static, ()>,
    },
    /// Any other test: alongside other such tests.
    Shared {
        _guard: RwLockReadGuard<'static, ()>,
    },
}

/// Why a test that runs `tools` cannot run here, if it cannot.
fn skip_reason(tools: &[&str]) -> Option<String> {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("");
    if euid != "0" {
        return Some("not root (the daemon creates namespaces and taps)".into());
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun".into());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for tool in TOOLS.iter().chain(tools) {
        if !std::env::split_paths(&path).any(|d| d.join(tool).is_file()) {
            return Some(format!("`{tool}` is not installed"));
        }
    }
    None
}

/// Run a measurement of real traffic (`measure`, given a lab tag), and once more, under the
/// tag `{tag}-2`, if `ok` finds its result off: the machine is shared, and a neighbour's load
/// that starves a daemon engine or the senders for a few milliseconds cost one CI run 6% at
/// 200 Mbit/s (188.6 Mbit/s, then 199.4-199.9 in four runs right after) and another a 40
/// Mbit/s class 5.2%. The second result is returned, and it is the one the test asserts.
pub fn measured_again_if_off<T>(
    tag: &str,
    mut measure: impl FnMut(&str) -> Option<T>,
    ok: impl Fn(&T) -> bool,
) -> Option<T> {
    let first = measure(tag)?;
    if ok(&first) {
        return Some(first);
    }
    println!("{tag}: off target, measuring again");
    measure(&format!("{tag}-2"))
}

/// One test's namespaces and scratch directory; deletes what is left of them when dropped.
pub struct Lab {
    tag: String,
    /// Scratch directory (config, policies, control socket, logs).
    pub dir: PathBuf,
    namespaces: Vec<String>,
    _turn: Turn,
}

impl Lab {
    /// A lab for the test tagged `tag` (a few letters; unique in this file), which runs
    /// `tools` besides `ip`, `ss` and `ping`, or `None` (after printing why) when it cannot run
    /// here. `alone`: the test measures rates and runs while no other test of this binary does.
    pub fn new(tag: &str, alone: bool, tools: &[&str]) -> Option<Lab> {
        if let Some(why) = skip_reason(tools) {
            eprintln!("skipped: {why}");
            return None;
        }
        let turn = if alone {
            Turn::Alone {
                _guard: MEASURE.write().unwrap_or_else(|e| e.into_inner()),
            }
        } else {
            Turn::Shared {
                _guard: MEASURE.read().unwrap_or_else(|e| e.into_inner()),
            }
        };
        let dir = std::env::temp_dir().join(format!("sluice-dt-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create the scratch directory");
        Some(Lab {
            tag: tag.to_string(),
            dir,
            namespaces: Vec::new(),
            _turn: turn,
        })
    }

    /// A namespace name unique to this test and `suffix`, remembered for clean-up. The name is
    /// not created here.
    pub fn ns(&mut self, suffix: &str) -> String {
        let name = format!("slt{}-{}-{suffix}", std::process::id(), self.tag);
        if !self.namespaces.contains(&name) {
            self.namespaces.push(name.clone());
        }
        name
    }

    /// Write `text` to `name` in the scratch directory and return its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.join(name);
        fs::write(&path, text).expect("write a scratch file");
        path
    }

    /// The control socket path for daemon `n` of this test.
    pub fn control(&self, n: usize) -> PathBuf {
        self.dir.join(format!("ctl{n}.sock"))
    }

    /// A daemon config: port `a` (tap in namespace `ns_a`, [`ADDR_A`]/24) and port `b` (tap in
    /// `ns_b`, [`ADDR_B`]/24), default interface names, link `a -> b` scheduled by `policy`
    /// (FIFO if `None`), link `b -> a` FIFO, control socket `control`, and `extra` lines in
    /// `[daemon]`.
    pub fn pair_config(
        &self,
        ns_a: &str,
        ns_b: &str,
        policy: Option<&Path>,
        control: &Path,
        extra: &str,
    ) -> String {
        let policy = policy
            .map(|p| format!("policy = \"{}\"\n", p.display()))
            .unwrap_or_default();
        format!(
            "[daemon]\ncontrol = \"{control}\"\n{extra}\n\n\
             [[port]]\nname = \"a\"\nkind = \"tap\"\n\
             netns = \"{ns_a}\"\naddress = \"{ADDR_A}/24\"\n\n\
             [[port]]\nname = \"b\"\nkind = \"tap\"\n\
             netns = \"{ns_b}\"\naddress = \"{ADDR_B}/24\"\n\n\
             [[link]]\nfrom = \"a\"\nto = \"b\"\n{policy}\n\
             [[link]]\nfrom = \"b\"\nto = \"a\"\n",
            control = control.display(),
        )
    }

    /// Start `sluice run` on the config `text` (written as `name`) and wait until its control
    /// socket `control` answers. Panics with the daemon's log if it exits or never answers.
    pub fn start(&self, name: &str, text: &str, control: &Path) -> Daemon {
        self.try_start(name, text, control)
            .unwrap_or_else(|log| panic!("the daemon exited before it was ready:\n{log}"))
    }

    /// [`Lab::start`], the daemon running in namespace `ns` (`ip netns exec`), where its
    /// `af_packet` ports' interfaces are.
    pub fn start_in(&self, ns: &str, name: &str, text: &str, control: &Path) -> Daemon {
        self.try_start_under(&["ip", "netns", "exec", ns], name, text, control)
            .unwrap_or_else(|log| panic!("the daemon exited before it was ready:\n{log}"))
    }

    /// [`Lab::start`], but a daemon that exits before it is ready is an `Err` with its log.
    pub fn try_start(&self, name: &str, text: &str, control: &Path) -> Result<Daemon, String> {
        self.try_start_under(&[], name, text, control)
    }

    /// [`Lab::try_start`], the daemon started by `wrapper` (a program that execs its
    /// arguments, so that the pid is the daemon's).
    fn try_start_under(
        &self,
        wrapper: &[&str],
        name: &str,
        text: &str,
        control: &Path,
    ) -> Result<Daemon, String> {
        let config = self.write(name, text);
        let log = self.dir.join(format!("{name}.log"));
        let child = spawn_daemon(&config, &log, wrapper);
        let mut d = Daemon {
            child: Some(child),
            control: control.to_path_buf(),
            log,
        };
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = d.try_wait() {
                return Err(format!("{status}\n{}", d.log()));
            }
            if let Ok(Reply::Stats(_)) =
                control_socket::request(control, &Request::Stats {}, REQUEST_TIMEOUT)
            {
                return Ok(d);
            }
            assert!(
                Instant::now() < deadline,
                "the daemon did not answer on {} within {PATIENCE:?}:\n{}",
                control.display(),
                d.log()
            );
            sleep(POLL);
        }
    }

    /// Run `sluice run` on the config `text` (written as `name`), which must fail: wait (at
    /// most [`PATIENCE`]) for it to exit and return its status, its pid and its stderr. Panics if
    /// it is still running then (it is stopped first).
    pub fn run_failing(&self, name: &str, text: &str) -> (ExitStatus, u32, String) {
        self.run_failing_under(&[], name, text)
    }

    /// [`Lab::run_failing`], the daemon started by `wrapper` (a program that execs its
    /// arguments, like `setpriv`, so that the pid is the daemon's).
    pub fn run_failing_under(
        &self,
        wrapper: &[&str],
        name: &str,
        text: &str,
    ) -> (ExitStatus, u32, String) {
        let config = self.write(name, text);
        let log = self.dir.join(format!("{name}.log"));
        let child = spawn_daemon(&config, &log, wrapper);
        let pid = child.id();
        let mut d = Daemon {
            child: Some(child),
            control: PathBuf::new(),
            log,
        };
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = d.try_wait() {
                return (status, pid, d.log());
            }
            assert!(
                Instant::now() < deadline,
                "`sluice run` on {name} should have failed but is still running:\n{}",
                d.log()
            );
            sleep(POLL);
        }
    }

    /// Set `key` (under `/proc/sys/net/`, like `ipv4/tcp_ecn`) to `value` in namespace `ns`.
    pub fn sysctl(&self, ns: &str, key: &str, value: &str) {
        let path = format!("/proc/sys/net/{key}");
        let out = in_ns(ns, "sh")
            .args(["-c", &format!("echo {value} > {path} && cat {path}")])
            .output()
            .expect("run sh");
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == value,
            "cannot set {path} = {value} in {ns}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Start an iperf3 server in `ns` on `port` for one test (`-1`), its JSON report going to
    /// a file; returns once it listens.
    pub fn iperf_server(&self, ns: &str, port: u16) -> Helper {
        let out = self.dir.join(format!("iperf-server-{ns}-{port}.json"));
        let child = in_ns(ns, "iperf3")
            .args(["-s", "-1", "-J", "-i", "1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(File::create(&out).expect("create the server's report"))
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn iperf3 -s");
        let mut h = Helper {
            child: Some(child),
            out,
        };
        wait_for(&format!("iperf3 listening on {ns}:{port}"), || {
            assert!(h.try_wait().is_none(), "iperf3 -s exited early");
            let ss = in_ns(ns, "ss")
                .args(["-Hltn", &format!("sport = :{port}")])
                .output()
                .expect("run ss");
            !String::from_utf8_lossy(&ss.stdout).trim().is_empty()
        });
        h
    }

    /// Start an iperf3 client in `ns` towards `server:port`: `args` added to `-J -C cubic`.
    pub fn iperf_client(&self, ns: &str, server: &str, port: u16, args: &[&str]) -> Helper {
        let out = self.dir.join(format!("iperf-client-{ns}-{port}.json"));
        let child = in_ns(ns, "iperf3")
            .args(["-c", server, "-p", &port.to_string(), "-J", "-C", "cubic"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(File::create(&out).expect("create the client's report"))
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn iperf3 -c");
        Helper {
            child: Some(child),
            out,
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            if sluice_dp::netns::netns_exists(ns) {
                eprintln!("clean-up: deleting namespace {ns}");
                let _ = Command::new("ip")
                    .args(["netns", "del", ns])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn spawn_daemon(config: &Path, log: &Path, wrapper: &[&str]) -> Child {
    let sluice = env!("CARGO_BIN_EXE_sluice");
    let mut command = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(sluice);
            c
        }
        None => Command::new(sluice),
    };
    command
        .args(["run", "--config"])
        .arg(config)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(File::create(log).expect("create the daemon's log"))
        .stderr(
            File::options()
                .append(true)
                .open(log)
                .expect("open the daemon's log"),
        )
        .spawn()
        .expect("spawn sluice run")
}

/// `ip netns exec NS PROGRAM` (ip execs the program, so the child's pid is the program's).
pub fn in_ns(ns: &str, program: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, program]);
    c
}

/// Ping `addr` from namespace `ns`: three echo replies within 20 s?
pub fn ping(ns: &str, addr: &str) -> Output {
    in_ns(ns, "ping")
        .args(["-c", "3", "-i", "0.2", "-w", "20", "-q", addr])
        .output()
        .expect("run ping")
}

/// Assert that a ping from `ns` to `addr` gets replies.
pub fn assert_ping(ns: &str, addr: &str) {
    let out = ping(ns, addr);
    assert!(
        out.status.success(),
        "ping {addr} from {ns} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Poll `cond` until it holds; panic naming `what` after [`PATIENCE`].
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {PATIENCE:?} waiting for {what}"
        );
        sleep(POLL);
    }
}

/// Send `signal` (like `-TERM`) to process `pid` (with the shell's `kill`: always there).
fn signal(pid: u32, signal: &str) {
    let _ = Command::new("sh")
        .args(["-c", "kill \"$0\" \"$1\"", signal, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Wait up to `patience` for `child` to exit.
fn wait_timeout(child: &mut Child, patience: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + patience;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        sleep(POLL);
    }
}

/// A running `sluice run`; stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Daemon {
    child: Option<Child>,
    /// Its control socket.
    pub control: PathBuf,
    log: PathBuf,
}

impl Daemon {
    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Everything it logged (stdout and stderr) so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its exit status, if it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Send one request to its control socket.
    pub fn request(&self, req: &Request) -> Reply {
        control_socket::request(&self.control, req, REQUEST_TIMEOUT)
            .unwrap_or_else(|e| panic!("control request {req:?}: {e}\n{}", self.log()))
    }

    /// Its statistics now.
    pub fn stats(&self) -> Snapshot {
        match self.request(&Request::Stats {}) {
            Reply::Stats(s) => *s,
            other => panic!("stats: unexpected reply {other:?}"),
        }
    }

    /// SIGTERM it and wait (at most [`STOP_PATIENCE`]) for its exit status; `None` if it did
    /// not exit in time (it is then killed) or was already stopped.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        signal(child.id(), "-TERM");
        let status = wait_timeout(&mut child, STOP_PATIENCE);
        if status.is_none() {
            eprintln!("clean-up: the daemon did not stop on SIGTERM and was killed");
            let _ = child.kill();
            let _ = child.wait();
        }
        status
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A helper process (iperf3) killed when dropped.
pub struct Helper {
    child: Option<Child>,
    /// Where its stdout goes.
    pub out: PathBuf,
}

impl Helper {
    /// Its exit status, if it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Wait (at most [`PATIENCE`]) for it to exit and return its stdout; panics if it failed
    /// or did not exit.
    pub fn finish(mut self) -> String {
        let mut child = self.child.take().expect("a running helper");
        let status = wait_timeout(&mut child, PATIENCE);
        let out = fs::read_to_string(&self.out).unwrap_or_default();
        match status {
            Some(s) if s.success() => out,
            Some(s) => panic!("{} exited with {s}:\n{out}", self.out.display()),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{} did not finish within {PATIENCE:?}", self.out.display())
            }
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Bit/s of class `name` of the link reading from `link` between two snapshots (wire bytes,
/// timed by the daemon's own uptime stamps).
pub fn class_rate_bps(before: &Snapshot, after: &Snapshot, link: &str, name: &str) -> f64 {
    let bytes = |s: &Snapshot| class(s, link, name).sent_bytes;
    let secs = (after.uptime_ns - before.uptime_ns) as f64 / 1e9;
    (bytes(after) - bytes(before)) as f64 * 8.0 / secs
}

/// Class `name` of the link reading from `link`.
pub fn class<'a>(s: &'a Snapshot, link: &str, name: &str) -> &'a ClassSnapshot {
    s.links
        .iter()
        .find(|l| l.from == link)
        .unwrap_or_else(|| panic!("no link from {link} in {s:?}"))
        .classes
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no class {name} on link {link} in {s:?}"))
}

/// What an iperf3 receiver measured: TCP payload bytes and seconds over its report intervals
/// that lie within `[from_s, to_s]` seconds of the test's start.
pub fn iperf_received(server_json: &str, from_s: f64, to_s: f64) -> (u64, f64) {
    let v: serde_json::Value = serde_json::from_str(server_json)
        .unwrap_or_else(|e| panic!("iperf3 server report: {e}:\n{server_json}"));
    let mut bytes = 0;
    let mut secs = 0.0;
    for i in v["intervals"].as_array().expect("intervals") {
        let s = &i["sum"];
        let (start, end) = (s["start"].as_f64().unwrap(), s["end"].as_f64().unwrap());
        // An interval belongs to the window if its middle does: a loaded machine fires
        // iperf3's interval timer late, so the edges are not exactly whole seconds.
        let middle = (start + end) / 2.0;
        if (from_s..=to_s).contains(&middle) {
            bytes += s["bytes"].as_u64().unwrap();
            secs += s["seconds"].as_f64().unwrap();
        }
    }
    assert!(
        secs >= (to_s - from_s) * 0.8,
        "iperf3 reported {secs} s of [{from_s}, {to_s}]:\n{server_json}"
    );
    (bytes, secs)
}

/// The TCP MSS an iperf3 client report says its connection used.
pub fn iperf_mss(client_json: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(client_json)
        .unwrap_or_else(|e| panic!("iperf3 client report: {e}:\n{client_json}"));
    v["start"]["tcp_mss_default"]
        .as_u64()
        .unwrap_or_else(|| panic!("no tcp_mss_default in:\n{client_json}"))
}

/// Bytes on the wire (Ethernet header included, no preamble or FCS: what the daemon charges)
/// that carried `payload` bytes of TCP over IPv4 with timestamps in segments of `mss` bytes.
pub fn tcp_wire_bytes(payload: u64, mss: u64) -> f64 {
    // 14 Ethernet + 20 IPv4 + 20 TCP + 12 timestamp option.
    payload as f64 * (mss + 66) as f64 / mss as f64
}

/// Interfaces in the initial namespace whose names start with `prefix`.
pub fn host_interfaces(prefix: &str) -> Vec<String> {
    let out = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .expect("run ip link");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|n| n.trim().split('@').next().unwrap_or("").to_string())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

/// Whether namespace `ns` has interface `ifname`.
pub fn ns_has_interface(ns: &str, ifname: &str) -> bool {
    Command::new("ip")
        .args(["-n", ns, "link", "show", ifname])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The interfaces of namespace `ns` with their IPv4 addresses, one line each, for
/// before/after comparisons (IPv6 link-local addresses are left out: they change state by
/// themselves for a second or two after a link comes up).
pub fn ns_addresses(ns: &str) -> String {
    let ip = |args: &[&str]| {
        let out = Command::new("ip")
            .args(["-n", ns, "-o"])
            .args(args)
            .output()
            .expect("run ip");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let links = ip(&["link", "show"]);
    let mut names: Vec<&str> = links
        .lines()
        .filter_map(|l| l.split(':').nth(1).map(str::trim))
        .collect();
    names.sort_unstable();
    format!("{}\n{}", names.join(" "), ip(&["-4", "addr", "show"]))
}

/// A loopback TCP port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}

/// `GET path` over HTTP/1.0 from `addr`; returns the status line and the body.
pub fn http_get(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(REQUEST_TIMEOUT)).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read the response");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// User plus system CPU time (clock ticks) from a `/proc/.../stat` line: fields 14 and 15,
/// counted after the parenthesised command name, which may hold spaces.
fn stat_ticks(stat: &str) -> u64 {
    let after_comm = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // `after_comm` starts at field 3 (the state), so fields 14 and 15 are at 11 and 12.
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

/// CPU ticks used so far by process `pid`, all its threads together.
pub fn process_ticks(pid: u32) -> u64 {
    stat_ticks(&fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
}

/// CPU ticks used so far by each thread of process `pid` whose name starts with `prefix`, by
/// thread name.
pub fn thread_ticks(pid: u32, prefix: &str) -> HashMap<String, u64> {
    let mut ticks = HashMap::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return ticks;
    };
    for task in tasks.flatten() {
        let comm = fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let name = comm.trim();
        if name.starts_with(prefix) {
            let stat = fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            ticks.insert(name.to_string(), stat_ticks(&stat));
        }
    }
    ticks
}

/// How much CPU a process was denied, as a snapshot to compare with a later one: each
/// thread's run-queue wait (the second field of `/proc/PID/task/TID/schedstat`: ns spent
/// runnable but not running) and the machine's steal time (`/proc/stat`, ticks the hypervisor
/// gave the virtual CPUs to someone else).
pub struct CpuDenied {
    waits_ns: HashMap<String, u64>,
    steal_ticks: u64,
    all_ticks: u64,
}

impl CpuDenied {
    /// The counters of process `pid` and of the machine now.
    pub fn sample(pid: u32) -> CpuDenied {
        let mut waits_ns = HashMap::new();
        if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
            for task in tasks.flatten() {
                let schedstat = fs::read_to_string(task.path().join("schedstat"));
                let wait = schedstat.ok().and_then(|s| {
                    s.split_whitespace()
                        .nth(1)
                        .and_then(|w| w.parse::<u64>().ok())
                });
                if let Some(wait) = wait {
                    waits_ns.insert(task.file_name().to_string_lossy().into_owned(), wait);
                }
            }
        }
        // The first line sums all CPUs: user nice system idle iowait irq softirq steal ...
        let stat = fs::read_to_string("/proc/stat").unwrap_or_default();
        let ticks: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .take(8)
            .map(|t| t.parse().unwrap_or(0))
            .collect();
        CpuDenied {
            steal_ticks: ticks.get(7).copied().unwrap_or(0),
            all_ticks: ticks.iter().sum(),
            waits_ns,
        }
    }

    /// The share of the `window_s` seconds since `earlier` in which the process may have
    /// been kept from running: the longest run-queue wait of any one of its threads (a daemon
    /// engine carries its traffic on one thread) plus the machine's steal share.
    pub fn share_since(&self, earlier: &CpuDenied, window_s: f64) -> f64 {
        let longest_wait_ns = self
            .waits_ns
            .iter()
            .map(|(tid, w)| w.saturating_sub(earlier.waits_ns.get(tid).copied().unwrap_or(0)))
            .max()
            .unwrap_or(0);
        let all = self.all_ticks.saturating_sub(earlier.all_ticks);
        let steal = self.steal_ticks.saturating_sub(earlier.steal_ticks);
        let steal_share = if all == 0 {
            0.0
        } else {
            steal as f64 / all as f64
        };
        longest_wait_ns as f64 / 1e9 / window_s + steal_share
    }
}

/// Nothing of daemon `pid` is left (`what` names the case in failures): none of `namespaces`,
/// no tap with its default name prefix `sl<pid>-`, no `control` socket.
pub fn assert_nothing_left(what: &str, pid: u32, namespaces: &[&str], control: &Path) {
    for ns in namespaces {
        assert!(
            !sluice_dp::netns::netns_exists(ns),
            "{what}: namespace {ns} left behind"
        );
    }
    assert_eq!(
        host_interfaces(&format!("sl{pid}-")),
        Vec::<String>::new(),
        "{what}: taps left behind"
    );
    assert!(!control.exists(), "{what}: control socket left behind");
}
