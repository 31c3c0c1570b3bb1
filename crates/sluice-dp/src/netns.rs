//! Network namespaces and interfaces: what the daemon creates around its ports, and how it
//! takes it all down again.
//!
//! Design. Everything is done with iproute2 (`ip`), one short command per step: the daemon
//! changes the network only at start and stop, so a process per step costs nothing that
//! matters, and every step is exactly what an operator would type (error messages quote the
//! command and what `ip` said). A [`Setup`] is a guard: each step it performs successfully is
//! recorded as a [`Step`], and [`Setup::teardown`] (or dropping the guard, e.g. when `?`
//! returns an error from the middle of a setup) undoes the recorded steps in reverse order:
//! addresses are removed, links brought down, RPS masks restored, moved interfaces moved back,
//! created veths deleted, created namespaces deleted. A step that fails is not recorded (each is
//! a single command that either happens or not), so nothing is left half-created, and nothing
//! the guard did not create is touched.
//!
//! Ownership rule: a `Setup` creates namespaces and works only in the daemon's own namespace
//! and in namespaces it created. A namespace that already exists was made by someone else
//! (another daemon, an operator): it is refused as a *busy namespace* and left alone.
//!
//! Undoing tolerates what vanished in between: a tap disappears when its descriptor is closed,
//! and a step whose interface no longer exists has nothing left to undo.
//!
//! Free helpers: [`interface_index`] and [`require_interface`] (does an interface exist here),
//! [`in_netns`] and [`in_netns_of`] (run a closure on a thread inside a namespace: sockets it
//! opens belong to that namespace), [`current_netns`] and [`is_current_netns`], [`run_in`]
//! (run a program inside a namespace, `ip netns exec`), [`ip`] and [`mac_address`].

use std::ffi::CString;
use std::fmt;
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::config::{IFNAME_MAX, valid_name};

/// Where iproute2 keeps named namespaces (`ip netns add NAME` bind-mounts `RUN_DIR/NAME`).
pub const RUN_DIR: &str = "/var/run/netns";

/// Most characters in a namespace name this module accepts.
pub const NETNS_NAME_MAX: usize = 64;

/// Why a namespace or interface operation failed.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// The namespace exists and this setup did not create it.
    #[error(
        "namespace `{0}` already exists and was not created by this daemon (busy namespace); \
         choose another name, or delete it with `ip netns del {0}` if nothing uses it"
    )]
    Busy(String),
    /// A step would work in a namespace this setup did not create.
    #[error(
        "namespace `{0}` was not created by this setup, which changes only namespaces it created"
    )]
    NotOwned(String),
    /// No namespace of that name.
    #[error("namespace `{0}` does not exist")]
    NoNetns(String),
    /// No interface of that name (in that namespace).
    #[error("interface `{ifname}` does not exist{}", in_ns(.netns))]
    NoInterface {
        /// The interface.
        ifname: String,
        /// The namespace looked in (`None`: the daemon's own).
        netns: Option<String>,
    },
    /// A name that cannot be used.
    #[error("invalid {what} `{name}`: expected {expected}")]
    InvalidName {
        /// "interface name" or "namespace name".
        what: &'static str,
        /// The name.
        name: String,
        /// What a valid name looks like.
        expected: &'static str,
    },
    /// A command ran and failed.
    #[error("`{command}` failed: {message}")]
    Command {
        /// The command line.
        command: String,
        /// What it printed on stderr (or its exit status).
        message: String,
    },
    /// A program could not be started.
    #[error("cannot run `{program}`{}: {source}", spawn_hint(.program, .source))]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: io::Error,
    },
    /// Any other system error, with what was being done.
    #[error("{what}: {source}")]
    Io {
        /// What failed.
        what: String,
        /// Why.
        source: io::Error,
    },
    /// Teardown could not undo some steps (it still undid all the others).
    #[error("teardown could not undo {} step(s): {}", .0.len(), .0.join("; "))]
    Teardown(Vec<String>),
}

fn in_ns(netns: &Option<String>) -> String {
    match netns {
        Some(ns) => format!(" in namespace `{ns}`"),
        None => String::new(),
    }
}

fn spawn_hint(program: &str, e: &io::Error) -> &'static str {
    if program == "ip" && e.kind() == io::ErrorKind::NotFound {
        " (install iproute2)"
    } else {
        ""
    }
}

impl From<NetnsError> for io::Error {
    fn from(e: NetnsError) -> io::Error {
        let kind = match &e {
            NetnsError::Busy(_) => io::ErrorKind::AlreadyExists,
            NetnsError::NotOwned(_) => io::ErrorKind::PermissionDenied,
            NetnsError::NoNetns(_) | NetnsError::NoInterface { .. } => io::ErrorKind::NotFound,
            NetnsError::InvalidName { .. } => io::ErrorKind::InvalidInput,
            NetnsError::Spawn { source, .. } | NetnsError::Io { source, .. } => source.kind(),
            NetnsError::Command { .. } | NetnsError::Teardown(_) => io::ErrorKind::Other,
        };
        io::Error::new(kind, e.to_string())
    }
}

/// Interface names the kernel refuses (`EINVAL`): its per-interface settings under
/// `/proc/sys/net/*/conf/` keep these names for all interfaces and for new ones.
const RESERVED_IFNAMES: [&str; 2] = ["all", "default"];

/// Check an interface name (1 to 15 letters, digits, `-`, `_`, `.`; not starting with `-`;
/// not `all` or `default`).
pub fn check_ifname(ifname: &str) -> Result<(), NetnsError> {
    if valid_name(ifname, IFNAME_MAX)
        && !ifname.starts_with('-')
        && !RESERVED_IFNAMES.contains(&ifname)
    {
        Ok(())
    } else {
        Err(NetnsError::InvalidName {
            what: "interface name",
            name: ifname.to_string(),
            expected: "1 to 15 letters, digits, '-', '_' or '.', not starting with '-', not \
                       `all` or `default`",
        })
    }
}

/// Check a namespace name (1 to 64 letters, digits, `-`, `_`, `.`; not starting with `-`).
pub fn check_netns_name(netns: &str) -> Result<(), NetnsError> {
    if valid_name(netns, NETNS_NAME_MAX) && !netns.starts_with('-') {
        Ok(())
    } else {
        Err(NetnsError::InvalidName {
            what: "namespace name",
            name: netns.to_string(),
            expected: "1 to 64 letters, digits, '-', '_' or '.', not starting with '-'",
        })
    }
}

/// The file iproute2 keeps for namespace `netns`.
pub fn netns_path(netns: &str) -> PathBuf {
    Path::new(RUN_DIR).join(netns)
}

/// Whether a named namespace `netns` exists.
pub fn netns_exists(netns: &str) -> bool {
    netns_path(netns).exists()
}

/// Which namespace the name `netns` names: the device and inode of its file, which iproute2
/// mounts the namespace on (`None` if there is none). A namespace deleted and made again under
/// the same name is another namespace, with another inode.
pub fn netns_identity(netns: &str) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(netns_path(netns)).ok()?;
    Some((meta.dev(), meta.ino()))
}

/// The index of interface `ifname` in the calling thread's namespace;
/// [`NetnsError::NoInterface`] ("interface `eth9` does not exist") when there is none.
pub fn interface_index(ifname: &str) -> Result<u32, NetnsError> {
    check_ifname(ifname)?;
    let name = CString::new(ifname).map_err(|_| NetnsError::InvalidName {
        what: "interface name",
        name: ifname.to_string(),
        expected: "no NUL byte",
    })?;
    // SAFETY: `name` is a NUL-terminated string that lives across the call; if_nametoindex
    // only reads it and keeps no pointer to it.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index != 0 {
        return Ok(index);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENODEV) {
        Err(NetnsError::NoInterface {
            ifname: ifname.to_string(),
            netns: None,
        })
    } else {
        Err(NetnsError::Io {
            what: format!("cannot look up interface `{ifname}`"),
            source: e,
        })
    }
}

/// `Ok` if interface `ifname` exists in the calling thread's namespace, else an error that
/// says so ("interface `eth9` does not exist").
pub fn require_interface(ifname: &str) -> Result<(), NetnsError> {
    interface_index(ifname).map(|_| ())
}

/// Whether interface `ifname` exists in namespace `netns` (`None`: the daemon's own). A
/// namespace that does not exist holds no interface.
pub fn interface_exists(netns: Option<&str>, ifname: &str) -> Result<bool, NetnsError> {
    check_ifname(ifname)?;
    if let Some(ns) = netns {
        check_netns_name(ns)?;
        if !netns_exists(ns) {
            return Ok(false);
        }
    }
    match ip_in(netns, &["link", "show", "dev", ifname]) {
        Ok(_) => Ok(true),
        Err(NetnsError::Command { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The MAC address of interface `ifname` in namespace `netns` (`None`: the daemon's own).
pub fn mac_address(netns: Option<&str>, ifname: &str) -> Result<[u8; 6], NetnsError> {
    check_ifname(ifname)?;
    let out = ip_in(netns, &["-o", "link", "show", "dev", ifname])?;
    let bad = || NetnsError::Command {
        command: command_line("ip", &["-o", "link", "show", "dev", ifname]),
        message: format!("no Ethernet address in its output: {}", out.trim()),
    };
    let mut words = out.split_whitespace();
    words.find(|w| *w == "link/ether").ok_or_else(bad)?;
    let text = words.next().ok_or_else(bad)?;
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut mac {
        let part = parts.next().ok_or_else(bad)?;
        *byte = u8::from_str_radix(part, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(mac)
}

/// Run `f` on a new thread that has joined namespace `netns`, and return its result. Sockets
/// and ports `f` opens belong to that namespace for their whole life (and can be used from any
/// thread); interface names `f` looks up are that namespace's. The calling thread's namespace
/// does not change. A panic in `f` is resumed on the calling thread.
pub fn in_netns<R, F>(netns: &str, f: F) -> Result<R, NetnsError>
where
    R: Send,
    F: FnOnce() -> R + Send,
{
    check_netns_name(netns)?;
    let path = netns_path(netns);
    let file = std::fs::File::open(&path).map_err(|source| {
        if source.kind() == io::ErrorKind::NotFound {
            NetnsError::NoNetns(netns.to_string())
        } else {
            NetnsError::Io {
                what: format!("cannot open {}", path.display()),
                source,
            }
        }
    })?;
    in_netns_of(&file, f).map_err(|source| NetnsError::Io {
        what: format!("cannot enter namespace `{netns}`"),
        source,
    })
}

/// The network namespace of the calling thread, as an open file (`/proc/thread-self/ns/net`):
/// a port that must re-create its socket later, perhaps on another thread, keeps it to create
/// the socket where the first one was.
pub fn current_netns() -> io::Result<std::fs::File> {
    std::fs::File::open("/proc/thread-self/ns/net")
}

/// Whether `netns` (a namespace file, as [`current_netns`] opens) is the calling thread's
/// network namespace.
pub fn is_current_netns(netns: &std::fs::File) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let (there, here) = (netns.metadata()?, current_netns()?.metadata()?);
    Ok((there.dev(), there.ino()) == (here.dev(), here.ino()))
}

/// [`in_netns`] for a namespace given as an open file (as [`current_netns`] opens): run `f`
/// on a new thread that has joined it. An error says why the thread could not join it.
pub fn in_netns_of<R, F>(netns: &std::fs::File, f: F) -> io::Result<R>
where
    R: Send,
    F: FnOnce() -> R + Send,
{
    let joined = std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: setns takes a descriptor that `netns` keeps open for the whole call, and
            // changes the network namespace of the calling thread only: this thread, which
            // exists to run `f` and ends right after it, so no other code observes the change.
            let rc = unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(f())
        })
        .join()
    });
    match joined {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

fn command_line(program: &str, args: &[&str]) -> String {
    std::iter::once(program)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ")
}

fn run(program: &str, args: &[&str], input: Option<&str>) -> Result<String, NetnsError> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| NetnsError::Spawn {
            program: program.to_string(),
            source,
        })?;
    let command = || command_line(program, args);
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        // Small inputs (a CPU mask): they fit the pipe, so writing before reading cannot block.
        stdin
            .write_all(text.as_bytes())
            .map_err(|source| NetnsError::Io {
                what: format!("cannot write to `{}`", command()),
                source,
            })?;
    }
    let out = child.wait_with_output().map_err(|source| NetnsError::Io {
        what: format!("cannot wait for `{}`", command()),
        source,
    })?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let message = stderr.trim();
    Err(NetnsError::Command {
        command: command(),
        message: if message.is_empty() {
            out.status.to_string()
        } else {
            message.replace('\n', "; ")
        },
    })
}

/// Run `ip ARGS` and return what it printed; an error quotes the command and `ip`'s message.
pub fn ip(args: &[&str]) -> Result<String, NetnsError> {
    run("ip", args, None)
}

/// `ip [-n NETNS] ARGS`.
fn ip_in(netns: Option<&str>, args: &[&str]) -> Result<String, NetnsError> {
    match netns {
        None => ip(args),
        Some(ns) => {
            let mut all = vec!["-n", ns];
            all.extend_from_slice(args);
            ip(&all)
        }
    }
}

/// Run `program ARGS` inside namespace `netns` (`ip netns exec`, which also mounts that
/// namespace's `/sys`) and return what it printed; an error if it cannot start or fails.
pub fn run_in(netns: &str, program: &str, args: &[&str]) -> Result<String, NetnsError> {
    check_netns_name(netns)?;
    if !netns_exists(netns) {
        return Err(NetnsError::NoNetns(netns.to_string()));
    }
    let mut all = vec!["netns", "exec", netns, program];
    all.extend_from_slice(args);
    ip(&all)
}

fn sysfs_read(netns: Option<&str>, path: &str) -> Result<String, NetnsError> {
    match netns {
        None => std::fs::read_to_string(path)
            .map(|s| s.trim().to_string())
            .map_err(|source| NetnsError::Io {
                what: format!("cannot read {path}"),
                source,
            }),
        Some(ns) => run_in(ns, "cat", &[path]).map(|s| s.trim().to_string()),
    }
}

fn sysfs_write(netns: Option<&str>, path: &str, value: &str) -> Result<(), NetnsError> {
    match netns {
        None => std::fs::write(path, value).map_err(|source| NetnsError::Io {
            what: format!("cannot write `{value}` to {path}"),
            source,
        }),
        Some(ns) => {
            check_netns_name(ns)?;
            run("ip", &["netns", "exec", ns, "tee", path], Some(value)).map(|_| ())
        }
    }
}

/// The receive queues of `ifname` (`rx-0`, `rx-1`, ...).
fn rx_queues(netns: Option<&str>, ifname: &str) -> Result<Vec<String>, NetnsError> {
    let dir = format!("/sys/class/net/{ifname}/queues");
    let names: Vec<String> = match netns {
        None => std::fs::read_dir(&dir)
            .map_err(|source| NetnsError::Io {
                what: format!("cannot list {dir}"),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect(),
        Some(ns) => run_in(ns, "ls", &[&dir])?
            .split_whitespace()
            .map(str::to_string)
            .collect(),
    };
    let mut rx: Vec<String> = names.into_iter().filter(|n| n.starts_with("rx-")).collect();
    rx.sort_by_key(|n| n[3..].parse::<u32>().unwrap_or(u32::MAX));
    Ok(rx)
}

/// The sysfs CPU mask (hex, in comma-separated 32-bit groups) holding only CPU `cpu`.
pub fn cpu_mask(cpu: usize) -> String {
    let mut groups = vec![0u32; cpu / 32 + 1];
    groups[0] = 1 << (cpu % 32);
    let mut text = format!("{:x}", groups[0]);
    for g in &groups[1..] {
        text.push_str(&format!(",{g:08x}"));
    }
    text
}

/// One thing a [`Setup`] did, and will undo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Created a namespace (undo: `ip netns del`, if the name still names it).
    Netns {
        /// Its name.
        name: String,
        /// Which namespace it is ([`netns_identity`]; `None`: it could not be read).
        identity: Option<(u64, u64)>,
    },
    /// Created a veth pair (undo: delete it, which deletes both ends).
    Veth {
        /// Namespace both ends were created in (`None`: the daemon's own).
        netns: Option<String>,
        /// One end.
        name: String,
        /// The other end.
        peer: String,
    },
    /// Moved an interface between namespaces (undo: move it back).
    Moved {
        /// The interface.
        ifname: String,
        /// Where it was (`None`: the daemon's own namespace, that of its main thread, which
        /// is where the undo sends it).
        from: Option<String>,
        /// Where it went.
        to: String,
    },
    /// Added an address (undo: remove it).
    Address {
        /// The namespace.
        netns: Option<String>,
        /// The interface.
        ifname: String,
        /// The address.
        addr: IpAddr,
        /// Its prefix length.
        prefix: u8,
    },
    /// Brought a link up that was down (undo: bring it down).
    Up {
        /// The namespace.
        netns: Option<String>,
        /// The interface.
        ifname: String,
    },
    /// Set the RPS CPU mask of a receive queue (undo: restore the previous mask).
    Rps {
        /// The namespace.
        netns: Option<String>,
        /// The interface.
        ifname: String,
        /// The queue (`rx-0`, ...).
        queue: String,
        /// The mask before.
        previous: String,
    },
}

fn ns_label(netns: &Option<String>) -> String {
    match netns {
        Some(ns) => format!("namespace `{ns}`"),
        None => "the daemon's namespace".to_string(),
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Netns { name, .. } => write!(f, "created namespace `{name}`"),
            Step::Veth { netns, name, peer } => {
                write!(f, "created veth `{name}`/`{peer}` in {}", ns_label(netns))
            }
            Step::Moved { ifname, from, to } => {
                write!(
                    f,
                    "moved `{ifname}` from {} to namespace `{to}`",
                    ns_label(from)
                )
            }
            Step::Address {
                netns,
                ifname,
                addr,
                prefix,
            } => {
                write!(
                    f,
                    "added {addr}/{prefix} to `{ifname}` in {}",
                    ns_label(netns)
                )
            }
            Step::Up { netns, ifname } => write!(f, "brought `{ifname}` up in {}", ns_label(netns)),
            Step::Rps {
                netns,
                ifname,
                queue,
                ..
            } => {
                write!(f, "pinned RPS of `{ifname}` {queue} in {}", ns_label(netns))
            }
        }
    }
}

/// A guard over what the daemon set up: namespaces, veths, moves, addresses, links up, RPS
/// masks. Every successful step is recorded; [`Setup::teardown`] or dropping the guard undoes
/// them in reverse order, and nothing else. See the module documentation.
#[derive(Debug, Default)]
pub struct Setup {
    steps: Vec<Step>,
}

impl Setup {
    /// An empty setup.
    pub fn new() -> Setup {
        Setup::default()
    }

    /// What has been done so far, in order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Whether this setup created namespace `netns`.
    pub fn owns(&self, netns: &str) -> bool {
        self.steps
            .iter()
            .any(|s| matches!(s, Step::Netns { name, .. } if name == netns))
    }

    fn check_owned(&self, netns: Option<&str>) -> Result<(), NetnsError> {
        match netns {
            Some(ns) if !self.owns(ns) => {
                check_netns_name(ns)?;
                Err(NetnsError::NotOwned(ns.to_string()))
            }
            _ => Ok(()),
        }
    }

    fn require(&self, netns: Option<&str>, ifname: &str) -> Result<(), NetnsError> {
        if interface_exists(netns, ifname)? {
            Ok(())
        } else {
            Err(NetnsError::NoInterface {
                ifname: ifname.to_string(),
                netns: netns.map(str::to_string),
            })
        }
    }

    /// Create namespace `netns`. Does nothing if this setup already created it; refuses a
    /// namespace that exists otherwise ([`NetnsError::Busy`]) and leaves it alone.
    pub fn netns(&mut self, netns: &str) -> Result<(), NetnsError> {
        check_netns_name(netns)?;
        if self.owns(netns) {
            return Ok(());
        }
        if netns_exists(netns) {
            return Err(NetnsError::Busy(netns.to_string()));
        }
        match ip(&["netns", "add", netns]) {
            Ok(_) => {
                self.steps.push(Step::Netns {
                    name: netns.to_string(),
                    identity: netns_identity(netns),
                });
                Ok(())
            }
            // Created by someone else between the check and the command.
            Err(NetnsError::Command { message, .. }) if message.contains("File exists") => {
                Err(NetnsError::Busy(netns.to_string()))
            }
            Err(e) => Err(e),
        }
    }

    /// Create a veth pair `name`/`peer` in namespace `netns` (`None`: the daemon's own).
    pub fn add_veth(
        &mut self,
        netns: Option<&str>,
        name: &str,
        peer: &str,
    ) -> Result<(), NetnsError> {
        check_ifname(name)?;
        check_ifname(peer)?;
        self.check_owned(netns)?;
        ip_in(
            netns,
            &["link", "add", name, "type", "veth", "peer", "name", peer],
        )?;
        self.steps.push(Step::Veth {
            netns: netns.map(str::to_string),
            name: name.to_string(),
            peer: peer.to_string(),
        });
        Ok(())
    }

    /// Move interface `ifname` from namespace `from` (`None`: the daemon's own) into namespace
    /// `to`, which this setup created. The interface arrives down and without addresses.
    pub fn move_link(
        &mut self,
        ifname: &str,
        from: Option<&str>,
        to: &str,
    ) -> Result<(), NetnsError> {
        check_ifname(ifname)?;
        self.check_owned(from)?;
        self.check_owned(Some(to))?;
        self.require(from, ifname)?;
        ip_in(from, &["link", "set", "dev", ifname, "netns", to])?;
        self.steps.push(Step::Moved {
            ifname: ifname.to_string(),
            from: from.map(str::to_string),
            to: to.to_string(),
        });
        Ok(())
    }

    /// Add `addr/prefix` to interface `ifname` in namespace `netns`. IPv6 addresses skip
    /// duplicate address detection (usable at once). An address already there is an error
    /// (it is not ours to remove later).
    pub fn add_address(
        &mut self,
        netns: Option<&str>,
        ifname: &str,
        addr: IpAddr,
        prefix: u8,
    ) -> Result<(), NetnsError> {
        check_ifname(ifname)?;
        self.check_owned(netns)?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(NetnsError::InvalidName {
                what: "prefix length",
                name: prefix.to_string(),
                expected: "at most 32 (IPv4) or 128 (IPv6)",
            });
        }
        self.require(netns, ifname)?;
        let cidr = format!("{addr}/{prefix}");
        let mut args = vec!["addr", "add", &cidr, "dev", ifname];
        if addr.is_ipv6() {
            args.push("nodad");
        }
        ip_in(netns, &args)?;
        self.steps.push(Step::Address {
            netns: netns.map(str::to_string),
            ifname: ifname.to_string(),
            addr,
            prefix,
        });
        Ok(())
    }

    /// Set the transmit queue length of interface `ifname` (in the calling thread's
    /// namespace). Not recorded: for interfaces the daemon creates, which vanish with it.
    pub fn set_txqueuelen(&mut self, ifname: &str, len: u32) -> Result<(), NetnsError> {
        check_ifname(ifname)?;
        self.require(None, ifname)?;
        ip_in(
            None,
            &["link", "set", "dev", ifname, "txqueuelen", &len.to_string()],
        )?;
        Ok(())
    }

    /// Bring interface `ifname` in namespace `netns` up (recorded only if it was down).
    pub fn link_up(&mut self, netns: Option<&str>, ifname: &str) -> Result<(), NetnsError> {
        check_ifname(ifname)?;
        self.check_owned(netns)?;
        self.require(netns, ifname)?;
        if is_up(netns, ifname)? {
            return Ok(());
        }
        ip_in(netns, &["link", "set", "dev", ifname, "up"])?;
        self.steps.push(Step::Up {
            netns: netns.map(str::to_string),
            ifname: ifname.to_string(),
        });
        Ok(())
    }

    /// Bring the loopback interface of namespace `netns` up.
    pub fn lo_up(&mut self, netns: &str) -> Result<(), NetnsError> {
        self.link_up(Some(netns), "lo")
    }

    /// Steer the packets of every receive queue of `ifname` to CPU `cpu` (RPS, `rps_cpus`), so
    /// that one queue's packets are processed in order on one CPU (two veths between
    /// namespaces on two CPUs reorder packets otherwise).
    pub fn pin_rps(
        &mut self,
        netns: Option<&str>,
        ifname: &str,
        cpu: usize,
    ) -> Result<(), NetnsError> {
        check_ifname(ifname)?;
        self.check_owned(netns)?;
        self.require(netns, ifname)?;
        let mask = cpu_mask(cpu);
        let queues = rx_queues(netns, ifname)?;
        if queues.is_empty() {
            return Err(NetnsError::Io {
                what: format!(
                    "cannot pin RPS of `{ifname}`{}",
                    in_ns(&netns.map(str::to_string))
                ),
                source: io::Error::new(io::ErrorKind::NotFound, "it has no receive queue in /sys"),
            });
        }
        for queue in queues {
            let path = format!("/sys/class/net/{ifname}/queues/{queue}/rps_cpus");
            let previous = sysfs_read(netns, &path)?;
            sysfs_write(netns, &path, &mask)?;
            self.steps.push(Step::Rps {
                netns: netns.map(str::to_string),
                ifname: ifname.to_string(),
                queue,
                previous,
            });
        }
        Ok(())
    }

    /// The usual placement of a port's interface: create namespace `netns` (unless this setup
    /// already did), bring its `lo` up, move `ifname` there from the daemon's namespace, add
    /// `address`, bring `ifname` up and, with `rps_cpu`, pin its receive queues to that CPU.
    pub fn place(
        &mut self,
        ifname: &str,
        netns: &str,
        address: Option<(IpAddr, u8)>,
        rps_cpu: Option<usize>,
    ) -> Result<(), NetnsError> {
        self.netns(netns)?;
        self.lo_up(netns)?;
        self.move_link(ifname, None, netns)?;
        if let Some((addr, prefix)) = address {
            self.add_address(Some(netns), ifname, addr, prefix)?;
        }
        self.link_up(Some(netns), ifname)?;
        if let Some(cpu) = rps_cpu {
            self.pin_rps(Some(netns), ifname, cpu)?;
        }
        Ok(())
    }

    /// Undo every step, newest first. Steps that cannot be undone are reported together after
    /// all the others have been undone.
    pub fn teardown(mut self) -> Result<(), NetnsError> {
        self.undo_all()
    }

    fn undo_all(&mut self) -> Result<(), NetnsError> {
        let mut failures = Vec::new();
        while let Some(step) = self.steps.pop() {
            if let Err(e) = undo(&step) {
                failures.push(format!("{step}: {e}"));
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(NetnsError::Teardown(failures))
        }
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Err(e) = self.undo_all() {
            eprintln!("sluice: {e}");
        }
    }
}

fn is_up(netns: Option<&str>, ifname: &str) -> Result<bool, NetnsError> {
    let out = ip_in(netns, &["-o", "link", "show", "dev", ifname])?;
    let flags = out
        .split('<')
        .nth(1)
        .and_then(|s| s.split('>').next())
        .unwrap_or("");
    Ok(flags.split(',').any(|f| f == "UP"))
}

fn has_address(netns: Option<&str>, ifname: &str, cidr: &str) -> Result<bool, NetnsError> {
    let out = ip_in(netns, &["-o", "addr", "show", "dev", ifname])?;
    Ok(out.split_whitespace().any(|w| w == cidr))
}

fn undo(step: &Step) -> Result<(), NetnsError> {
    match step {
        Step::Netns { name, identity } => {
            // Deleted by someone else and made again under the name: not ours to delete.
            let ours = identity.is_none() || netns_identity(name) == *identity;
            if netns_exists(name) && ours {
                ip(&["netns", "del", name])?;
            }
        }
        Step::Veth { netns, name, .. } => {
            if interface_exists(netns.as_deref(), name)? {
                ip_in(netns.as_deref(), &["link", "del", "dev", name])?;
            }
        }
        Step::Moved { ifname, from, to } => {
            if interface_exists(Some(to), ifname)? {
                let target = match from {
                    Some(ns) => ns.clone(),
                    None => std::process::id().to_string(),
                };
                ip_in(Some(to), &["link", "set", "dev", ifname, "netns", &target])?;
            }
        }
        Step::Address {
            netns,
            ifname,
            addr,
            prefix,
        } => {
            let cidr = format!("{addr}/{prefix}");
            let ns = netns.as_deref();
            if interface_exists(ns, ifname)? && has_address(ns, ifname, &cidr)? {
                ip_in(ns, &["addr", "del", &cidr, "dev", ifname])?;
            }
        }
        Step::Up { netns, ifname } => {
            if interface_exists(netns.as_deref(), ifname)? {
                ip_in(netns.as_deref(), &["link", "set", "dev", ifname, "down"])?;
            }
        }
        Step::Rps {
            netns,
            ifname,
            queue,
            previous,
        } => {
            if interface_exists(netns.as_deref(), ifname)? {
                let path = format!("/sys/class/net/{ifname}/queues/{queue}/rps_cpus");
                sysfs_write(netns.as_deref(), &path, previous)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_ifname("sl-a").is_ok());
        assert!(check_ifname("-x").is_err());
        // The kernel refuses these (EINVAL): a tap so named failed with "TUNSETIFF failed:
        // Invalid argument", after `--check` had passed it.
        for reserved in ["all", "default"] {
            let e = check_ifname(reserved).unwrap_err().to_string();
            assert!(e.contains("not `all` or `default`"), "{e}");
        }
        assert!(check_ifname("all0").is_ok() && check_ifname("defaults").is_ok());
        let e = check_ifname("a-name-far-too-long").unwrap_err().to_string();
        assert!(
            e.contains("invalid interface name `a-name-far-too-long`"),
            "{e}"
        );
        assert!(check_netns_name("../x").is_err());
        assert!(check_netns_name(&"n".repeat(65)).is_err());
    }

    #[test]
    fn cpu_masks() {
        assert_eq!(cpu_mask(0), "1");
        assert_eq!(cpu_mask(1), "2");
        assert_eq!(cpu_mask(31), "80000000");
        assert_eq!(cpu_mask(32), "1,00000000");
        assert_eq!(cpu_mask(70), "40,00000000,00000000");
    }

    #[test]
    fn errors_read_well() {
        let e = NetnsError::NoInterface {
            ifname: "eth9".into(),
            netns: None,
        };
        assert_eq!(e.to_string(), "interface `eth9` does not exist");
        let e = NetnsError::NoInterface {
            ifname: "eth9".into(),
            netns: Some("n".into()),
        };
        assert_eq!(
            e.to_string(),
            "interface `eth9` does not exist in namespace `n`"
        );
        assert!(
            NetnsError::Busy("n".into())
                .to_string()
                .contains("busy namespace")
        );
        let io: io::Error = NetnsError::Busy("n".into()).into();
        assert_eq!(io.kind(), io::ErrorKind::AlreadyExists);
        let step = Step::Address {
            netns: None,
            ifname: "t".into(),
            addr: "10.0.0.1".parse().unwrap(),
            prefix: 24,
        };
        assert_eq!(
            step.to_string(),
            "added 10.0.0.1/24 to `t` in the daemon's namespace"
        );
    }

    #[test]
    fn missing_interface_is_a_clear_error() {
        let e = require_interface("slnx0nope").unwrap_err();
        assert_eq!(e.to_string(), "interface `slnx0nope` does not exist");
        assert!(interface_index("lo").is_ok_and(|i| i > 0));
    }

    #[test]
    fn nothing_to_undo_for_a_namespace_that_does_not_exist() {
        // Steps are not run here: an empty setup and one whose objects vanished both tear down.
        assert!(Setup::new().teardown().is_ok());
        let s = Setup {
            steps: vec![Step::Up {
                netns: Some("slnx-none".into()),
                ifname: "x".into(),
            }],
        };
        assert!(s.teardown().is_ok());
    }
}
