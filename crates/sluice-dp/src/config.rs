//! The daemon's configuration file (`sluice run --config FILE`), in TOML.
//!
//! ```toml
//! [daemon]
//! mode = "event"              # "event": sleep until the next frame or release (idle: ~0% CPU)
//!                             # "busy": poll without sleeping (lowest latency, one core)
//! engines = 1                 # per-core engines (flows hashed to engines)
//! memory = "256MiB"           # frame buffers: the global memory bound (3/4 in 64 KiB buffers,
//!                             #   1/4 in 4 KiB ones for small frames; 2MiB to 64GiB,
//!                             #   shared out among the engines, 1399468 bytes each at least)
//! at_bound = "pause"          # lossless: stop reading until frames leave; "drop": drop, counted
//! metrics = "127.0.0.1:9464"  # Prometheus text endpoint (omit to disable)
//! control = "/run/sluice/demo.sock"  # Unix control socket, mode 0600 (omit to disable)
//! malformed = "drop"          # malformed frames: "drop" (counted) or "default" (no fields)
//! ecn = "2ms"                 # CoDel target: mark ECN-capable frames CE when a flow's frames
//!                             #   keep waiting longer than this ("off": never mark)
//! ecn_interval = "20ms"       # ... for longer than this (about a round-trip time)
//!
//! [[port]]
//! name = "a"                  # how links and statistics refer to it
//! kind = "tap"                # "tap": create a tap (with virtio-net header) ...
//! ifname = "sl-a"             # ... with this name (default: sl<pid>-<port index>, unique)
//! netns = "sl-ns-a"           # ... moved into this namespace, which the daemon creates (it
//!                             #     must not exist) and removes when it stops
//! address = "10.77.0.1/24"    # ... with this address, brought up
//! delay = "5ms"               # optional delay line on frames leaving this port
//! jitter = "1ms"
//!
//! [[port]]
//! name = "uplink"
//! kind = "af_packet"          # an existing interface, through AF_PACKET (TPACKET_V3)
//! ifname = "eth1"
//!
//! [[link]]                    # frames read on `from` leave through `to`
//! from = "a"
//! to = "uplink"
//! policy = "examples/policies/three-classes.toml"   # scheduled by this policy
//!
//! [[link]]
//! from = "uplink"
//! to = "a"                    # no policy: first in, first out, unshaped
//! ```
//!
//! Relative policy paths are relative to the configuration file. Every error names the file
//! and what is wrong; TOML syntax errors carry line and column.

use serde::Deserialize;
use sluice_sched::config::line_col;
use sluice_sched::units::{parse_duration, parse_size};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// How the datapath waits for work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Sleep in epoll until a frame arrives or the shaper's next release (timerfd).
    Event,
    /// Poll continuously on one core.
    Busy,
}

/// What to do when no frame buffer is free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtBound {
    /// Stop reading until frames leave (lossless inside the daemon; the kernel's own ring
    /// drops if the sender keeps going).
    Pause,
    /// Read and drop the frame, counted.
    Drop,
}

/// What to do with a frame that does not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malformed {
    /// Drop it (counted per reason).
    Drop,
    /// Forward it, classified with no fields (counted per reason): a rule with no condition
    /// takes it, else the policy's default class.
    Default,
}

/// A port's kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortKind {
    /// Create a tap device.
    Tap {
        /// Namespace to move it into (created if missing).
        netns: Option<String>,
        /// Address (with prefix length) to give it there.
        address: Option<(IpAddr, u8)>,
    },
    /// Attach to an existing interface with AF_PACKET.
    AfPacket,
}

/// One port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortConfig {
    /// Its name in links and statistics.
    pub name: String,
    /// Interface name.
    pub ifname: String,
    /// Kind.
    pub kind: PortKind,
    /// Delay added to frames leaving it, ns.
    pub delay_ns: u64,
    /// Jitter added on top, up to this many ns.
    pub jitter_ns: u64,
}

/// One direction between two ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkConfig {
    /// Index of the port frames are read from.
    pub from: usize,
    /// Index of the port they leave through.
    pub to: usize,
    /// Policy file scheduling them (None: FIFO, unshaped).
    pub policy: Option<PathBuf>,
}

/// The whole configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// How to wait.
    pub mode: Mode,
    /// Engines.
    pub engines: usize,
    /// Bytes of frame buffers, the global memory bound (see [`crate::buffers`]).
    pub memory: usize,
    /// Action at the bound.
    pub at_bound: AtBound,
    /// Prometheus endpoint.
    pub metrics: Option<std::net::SocketAddr>,
    /// Control socket path.
    pub control: Option<PathBuf>,
    /// Malformed frames.
    pub malformed: Malformed,
    /// ECN marking by CoDel (None: never mark).
    pub ecn: Option<crate::codel::Params>,
    /// Ports.
    pub ports: Vec<PortConfig>,
    /// Links.
    pub links: Vec<LinkConfig>,
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("{file}: cannot read: {error}")]
    Io {
        /// The file.
        file: String,
        /// Why. (Not `source`: as the error's cause too, `{e:#}` printed it twice.)
        error: std::io::Error,
    },
    /// Malformed TOML or unknown keys, at `FILE:LINE:COL` as a policy file's errors are.
    #[error("{file}:{line}:{col}: {message}")]
    Syntax {
        /// The file.
        file: String,
        /// Line of the error, from 1.
        line: usize,
        /// Column of the error, from 1, in characters.
        col: usize,
        /// The parser's message, on one line.
        message: String,
    },
    /// A value that cannot hold.
    #[error("{file}: {what}; expected {expected}")]
    Invalid {
        /// The file.
        file: String,
        /// What is wrong.
        what: String,
        /// What was expected.
        expected: String,
    },
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDaemon {
    mode: Option<String>,
    engines: Option<i64>,
    memory: Option<toml::Value>,
    at_bound: Option<String>,
    metrics: Option<String>,
    control: Option<String>,
    malformed: Option<String>,
    ecn: Option<String>,
    ecn_interval: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPort {
    name: String,
    kind: String,
    ifname: Option<String>,
    netns: Option<String>,
    address: Option<String>,
    delay: Option<String>,
    jitter: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    from: String,
    to: String,
    policy: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    daemon: RawDaemon,
    #[serde(default)]
    port: Vec<RawPort>,
    #[serde(default)]
    link: Vec<RawLink>,
}

/// The ECN (CoDel) target when the file does not say.
pub const DEFAULT_ECN: &str = "2ms";

/// The ECN (CoDel) interval when the file does not say.
pub const DEFAULT_ECN_INTERVAL: &str = "20ms";

/// The least `memory` a file may set, bytes (2 MiB: more than one engine's least pool).
pub const MEMORY_MIN: u64 = 2 << 20;

/// The most `memory` a file may set, bytes (64 GiB).
pub const MEMORY_MAX: u64 = 64 << 30;

const _: () = assert!(crate::buffers::MIN_MEMORY as u64 <= MEMORY_MIN);

/// Most characters in an interface name (IFNAMSIZ - 1).
pub const IFNAME_MAX: usize = 15;

/// Whether `s` is a usable interface or namespace name.
pub fn valid_name(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && s != "."
        && s != ".."
}

impl Config {
    /// Read and check the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        // A regular file of at most 64 MiB: not a device or a pipe, which may never end.
        let io = |error| ConfigError::Io {
            file: file.clone(),
            error,
        };
        let bytes = sluice_sched::config::read_capped(path).map_err(io)?;
        let text = String::from_utf8(bytes).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not UTF-8 text (byte {at})"),
            ))
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, &file, base)
    }

    /// Check `text` (from `file`; policy paths relative to `base`).
    pub fn parse(text: &str, file: &str, base: &Path) -> Result<Config, ConfigError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| {
            let (line, col) = line_col(text, e.span().map_or(0, |s| s.start));
            let mut message = e.message().trim().replace('\n', "; ");
            let policy_table = ["node", "classify", "scheduler", "shaper"]
                .iter()
                .any(|t| message.starts_with(&format!("unknown field `{t}`")));
            if policy_table {
                message.push_str(
                    " (this looks like a policy file: the daemon's file names one in a \
                     [[link]]'s `policy`, docs/daemon.md)",
                );
            }
            ConfigError::Syntax {
                file: file.to_string(),
                line,
                col,
                message,
            }
        })?;
        let invalid = |what: String, expected: &str| ConfigError::Invalid {
            file: file.to_string(),
            what,
            expected: expected.to_string(),
        };
        let d = raw.daemon;
        let mode = match d.mode.as_deref().unwrap_or("event") {
            "event" => Mode::Event,
            "busy" => Mode::Busy,
            other => {
                return Err(invalid(
                    format!("[daemon] mode = \"{other}\""),
                    "\"event\" or \"busy\"",
                ));
            }
        };
        let engines = d.engines.unwrap_or(1);
        if !(1..=64).contains(&engines) {
            return Err(invalid(format!("[daemon] engines = {engines}"), "1..=64"));
        }
        let memory = match d.memory {
            None => 256 << 20,
            // 0 too, to be told the range (it is a size, only too small).
            Some(toml::Value::Integer(i)) if i >= 0 => i as u64,
            Some(toml::Value::String(s)) => parse_size(&s)
                .map_err(|e| invalid(format!("[daemon] memory: {e}"), "a size like \"256MiB\""))?,
            Some(v) => {
                return Err(invalid(
                    format!("[daemon] memory = {v}"),
                    "a size like \"256MiB\"",
                ));
            }
        };
        if !(MEMORY_MIN..=MEMORY_MAX).contains(&memory) {
            return Err(invalid(
                format!("[daemon] memory = {memory} bytes"),
                "between 2MiB and 64GiB",
            ));
        }
        // The bound is global: each engine gets its share, which must buy its least pool (the
        // daemon would raise a smaller share to it, over the bound).
        let least = crate::buffers::MIN_MEMORY as u64 * engines as u64;
        if memory < least {
            return Err(invalid(
                format!("[daemon] memory = {memory} bytes for {engines} engines"),
                &format!(
                    "at least {least} bytes ({} per engine, for {} buffers of 64 KiB each), \
                     or fewer engines",
                    crate::buffers::MIN_MEMORY,
                    crate::buffers::MIN_LARGE
                ),
            ));
        }
        let at_bound = match d.at_bound.as_deref().unwrap_or("pause") {
            "pause" => AtBound::Pause,
            "drop" => AtBound::Drop,
            other => {
                return Err(invalid(
                    format!("[daemon] at_bound = \"{other}\""),
                    "\"pause\" or \"drop\"",
                ));
            }
        };
        let malformed = match d.malformed.as_deref().unwrap_or("drop") {
            "drop" => Malformed::Drop,
            "default" => Malformed::Default,
            other => {
                return Err(invalid(
                    format!("[daemon] malformed = \"{other}\""),
                    "\"drop\" or \"default\"",
                ));
            }
        };
        let metrics = match d.metrics {
            None => None,
            Some(m) => {
                let addr: std::net::SocketAddr = m.parse().map_err(|_| {
                    invalid(
                        format!("[daemon] metrics = \"{m}\""),
                        "an address like \"127.0.0.1:9464\"",
                    )
                })?;
                if !addr.ip().is_loopback() {
                    return Err(invalid(
                        format!("[daemon] metrics = \"{m}\" is not a loopback address"),
                        "127.0.0.1 or ::1 (metrics stay on this host)",
                    ));
                }
                if addr.port() == 0 {
                    // The kernel would pick one, which nothing reports: no scraper finds it.
                    return Err(invalid(
                        format!("[daemon] metrics = \"{m}\" has port 0"),
                        "a port of 1-65535 for scrapers to find",
                    ));
                }
                Some(addr)
            }
        };
        // `ecn` may be "off"; `ecn_interval` may not (it was offered it, and refused it).
        let ecn_duration = |key: &str, v: &str| -> Result<u64, ConfigError> {
            let or_off = if key == "ecn" { ", or \"off\"" } else { "" };
            let ns = parse_duration(v).map_err(|_| {
                invalid(
                    format!("[daemon] {key} = \"{v}\" is not a duration"),
                    &format!("a duration like \"2ms\"{or_off}"),
                )
            })?;
            if !(1_000..=10_000_000_000).contains(&ns) {
                return Err(invalid(
                    format!("[daemon] {key} = \"{v}\""),
                    &format!("between 1us and 10s{or_off}"),
                ));
            }
            Ok(ns)
        };
        let interval_ns = ecn_duration(
            "ecn_interval",
            d.ecn_interval.as_deref().unwrap_or(DEFAULT_ECN_INTERVAL),
        )?;
        let ecn = match d.ecn.as_deref().unwrap_or(DEFAULT_ECN) {
            "off" => None,
            e => Some(crate::codel::Params {
                target_ns: ecn_duration("ecn", e)?,
                interval_ns,
            }),
        };
        if d.control.as_deref() == Some("") {
            return Err(invalid(
                "control = \"\"".to_string(),
                "a path for the control socket, or no `control` key for none",
            ));
        }
        // What `run` would refuse when it binds, said by `--check` too (it said "ok").
        if let Some(c) = d.control.as_deref() {
            if c.contains('\0') {
                return Err(invalid(
                    format!("control = {c:?} holds a NUL byte"),
                    "a path for the control socket",
                ));
            }
            if let Err(e) = crate::control_socket::check_path_len(Path::new(c)) {
                return Err(invalid(
                    format!("control = {e}"),
                    "a path of at most 107 bytes (a Unix socket's address)",
                ));
            }
        }
        let control = d.control.map(PathBuf::from);
        let pid = std::process::id();
        let mut ports: Vec<PortConfig> = Vec::new();
        for p in raw.port {
            if !valid_name(&p.name, 32) {
                return Err(invalid(
                    format!("port name \"{}\"", p.name),
                    "1-32 letters, digits, '-', '_' or '.'",
                ));
            }
            if ports.iter().any(|q| q.name == p.name) {
                return Err(invalid(
                    format!("two ports are named \"{}\"", p.name),
                    "unique port names",
                ));
            }
            // pid and index: unique among daemons and among this daemon's ports, and at most
            // 2 + 7 + 1 + 2 characters.
            let ifname = p
                .ifname
                .unwrap_or_else(|| format!("sl{pid}-{}", ports.len()));
            if !valid_name(&ifname, IFNAME_MAX) {
                return Err(invalid(
                    format!("port \"{}\": ifname \"{ifname}\"", p.name),
                    "an interface name of 1-15 letters, digits, '-', '_' or '.'",
                ));
            }
            let kind = match p.kind.as_str() {
                "tap" => {
                    // What the tap's creation and the namespace's set-up take (`ip` reads a
                    // leading '-' as an option), said before anything is created.
                    if ifname.starts_with('-') {
                        return Err(invalid(
                            format!("port \"{}\": ifname \"{ifname}\"", p.name),
                            "an interface name of 1-15 letters, digits, '-', '_' or '.', not \
                             starting with '-'",
                        ));
                    }
                    if let Some(ns) = &p.netns {
                        if crate::netns::check_netns_name(ns).is_err() {
                            return Err(invalid(
                                format!("port \"{}\": netns \"{ns}\"", p.name),
                                "a namespace name of 1-64 letters, digits, '-', '_' or '.', not \
                                 starting with '-'",
                            ));
                        }
                    }
                    let address = match &p.address {
                        None => None,
                        Some(a) => Some(parse_cidr(a).ok_or_else(|| {
                            invalid(
                                format!("port \"{}\": address \"{a}\"", p.name),
                                "an address with prefix length, like \"10.77.0.1/24\"",
                            )
                        })?),
                    };
                    PortKind::Tap {
                        netns: p.netns,
                        address,
                    }
                }
                "af_packet" => {
                    if p.netns.is_some() || p.address.is_some() {
                        return Err(invalid(
                            format!("port \"{}\": netns/address on an af_packet port", p.name),
                            "an existing interface, configured outside the daemon",
                        ));
                    }
                    PortKind::AfPacket
                }
                other => {
                    return Err(invalid(
                        format!("port \"{}\": kind \"{other}\"", p.name),
                        "\"tap\" or \"af_packet\"",
                    ));
                }
            };
            let dur = |v: &Option<String>, key: &str| -> Result<u64, ConfigError> {
                match v {
                    None => Ok(0),
                    Some(s) => {
                        let ns = parse_duration(s).map_err(|e| {
                            invalid(
                                format!("port \"{}\": {key}: {e}", p.name),
                                "a duration like \"5ms\"",
                            )
                        })?;
                        if ns > 10_000_000_000 {
                            return Err(invalid(
                                format!("port \"{}\": {key} = \"{s}\"", p.name),
                                "at most 10s",
                            ));
                        }
                        Ok(ns)
                    }
                }
            };
            let delay_ns = dur(&p.delay, "delay")?;
            let jitter_ns = dur(&p.jitter, "jitter")?;
            ports.push(PortConfig {
                name: p.name,
                ifname,
                kind,
                delay_ns,
                jitter_ns,
            });
        }
        if ports.is_empty() {
            return Err(invalid(
                "no [[port]]".into(),
                "at least two ports and a [[link]] between them",
            ));
        }
        let mut links = Vec::new();
        for l in raw.link {
            let find = |n: &str| ports.iter().position(|p| p.name == n);
            let names = ports
                .iter()
                .map(|p| format!("\"{}\"", p.name))
                .collect::<Vec<_>>()
                .join(", ");
            let from = find(&l.from).ok_or_else(|| {
                invalid(
                    format!("link from unknown port \"{}\"", l.from),
                    &format!("one of {names}"),
                )
            })?;
            let to = find(&l.to).ok_or_else(|| {
                invalid(
                    format!("link to unknown port \"{}\"", l.to),
                    &format!("one of {names}"),
                )
            })?;
            if from == to {
                return Err(invalid(
                    format!("link from \"{}\" to itself", l.from),
                    "a link between two different ports",
                ));
            }
            if links.iter().any(|x: &LinkConfig| x.from == from) {
                return Err(invalid(
                    format!("two links read from port \"{}\"", l.from),
                    "one link per reading port",
                ));
            }
            links.push(LinkConfig {
                from,
                to,
                policy: l.policy.map(|p| base.join(p)),
            });
        }
        if links.is_empty() {
            return Err(invalid(
                "no [[link]]".into(),
                "at least one link from a port to another",
            ));
        }
        Ok(Config {
            mode,
            engines: engines as usize,
            memory: memory as usize,
            at_bound,
            metrics,
            control,
            malformed,
            ecn,
            ports,
            links,
        })
    }
}

/// Parse `addr/len`.
pub fn parse_cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (a, l) = s.split_once('/')?;
    let addr: IpAddr = a.parse().ok()?;
    let len: u8 = l.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (len <= max).then_some((addr, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[daemon]
mode = "event"
memory = "64MiB"
metrics = "127.0.0.1:9464"

[[port]]
name = "a"
kind = "tap"
netns = "ns-a"
address = "10.77.0.1/24"
delay = "5ms"

[[port]]
name = "b"
kind = "tap"
ifname = "tap-b"

[[link]]
from = "a"
to = "b"
policy = "p.toml"

[[link]]
from = "b"
to = "a"
"#;

    #[test]
    fn a_good_file() {
        let c = Config::parse(GOOD, "d.toml", Path::new("/etc/sluice")).unwrap();
        assert_eq!(c.mode, Mode::Event);
        assert_eq!(c.memory, 64 << 20);
        assert_eq!(c.ports.len(), 2);
        assert_eq!(c.ports[0].delay_ns, 5_000_000);
        assert!(c.ports[0].ifname.starts_with("sl"));
        assert_eq!(c.ports[1].ifname, "tap-b");
        assert_eq!(
            c.links[0].policy.as_deref(),
            Some(Path::new("/etc/sluice/p.toml"))
        );
        assert_eq!(c.links[1].policy, None);
        assert_eq!(
            c.ecn,
            Some(crate::codel::Params {
                target_ns: 2_000_000,
                interval_ns: 20_000_000
            }),
            "ECN marking is on by default"
        );
        let off = Config::parse(
            &GOOD.replace("[daemon]", "[daemon]\necn = \"off\""),
            "d.toml",
            Path::new("."),
        )
        .unwrap();
        assert_eq!(off.ecn, None);
    }

    #[test]
    fn default_interface_names_are_unique_per_daemon_and_port() {
        let text = GOOD.replace("ifname = \"tap-b\"\n", "");
        let c = Config::parse(&text, "d.toml", Path::new(".")).unwrap();
        let pid = std::process::id();
        assert_eq!(c.ports[0].ifname, format!("sl{pid}-0"));
        assert_eq!(c.ports[1].ifname, format!("sl{pid}-1"));
    }

    #[test]
    fn errors_say_what_and_what_was_expected() {
        for (change, needle) in [
            (
                GOOD.replace("mode = \"event\"", "mode = \"fast\""),
                "\"event\" or \"busy\"",
            ),
            (
                GOOD.replace("memory = \"64MiB\"", "memory = \"1KB\""),
                "between 2MiB and 64GiB",
            ),
            (GOOD.replace("127.0.0.1:9464", "0.0.0.0:9464"), "loopback"),
            (
                GOOD.replace("mode = \"event\"", "mode = \"event\"\ncontrol = \"\""),
                "a path for the control socket",
            ),
            (
                GOOD.replace("address = \"10.77.0.1/24\"", "address = \"10.77.0.1\""),
                "prefix length",
            ),
            (
                GOOD.replace("address = \"10.77.0.1/24\"", "address = \"10.77.0.1/40\""),
                "prefix length",
            ),
            (
                GOOD.replace("ifname = \"tap-b\"", "ifname = \"a-name-far-too-long\""),
                "1-15",
            ),
            (
                GOOD.replace("to = \"b\"", "to = \"c\""),
                "unknown port \"c\"",
            ),
            (GOOD.replace("delay = \"5ms\"", "delay = \"5\""), "duration"),
            (
                GOOD.replace("kind = \"tap\"\nifname", "kind = \"tun\"\nifname"),
                "\"tap\" or \"af_packet\"",
            ),
            (
                GOOD.replace(
                    "[[link]]\nfrom = \"b\"\nto = \"a\"",
                    "[[link]]\nfrom = \"a\"\nto = \"b\"",
                ),
                "one link per reading port",
            ),
            (
                GOOD.replace("mode = \"event\"", "mode = \"event\"\nspeed = 3"),
                "d.toml:4:1: unknown field `speed`, expected one of",
            ),
            (
                GOOD.replace("[daemon]", "[daemon"),
                "d.toml:2:8: unclosed table",
            ),
            (
                format!("{GOOD}\n[[node]]\nname = \"q\"\npolicy = \"fifo\"\n"),
                "unknown field `node`, expected one of `daemon`, `port`, `link` (this looks like \
                 a policy file",
            ),
            (
                GOOD.replace("[daemon]", "[daemon]\necn = \"soon\""),
                "\"off\"",
            ),
            (
                GOOD.replace("[daemon]", "[daemon]\necn = \"20s\""),
                "between 1us and 10s",
            ),
        ] {
            let e = Config::parse(&change, "d.toml", Path::new("."))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("d.toml:"), "{e}");
            assert!(e.contains(needle), "{needle:?} not in: {e}");
        }
        // `ecn_interval` is not offered the "off" that only `ecn` takes, nor told twice
        // what it expects.
        let e = Config::parse(
            &GOOD.replace("[daemon]", "[daemon]\necn_interval = \"off\""),
            "d.toml",
            Path::new("."),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("ecn_interval = \"off\" is not a duration"),
            "{e}"
        );
        assert_eq!(e.matches("expected").count(), 1, "{e}");
        assert!(!e.contains("or \"off\""), "{e}");
        // Control paths that `run` cannot bind are refused by the check too.
        let long = format!("/tmp/{}", "s".repeat(200));
        for (control, needle) in [(long.as_str(), "at most 107"), ("/tmp/a\\u0000b", "NUL")] {
            let text = GOOD.replace("[daemon]", &format!("[daemon]\ncontrol = \"{control}\""));
            let e = Config::parse(&text, "d.toml", Path::new("."))
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{needle:?} not in: {e}");
        }
    }

    /// The memory bound is global: `memory` is shared out among the engines, and each
    /// engine's share must buy its least pool. With `engines = 4` and `memory = "2MiB"`, each
    /// engine was raised to that least pool, 5.3 MiB in all, over the bound the file set; and
    /// a bound below the 2 MiB the error states (1.5 MiB) was taken, while `memory = 0` was
    /// told it is not "a size".
    #[test]
    fn the_memory_bound_is_what_the_file_says_and_holds_with_every_engine() {
        let with = |daemon: &str| {
            Config::parse(
                &GOOD.replace("memory = \"64MiB\"", daemon),
                "d.toml",
                Path::new("."),
            )
        };
        for (daemon, needle) in [
            ("memory = \"1500000B\"", "between 2MiB and 64GiB"),
            ("memory = 0", "between 2MiB and 64GiB"),
            ("memory = \"0B\"", "between 2MiB and 64GiB"),
            ("memory = -1", "a size like"),
            ("memory = \"65GiB\"", "between 2MiB and 64GiB"),
            ("memory = \"2MiB\"\nengines = 2", "2 engines"),
            ("memory = \"64MiB\"\nengines = 64", "64 engines"),
        ] {
            let e = with(daemon).unwrap_err().to_string();
            assert!(e.contains(needle), "{daemon}: {needle:?} not in: {e}");
        }
        for (daemon, engines) in [
            ("memory = \"2MiB\"", 1),
            ("memory = 2097152", 1),
            ("memory = \"4MiB\"\nengines = 2", 2),
            ("memory = \"90MiB\"\nengines = 64", 64),
        ] {
            let c = with(daemon).unwrap();
            assert_eq!(c.engines, engines);
            assert!(
                c.memory / c.engines >= crate::buffers::MIN_MEMORY,
                "{daemon}: each engine's share buys its least pool"
            );
        }
    }

    /// An interface or namespace name starting with '-' passed the file's check and
    /// `--check`, then `run` refused it when it came to create the tap or the namespace (to
    /// `ip`, a leading '-' reads as an option). Refused by the file's check now.
    #[test]
    fn names_starting_with_a_dash_are_refused_by_the_file_check() {
        for (change, needle) in [
            (
                GOOD.replace("ifname = \"tap-b\"", "ifname = \"-tap\""),
                "ifname \"-tap\"",
            ),
            (
                GOOD.replace("netns = \"ns-a\"", "netns = \"-n\""),
                "netns \"-n\"",
            ),
        ] {
            let e = Config::parse(&change, "d.toml", Path::new("."))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(needle) && e.contains("not starting with '-'"),
                "{e}"
            );
        }
    }

    /// `metrics = "127.0.0.1:0"` was taken: the endpoint bound a port the kernel picked,
    /// which nothing logs or reports, so no scraper could find it. Refused, saying why.
    #[test]
    fn a_metrics_port_of_0_is_refused() {
        for addr in ["127.0.0.1:0", "[::1]:0"] {
            let e = Config::parse(
                &GOOD.replace("127.0.0.1:9464", addr),
                "d.toml",
                Path::new("."),
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains(addr) && e.contains("1-65535"), "{e}");
        }
        let c = Config::parse(
            &GOOD.replace("127.0.0.1:9464", "[::1]:65535"),
            "d.toml",
            Path::new("."),
        )
        .unwrap();
        assert_eq!(c.metrics.map(|a| a.port()), Some(65535));
    }

    /// A device or a named pipe is refused before it is read (`/dev/zero` took gigabytes, and
    /// a pipe with no writer hung the daemon in `open` where no signal could stop it), and a
    /// file that cannot be read says why once (it said it twice under `--check`).
    #[test]
    fn only_regular_files_are_read_and_errors_say_why_once() {
        let e = Config::load(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
        let dir = std::env::temp_dir().join(format!("sluice-cfg-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("d.toml");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that lives across the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = Config::load(&fifo).unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(e.to_string().contains("named pipe"), "{e}");
        let e = Config::load(Path::new("/nonexistent/d.toml")).unwrap_err();
        assert!(std::error::Error::source(&e).is_none(), "{e:?}");
        assert_eq!(e.to_string().matches("No such file").count(), 1, "{e}");
    }

    /// The `toml` block after `start` in `text` (a Markdown file or this module's note).
    fn example_after<'a>(text: &'a str, start: &str) -> &'a str {
        text.split(start)
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .unwrap_or_else(|| panic!("no `{start}` block"))
    }

    /// The keys a table takes, as the parser lists them for an unknown one.
    fn keys_of(table: &str, ports_and_link: &str) -> Vec<String> {
        let text = format!("{table}\nzz_unknown = 1\n{ports_and_link}");
        let e = Config::parse(&text, "k.toml", Path::new("."))
            .unwrap_err()
            .to_string();
        let list = e
            .split("expected one of ")
            .nth(1)
            .unwrap_or_else(|| panic!("no key list in {e}"));
        list.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    }

    /// The configuration docs/daemon.md shows, and the one this module's note shows, are
    /// files the daemon takes, and each shows every key of `[daemon]`, `[[port]]` and
    /// `[[link]]` (a key added to the parser and not to the docs fails here). The module
    /// note's links named a port `b` it did not have: the file was refused.
    #[test]
    fn the_documented_examples_parse_and_show_every_key() {
        let doc = example_after(include_str!("../../../docs/daemon.md"), "```toml\n");
        let note: String = example_after(include_str!("config.rs"), "//! ```toml\n")
            .lines()
            .map(|l| l.strip_prefix("//!").unwrap_or(l))
            .map(|l| l.strip_prefix(' ').unwrap_or(l))
            .map(|l| format!("{l}\n"))
            .collect();
        let two_ports = "[[port]]\nname = \"a\"\nkind = \"tap\"\n\
                         [[port]]\nname = \"b\"\nkind = \"tap\"\n\
                         [[link]]\nfrom = \"a\"\nto = \"b\"\n";
        let tables = [
            ("[daemon]", keys_of("[daemon]", two_ports)),
            (
                "[[port]]",
                keys_of("[[port]]\nname = \"c\"\nkind = \"tap\"", two_ports),
            ),
            (
                "[[link]]",
                keys_of(
                    &format!("{two_ports}[[link]]\nfrom = \"b\"\nto = \"a\""),
                    "",
                ),
            ),
        ];
        for (name, example) in [("docs/daemon.md", doc), ("config.rs's note", note.as_str())] {
            if let Err(e) = Config::parse(example, name, Path::new("/etc/sluice")) {
                panic!("{e}");
            }
            let shown: Vec<&str> = example
                .lines()
                .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim()))
                .collect();
            for (table, keys) in &tables {
                assert!(keys.len() >= 2, "{table}: {keys:?}");
                for key in keys {
                    assert!(
                        shown.contains(&key.as_str()),
                        "{name} does not show {table} {key}"
                    );
                }
            }
        }
    }

    #[test]
    fn names_and_cidrs() {
        assert!(valid_name("sl-ns-a", 64));
        assert!(!valid_name("../etc", 64));
        assert!(!valid_name("a b", 64));
        assert!(!valid_name("", 15));
        assert_eq!(
            parse_cidr("fd00::1/64"),
            Some(("fd00::1".parse().unwrap(), 64))
        );
        assert_eq!(parse_cidr("10.0.0.1/33"), None);
    }
}
