//! Policy files: a scheduler described in TOML (its tree, each node's policy, queue and rate
//! limits, the classifier and the shaper), validated with `FILE:LINE:COL` errors and compiled
//! to a [`TreeBuilder`].
//!
//! [`compile_str`] / [`compile_file`] return the builder and its [`SchedConfig`] (so tests can
//! also build the reference oracle from it); [`build_str`] / [`build_file`] return the
//! [`Scheduler`]. Compiling validates everything the builder validates, so a file that
//! compiles builds. Nothing here panics on any input: every problem is a [`PolicyError`] naming
//! the file, the line (and column), what is wrong and what was expected. Cost: linear in the
//! file, plus building each node's queue once to check it (as [`TreeBuilder::build`] does).
//!
//! # Format
//!
//! Every key is optional unless marked required; unknown keys are errors. The full reference,
//! with every error explained, is `docs/policy-files.md`.
//!
//! ```toml
//! [scheduler]                 # optional; defaults shown
//! capacity = 65536            # packets held at once (1..=2^24)
//! flows = 65536               # flow table slots (1..=2^24)
//! max_packet = "64KiB"        # largest packet expected (size, 1 B..=4 GiB - 1)
//! default = "bronze"          # leaf for packets no rule matches; omit to reject them
//!
//! [shaper]                    # optional; defaults: 1024 ns slots, 2^20 of them (~1.07 s)
//! slot = "1024ns"             # duration (units ns, us or µs, ms, s; to the nearest ns)
//! horizon = "1s"              # duration; slots = ceil(horizon / slot), 2..=2^24 of them
//! beyond_horizon = "clamp"    # or "reject"
//! queue = "timing_wheel"      # or an exact kind: binary_heap, btree, skiplist
//!
//! [[node]]
//! name = "root"               # required, unique: 1-64 letters, digits, `-_.:/`
//! policy = "wfq"              # required: fifo prio wfq drr edf lstf pfabric (srpt) lqf hclock htb fq
//! parent = "root"             # omitted only for the one root
//! queue = "auto"              # or a kind like "cffs", or { kind = "cffs", buckets = 4096, granularity = 1024 }
//! rate = "1Gbit"              # rate limit on what leaves this node (HTB: ceil; hClock: limit)
//! burst = "15KB"              # burst of that limit (size, 0..=4 GiB - 1; default 0; needs `rate`)
//! weight = 3                  # share in its parent (1..=65536; default 1)
//! priority = 0                # level in a prio parent (0..=255)
//! quantum = "3028B"           # DRR quantum in its parent (size, 1 B..=4 GiB - 1)
//! reservation = "100Mbit"     # hClock reservation / HTB guaranteed rate, in its parent
//! flow_rate = "10Mbit"        # leaves only: pacing rate of every flow
//! flow_burst = "3KB"          # leaves only (size, 0..=4 GiB - 1; needs `flow_rate`)
//! flow_weight = 1             # leaves only
//! flow_quantum = "3028B"      # leaves only
//! flow_reservation = "1Mbit"  # leaves only
//!
//! [[classify]]                # rules, tried in file order; every condition given must hold
//! to = "gold"                 # required: a leaf
//! class = 1                   # host-given class id (0..=2^32-1)
//! dscp = 46                   # 0..=63
//! vlan = 100                  # 0..=4095
//! proto = "tcp"               # "tcp", "udp", "icmp", "icmpv6" (any case) or 0..=255
//! src = "10.0.0.0/8"          # address or CIDR prefix (v4 or v6; host bits zero)
//! dst = "fd00::/8"
//! sport = 5000                # port or "lo-hi" range
//! dport = "5000-5999"
//! ```
//!
//! Rates are [`Rate::parse`] strings (`10Mbit`, `1.5Gbit`: bits per second), sizes
//! [`units::parse_size`] strings or whole numbers of bytes, durations
//! [`units::parse_duration`] strings. Nodes may be listed in any order; they are added to the
//! builder parents first (breadth first, children in file order).

use crate::builder::{BuildError, NodeSpec, QueueChoice, SchedConfig, ShaperConfig, TreeBuilder};
use crate::classify::Match;
use crate::policy::{MAX_WEIGHT, MemberCfg, PolicyKind};
use crate::tree::{MAX_DEPTH, NodeId, Scheduler};
use crate::units::{self, Rate, UnitError};
use serde::Deserialize;
use sluice_queue::{ConfigError, Overflow, QueueKind};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::IpAddr;
use std::ops::Range;
use std::path::Path;
use toml::{Spanned, Value};

mod bounds;

/// Most packets (`capacity`) and flow-table slots (`flows`) a policy file may ask for.
pub const MAX_COUNT: u64 = crate::builder::MAX_PACKETS as u64;

/// Most buckets in a node's queue, and most shaper slots, a policy file may ask for.
pub const MAX_BUCKETS: u64 = 1 << 24;

/// Largest size a policy file may give (`max_packet`, `quantum`, `burst`, ...): 4 GiB - 1 B.
/// A burst beyond it would let a gate send gigabytes at once, past any queue.
pub const MAX_SIZE: u64 = u32::MAX as u64;

/// Most nodes in a tree.
const MAX_NODES: usize = u16::MAX as usize;

/// A place in a policy file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The file, as the caller named it.
    pub file: String,
    /// Line, from 1.
    pub line: usize,
    /// Column in characters, from 1, when known.
    pub col: Option<usize>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)?;
        if let Some(c) = self.col {
            write!(f, ":{c}")?;
        }
        Ok(())
    }
}

/// Why a policy file cannot be used. Displays as `FILE:LINE:COL: what is wrong; expected ...`
/// (or `FILE: cannot read: ...`).
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("{file}: cannot read: {error}")]
    Io {
        /// The file.
        file: String,
        /// Why.
        error: std::io::Error,
    },
    /// The file's content is wrong.
    #[error("{at}: {what}; expected {expected}")]
    Invalid {
        /// Where.
        at: Location,
        /// What is wrong.
        what: String,
        /// What would have been right.
        expected: String,
    },
    /// The file is valid, and each of its parts could be built alone, but not the whole tree
    /// (memory ran out): no one line is at fault.
    #[error(
        "{file}: cannot build the tree: {error}; expected queues and tables that fit in \
         memory together: fewer `buckets`, or a smaller `capacity` or `flows`"
    )]
    Build {
        /// The file.
        file: String,
        /// Why.
        error: BuildError,
    },
}

impl PolicyError {
    /// Where in the file the problem is (`None` for read errors).
    pub fn location(&self) -> Option<&Location> {
        match self {
            PolicyError::Io { .. } | PolicyError::Build { .. } => None,
            PolicyError::Invalid { at, .. } => Some(at),
        }
    }
}

/// Compile policy file text (`file` names it in errors) to a builder and its configuration.
pub fn compile_str(text: &str, file: &str) -> Result<(TreeBuilder, SchedConfig), PolicyError> {
    // A byte order mark is not part of the text (and would shift the columns of line 1).
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let cx = Ctx {
        text,
        file,
        again: 0,
    };
    if let Some(at) = text.find('\0') {
        // TOML's parser calls a file of NUL bytes a key with no value.
        return Err(cx.err(
            at..at + 1,
            "a NUL byte: this is not a text file",
            "a UTF-8 text file (TOML is UTF-8)",
        ));
    }
    if let Some((at, tables)) = bounds::first_excess(text) {
        let (what, max, each) = if tables {
            (
                "tables (`[table]`, `[[array]]` and `{ inline }`)",
                bounds::MAX_TABLES,
                "about 1.5 KB a table",
            )
        } else {
            (
                "values (counted by `=`, `,` and arrays' `[`)",
                bounds::MAX_VALUES,
                "up to 400 B a value",
            )
        };
        return Err(cx.err(
            at..at + 1,
            format!("more than {max} {what} in one file"),
            format!(
                "at most {max}: the TOML parser holds the whole file in memory before any \
                 check, {each} (the largest tree, 65 535 nodes each with an inline \
                 `queue` table, fits)"
            ),
        ));
    }
    cx.compile()
}

/// Read and compile a policy file.
pub fn compile_file(path: &Path) -> Result<(TreeBuilder, SchedConfig), PolicyError> {
    let file = path.display().to_string();
    let bytes = read_capped(path).map_err(|error| PolicyError::Io {
        file: file.clone(),
        error,
    })?;
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => return Err(not_utf8(&file, e.as_bytes(), e.utf8_error().valid_up_to())),
    };
    compile_str(&text, &file)
}

/// Largest policy file read: far above any real tree (65 536 nodes take about 5 MB), and
/// small enough that a wrong path to a disk image fails at once.
const MAX_FILE_BYTES: u64 = 64 << 20;

/// The file's bytes, refusing more than 64 MiB, and named pipes, sockets and
/// devices (opening a pipe waits for a writer: `policy check` hung on one with none, and on a
/// terminal). That refuses `/dev/stdin` from a shell pipe or a terminal too. For any
/// configuration file (the daemon reads its own with it: `sluice run --config /dev/zero`
/// took gigabytes, and a FIFO hung it before it could be stopped).
pub fn read_capped(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        let kind = std::fs::metadata(path)?.file_type();
        let what = if kind.is_fifo() {
            Some("a named pipe (FIFO), not a file: reading it would wait for a writer")
        } else if kind.is_socket() {
            Some("a socket, not a file: reading it would wait for a writer")
        } else if kind.is_char_device() {
            // A terminal waits for typing; /dev/zero never ends.
            Some("a character device, not a file: reading it may wait or never end")
        } else if kind.is_block_device() {
            Some("a block device, not a file")
        } else {
            None
        };
        if let Some(what) = what {
            return Err(std::io::Error::other(format!(
                "it is {what}; a configuration file is a regular file"
            )));
        }
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {} MiB; a configuration file is text of a few KB",
            MAX_FILE_BYTES >> 20
        )));
    }
    Ok(bytes)
}

/// The error for a file whose bytes from `at` on are not UTF-8: where that is.
fn not_utf8(file: &str, bytes: &[u8], at: usize) -> PolicyError {
    let before = &bytes[..at];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    // Characters, not bytes, as the other errors count columns (the prefix is valid UTF-8),
    // and without a byte-order mark, as they are counted once it is stripped.
    let col = String::from_utf8_lossy(&before[line_start..])
        .trim_start_matches('\u{feff}')
        .chars()
        .count()
        + 1;
    PolicyError::Invalid {
        at: Location {
            file: file.to_string(),
            line,
            col: Some(col),
        },
        what: "bytes that are not UTF-8".into(),
        expected: "a UTF-8 text file (TOML is UTF-8)".into(),
    }
}

/// Compile policy file text and build its scheduler.
pub fn build_str(text: &str, file: &str) -> Result<Scheduler, PolicyError> {
    let (builder, _) = compile_str(text, file)?;
    finish(builder, file)
}

/// Read a policy file and build its scheduler.
pub fn build_file(path: &Path) -> Result<Scheduler, PolicyError> {
    let (builder, _) = compile_file(path)?;
    finish(builder, &path.display().to_string())
}

/// Build a compiled tree. Compiling already ran the builder's checks, each queue built alone,
/// so this fails only when all of them together do not fit in memory.
fn finish(builder: TreeBuilder, file: &str) -> Result<Scheduler, PolicyError> {
    builder.build().map_err(|error| PolicyError::Build {
        file: file.to_string(),
        error,
    })
}

// ---------------------------------------------------------------------------------------------
// The file as TOML gives it: structure checked by serde (unknown keys are errors), every value
// kept with its position and checked below.

type Val = Option<Spanned<Value>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    scheduler: Option<Spanned<Table<RawScheduler>>>,
    shaper: Option<Spanned<Table<RawShaper>>>,
    #[serde(default)]
    node: Vec<Spanned<Table<RawNode>>>,
    #[serde(default)]
    classify: Vec<Spanned<Table<RawRule>>>,
}

/// A `T` read from a TOML table only. serde's derived structs also take a sequence, its
/// elements as the fields in order: `scheduler = [5, 7, 1500, "leaf"]` was a scheduler of 5
/// packets, and a `[[classify]]` written as an array a rule. An array here is an error.
struct Table<T>(T);

impl<T> std::ops::Deref for Table<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Table<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visit<T> {
            type Value = Table<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                // What serde's derive says (`struct RawNode`), which `toml_error` rewords.
                let name = std::any::type_name::<T>();
                let name = name.rsplit("::").next().unwrap_or(name);
                write!(f, "struct {name}")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<Table<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(m)).map(Table)
            }
        }
        d.deserialize_map(Visit(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScheduler {
    capacity: Val,
    flows: Val,
    max_packet: Val,
    default: Val,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawShaper {
    slot: Val,
    horizon: Val,
    beyond_horizon: Val,
    queue: Val,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: Val,
    policy: Val,
    parent: Val,
    queue: Option<Spanned<RawQueue>>,
    rate: Val,
    burst: Val,
    weight: Val,
    priority: Val,
    quantum: Val,
    reservation: Val,
    flow_rate: Val,
    flow_burst: Val,
    flow_weight: Val,
    flow_quantum: Val,
    flow_reservation: Val,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    to: Val,
    class: Val,
    dscp: Val,
    vlan: Val,
    proto: Val,
    src: Val,
    dst: Val,
    sport: Val,
    dport: Val,
}

/// `queue = "cffs"` or `queue = { kind = "cffs", buckets = 4096, granularity = 1024 }`.
enum RawQueue {
    Name(String),
    Table(RawQueueTable),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQueueTable {
    kind: Val,
    buckets: Val,
    granularity: Val,
}

impl<'de> Deserialize<'de> for RawQueue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = RawQueue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "`queue` = \"auto\", a queue kind like \"cffs\", or a table like \
                     { kind = \"cffs\", buckets = 4096, granularity = 1024 }",
                )
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<RawQueue, E> {
                Ok(RawQueue::Name(s.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<RawQueue, A::Error> {
                RawQueueTable::deserialize(serde::de::value::MapAccessDeserializer::new(m))
                    .map(RawQueue::Table)
            }
        }
        d.deserialize_any(Visit)
    }
}

// ---------------------------------------------------------------------------------------------
// Positions and errors.

/// The file being compiled: its text (for positions) and its name (for messages).
struct Ctx<'a> {
    text: &'a str,
    file: &'a str,
    /// How many values toml could not hold were replaced to compile it
    /// ([`Ctx::compile_replacing`]).
    again: u8,
}

/// Line and column (both from 1, the column in characters) of byte `offset` in `text`.
/// Offsets past the end or inside a character are tolerated. (Public so that the daemon's
/// configuration file names its errors' places as policy files do.)
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let col = before[start..]
        .iter()
        .filter(|&&b| b & 0xC0 != 0x80)
        .count()
        + 1;
    (line, col)
}

impl Ctx<'_> {
    fn err(
        &self,
        span: Range<usize>,
        what: impl Into<String>,
        expected: impl Into<String>,
    ) -> PolicyError {
        let (line, col) = line_col(self.text, span.start);
        PolicyError::Invalid {
            at: Location {
                file: self.file.to_string(),
                line,
                col: Some(col),
            },
            what: what.into(),
            expected: expected.into(),
        }
    }

    /// The source text of `span` (empty if the span is not in the text).
    fn snippet(&self, span: Range<usize>) -> &str {
        self.text.get(span).unwrap_or("")
    }

    /// A TOML syntax or structure error, reworded into "what; expected".
    fn toml_error(&self, e: &toml::de::Error) -> PolicyError {
        let span = e.span().unwrap_or(0..0);
        let message = e.message().trim().replace('\n', "; ");
        let (mut what, mut expected) = match message.split_once(", expected ") {
            Some((w, x)) => (w.to_string(), x.to_string()),
            None => match message.strip_prefix("expected ") {
                Some(x) => ("invalid TOML".to_string(), x.to_string()),
                None => (message.clone(), "valid TOML (https://toml.io)".to_string()),
            },
        };
        if let Some(quoted) = what.strip_prefix("invalid type: string ") {
            // serde quotes the whole string: 100 KB of it on one line.
            what = format!("invalid type: string {}", shorten(quoted));
        }
        if what.contains("$__toml_private_datetime") {
            // toml's internal name for a date-time, reported as an unknown key.
            what = "a date-time value".into();
            expected = "a string, number or table, as docs/policy-files.md shows".into();
        } else if let Some(key) = what.strip_prefix("unknown field ") {
            // A top-level table of the daemon's file (the keys expected are the file's own).
            let daemons =
                expected.contains("`scheduler`") && ["`daemon`", "`port`", "`link`"].contains(&key);
            what = format!("unknown key {}", shorten(key));
            expected = format!("a known key here: {expected}");
            if daemons {
                expected.push_str(
                    " (this looks like the daemon's configuration: check it with `sluice run \
                     --check -c FILE`, docs/daemon.md)",
                );
            }
        } else if (what.starts_with("invalid type: integer") && what.contains("i128"))
            || what == "u64 value was too large"
        {
            // toml reads integers beyond i64 as i128, on either side of zero; one in
            // 2^63..2^64 reaches a `Value` as a u64, which it refuses in its own words.
            let negative = self.snippet(span.clone()).trim_start().starts_with('-');
            what = if negative {
                "an integer too far below zero".into()
            } else {
                "an integer too large".into()
            };
            // Name the key, the last before the value on its line (toml points at the value
            // only; in an inline table the key is after its `{` or `,`).
            let line = self.text.get(..span.start).unwrap_or("");
            let line = &line[line.rfind('\n').map_or(0, |i| i + 1)..];
            if let Some((before, _)) = line.rsplit_once('=') {
                let before = before.trim_end();
                let key = &before[before.rfind([' ', '\t', '{', ',']).map_or(0, |i| i + 1)..];
                what = format!("`{}` = {what}", shorten(key));
            }
            // What the key expects, as its own check says it. (Told "an integer from -2^63
            // to below 2^63" whatever the key, a user who wrote `rate = 10` next was told a
            // rate is no integer.)
            let (line, col) = line_col(self.text, span.start);
            expected = match self.compile_replacing(span.clone()) {
                // Compiled again for such a value before this one: this one replaced too, the
                // checks reach that one.
                Some(Err(e)) if self.again > 0 => return e,
                Some(Err(PolicyError::Invalid { at, expected, .. }))
                    if at.line == line && at.col == Some(col) =>
                {
                    expected
                }
                // Another fault in the file came first (another such value, whose key is
                // checked first): what TOML holds, and where to look for the rest.
                _ => "an integer from -2^63 to below 2^63 (as TOML holds them), in the key's \
                      range (docs/policy-files.md)"
                    .into(),
            };
        } else if what == "invalid boolean" {
            // An unquoted word that starts like `true` or `false` (`fq`, `tcp`): toml reads a
            // boolean, where other words get its "string values must be quoted".
            let rest = self.text.get(span.start..).unwrap_or("");
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
                .unwrap_or(rest.len());
            let word = shorten(&rest[..end]);
            what = format!("`{word}` is not quoted (string values must be)");
            expected = format!("a quoted string (\"{word}\"), or `true` or `false`");
        } else if what == "duplicate key" {
            what = format!("duplicate key `{}`", shorten(self.snippet(span.clone())));
            expected = "each key at most once in a table".into();
        }
        if what == "invalid type: map" && expected == "a sequence" {
            // On one line and short: an inline table may span lines (TOML 1.1) and be long.
            let text = self
                .snippet(span.clone())
                .split_whitespace()
                .collect::<Vec<_>>();
            what = format!("`{}` is a single table", shorten(&text.join(" ")));
        }
        for (serde_name, ours) in [
            (
                "a sequence",
                "an array of tables: `[[node]]` or `[[classify]]` (double brackets)",
            ),
            ("struct RawScheduler", "a `[scheduler]` table"),
            ("struct RawShaper", "a `[shaper]` table"),
            ("struct RawNode", "a table: one `[[node]]` per node"),
            ("struct RawRule", "a table: one `[[classify]]` per rule"),
            ("struct RawQueueTable", "a table"),
            ("struct RawFile", "a table"),
        ] {
            // serde says `struct RawNode`, after `invalid type: sequence` for an array where
            // the table belongs ([`Table`]).
            if expected.starts_with(serde_name) {
                if what == "invalid type: sequence" {
                    what = "an array".into();
                }
                expected = ours.to_string();
            }
        }
        // Whatever else toml or serde quote, one short line.
        let (what, expected) = (shorten_to(&what, 200), shorten_to(&expected, 400));
        self.err(span, what, expected)
    }

    /// The file compiled again with -2^63 in place of the value at `span`, an integer toml
    /// could not hold (beyond 64 bits): a value every key refuses (none takes a negative
    /// number, several no number at all), so that the key's own check says what it expects.
    /// `None` after a few such values in one file, each replaced in turn.
    fn compile_replacing(
        &self,
        span: Range<usize>,
    ) -> Option<Result<(TreeBuilder, SchedConfig), PolicyError>> {
        if self.again >= 8 {
            return None;
        }
        let (before, after) = (self.text.get(..span.start)?, self.text.get(span.end..)?);
        let text = format!("{before}{}{after}", i64::MIN);
        let cx = Ctx {
            text: &text,
            file: self.file,
            again: self.again + 1,
        };
        Some(cx.compile())
    }

    fn compile(&self) -> Result<(TreeBuilder, SchedConfig), PolicyError> {
        let raw: RawFile = toml::from_str(self.text).map_err(|e| self.toml_error(&e))?;
        let (mut cfg, default) = self.scheduler(raw.scheduler.as_ref())?;
        cfg.shaper = self.shaper(raw.shaper.as_ref())?;
        let defs = raw
            .node
            .iter()
            .map(|n| self.node(n))
            .collect::<Result<Vec<_>, _>>()?;
        let tree = self.tree(&defs)?;

        let mut b = TreeBuilder::new(cfg);
        let mut ids: Vec<NodeId> = vec![0; defs.len()];
        for &i in &tree.order {
            let spec = defs[i].spec.clone();
            ids[i] = match tree.parent[i] {
                None => b.root(spec),
                Some(p) => b.child(ids[p], spec),
            };
        }
        let leaves: Vec<&str> = (0..defs.len())
            .filter(|&i| tree.children[i].is_empty())
            .map(|i| defs[i].spec.name.as_str())
            .collect();
        let lookup = |key: &str, v: &Spanned<Value>| -> Result<NodeId, PolicyError> {
            let name = self.string(key, v, "the name of a leaf")?;
            match tree.index.get(name) {
                Some(&i) => Ok(ids[i]),
                None => Err(self.err(
                    v.span(),
                    format!("`{key}` = {} names no node", show(v.get_ref())),
                    format!("the name of a leaf: {}", list(&leaves)),
                )),
            }
        };
        for r in &raw.classify {
            let (all, to) = self.rule(r)?;
            b.rule(all, lookup("to", to)?);
        }
        if let Some(d) = &default {
            b.default_leaf(lookup("default", d)?);
        }
        if let Err(e) = b.plan() {
            return Err(self.build_error(e, &defs, &tree, &raw, default.as_ref(), &leaves));
        }
        Ok((b, cfg))
    }

    // -----------------------------------------------------------------------------------------
    // Sections.

    fn scheduler(
        &self,
        raw: Option<&Spanned<Table<RawScheduler>>>,
    ) -> Result<(SchedConfig, Option<Spanned<Value>>), PolicyError> {
        let mut cfg = SchedConfig::default();
        let Some(raw) = raw else {
            return Ok((cfg, None));
        };
        let s = raw.get_ref();
        if let Some(v) = &s.capacity {
            cfg.capacity = self.int("capacity", v, 1, MAX_COUNT as i64)? as usize;
        }
        if let Some(v) = &s.flows {
            cfg.flows = self.int("flows", v, 1, MAX_COUNT as i64)? as usize;
        }
        if let Some(v) = &s.max_packet {
            cfg.max_packet = self.size("max_packet", v, 1, MAX_SIZE)? as u32;
        }
        Ok((cfg, s.default.clone()))
    }

    fn shaper(&self, raw: Option<&Spanned<Table<RawShaper>>>) -> Result<ShaperConfig, PolicyError> {
        let mut cfg = ShaperConfig::default();
        let Some(raw) = raw else {
            return Ok(cfg);
        };
        let s = raw.get_ref();
        if let Some(v) = &s.queue {
            let expected = format!("a queue kind: {}", queue_kinds());
            let name = self.string("queue", v, &expected)?;
            cfg.kind = name.parse().map_err(|_| {
                self.err(
                    v.span(),
                    format!("`queue` = {} is not a queue kind", show(v.get_ref())),
                    expected.clone(),
                )
            })?;
        }
        let default_horizon = cfg.horizon_ns();
        let slot = match &s.slot {
            Some(v) => self.duration("slot", v, 1)?,
            None => cfg.slot_ns,
        };
        let horizon = match &s.horizon {
            Some(v) => self.duration("horizon", v, 1)?,
            None => default_horizon,
        };
        // Only a given `slot` or `horizon` can be wrong: the one to point at.
        let span = match (&s.horizon, &s.slot) {
            (Some(v), _) | (None, Some(v)) => v.span(),
            (None, None) => raw.span(),
        };
        // Say so when the file left the horizon at its default.
        let a = if s.horizon.is_some() {
            "a"
        } else {
            "the default"
        };
        // An exact structure has no slots: any `slot` and `horizon` will do.
        if horizon < slot && !cfg.kind.exact() {
            return Err(self.err(
                span,
                format!("{a} {horizon} ns `horizon` is shorter than one {slot} ns `slot`"),
                "a `horizon` of at least one `slot` (the wheel holds horizon / slot slots)",
            ));
        }
        let slots = horizon.div_ceil(slot);
        let slots = if cfg.kind.exact() {
            slots.clamp(2, MAX_BUCKETS)
        } else {
            slots
        };
        if slots < 2 {
            return Err(self.err(
                span,
                format!("{a} {horizon} ns `horizon` in {slot} ns `slot`s is one slot"),
                "at least 2 slots: a `horizon` longer than one `slot` (releases beyond it are \
                 brought in by a wake at its end, which one slot would file in the slot it \
                 leaves, again and again)",
            ));
        }
        if slots > MAX_BUCKETS {
            return Err(self.err(
                span,
                format!("{a} {horizon} ns `horizon` in {slot} ns `slot`s is {slots} slots"),
                format!(
                    "at most {MAX_BUCKETS} slots (2^24): a longer `slot` or a shorter `horizon`"
                ),
            ));
        }
        cfg.slot_ns = slot;
        cfg.slots = slots as usize;
        if let Some(v) = &s.beyond_horizon {
            const EXPECTED: &str = "\"clamp\" or \"reject\"";
            cfg.beyond_horizon = match self.string("beyond_horizon", v, EXPECTED)? {
                "clamp" => Overflow::Clamp,
                "reject" => Overflow::Reject,
                _ => {
                    return Err(self.err(
                        v.span(),
                        format!("`beyond_horizon` = {} is not a choice", show(v.get_ref())),
                        EXPECTED,
                    ));
                }
            };
        }
        Ok(cfg)
    }

    fn node(&self, raw: &Spanned<Table<RawNode>>) -> Result<NodeDef, PolicyError> {
        let n = raw.get_ref();
        let header = raw.span();
        let Some(name_v) = &n.name else {
            return Err(self.err(
                header,
                "this `[[node]]` has no `name`",
                "`name = \"...\"`, unique in the file",
            ));
        };
        const NAME: &str = "a name of 1 to 64 letters, digits and `-_.:/`";
        let name = self.string("name", name_v, NAME)?;
        // Names appear in messages, `sluice top` and metrics labels: invisible or
        // direction-changing characters (a zero-width space, U+202E) and quotes would make two
        // names look alike or garble what prints them.
        let usable = |c: char| c.is_alphanumeric() || "-_.:/".contains(c);
        if name.is_empty() || name.chars().count() > 64 || !name.chars().all(usable) {
            return Err(self.err(
                name_v.span(),
                format!("`name` = {} is not a usable name", show(name_v.get_ref())),
                NAME,
            ));
        }
        let Some(policy_v) = &n.policy else {
            return Err(self.err(
                header,
                format!("node `{name}` has no `policy`"),
                format!("`policy = \"...\"`, one of {}", policy_names()),
            ));
        };
        let policy = self.policy(policy_v)?;
        let mut spec = NodeSpec::new(name, policy);
        if let Some(q) = &n.queue {
            spec.queue = self.queue(q)?;
        }
        if let Some(v) = &n.rate {
            spec.rate = Some(self.rate("rate", v)?);
        }
        if let Some(v) = &n.burst {
            spec.burst = self.size("burst", v, 0, MAX_SIZE)?;
            if spec.rate.is_none() {
                return Err(self.err(
                    v.span(),
                    format!("node `{name}` has a `burst` but no `rate`"),
                    "`burst` together with the `rate` it applies to",
                ));
            }
        }
        spec.member = self.member("", &n.weight, &n.quantum, &n.reservation)?;
        if let Some(v) = &n.priority {
            spec.member.priority = Some(self.int("priority", v, 0, 255)? as u8);
        }
        spec.flows = self.member(
            "flow_",
            &n.flow_weight,
            &n.flow_quantum,
            &n.flow_reservation,
        )?;
        if let Some(v) = &n.flow_rate {
            spec.flow_rate = Some(self.rate("flow_rate", v)?);
        }
        if let Some(v) = &n.flow_burst {
            spec.flow_burst = self.size("flow_burst", v, 0, MAX_SIZE)?;
            if spec.flow_rate.is_none() {
                return Err(self.err(
                    v.span(),
                    format!("node `{name}` has a `flow_burst` but no `flow_rate`"),
                    "`flow_burst` together with the `flow_rate` it applies to",
                ));
            }
        }
        let flow_key = [
            ("flow_rate", &n.flow_rate),
            ("flow_burst", &n.flow_burst),
            ("flow_weight", &n.flow_weight),
            ("flow_quantum", &n.flow_quantum),
            ("flow_reservation", &n.flow_reservation),
        ]
        .into_iter()
        .find_map(|(k, v)| v.as_ref().map(|v| (k, v.span())));
        let parent = match &n.parent {
            Some(v) => Some((
                self.string("parent", v, "the name of another node")?
                    .to_string(),
                v.span(),
            )),
            None => None,
        };
        Ok(NodeDef {
            spec,
            header,
            name_span: name_v.span(),
            policy_span: policy_v.span(),
            parent,
            queue_span: n.queue.as_ref().map(|q| q.span()),
            flow_key,
        })
    }

    /// How a parent sees a member (keys `weight`, `quantum`, `reservation`), or how a leaf sees
    /// each of its flows (the same keys with `prefix` "flow_").
    fn member(
        &self,
        prefix: &str,
        weight: &Val,
        quantum: &Val,
        reservation: &Val,
    ) -> Result<MemberCfg, PolicyError> {
        let mut m = MemberCfg::default();
        if let Some(v) = weight {
            m.weight = self.int(&format!("{prefix}weight"), v, 1, i64::from(MAX_WEIGHT))? as u32;
        }
        if let Some(v) = quantum {
            m.quantum = self.size(&format!("{prefix}quantum"), v, 1, MAX_SIZE)? as u32;
        }
        if let Some(v) = reservation {
            m.reservation = Some(self.rate(&format!("{prefix}reservation"), v)?);
        }
        Ok(m)
    }

    fn policy(&self, v: &Spanned<Value>) -> Result<PolicyKind, PolicyError> {
        let expected = format!("one of {}", policy_names());
        let name = self.string("policy", v, &expected)?;
        PolicyKind::from_name(name).ok_or_else(|| {
            self.err(
                v.span(),
                format!("`policy` = {} is not a known policy", show(v.get_ref())),
                expected.clone(),
            )
        })
    }

    fn queue(&self, q: &Spanned<RawQueue>) -> Result<QueueChoice, PolicyError> {
        let kind_expected = || format!("\"auto\" or a queue kind: {}", node_queue_kinds());
        match q.get_ref() {
            RawQueue::Name(name) if name == "auto" => Ok(QueueChoice::Auto),
            RawQueue::Name(name) => match name.parse::<QueueKind>() {
                Ok(kind) => Ok(QueueChoice::Kind {
                    kind,
                    buckets: None,
                    granularity: None,
                }),
                Err(_) => Err(self.err(
                    q.span(),
                    format!(
                        "`queue` = {} is not a queue kind",
                        show(&Value::String(name.clone()))
                    ),
                    kind_expected(),
                )),
            },
            RawQueue::Table(t) => {
                let Some(kind_v) = &t.kind else {
                    return Err(self.err(
                        q.span(),
                        "the `queue` table has no `kind`",
                        format!("`kind = \"...\"`, a queue kind: {}", node_queue_kinds()),
                    ));
                };
                let expected = format!("a queue kind: {}", node_queue_kinds());
                let kind = self
                    .string("kind", kind_v, &expected)?
                    .parse::<QueueKind>()
                    .map_err(|_| {
                        self.err(
                            kind_v.span(),
                            format!("`kind` = {} is not a queue kind", show(kind_v.get_ref())),
                            expected.clone(),
                        )
                    })?;
                let buckets = match &t.buckets {
                    Some(v) => Some(self.int("buckets", v, 1, MAX_BUCKETS as i64)? as usize),
                    None => None,
                };
                let granularity = match &t.granularity {
                    Some(v) => Some(self.int("granularity", v, 1, i64::MAX)? as u64),
                    None => None,
                };
                Ok(QueueChoice::Kind {
                    kind,
                    buckets,
                    granularity,
                })
            }
        }
    }

    /// A rule's conditions and its `to`.
    fn rule<'r>(
        &self,
        raw: &'r Spanned<Table<RawRule>>,
    ) -> Result<(Vec<Match>, &'r Spanned<Value>), PolicyError> {
        let r = raw.get_ref();
        let Some(to) = &r.to else {
            return Err(self.err(
                raw.span(),
                "this `[[classify]]` rule has no `to`",
                "`to = \"...\"`, the leaf its packets go to",
            ));
        };
        let mut all = Vec::new();
        if let Some(v) = &r.class {
            all.push(Match::Class(
                self.int("class", v, 0, i64::from(u32::MAX))? as u32
            ));
        }
        if let Some(v) = &r.dscp {
            all.push(Match::Dscp(self.int("dscp", v, 0, 63)? as u8));
        }
        if let Some(v) = &r.vlan {
            all.push(Match::Vlan(self.int("vlan", v, 0, 4095)? as u16));
        }
        if let Some(v) = &r.proto {
            all.push(Match::Proto(self.proto(v)?));
        }
        if let Some(v) = &r.src {
            let (a, l) = self.prefix("src", v)?;
            all.push(Match::Src(a, l));
        }
        if let Some(v) = &r.dst {
            let (a, l) = self.prefix("dst", v)?;
            all.push(Match::Dst(a, l));
        }
        if let Some(v) = &r.sport {
            let (lo, hi) = self.ports("sport", v)?;
            all.push(Match::Sport(lo, hi));
        }
        if let Some(v) = &r.dport {
            let (lo, hi) = self.ports("dport", v)?;
            all.push(Match::Dport(lo, hi));
        }
        Ok((all, to))
    }

    // -----------------------------------------------------------------------------------------
    // The tree: names, parents, one root, no cycles; an order with parents first.

    fn tree(&self, defs: &[NodeDef]) -> Result<Tree, PolicyError> {
        let Some(first) = defs.first() else {
            return Err(self.err(
                0..0,
                "the file has no `[[node]]` tables",
                "at least the root: a `[[node]]` with a `name`, a `policy` and no `parent`",
            ));
        };
        if defs.len() > MAX_NODES {
            return Err(self.err(
                defs[MAX_NODES].header.clone(),
                format!("{} nodes", defs.len()),
                format!("at most {MAX_NODES} nodes"),
            ));
        }
        let mut index: HashMap<String, usize> = HashMap::new();
        for (i, d) in defs.iter().enumerate() {
            if let Some(&j) = index.get(&d.spec.name) {
                let (line, _) = line_col(self.text, defs[j].name_span.start);
                return Err(self.err(
                    d.name_span.clone(),
                    format!(
                        "node name `{}` is used twice (first on line {line})",
                        d.spec.name
                    ),
                    "a unique name for every node",
                ));
            }
            index.insert(d.spec.name.clone(), i);
        }
        let names: Vec<&str> = defs.iter().map(|d| d.spec.name.as_str()).collect();
        let mut parent: Vec<Option<usize>> = vec![None; defs.len()];
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); defs.len()];
        let mut root: Option<usize> = None;
        for (i, d) in defs.iter().enumerate() {
            match &d.parent {
                Some((p, span)) => {
                    let Some(&j) = index.get(p) else {
                        return Err(self.err(
                            span.clone(),
                            format!(
                                "node `{}`: `parent` = {} names no node",
                                d.spec.name,
                                show(&Value::String(p.clone()))
                            ),
                            format!("the name of a node in this file: {}", list(&names)),
                        ));
                    };
                    parent[i] = Some(j);
                    children[j].push(i);
                }
                None => match root {
                    None => root = Some(i),
                    Some(r) => {
                        let (line, _) = line_col(self.text, defs[r].header.start);
                        return Err(self.err(
                            d.header.clone(),
                            format!(
                                "two roots: neither `{}` (line {line}) nor `{}` has a `parent`",
                                defs[r].spec.name, d.spec.name
                            ),
                            "exactly one root: a `parent` on every other node",
                        ));
                    }
                },
            }
        }
        let Some(root) = root else {
            return Err(self.err(
                first.header.clone(),
                "no root: every node has a `parent`",
                "exactly one node without `parent`, the root",
            ));
        };
        // Breadth first from the root, children in file order.
        let mut order = Vec::with_capacity(defs.len());
        let mut seen = vec![false; defs.len()];
        let mut todo = VecDeque::from([root]);
        seen[root] = true;
        while let Some(i) = todo.pop_front() {
            order.push(i);
            for &c in &children[i] {
                if !seen[c] {
                    seen[c] = true;
                    todo.push_back(c);
                }
            }
        }
        if let Some(start) = seen.iter().position(|s| !s) {
            // Every node has one parent and the root is reached, so a node not reached is
            // below a cycle of parent links: follow them until one repeats.
            // `at_step[i]`: where node i is on the path (linear, for cycles of any length).
            let mut path = vec![start];
            let mut at_step = vec![usize::MAX; defs.len()];
            at_step[start] = 0;
            let mut cur = start;
            let cycle = loop {
                let Some(p) = parent[cur] else {
                    break vec![cur]; // not possible: only the root has no parent
                };
                if at_step[p] != usize::MAX {
                    break path.split_off(at_step[p]);
                }
                at_step[p] = path.len();
                path.push(p);
                cur = p;
            };
            let first = cycle.iter().copied().min().unwrap_or(start);
            let at = cycle.iter().position(|&x| x == first).unwrap_or(0);
            // A long cycle shows its first nodes and how many there are, not one huge line.
            const SHOWN: usize = 8;
            let mut names: Vec<&str> = cycle[at..]
                .iter()
                .chain(&cycle[..at])
                .take(SHOWN)
                .map(|&i| defs[i].spec.name.as_str())
                .collect();
            let more = format!("... ({} nodes)", cycle.len());
            if cycle.len() > SHOWN {
                names.push(&more);
            }
            names.push(defs[first].spec.name.as_str());
            let span = defs[first]
                .parent
                .as_ref()
                .map_or(defs[first].header.clone(), |(_, s)| s.clone());
            return Err(self.err(
                span,
                format!(
                    "node `{}`: `parent` links form a cycle: {}",
                    defs[first].spec.name,
                    names.join(" -> ")
                ),
                format!(
                    "parent links that lead up to the root `{}`",
                    defs[root].spec.name
                ),
            ));
        }
        for (i, d) in defs.iter().enumerate() {
            if let (Some((key, span)), false) = (&d.flow_key, children[i].is_empty()) {
                return Err(self.err(
                    span.clone(),
                    format!(
                        "node `{}` has children, but `{key}` is for leaves",
                        d.spec.name
                    ),
                    format!(
                        "`flow_*` keys only on leaves (nodes no other node names as `parent`); \
                         `{}` is the node's own, for it as a whole",
                        key.strip_prefix("flow_").unwrap_or(key)
                    ),
                ));
            }
        }
        Ok(Tree {
            index,
            parent,
            children,
            order,
        })
    }

    /// Point a builder error at the node, rule or section it is about.
    fn build_error(
        &self,
        e: BuildError,
        defs: &[NodeDef],
        tree: &Tree,
        raw: &RawFile,
        default: Option<&Spanned<Value>>,
        leaves: &[&str],
    ) -> PolicyError {
        let node = |name: &str| tree.index.get(name).map(|&i| &defs[i]);
        let whole_file = 0..0;
        match e {
            BuildError::Misplaced {
                node: ref n,
                policy,
                ..
            } => {
                let span = node(n).map_or(whole_file, |d| d.policy_span.clone());
                let expected = if policy.leaf_only() {
                    format!(
                        "`{policy}` only on a leaf (a node no other node names as `parent`); \
                         above leaves use e.g. wfq, drr or prio"
                    )
                } else {
                    format!(
                        "`{policy}` only on a node with children (it shares among its child \
                         classes); for a leaf use e.g. fifo, fq or wfq"
                    )
                };
                self.err(span, e.to_string(), expected)
            }
            BuildError::RuleToInner(ref n) => {
                let rule_to = raw.classify.iter().find_map(|r| {
                    r.get_ref()
                        .to
                        .as_ref()
                        .filter(|v| v.get_ref().as_str() == Some(n.as_str()))
                });
                let (key, span) = match (rule_to, default) {
                    (Some(v), _) => ("to", v.span()),
                    (None, Some(v)) => ("default", v.span()),
                    (None, None) => ("to", whole_file),
                };
                self.err(
                    span,
                    format!("`{key}` = \"{n}\" is a node with children, not a leaf"),
                    format!("a leaf: {}", list(leaves)),
                )
            }
            BuildError::TooDeep(ref n) => self.err(
                node(n).map_or(whole_file, |d| d.header.clone()),
                e.to_string(),
                format!("at most {MAX_DEPTH} levels from the root down to a leaf"),
            ),
            BuildError::TooManyBuckets { node: ref n, .. } => self.err(
                node(n).map_or(whole_file, |d| {
                    d.queue_span.clone().unwrap_or(d.policy_span.clone())
                }),
                e.to_string(),
                "fewer `buckets` on the nodes' queues, or `queue = \"auto\"`",
            ),
            BuildError::Queue { node: ref n, .. }
            | BuildError::QueueRange { node: ref n, .. }
            | BuildError::ApproximateLeaf { node: ref n, .. }
            | BuildError::NodeWheel { node: ref n } => {
                let span = node(n).map_or(whole_file, |d| {
                    d.queue_span.clone().unwrap_or(d.policy_span.clone())
                });
                let expected = if matches!(
                    e,
                    BuildError::Queue {
                        source: ConfigError::OutOfMemory { .. },
                        ..
                    }
                ) {
                    "a queue that fits in memory: fewer `buckets`, or a smaller `[scheduler]` \
                     `capacity` (every queue is sized for all of it)"
                } else if matches!(e, BuildError::ApproximateLeaf { .. }) {
                    "a queue that keeps its buckets in order at this leaf (cffs, or an exact \
                     one: binary_heap, btree, skiplist), `queue = \"auto\"`, or \
                     `circular_approx` at an internal node"
                } else if matches!(e, BuildError::Queue { .. }) {
                    "a queue its kind can build: fewer `buckets`, another `granularity`, \
                     or `queue = \"auto\"`"
                } else {
                    "a queue with a moving range (cffs, circular_approx), an exact one \
                     (binary_heap, btree, skiplist), or `queue = \"auto\"`"
                };
                self.err(span, e.to_string(), expected)
            }
            BuildError::Shaper(_) => self.err(
                raw.shaper.as_ref().map_or(whole_file, |s| s.span()),
                e.to_string(),
                "a `[shaper]` whose `slot` and `horizon` the queue kind can hold",
            ),
            BuildError::ShaperKind(_) => self.err(
                raw.shaper
                    .as_ref()
                    .and_then(|s| s.get_ref().queue.as_ref().map(|q| q.span()))
                    .unwrap_or(whole_file),
                e.to_string(),
                "a shaper `queue` that orders time: timing_wheel, or an exact one (binary_heap, \
                 btree, skiplist)",
            ),
            BuildError::DuplicateName(ref n) => self.err(
                node(n).map_or(whole_file, |d| d.name_span.clone()),
                e.to_string(),
                "a unique name for every node",
            ),
            BuildError::NoRoot | BuildError::TooManyNodes(_) | BuildError::Invalid(_) => {
                // Checked above already; point at the named node if the message names one.
                let span = e
                    .to_string()
                    .strip_prefix("node `")
                    .and_then(|s| s.split_once('`'))
                    .and_then(|(n, _)| node(n))
                    .map_or(whole_file, |d| d.header.clone());
                self.err(span, e.to_string(), "a tree the scheduler can build")
            }
            BuildError::OutOfMemory(_) => self.err(
                raw.scheduler.as_ref().map_or(whole_file, |s| s.span()),
                e.to_string(),
                "`capacity` and `flows` this machine can hold",
            ),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Values.

    fn string<'v>(
        &self,
        key: &str,
        v: &'v Spanned<Value>,
        expected: &str,
    ) -> Result<&'v str, PolicyError> {
        match v.get_ref() {
            Value::String(s) => Ok(s),
            other => Err(self.err(v.span(), wrong_type(key, other), expected)),
        }
    }

    fn int(&self, key: &str, v: &Spanned<Value>, lo: i64, hi: i64) -> Result<i64, PolicyError> {
        let expected = format!("an integer in {lo}..={hi}");
        match *v.get_ref() {
            Value::Integer(i) if (lo..=hi).contains(&i) => Ok(i),
            Value::Integer(_) => Err(self.err(v.span(), out_of_range(key, v.get_ref()), expected)),
            ref other => Err(self.err(v.span(), wrong_type(key, other), expected)),
        }
    }

    fn size(&self, key: &str, v: &Spanned<Value>, lo: u64, hi: u64) -> Result<u64, PolicyError> {
        let expected = format!(
            "a size like \"1500B\", \"64KiB\" or \"1MB\", or a whole number of bytes, \
             {lo}..={hi} bytes"
        );
        let bytes = match v.get_ref() {
            Value::Integer(i) => u64::try_from(*i).ok(),
            Value::String(s) => match units::parse_size(s) {
                Ok(b) => Some(b),
                // Below 0 or beyond 2^63 bytes: out of this key's range, which `expected`
                // gives (the units' own bounds, "between 0 and 2^63 bytes", contradicted it).
                Err(UnitError::OutOfRange { why, .. }) if why != units::NOT_WHOLE_BYTES => None,
                Err(e) => {
                    return Err(self.err(v.span(), unit_what(key, v.get_ref(), e), &expected));
                }
            },
            other => return Err(self.err(v.span(), wrong_type(key, other), expected)),
        };
        match bytes {
            Some(b) if (lo..=hi).contains(&b) => Ok(b),
            _ => Err(self.err(v.span(), out_of_range(key, v.get_ref()), expected)),
        }
    }

    fn rate(&self, key: &str, v: &Spanned<Value>) -> Result<Rate, PolicyError> {
        const EXPECTED: &str = "a rate in bits per second like \"10Mbit\", \"1.5Gbit\" or \
                                \"250kbit\", above 0 and below 2^63 bit/s";
        match v.get_ref() {
            Value::String(s) => Rate::parse(s).map_err(|e| {
                let malformed = matches!(e, UnitError::Malformed { .. });
                let unit = s.trim().trim_end_matches("/s");
                let mut what = unit_what(key, v.get_ref(), e);
                if malformed && unit.to_ascii_lowercase().ends_with("bps") {
                    // tc reads `mbps` as megabytes per second, others as megabits.
                    what += " (`bps` is ambiguous: tc reads `Mbps` as megabytes per second; \
                             write `Mbit` for megabits)";
                } else if malformed && unit.trim_end_matches("ps").ends_with('B') {
                    what += &bytes_hint(unit.trim_end_matches("ps"));
                } else if malformed && unit.ends_with(['k', 'K', 'M', 'G', 'T', 'b']) {
                    what += " (name the unit in full: `Mbit`)";
                }
                self.err(v.span(), what, EXPECTED)
            }),
            other => Err(self.err(v.span(), wrong_type(key, other), EXPECTED)),
        }
    }

    fn duration(&self, key: &str, v: &Spanned<Value>, lo: u64) -> Result<u64, PolicyError> {
        let expected =
            format!("a duration of at least {lo}ns like \"800ns\", \"250us\", \"10ms\" or \"1s\"");
        let ns = match v.get_ref() {
            Value::String(s) => units::parse_duration(s)
                .map_err(|e| self.err(v.span(), unit_what(key, v.get_ref(), e), &expected))?,
            other => return Err(self.err(v.span(), wrong_type(key, other), expected)),
        };
        if ns < lo {
            // Durations go to the nearest nanosecond: say so when a non-zero one became 0.
            let digits = v.get_ref().as_str().unwrap_or("");
            let mantissa = digits.split(['e', 'E']).next().unwrap_or("");
            let what = if ns == 0 && mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b)) {
                format!(
                    "`{key}` = {} rounds to 0 ns (durations are kept to the nearest nanosecond)",
                    show(v.get_ref())
                )
            } else {
                out_of_range(key, v.get_ref())
            };
            return Err(self.err(v.span(), what, expected));
        }
        Ok(ns)
    }

    fn proto(&self, v: &Spanned<Value>) -> Result<u8, PolicyError> {
        const EXPECTED: &str =
            "\"tcp\", \"udp\", \"icmp\", \"icmpv6\" or a protocol number 0..=255";
        let bad = || {
            self.err(
                v.span(),
                format!("`proto` = {} is not a protocol", show(v.get_ref())),
                EXPECTED,
            )
        };
        match v.get_ref() {
            Value::Integer(i) => u8::try_from(*i).map_err(|_| bad()),
            Value::String(s) => match s.to_ascii_lowercase().as_str() {
                "tcp" => Ok(6),
                "udp" => Ok(17),
                "icmp" => Ok(1),
                "icmpv6" => Ok(58),
                other => other.parse().map_err(|_| bad()),
            },
            other => Err(self.err(v.span(), wrong_type("proto", other), EXPECTED)),
        }
    }

    /// An address or CIDR prefix with its host bits zero.
    fn prefix(&self, key: &str, v: &Spanned<Value>) -> Result<(IpAddr, u8), PolicyError> {
        const EXPECTED: &str =
            "an address or CIDR prefix like \"10.0.0.0/8\", \"192.168.1.7\" or \"fd00::/8\"";
        let text = self.string(key, v, EXPECTED)?;
        let bad = || {
            self.err(
                v.span(),
                format!(
                    "`{key}` = {} is not an address or prefix",
                    show(v.get_ref())
                ),
                EXPECTED,
            )
        };
        let (addr, len) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (text, None),
        };
        let addr: IpAddr = addr.trim().parse().map_err(|_| bad())?;
        let max: u8 = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) => match l.trim().parse::<u8>() {
                Ok(l) if l <= max => l,
                _ => {
                    return Err(self.err(
                        v.span(),
                        format!("`{key}` = {} has a bad prefix length", show(v.get_ref())),
                        format!("a prefix length in 0..={max} after the `/`"),
                    ));
                }
            },
        };
        let network = match addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                IpAddr::from(std::net::Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                IpAddr::from(std::net::Ipv6Addr::from(u128::from(a) & mask))
            }
        };
        if network != addr {
            return Err(self.err(
                v.span(),
                format!("`{key}` = {} has host bits set", show(v.get_ref())),
                format!("the network address: \"{network}/{len}\""),
            ));
        }
        Ok((addr, len))
    }

    /// A port or an inclusive `lo-hi` range.
    fn ports(&self, key: &str, v: &Spanned<Value>) -> Result<(u16, u16), PolicyError> {
        const EXPECTED: &str = "a port in 0..=65535 or a range like \"5000-5999\"";
        let bad = |what: &str| {
            self.err(
                v.span(),
                format!("`{key}` = {} {what}", show(v.get_ref())),
                EXPECTED,
            )
        };
        let (lo, hi) = match v.get_ref() {
            Value::Integer(i) => {
                let p = u16::try_from(*i).map_err(|_| bad("is out of range"))?;
                (p, p)
            }
            Value::String(s) => {
                let port = |t: &str| match t.trim().parse::<u64>() {
                    Ok(p) => u16::try_from(p).map_err(|_| bad("is out of range")),
                    Err(_) => Err(bad("is not a port range")),
                };
                match s.split_once('-') {
                    Some((a, b)) => (port(a)?, port(b)?),
                    None => (port(s)?, port(s)?),
                }
            }
            other => return Err(self.err(v.span(), wrong_type(key, other), EXPECTED)),
        };
        if lo > hi {
            return Err(bad("is an empty range (its start is above its end)"));
        }
        Ok((lo, hi))
    }
}

/// One `[[node]]`, its values checked, with the positions errors point at.
struct NodeDef {
    spec: NodeSpec,
    header: Range<usize>,
    name_span: Range<usize>,
    policy_span: Range<usize>,
    parent: Option<(String, Range<usize>)>,
    queue_span: Option<Range<usize>>,
    /// The first `flow_*` key given, if any.
    flow_key: Option<(&'static str, Range<usize>)>,
}

/// The shape of the tree, by index into the file's nodes.
struct Tree {
    index: HashMap<String, usize>,
    parent: Vec<Option<usize>>,
    children: Vec<Vec<usize>>,
    /// Parents before children.
    order: Vec<usize>,
}

/// The hint for a rate written in bytes, `unit` ending in `B` ("10GB", "5KiB"): the bit unit
/// with its prefix.
fn bytes_hint(unit: &str) -> String {
    let letters = &unit[unit
        .trim_end_matches(|c: char| c.is_ascii_alphabetic())
        .len()..];
    let bits = match letters.trim_end_matches('B').trim_end_matches('i') {
        "" => "bit",
        "k" | "K" => "kbit",
        "m" | "M" => "Mbit",
        "g" | "G" => "Gbit",
        "t" | "T" => "Tbit",
        _ => return " (rates count bits: `Mbit`, not `MB`)".into(),
    };
    format!(" (rates count bits: `{bits}`, not `{letters}`)")
}

/// A value as the file wrote it (strings quoted and shortened).
/// `text` cut to 40 characters, for echoing what a file says in an error, and whether it
/// was longer.
fn cut(text: &str) -> (&str, bool) {
    match text.char_indices().nth(40) {
        Some((at, _)) => (&text[..at], true),
        None => (text, false),
    }
}

/// [`cut`], with `...` where it cut.
fn shorten(text: &str) -> String {
    shorten_to(text, 40)
}

/// `text` cut to `max` characters, with `...` where it cut.
fn shorten_to(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_string(),
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => match cut(s) {
            (short, true) => format!("{short:?}..."),
            (all, false) => format!("{all:?}"),
        },
        Value::Integer(i) => i.to_string(),
        // Debug keeps the point and the exponent: `1500000000.0`, `1e300`.
        Value::Float(f) => format!("{f:?}"),
        Value::Boolean(b) => b.to_string(),
        Value::Datetime(d) => d.to_string(),
        Value::Array(_) => "[...]".into(),
        Value::Table(_) => "{...}".into(),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a date-time",
        Value::Array(_) => "an array",
        Value::Table(_) => "a table",
    }
}

fn wrong_type(key: &str, v: &Value) -> String {
    format!("`{key}` = {} is {}", show(v), type_name(v))
}

/// What is wrong with a rate, size or duration the units module rejected.
fn unit_what(key: &str, v: &Value, e: UnitError) -> String {
    match e {
        UnitError::Malformed { what, .. } => format!("`{key}` = {} is not a {what}", show(v)),
        UnitError::OutOfRange { why, .. } => {
            format!("`{key}` = {} is out of range: {why}", show(v))
        }
    }
}

fn out_of_range(key: &str, v: &Value) -> String {
    format!("`{key}` = {} is out of range", show(v))
}

/// Names as a readable list, shortened past twelve.
fn list(names: &[&str]) -> String {
    let mut out: Vec<String> = names.iter().take(12).map(|n| format!("`{n}`")).collect();
    if names.len() > 12 {
        out.push(format!("... ({} in all)", names.len()));
    }
    if out.is_empty() {
        "(none)".into()
    } else {
        out.join(", ")
    }
}

fn policy_names() -> String {
    let names: Vec<&str> = PolicyKind::ALL.iter().map(|k| k.name()).collect();
    format!("{} (or srpt for pfabric)", names.join(", "))
}

fn queue_kinds() -> String {
    let names: Vec<&str> = QueueKind::ALL.iter().map(|k| k.name()).collect();
    names.join(", ")
}

/// The kinds a node may use: all but the shaper's timing wheel.
fn node_queue_kinds() -> String {
    let names: Vec<&str> = QueueKind::ALL
        .iter()
        .filter(|&&k| k != QueueKind::TimingWheel)
        .map(|k| k.name())
        .collect();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error `text` gives, as displayed.
    fn error(text: &str) -> String {
        match compile_str(text, "t.toml") {
            Ok(_) => panic!("expected an error for:\n{text}"),
            Err(e) => e.to_string(),
        }
    }

    /// `text` fails on `line` with a message containing every one of `needles`.
    #[track_caller]
    fn fails(text: &str, line: usize, needles: &[&str]) {
        let e = error(text);
        assert!(
            e.starts_with(&format!("t.toml:{line}:")),
            "wrong line (want {line}): {e}"
        );
        assert!(e.contains("; expected "), "no expectation: {e}");
        for n in needles {
            assert!(e.contains(n), "missing {n:?} in: {e}");
        }
    }

    /// A root and two leaves, with `extra` lines appended to the root's table.
    fn tree_with(root_extra: &str) -> String {
        format!(
            "[[node]]\nname = \"root\"\npolicy = \"wfq\"\n{root_extra}\n\
             [[node]]\nname = \"gold\"\nparent = \"root\"\npolicy = \"fifo\"\n\
             [[node]]\nname = \"bronze\"\nparent = \"root\"\npolicy = \"fifo\"\n"
        )
    }

    const SPEC_EXAMPLE: &str = r#"
[scheduler]
capacity = 65536
flows = 65536
max_packet = "64KiB"
default = "bronze"

[shaper]
slot = "1024ns"
horizon = "1s"
beyond_horizon = "reject"
queue = "timing_wheel"

[[classify]]
to = "gold"
class = 1
dscp = 46
vlan = 100
proto = "tcp"
src = "10.0.0.0/8"
dst = "fd00::/8"
sport = 5000
dport = "5000-5999"

[[node]]
name = "gold"
policy = "fifo"
parent = "root"
queue = { kind = "cffs", buckets = 4096, granularity = 1024 }
weight = 3
priority = 0
quantum = "3028B"
reservation = "100Mbit"
flow_rate = "10Mbit"
flow_burst = "3KB"
flow_weight = 2
flow_quantum = 1514
flow_reservation = "1Mbit"

[[node]]
name = "root"
policy = "wfq"
queue = "auto"
rate = "1Gbit"
burst = "15KB"

[[node]]
name = "bronze"
policy = "fq"
parent = "root"
queue = "binary_heap"
"#;

    #[test]
    fn the_documented_example_maps_every_key_to_the_builder() {
        let (b, cfg) = compile_str(SPEC_EXAMPLE, "t.toml").unwrap();
        assert_eq!(cfg.capacity, 65536);
        assert_eq!(cfg.flows, 65536);
        assert_eq!(cfg.max_packet, 65536);
        assert_eq!(cfg.shaper.slot_ns, 1024);
        assert_eq!(cfg.shaper.slots, 1_000_000_000u64.div_ceil(1024) as usize);
        assert_eq!(cfg.shaper.beyond_horizon, Overflow::Reject);
        assert_eq!(cfg.shaper.kind, QueueKind::TimingWheel);

        // The same tree built by hand, parents first.
        let mut want = TreeBuilder::new(cfg);
        let root = want.root(NodeSpec::new("root", PolicyKind::Wfq).rate(Rate::gbit(1), 15_000));
        let mut gold = NodeSpec::new("gold", PolicyKind::Fifo)
            .weight(3)
            .priority(0)
            .reservation(Rate::mbit(100))
            .queue(QueueChoice::Kind {
                kind: QueueKind::Cffs,
                buckets: Some(4096),
                granularity: Some(1024),
            });
        gold.flows = MemberCfg {
            weight: 2,
            priority: None,
            quantum: 1514,
            reservation: Some(Rate::mbit(1)),
        };
        gold.flow_rate = Some(Rate::mbit(10));
        gold.flow_burst = 3000;
        let gold = want.child(root, gold);
        let bronze = want.child(
            root,
            NodeSpec::new("bronze", PolicyKind::Fq).queue(QueueChoice::Kind {
                kind: QueueKind::BinaryHeap,
                buckets: None,
                granularity: None,
            }),
        );
        want.rule(
            vec![
                Match::Class(1),
                Match::Dscp(46),
                Match::Vlan(100),
                Match::Proto(6),
                Match::Src("10.0.0.0".parse().unwrap(), 8),
                Match::Dst("fd00::".parse().unwrap(), 8),
                Match::Sport(5000, 5000),
                Match::Dport(5000, 5999),
            ],
            gold,
        );
        want.default_leaf(bronze);
        assert_eq!(format!("{b:?}"), format!("{want:?}"));
        let s = b.build().unwrap();
        assert_eq!(s.node_name(0), "root");
        assert!(s.describe().contains("classify: default -> bronze"));
    }

    #[test]
    fn an_empty_scheduler_section_is_the_library_default() {
        let text = "[scheduler]\n[shaper]\n[[node]]\nname = \"r\"\npolicy = \"fifo\"\n";
        let (_, cfg) = compile_str(text, "t.toml").unwrap();
        assert_eq!(cfg, SchedConfig::default());
        let s = build_str(text, "t.toml").unwrap();
        assert!(s.describe().contains("default -> reject"));
        assert!(s.describe().contains("every packet is rejected"));
    }

    /// `policy check` points out a leaf that nothing sends packets to.
    #[test]
    fn the_description_names_leaves_no_packet_reaches() {
        let text = format!("[scheduler]\ndefault = \"gold\"\n{}", tree_with(""));
        let d = build_str(&text, "t.toml").unwrap().describe();
        assert!(
            d.contains("note: leaf `bronze` receives no packet") && !d.contains("`gold` receives"),
            "{d}"
        );
        assert!(!d.contains("every packet is rejected"), "{d}");
    }

    /// Settings that build but cannot do what they seem to: coarse priority buckets, a
    /// reservation above the node's own limit. And only the parameters that take effect.
    #[test]
    fn the_description_notes_settings_that_cannot_take_effect() {
        let text = "[scheduler]\ndefault = \"a\"\n\
                    [[node]]\nname = \"r\"\npolicy = \"htb\"\n\
                    [[node]]\nname = \"p\"\nparent = \"r\"\npolicy = \"prio\"\n\
                    reservation = \"5Gbit\"\nrate = \"1Mbit\"\n\
                    queue = { kind = \"ffs\", buckets = 1 }\n\
                    [[node]]\nname = \"a\"\nparent = \"p\"\npolicy = \"fq\"\n\
                    priority = 0\nweight = 7\nflow_quantum = 1514\n";
        let d = build_str(text, "t.toml").unwrap().describe();
        for want in [
            "note: node `p`: its queue holds 256 priority levels per bucket",
            "note: node `p`: its reservation 5Gbit is above its own rate limit 1Mbit",
            "] priority 0 flows: quantum 1514B",
        ] {
            assert!(d.contains(want), "missing {want:?} in:\n{d}");
        }
        assert!(!d.contains("weight 7"), "prio takes no weight:\n{d}");
    }

    /// Buckets so coarse that a policy's ranks share one or two: weights 3 : 1 shared 1 : 1
    /// under wfq, all members in one bucket. Not under `auto`, nor buckets that keep a
    /// largest packet's step at weight 1 apart.
    #[test]
    fn the_description_notes_buckets_too_coarse_for_the_ranks() {
        let wfq = |g: &str| {
            tree_with(&format!(
                "queue = {{ kind = \"cffs\", buckets = 4096, granularity = {g} }}"
            ))
        };
        let d = build_str(&wfq("1099511627776"), "t.toml")
            .unwrap()
            .describe();
        let want = "note: node `root`: its queue `cffs` has buckets of 1099511627776 rank units, \
                    more than half the 8589934592 that policy `wfq` ranks over: its ranks share \
                    one or two buckets, whose entries leave in arrival order, so its members take \
                    turns whatever their weights until their ranks reach the next bucket";
        assert!(d.contains(want), "missing {want:?} in:\n{d}");
        for fine in [wfq("4294967296"), wfq("1048576"), tree_with("")] {
            let d = build_str(&fine, "t.toml").unwrap().describe();
            assert!(!d.contains("more than half"), "{d}");
        }
        // Deadlines two seconds ahead in buckets of 2^31 ns.
        let edf = tree_with("queue = { kind = \"cffs\", granularity = 2147483648 }")
            .replacen("wfq", "edf", 1);
        let d = build_str(&edf, "t.toml").unwrap().describe();
        assert!(
            d.contains("the 2000000000 that policy `edf` ranks over")
                && d.contains("so its policy's order is lost"),
            "{d}"
        );
        // hClock's first queue holds reservation tags, times: its note says so.
        let d = build_str(&wfq("1099511627776").replacen("wfq", "hclock", 1), "t.toml")
            .unwrap()
            .describe();
        assert!(
            d.contains("its reservation queue `cffs` has buckets")
                && d.contains("so reservations are met in arrival order, not by when")
                && d.contains("its queue `cffs` has buckets")
                && d.contains("so its members take turns whatever their weights"),
            "{d}"
        );
        // Every policy under `auto` is fine.
        for policy in ["prio", "wfq", "lqf", "edf", "lstf", "drr", "hclock", "htb"] {
            let d = build_str(&tree_with("").replacen("wfq", policy, 1), "t.toml")
                .unwrap()
                .describe();
            assert!(!d.contains("more than half"), "{policy}: {d}");
        }
    }

    /// Reservations the rate limit above them cannot carry: one child's alone (the note said
    /// so only for the child's own limit), or all of them together.
    #[test]
    fn the_description_notes_reservations_above_the_parents_limit() {
        let tree = |root: &str, a: &str, b: &str| {
            format!(
                "[scheduler]\ndefault = \"a\"\n\
                 [[node]]\nname = \"r\"\npolicy = \"wfq\"\n{root}\n\
                 [[node]]\nname = \"p\"\nparent = \"r\"\npolicy = \"hclock\"\n\
                 [[node]]\nname = \"a\"\nparent = \"p\"\npolicy = \"fifo\"\n{a}\n\
                 [[node]]\nname = \"b\"\nparent = \"p\"\npolicy = \"fifo\"\n{b}\n\
                 [[node]]\nname = \"c\"\nparent = \"r\"\npolicy = \"fifo\"\n"
            )
        };
        let describe = |text: String| build_str(&text, "t.toml").unwrap().describe();
        // The parent's own limit.
        let one = tree("", "reservation = \"5Gbit\"", "reservation = \"1Mbit\"").replace(
            "policy = \"hclock\"\n",
            "policy = \"hclock\"\nrate = \"1Gbit\"\n",
        );
        let d = describe(one);
        assert!(
            d.contains(
                "note: node `a`: its reservation 5Gbit is above the rate limit 1Gbit of `p`, its \
                 parent, which it never exceeds"
            ),
            "{d}"
        );
        assert!(!d.contains("add up to"), "{d}");
        // Together, under a limit further up.
        let d = describe(tree(
            "rate = \"1Gbit\"",
            "reservation = \"600Mbit\"",
            "reservation = \"500Mbit\"",
        ));
        assert!(
            d.contains(
                "note: node `p`: its children's reservations add up to 1.1Gbit, above the rate \
                 limit 1Gbit of `r` above it: they cannot all be met at once"
            ),
            "{d}"
        );
        // Within the limit, or with no limit: nothing.
        for text in [
            tree(
                "rate = \"1Gbit\"",
                "reservation = \"500Mbit\"",
                "reservation = \"500Mbit\"",
            ),
            tree("", "reservation = \"5Gbit\"", "reservation = \"5Gbit\""),
        ] {
            let d = describe(text);
            assert!(
                !d.contains("is above the rate limit") && !d.contains("add up to"),
                "{d}"
            );
        }
    }

    /// Settings dropped without a word: the keys that place a node in its parent on the root,
    /// flow settings a leaf's policy does not use, buckets of an exact queue, `reject`, `slot`
    /// and `horizon` with an exact shaper (which has no horizon).
    #[test]
    fn the_description_notes_settings_dropped_where_they_cannot_take_effect() {
        let text = "[shaper]\nqueue = \"btree\"\nbeyond_horizon = \"reject\"\nhorizon = \"2s\"\n\
                    [scheduler]\ndefault = \"f\"\n\
                    [[node]]\nname = \"r\"\npolicy = \"wfq\"\nweight = 3\nreservation = \"1Mbit\"\n\
                    queue = { kind = \"binary_heap\", buckets = 16, granularity = 4 }\n\
                    [[node]]\nname = \"f\"\nparent = \"r\"\npolicy = \"fq\"\n\
                    flow_weight = 2\nflow_quantum = 1514\n\
                    [[node]]\nname = \"o\"\nparent = \"r\"\npolicy = \"fifo\"\n\
                    flow_weight = 2\nflow_reservation = \"1Mbit\"\n\
                    [[node]]\nname = \"h\"\nparent = \"r\"\npolicy = \"hclock\"\n\
                    flow_weight = 2\nflow_reservation = \"1Mbit\"\nflow_quantum = 100\n\
                    [[node]]\nname = \"s\"\nparent = \"r\"\npolicy = \"drr\"\nflow_quantum = 100\n\
                    queue = { kind = \"skiplist\", granularity = 2 }\n";
        let d = build_str(text, "t.toml").unwrap().describe();
        for want in [
            "note: node `r`: `weight` and `reservation` are ignored: they place a node in its \
             parent, and the root has no parent",
            "note: node `r`: `buckets` and `granularity` are ignored: its queue `binary_heap` is \
             exact and has no buckets",
            "note: node `f`: `flow_weight` is ignored: policy `fq` does not use it for its flows \
             (of `flow_weight`, `flow_quantum` and `flow_reservation` it uses only \
             `flow_quantum`)",
            "note: node `o`: `flow_weight` and `flow_reservation` are ignored: policy `fifo` does \
             not use them for its flows (of `flow_weight`, `flow_quantum` and \
             `flow_reservation` it uses none of them)",
            "note: node `h`: `flow_quantum` is ignored: policy `hclock` does not use it for its \
             flows (of `flow_weight`, `flow_quantum` and `flow_reservation` it uses only \
             `flow_weight` and `flow_reservation`)",
            "note: node `s`: `granularity` is ignored: its queue `skiplist` is exact",
            "note: the shaper: `slot` and `horizon` have no effect: its queue `btree` is exact \
             and has no slots, so it holds a release for any time",
            "note: the shaper: `beyond_horizon = \"reject\"` has no effect: its queue `btree` is \
             exact and has no horizon, so no release is ever beyond it",
        ] {
            assert!(d.contains(want), "missing {want:?} in:\n{d}");
        }
        assert_eq!(d.matches("note: node `s`").count(), 1, "{d}");
        // Settings that take effect, and defaults, are not noted.
        let used = "[shaper]\nqueue = \"btree\"\n\
                    [[node]]\nname = \"r\"\npolicy = \"wfq\"\nweight = 1\nquantum = 3028\n\
                    queue = { kind = \"cffs\", buckets = 4096 }\n\
                    [[node]]\nname = \"f\"\nparent = \"r\"\npolicy = \"fq\"\nflow_quantum = 1514\n\
                    [[node]]\nname = \"w\"\nparent = \"r\"\npolicy = \"wfq\"\nflow_weight = 2\n";
        let d = build_str(used, "t.toml").unwrap().describe();
        assert!(!d.contains("ignored") && !d.contains("no effect"), "{d}");
    }

    /// A root `r` at `rates[0]` over an fq leaf `a` (rate `rates[1]`, flows at `rates[2]`) and a
    /// fifo leaf `b` at `rates[3]`, with a `[shaper]` table `shaper` (or none).
    fn gated_tree(shaper: &str, rates: [&str; 4]) -> String {
        let [r, a, flows, b] = rates;
        format!(
            "[scheduler]\ndefault = \"a\"\n{shaper}\
             [[node]]\nname = \"r\"\npolicy = \"wfq\"\nrate = \"{r}\"\n\
             [[node]]\nname = \"a\"\nparent = \"r\"\npolicy = \"fq\"\n\
             rate = \"{a}\"\nflow_rate = \"{flows}\"\n\
             [[node]]\nname = \"b\"\nparent = \"r\"\npolicy = \"fifo\"\nrate = \"{b}\"\n"
        )
    }

    /// Rates whose packets take less than the shaper's slot: the wheel releases a slot's worth
    /// of them at once. Not the root's (its gate is checked at each dequeue), nor rates the
    /// slot spaces, nor under an exact shaper.
    #[test]
    fn the_description_notes_rates_faster_than_the_shaper_slot() {
        let tree = |shaper: &str| gated_tree(shaper, ["100Gbit", "40Gbit", "100Gbit", "8Gbit"]);
        let d = build_str(&tree(""), "t.toml").unwrap().describe();
        for want in [
            "note: node `a`: its rate 40Gbit sends 1500 B in 300 ns, less than the shaper's \
             1024 ns slot: up to 4 such packets leave at once beyond its burst; a `slot` of \
             300 ns or less spaces them",
            "note: node `a`: its flows' rate 100Gbit sends 1500 B in 120 ns",
        ] {
            assert!(d.contains(want), "missing {want:?} in:\n{d}");
        }
        assert!(
            !d.contains("node `r`: its rate") && !d.contains("node `b`"),
            "{d}"
        );
        let fine = tree("[shaper]\nslot = \"100ns\"\nhorizon = \"100ms\"\n");
        let exact = tree("[shaper]\nqueue = \"binary_heap\"\n");
        for text in [fine, exact] {
            let d = build_str(&text, "t.toml").unwrap().describe();
            assert!(!d.contains("slot:"), "{d}");
        }
    }

    /// A rate whose 1500 B take under a nanosecond: the note said "in 0 ns" and that a `slot`
    /// of 1 ns or less spaces them, which no slot does.
    #[test]
    fn the_slot_note_is_true_for_packets_faster_than_a_nanosecond() {
        let tree = gated_tree(
            "",
            ["100Gbit", "9223372036854775807bit", "100Gbit", "8Gbit"],
        );
        let d = build_str(&tree, "t.toml").unwrap().describe();
        let want = "note: node `a`: its rate 9223372036854775.807kbit sends 1500 B in under \
                    1 ns, less than the shaper's 1024 ns slot: up to 787192861 such packets leave \
                    at once beyond its burst, and no `slot` spaces them (the finest is 1 ns)";
        assert!(d.contains(want), "missing {want:?} in:\n{d}");
        assert!(
            !d.contains(" in 0 ns") && !d.contains("a `slot` of 1 ns"),
            "{d}"
        );
    }

    /// Rates so low that a packet takes longer than the shaper's horizon: re-filed, or for a
    /// flow under `beyond_horizon = "reject"`, refused.
    #[test]
    fn the_description_notes_rates_slower_than_the_shaper_horizon() {
        let tree = |shaper: &str| gated_tree(shaper, ["5kbit", "8kbit", "10kbit", "12kbit"]);
        let d = build_str(&tree(""), "t.toml").unwrap().describe();
        for want in [
            "note: node `a`: its rate 8kbit takes 1.500 s to send 1500 B, longer than the \
             shaper's 1.074 s horizon: each release waits outside the wheel until it is \
             within the horizon (counted as `clamped`); a `horizon` of 1.500 s or more \
             avoids it",
            "note: node `a`: its flows' rate 10kbit takes 1.200 s to send 1500 B",
        ] {
            assert!(d.contains(want), "missing {want:?} in:\n{d}");
        }
        // The root's gate is not in the wheel; 12 kbit/s takes exactly 1 s.
        assert!(
            !d.contains("node `r`: its rate") && !d.contains("node `b`"),
            "{d}"
        );
        let reject = tree("[shaper]\nbeyond_horizon = \"reject\"\n");
        let d = build_str(&reject, "t.toml").unwrap().describe();
        assert!(
            d.contains(
                "its flows' rate 10kbit takes 1.200 s to send 1500 B, longer than the \
                        shaper's 1.074 s horizon: a flow's packets are refused"
            ),
            "{d}"
        );
        assert!(
            d.contains("its rate 8kbit takes 1.500 s") && d.contains("outside the wheel"),
            "{d}"
        );
        let long = tree("[shaper]\nhorizon = \"2s\"\n");
        let d = build_str(&long, "t.toml").unwrap().describe();
        assert!(!d.contains("s horizon:"), "{d}");
    }

    #[test]
    fn the_description_notes_rules_that_never_send_a_packet() {
        let rules = "[[classify]]\nto = \"gold\"\nsrc = \"10.0.0.0/8\"\ndst = \"fd00::/8\"\n\
                     [[classify]]\nto = \"gold\"\nproto = \"icmp\"\ndport = 80\n\
                     [[classify]]\nto = \"gold\"\ndscp = 46\n\
                     [[classify]]\nto = \"bronze\"\ndscp = 46\nproto = \"udp\"\n\
                     [[classify]]\nto = \"bronze\"\nproto = \"udp\"\ndport = 53\n";
        let d = build_str(&(tree_with("") + rules), "t.toml")
            .unwrap()
            .describe();
        for want in [
            "note: rule 1 matches no packet: its addresses are of two families",
            "note: rule 2 matches no packet: it asks for ports with a protocol that has none",
            "note: rule 4 is never reached: rule 3 before it matches all it would",
        ] {
            assert!(d.contains(want), "missing {want:?} in:\n{d}");
        }
        assert!(!d.contains("rule 3 is") && !d.contains("rule 5"), "{d}");
    }

    /// A rule with no condition matches every packet: the `default` after it never receives
    /// one. It was printed as `classify: default -> bronze` without a word, and `bronze`,
    /// named by the default, was not noted as a leaf that receives no packet either.
    #[test]
    fn the_description_notes_a_default_that_a_catch_all_rule_leaves_unused() {
        let text = format!(
            "[scheduler]\ndefault = \"bronze\"\n{}\
             [[classify]]\nto = \"gold\"\ndscp = 46\n\
             [[classify]]\nto = \"gold\"\n\
             [[classify]]\nto = \"bronze\"\nproto = \"udp\"\n",
            tree_with("")
        );
        let s = build_str(&text, "t.toml").unwrap();
        let d = s.describe();
        for want in [
            "classify: any -> gold\n",
            "note: rule 3 is never reached: rule 2 before it matches all it would\n",
            "classify: default -> bronze\nnote: the default is never used: rule 2 before it \
             has no condition and matches every packet\n",
        ] {
            assert!(d.contains(want), "missing {want:?} in:\n{d}");
        }
        // As the note says: every packet goes to gold, none to the default.
        let gold = s.node_by_name("gold");
        for p in [packet_with(None, None), packet_with(Some(46), Some(17))] {
            assert_eq!(s.classify(&p), gold, "{p:?}");
        }
        // A default that some packet can reach is not noted, nor a catch-all rule without one.
        let reached = text.replace("[[classify]]\nto = \"gold\"\n[[classify]]", "[[classify]]");
        let d = build_str(&reached, "t.toml").unwrap().describe();
        assert!(!d.contains("default is never used"), "{d}");
        let no_default = text.replace("[scheduler]\ndefault = \"bronze\"\n", "");
        let d = build_str(&no_default, "t.toml").unwrap().describe();
        assert!(!d.contains("default is never used"), "{d}");
    }

    /// Rules that test a class id are counted (a host that sets none, as the daemon, warns
    /// of them): one with a class among other conditions counts, one without does not.
    #[test]
    fn rules_on_a_class_id_are_counted() {
        let text = format!(
            "{}[[classify]]\nto = \"gold\"\nclass = 7\n\
             [[classify]]\nto = \"gold\"\ndscp = 46\n\
             [[classify]]\nto = \"bronze\"\nclass = 9\nproto = \"udp\"\n",
            tree_with("")
        );
        assert_eq!(build_str(&text, "t.toml").unwrap().class_rules(), 2);
        let text = format!("{}[[classify]]\nto = \"gold\"\ndscp = 46\n", tree_with(""));
        assert_eq!(build_str(&text, "t.toml").unwrap().class_rules(), 0);
    }

    /// The edges of each condition, compiled from a file and classified: prefixes of length 0
    /// hold every address of their family only, /32 and /128 one address; ports 0 and 65535
    /// are ports like the others, and a range matches only packets that have ports; the first
    /// rule that holds wins.
    #[test]
    fn conditions_at_their_edges_match_what_they_say() {
        let leaves: String = (1..=8)
            .map(|i| format!("[[node]]\nname = \"l{i}\"\nparent = \"r\"\npolicy = \"fifo\"\n"))
            .collect();
        let text = format!(
            "[scheduler]\ndefault = \"l8\"\n[[node]]\nname = \"r\"\npolicy = \"wfq\"\n{leaves}\
             [[classify]]\nto = \"l1\"\nsrc = \"2001:db8::1/128\"\n\
             [[classify]]\nto = \"l2\"\nsrc = \"10.0.0.1/32\"\n\
             [[classify]]\nto = \"l3\"\nsport = 0\n\
             [[classify]]\nto = \"l4\"\ndport = \"65535\"\n\
             [[classify]]\nto = \"l5\"\ndst = \"::/0\"\n\
             [[classify]]\nto = \"l6\"\ndst = \"0.0.0.0/0\"\ndport = \"0-65535\"\n\
             [[classify]]\nto = \"l7\"\nvlan = 4095\n"
        );
        let s = build_str(&text, "t.toml").unwrap();
        let at = |src: &str, dst: &str, ports: Option<(u16, u16)>, vlan: Option<u16>| {
            let p = crate::Packet {
                len: 100,
                headers: crate::Headers {
                    src: src.parse().ok(),
                    dst: dst.parse().ok(),
                    sport: ports.map(|(s, _)| s),
                    dport: ports.map(|(_, d)| d),
                    vlan,
                    ..crate::Headers::default()
                },
                ..crate::Packet::default()
            };
            s.classify(&p).map(|l| s.node_name(l).to_string())
        };
        for (src, dst, ports, vlan, leaf) in [
            ("2001:db8::1", "10.9.9.9", Some((1, 1)), None, "l1"),
            ("2001:db8::2", "2001:db8::9", None, None, "l5"),
            ("10.0.0.1", "10.9.9.9", Some((0, 0)), None, "l2"),
            ("10.0.0.2", "10.9.9.9", Some((0, 80)), None, "l3"),
            ("10.0.0.2", "10.9.9.9", Some((80, 65535)), None, "l4"),
            ("10.0.0.2", "10.9.9.9", Some((80, 65534)), None, "l6"),
            // No ports: the full range does not hold.
            ("10.0.0.2", "10.9.9.9", None, Some(4095), "l7"),
            ("10.0.0.2", "10.9.9.9", None, Some(4094), "l8"),
            ("", "", None, None, "l8"),
        ] {
            assert_eq!(
                at(src, dst, ports, vlan).as_deref(),
                Some(leaf),
                "{src} -> {dst} {ports:?} {vlan:?}"
            );
        }
    }

    /// A packet with only a DSCP value and a protocol, as given.
    fn packet_with(dscp: Option<u8>, proto: Option<u8>) -> crate::Packet {
        crate::Packet {
            len: 100,
            headers: crate::Headers {
                dscp,
                proto,
                ..crate::Headers::default()
            },
            ..crate::Packet::default()
        }
    }

    #[test]
    fn a_queue_narrower_than_its_ranks_is_noted() {
        // prio on 4 buckets: priorities 4..=255 pile into the last one, in arrival order.
        let prio = "[[node]]\nname = \"root\"\npolicy = \"prio\"\n\
                    queue = { kind = \"ffs\", buckets = 4, granularity = 1 }\n";
        let d = build_str(prio, "t.toml").unwrap().describe();
        assert!(
            d.contains(
                "node `root`: its queue `ffs` covers 4 rank units and policy `prio` ranks over 256"
            ),
            "{d}"
        );
        // wfq on a moving range of single units: its virtual times pass it at once.
        let wfq = tree_with("queue = { kind = \"cffs\", granularity = 1 }");
        let d = build_str(&wfq, "t.toml").unwrap().describe();
        assert!(
            d.contains("its queue `cffs` covers") && d.contains("`wfq` ranks over"),
            "{d}"
        );
        // Coarse buckets for prio: as many levels per bucket as there are, no more.
        let coarse = prio.replace(
            "buckets = 4, granularity = 1",
            "buckets = 4, granularity = 1024",
        );
        let d = build_str(&coarse, "t.toml").unwrap().describe();
        assert!(d.contains("holds 256 priority levels per bucket"), "{d}");
        assert!(!d.contains("covers"), "{d}");
        // `auto` never is.
        for policy in ["prio", "wfq", "lqf", "edf", "drr", "hclock", "htb"] {
            let d = build_str(&tree_with("").replacen("wfq", policy, 1), "t.toml")
                .unwrap()
                .describe();
            assert!(!d.contains("covers"), "{policy}: {d}");
        }
    }

    #[test]
    fn approximate_queues_are_sized_to_their_window_for_fixed_ranges_too() {
        // They were sized for the range (65 536 buckets for lqf) and refused as too many.
        for (policy, kind) in [
            ("lqf", "approx_gradient"),
            ("lqf", "circular_approx"),
            ("pfabric", "approx_gradient"),
            ("prio", "circular_approx"),
        ] {
            let text =
                format!("[[node]]\nname = \"root\"\npolicy = \"{policy}\"\nqueue = \"{kind}\"\n");
            let d = build_str(&text, "t.toml").unwrap_or_else(|e| panic!("{policy} {kind}: {e}"));
            assert!(!d.describe().contains("covers"), "{policy} {kind}");
        }
    }

    #[test]
    fn an_error_quoting_a_long_inline_table_stays_on_one_short_line() {
        let long = "x".repeat(1000);
        let text = format!("node = {{\n name = \"{long}\",\n policy = \"fifo\",\n}}\n");
        let e = error(&text);
        assert!(!e.contains('\n'), "{e}");
        assert!(e.len() < 400 && e.contains("is a single table"), "{e}");
    }

    /// serde quoted the whole string it did not expect: 100 KB on one line.
    #[test]
    fn an_error_quoting_a_long_string_stays_short() {
        let long = "x".repeat(100_000);
        for text in [
            format!("node = \"{long}\"\n"),
            format!("scheduler = \"{long}\"\n"),
        ] {
            let e = error(&text);
            assert!(
                e.len() < 400 && e.contains("\"xxxx"),
                "{} bytes: {}",
                e.len(),
                &e[..e.len().min(300)]
            );
        }
        fails(
            &format!("node = \"{long}\"\n"),
            1,
            &["invalid type: string \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...;"],
        );
    }

    /// toml holds a whole file before any check: an 18 MB file of inline tables took more
    /// than 4 GB and aborted. Too many tables or values are refused before it parses, at the
    /// first one too many; the largest tree still compiles.
    #[test]
    fn files_that_would_take_too_much_memory_to_parse_are_refused_first() {
        let tables = format!("x = [\n{}]\n", "{ a = 1 },\n".repeat(3_000_000));
        fails(
            &tables,
            131_074,
            &["more than 131072 tables", "1.5 KB a table"],
        );
        let values = format!("x = [{}]\n", "1, ".repeat(2_000_000));
        let e = error(&values);
        assert!(
            e.starts_with("t.toml:1:3145729: more than 1048576 values"),
            "{e}"
        );
        let mut tree = String::from("[[node]]\nname = \"r\"\npolicy = \"wfq\"\n");
        for i in 1..65_535 {
            tree += &format!(
                "[[node]]\nname = \"n{i}\"\nparent = \"r\"\npolicy = \"fifo\"\n\
                 queue = {{ kind = \"ffs\", buckets = 8 }}\n"
            );
        }
        assert!(compile_str(&tree, "t.toml").is_ok());
    }

    #[test]
    fn each_of_many_rules_is_checked_against_every_rule_before_it() {
        // Every pair took 32 s for 40 000 rules, a window of the 4096 before each 83 s for
        // 600 000; and a rule repeating one further back went unnoticed.
        let mut rules = String::new();
        for c in 0..5000 {
            rules += &format!("[[classify]]\nto = \"gold\"\nclass = {c}\n");
        }
        // Rule 5001 repeats rule 4999; rule 5002 repeats rule 1, 5000 rules back; rule 5003
        // asks for more than rule 2 does; rule 5004 for a class no rule had.
        rules += "[[classify]]\nto = \"gold\"\nclass = 4998\n";
        rules += "[[classify]]\nto = \"gold\"\nclass = 0\n";
        rules += "[[classify]]\nto = \"bronze\"\nclass = 1\ndscp = 46\n";
        rules += "[[classify]]\nto = \"gold\"\nclass = 5000\n";
        let d = build_str(&(tree_with("") + &rules), "t.toml")
            .unwrap()
            .describe();
        let tail = &d[d.len() - 800..];
        assert!(
            tail.contains("note: rule 5001 is never reached: rule 4999 before it"),
            "{tail}"
        );
        assert!(
            tail.contains("note: rule 5002 is never reached: rule 1 before it"),
            "{tail}"
        );
        assert!(
            tail.contains("note: rule 5003 is never reached: rule 2 before it"),
            "{tail}"
        );
        assert!(!d.contains("rule 5004 is never"), "{tail}");
        assert_eq!(d.matches("is never reached").count(), 3, "{tail}");
    }

    #[test]
    fn nodes_may_come_in_any_order() {
        let forward = tree_with("");
        let backward = "[[node]]\nname = \"bronze\"\nparent = \"root\"\npolicy = \"fifo\"\n\
                        [[node]]\nname = \"gold\"\nparent = \"root\"\npolicy = \"fifo\"\n\
                        [[node]]\nname = \"root\"\npolicy = \"wfq\"\n";
        let (a, _) = compile_str(&forward, "a").unwrap();
        let (b, _) = compile_str(backward, "b").unwrap();
        let (a, b) = (a.build().unwrap(), b.build().unwrap());
        assert_eq!(a.node_name(0), "root");
        assert_eq!(b.node_name(0), "root");
        // Children keep file order.
        assert!(a.describe().find("gold") < a.describe().find("bronze"));
        assert!(b.describe().find("bronze") < b.describe().find("gold"));
        // Deeper trees listed leaves first.
        let deep = "[[node]]\nname = \"c\"\nparent = \"b\"\npolicy = \"fifo\"\n\
                    [[node]]\nname = \"b\"\nparent = \"a\"\npolicy = \"wfq\"\n\
                    [[node]]\nname = \"a\"\npolicy = \"wfq\"\n";
        let s = build_str(deep, "d").unwrap();
        assert_eq!(
            (s.node_name(0), s.node_name(1), s.node_name(2)),
            ("a", "b", "c")
        );
    }

    #[test]
    fn positions_are_lines_and_character_columns() {
        assert_eq!(line_col("", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("é = 1\nx", 3), (1, 3)); // é is two bytes, one column
        assert_eq!(line_col("ab\n", 99), (2, 1)); // past the end
        assert_eq!(line_col("é", 1), (1, 2)); // inside a character
    }

    #[test]
    fn malformed_toml() {
        fails("[scheduler\ncapacity = 1\n", 1, &["unclosed table", "`]`"]);
        fails("[scheduler]\ncapacity = \n", 2, &["expected"]);
        fails(
            "[scheduler]\ncapacity = 1\ncapacity = 2\n",
            3,
            &["duplicate key `capacity`"],
        );
        fails(
            "[node]\nname = \"r\"\n",
            1,
            &["`[node]` is a single table", "[[node]]"],
        );
        fails("scheduler = 5\n", 1, &["`[scheduler]` table"]);
    }

    #[test]
    fn unknown_keys_anywhere_name_the_key_and_the_allowed_ones() {
        fails(
            "capacity = 3\n",
            1,
            &["unknown key `capacity`", "`scheduler`", "`node`"],
        );
        // The daemon's configuration given as a policy file is named as such; a node's key
        // of the same name is not.
        fails(
            "[daemon]\nmode = \"event\"\n",
            1,
            &[
                "unknown key `daemon`",
                "looks like the daemon's configuration",
                "sluice run",
            ],
        );
        fails(
            "[[port]]\nname = \"a\"\n",
            1,
            &[
                "unknown key `port`",
                "looks like the daemon's configuration",
            ],
        );
        let e = build_str(
            "[[node]]\nname = \"q\"\npolicy = \"fifo\"\nlink = 1\n",
            "t.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("unknown key `link`") && !e.contains("daemon"),
            "{e}"
        );
        fails(
            "[scheduler]\ncapasity = 3\n",
            2,
            &["`capasity`", "`capacity`", "`max_packet`"],
        );
        fails(
            "[shaper]\nslots = 3\n",
            2,
            &["`slots`", "`slot`", "`horizon`"],
        );
        fails(
            &tree_with("wieght = 3"),
            4,
            &["`wieght`", "`weight`", "`flow_reservation`"],
        );
        fails(
            &tree_with("queue = { kind = \"cffs\", bucket = 3 }"),
            4,
            &["`bucket`", "`buckets`", "`granularity`"],
        );
        fails(
            &format!("{}[[classify]]\nto = \"gold\"\nport = 80\n", tree_with("")),
            15,
            &["`port`", "`dport`", "`sport`"],
        );
    }

    #[test]
    fn missing_name_policy_or_to() {
        fails("[[node]]\npolicy = \"fifo\"\n", 1, &["no `name`"]);
        fails(
            "[[node]]\nname = \"r\"\n",
            1,
            &["`r`", "no `policy`", "wfq"],
        );
        fails(
            &format!("{}\n[[classify]]\ndscp = 1\n", tree_with("")),
            14,
            &["no `to`"],
        );
        fails(
            "[[node]]\nname = \"\"\npolicy = \"fifo\"\n",
            2,
            &["`name`", "1 to 64"],
        );
        fails(
            "[[node]]\nname = \"a b\"\npolicy = \"fifo\"\n",
            2,
            &["`name`"],
        );
        fails(
            "[[node]]\nname = 5\npolicy = \"fifo\"\n",
            2,
            &["`name` = 5 is an integer"],
        );
    }

    #[test]
    fn duplicate_names() {
        let text = "[[node]]\nname = \"r\"\npolicy = \"wfq\"\n\
                    [[node]]\nname = \"r\"\nparent = \"r\"\npolicy = \"fifo\"\n";
        fails(text, 5, &["`r` is used twice", "line 2", "unique"]);
    }

    #[test]
    fn one_root_exactly() {
        fails("", 1, &["no `[[node]]`"]);
        fails("[scheduler]\ncapacity = 10\n", 1, &["no `[[node]]`"]);
        let two = "[[node]]\nname = \"a\"\npolicy = \"fifo\"\n\
                   [[node]]\nname = \"b\"\npolicy = \"fifo\"\n";
        fails(
            two,
            4,
            &["two roots", "`a` (line 1)", "`b`", "exactly one root"],
        );
        let none = "[[node]]\nname = \"a\"\nparent = \"b\"\npolicy = \"fifo\"\n\
                    [[node]]\nname = \"b\"\nparent = \"a\"\npolicy = \"fifo\"\n";
        fails(none, 1, &["no root", "`parent`"]);
    }

    #[test]
    fn unknown_parent() {
        let text = tree_with("").replace(
            "parent = \"root\"\npolicy = \"fifo\"\n[[node]]\nname = \"bronze\"",
            "parent = \"rot\"\npolicy = \"fifo\"\n[[node]]\nname = \"bronze\"",
        );
        fails(&text, 7, &["`parent` = \"rot\" names no node", "`root`"]);
    }

    #[test]
    fn cycles_in_parent_links() {
        let text = "[[node]]\nname = \"r\"\npolicy = \"wfq\"\n\
                    [[node]]\nname = \"a\"\nparent = \"b\"\npolicy = \"wfq\"\n\
                    [[node]]\nname = \"b\"\nparent = \"a\"\npolicy = \"wfq\"\n\
                    [[node]]\nname = \"c\"\nparent = \"b\"\npolicy = \"fifo\"\n";
        fails(text, 6, &["cycle: a -> b -> a", "root `r`"]);
        // A root beside a cycle of `n` nodes, c0 -> c1 -> ... -> c0.
        let ring = |n: usize| {
            let mut text = String::from("[[node]]\nname = \"r\"\npolicy = \"wfq\"\n");
            for i in 0..n {
                let p = (i + 1) % n;
                text +=
                    &format!("[[node]]\nname = \"c{i}\"\nparent = \"c{p}\"\npolicy = \"wfq\"\n");
            }
            text
        };
        // A long cycle: its first nodes and its length, on one short line.
        let e = error(&ring(1000));
        assert!(
            e.contains("c0 -> c1 -> ") && e.contains("... (1000 nodes) -> c0"),
            "{e}"
        );
        assert!(e.len() < 300, "{e}");
        // Eight nodes are shown whole, without the count.
        let e = error(&ring(8));
        assert!(
            e.contains("c0 -> c1 -> c2 -> c3 -> c4 -> c5 -> c6 -> c7 -> c0"),
            "{e}"
        );
        assert!(!e.contains("nodes)"), "{e}");
        let own = "[[node]]\nname = \"r\"\npolicy = \"wfq\"\n\
                   [[node]]\nname = \"x\"\nparent = \"x\"\npolicy = \"fifo\"\n";
        fails(own, 6, &["cycle: x -> x"]);
    }

    #[test]
    fn toml_structure_errors_speak_the_files_language() {
        // serde's names for our structs, toml's internal date-time key, i128: none leak.
        fails(
            "[[scheduler]]\ncapacity = 10\n",
            1,
            &["an array", "a `[scheduler]` table"],
        );
        fails(&tree_with("queue = 1979-05-27"), 4, &["a date-time value"]);
        // Each says what its key takes, as its own check would (it said "an integer from
        // -2^63 to below 2^63" for all, and a rate then refused the integer it was given).
        fails(
            "[scheduler]\ncapacity = 99999999999999999999\n",
            2,
            &[
                "`capacity` = an integer too large",
                "an integer in 1..=16777216",
            ],
        );
        // 2^64 - 1 and 2^63 fit a u64, which toml's `Value` refused as "u64 value was too
        // large; expected valid TOML".
        for big in ["18446744073709551615", "9223372036854775808"] {
            fails(
                &format!("[scheduler]\nflows = {big}\n"),
                2,
                &[
                    "`flows` = an integer too large",
                    "an integer in 1..=16777216",
                ],
            );
        }
        fails(
            "[scheduler]\ncapacity = -99999999999999999999\n",
            2,
            &["`capacity` = an integer too far below zero", "1..=16777216"],
        );
        fails(
            &tree_with("queue = { kind = \"ffs\", buckets = 99999999999999999999 }"),
            4,
            &[
                "`buckets` = an integer too large",
                "an integer in 1..=16777216",
            ],
        );
        fails(
            &tree_with("rate = 99999999999999999999"),
            4,
            &[
                "`rate` = an integer too large",
                "a rate in bits per second like",
            ],
        );
        fails(
            &tree_with("queue = 99999999999999999999"),
            4,
            &["`queue` = an integer too large", "a queue kind like"],
        );
        // Two in one rule, the later one's key checked first: what TOML holds, and where
        // the key's range is.
        let rule = "[[classify]]\nto = \"gold\"\ndport = 99999999999999999999\n\
                    src = 99999999999999999999\n";
        fails(
            &format!("{}{rule}", tree_with("")),
            15,
            &[
                "`dport` = an integer too large",
                "below 2^63",
                "docs/policy-files.md",
            ],
        );
        // A file of NUL bytes was "a key with no value".
        fails("\0\0\0\0", 1, &["a NUL byte", "a UTF-8 text file"]);
        fails("[scheduler]\ncapacity = 1\0\n", 2, &["a NUL byte"]);
        // Echoes stay short; floats show as floats.
        let long = format!("[scheduler]\n{} = 1\n", "k".repeat(3000));
        let e = error(&long);
        assert!(e.contains("unknown key `kkk") && e.len() < 300, "{e}");
        fails(
            &tree_with("rate = 1.5e9"),
            4,
            &["`rate` = 1500000000.0 is a float"],
        );
        // A port beyond 65535 in a range is out of range, not malformed.
        let rule = "[[classify]]\nto = \"gold\"\ndport = \"1-70000\"\n";
        fails(
            &(tree_with("") + rule),
            15,
            &["\"1-70000\" is out of range"],
        );
    }

    /// serde's derived structs take a sequence too, its elements as the fields in order: these
    /// all compiled (a scheduler of 5 packets, a rule with eight conditions).
    #[test]
    fn an_array_in_place_of_a_table_is_refused() {
        let root = "[[node]]\nname = \"root\"\npolicy = \"fifo\"\n";
        fails(
            &format!("scheduler = [5, 7, 1500, \"root\"]\n{root}"),
            1,
            &["an array", "a `[scheduler]` table"],
        );
        fails(
            &format!("shaper = [\"1us\", \"2ms\", \"reject\", \"timing_wheel\"]\n{root}"),
            1,
            &["an array", "a `[shaper]` table"],
        );
        fails(
            &format!(
                "classify = [[\"root\", 7, 46, 100, \"tcp\", \"10.0.0.0/8\", \"10.0.0.0/8\", \
                 80, \"443-444\"]]\n{root}"
            ),
            1,
            &["an array", "a table: one `[[classify]]` per rule"],
        );
        let node = "[\"leaf\", \"fifo\", \"root\", \"auto\", \"10Mbit\", \"3KB\", 2, 0, 3028, \
                    \"1Mbit\", \"1Mbit\", \"1KB\", 1, 3028, \"1Mbit\"]";
        fails(
            &format!("node = [\n  {{ name = \"root\", policy = \"wfq\" }},\n  {node},\n]\n"),
            3,
            &["an array", "a table: one `[[node]]` per node"],
        );
        // Shorter arrays were refused already (serde wanted every field), the same way.
        fails(
            "node = [[\"r\", \"fifo\"]]\n",
            1,
            &["t.toml:1:9: an array", "one `[[node]]` per node"],
        );
    }

    #[test]
    fn a_byte_order_mark_is_not_text_and_other_encodings_are_located() {
        let e = error("\u{feff}capasity = 3\n");
        assert!(e.starts_with("t.toml:1:1: unknown key `capasity`"), "{e}");
        let dir = std::env::temp_dir().join(format!("sluice-latin1-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.toml");
        std::fs::write(&path, b"[scheduler]\n# caf\xe9\ncapacity = 10\n").unwrap();
        let e = compile_file(&path)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        // A byte-order mark is not a column (the other errors count without it).
        std::fs::write(&path, b"\xef\xbb\xbfx\xff").unwrap();
        let bom = compile_file(&path)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            bom.contains("p.toml:1:2: bytes that are not UTF-8"),
            "{bom}"
        );
        // One byte past the cap (sparse: nothing is written).
        let big = dir.join("big.toml");
        std::fs::File::create(&big)
            .and_then(|f| f.set_len(MAX_FILE_BYTES + 1))
            .unwrap();
        let too_big = compile_file(&big)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            too_big.contains("big.toml: cannot read: larger than 64 MiB"),
            "{too_big}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            e.ends_with(
                "p.toml:2:6: bytes that are not UTF-8; expected a UTF-8 text file (TOML is UTF-8)"
            ),
            "{e}"
        );
    }

    #[test]
    fn node_names_are_short_and_visible() {
        for bad in ["a\u{200b}", "a\u{202e}b", "a`b", "a b", "", &"n".repeat(65)] {
            let text = format!("[[node]]\nname = \"{bad}\"\npolicy = \"fifo\"\n");
            fails(&text, 2, &["is not a usable name", "1 to 64 letters"]);
        }
        for good in ["vm-db", "best_effort", "tenant.1", "gold:web/v2", "vidéo"] {
            let text = format!("[[node]]\nname = \"{good}\"\npolicy = \"fifo\"\n");
            assert!(compile_str(&text, "t.toml").is_ok(), "{good}");
        }
    }

    #[test]
    fn a_wheel_of_one_slot_is_refused() {
        // A release beyond its horizon was filed again in the same slot, forever.
        fails(
            "[shaper]\nslot = \"1ms\"\nhorizon = \"1ms\"\n",
            3,
            &["is one slot", "at least 2 slots"],
        );
    }

    #[test]
    fn an_exact_shaper_takes_any_slot_and_horizon() {
        // A slot longer than the horizon too (it was refused, default horizon or given).
        for shaper in [
            "queue = \"binary_heap\"\nslot = \"1ns\"\nhorizon = \"10s\"",
            "queue = \"btree\"\nslot = \"2s\"",
            "queue = \"skiplist\"\nslot = \"2s\"\nhorizon = \"1ms\"",
        ] {
            let text = format!("[shaper]\n{shaper}\n[[node]]\nname = \"r\"\npolicy = \"fifo\"\n");
            let c = build_str(&text, "t.toml");
            assert!(c.is_ok(), "{shaper}: {:?}", c.err().map(|e| e.to_string()));
        }
    }

    #[test]
    fn a_slot_too_fine_for_the_default_horizon_says_the_horizon_is_the_default() {
        fails(
            "[shaper]\nslot = \"1ns\"\n",
            2,
            &["the default 1073741824 ns `horizon`", "a shorter `horizon`"],
        );
    }

    /// An unquoted word that starts like `true` or `false` was reported as a bad boolean.
    #[test]
    fn unquoted_words_are_said_to_be_unquoted() {
        fails(
            "[[node]]\nname = \"r\"\npolicy = fq\n",
            3,
            &["`fq` is not quoted", "\"fq\""],
        );
        fails(
            "[[node]]\nname = \"r\"\npolicy = wfq\n",
            3,
            &["must be quoted"],
        );
        fails(
            "[[node]]\nname = \"r\"\npolicy = \"fifo\"\n\n[[classify]]\nproto = tcp\nto = \"r\"\n",
            6,
            &["`tcp` is not quoted"],
        );
    }

    /// The horizon a note advises is rounded up (11 999 bit/s takes 1.000083 s a packet: a
    /// `horizon` of "1.000 s" was advised, the one in use), and comes with the slot it needs
    /// when 2^24 slots of 1024 ns fall short (at 1 bit/s, 12 000 s).
    #[test]
    fn the_horizon_a_note_advises_is_enough_and_possible() {
        let text = "[shaper]\nhorizon = \"1s\"\n\n[[node]]\nname = \"r\"\npolicy = \"fifo\"\n\n\
                    [[node]]\nname = \"a\"\nparent = \"r\"\npolicy = \"fifo\"\nrate = \"11999bit\"\n\n\
                    [[node]]\nname = \"b\"\nparent = \"r\"\npolicy = \"fifo\"\nflow_rate = \"1bit\"\n";
        let d = build_str(text, "t.toml").unwrap().describe();
        for want in [
            "its rate 11.999kbit takes 1.000 s to send 1500 B, longer than the shaper's 1.000 s \
             horizon",
            "a `horizon` of 1.001 s or more avoids it\n",
            "a `horizon` of 12000.000 s or more avoids it, with a `slot` of 715256 ns or more \
             (2^24 slots at most)",
        ] {
            assert!(d.contains(want), "missing {want:?} in:\n{d}");
        }
    }

    #[test]
    fn a_horizon_shorter_than_a_slot_is_refused() {
        fails(
            "[shaper]\nslot = \"1s\"\nhorizon = \"1ns\"\n",
            3,
            &["shorter than one"],
        );
        fails(
            "[shaper]\nhorizon = \"1ns\"\n",
            2,
            &["1 ns `horizon`", "1024 ns `slot`"],
        );
    }

    #[test]
    fn impossible_rates() {
        for (rate, needle) in [
            ("\"0Mbit\"", "must be positive"),
            ("\"-5Mbit\"", "must be positive"),
            ("\"1e30bit\"", "below 2^63"),
            ("\"10MB\"", "rates count bits: `Mbit`, not `MB`"),
            ("\"10GB\"", "rates count bits: `Gbit`, not `GB`"),
            ("\"5KiB\"", "rates count bits: `kbit`, not `KiB`"),
            ("\"10B\"", "rates count bits: `bit`, not `B`"),
            ("\"10Mbps\"", "tc reads `Mbps` as megabytes"),
            ("\"10gbps\"", "tc reads `Mbps` as megabytes"),
            ("\"10M\"", "name the unit in full"),
            ("\"10Mb\"", "name the unit in full"),
            ("\"fast\"", "is not a rate"),
            ("10", "is an integer"),
        ] {
            fails(
                &tree_with(&format!("rate = {rate}")),
                4,
                &["`rate`", needle, "10Mbit"],
            );
        }
        fails(&tree_with("reservation = \"0bit\""), 4, &["`reservation`"]);
        let leaf = "[[node]]\nname = \"r\"\npolicy = \"fq\"\nflow_rate = \"5 apples\"\n";
        fails(leaf, 4, &["`flow_rate`", "is not a rate"]);
    }

    #[test]
    fn absurd_sizes_and_counts() {
        let node = "[[node]]\nname = \"r\"\npolicy = \"fifo\"\n";
        for (section, key, value, needle) in [
            ("scheduler", "capacity", "0", "1..=16777216"),
            ("scheduler", "capacity", "16777217", "1..=16777216"),
            ("scheduler", "flows", "-1", "1..=16777216"),
            ("scheduler", "capacity", "\"many\"", "is a string"),
            ("scheduler", "max_packet", "\"0B\"", "1..=4294967295 bytes"),
            ("scheduler", "max_packet", "\"8GB\"", "out of range"),
            ("scheduler", "max_packet", "\"1.5B\"", "whole number"),
            ("shaper", "slot", "\"0ns\"", "at least 1ns"),
            ("shaper", "slot", "\"0.4ns\"", "rounds to 0 ns"),
            ("shaper", "slot", "\"4e-10s\"", "rounds to 0 ns"),
            ("shaper", "slot", "100", "is an integer"),
            ("shaper", "horizon", "\"10\"", "not a duration"),
            ("shaper", "horizon", "\"100s\"", "at most 16777216 slots"),
            (
                "shaper",
                "queue",
                "\"hffs\"",
                "timing_wheel, or an exact one",
            ),
            ("shaper", "queue", "\"bucket_heap\"", "fixed range"),
            ("shaper", "queue", "\"cffs\"", "a flow paced sooner"),
            (
                "shaper",
                "beyond_horizon",
                "\"drop\"",
                "\"clamp\" or \"reject\"",
            ),
        ] {
            fails(
                &format!("[{section}]\n{key} = {value}\n{node}"),
                2,
                &[key, needle],
            );
        }
        for (line, needle) in [
            ("weight = 0", "1..=65536"),
            ("weight = 65537", "1..=65536"),
            ("priority = 256", "0..=255"),
            ("priority = -1", "0..=255"),
            ("quantum = 0", "quantum"),
            ("burst = -1", "burst"),
            ("burst = \"lots\"", "is not a size"),
        ] {
            let text =
                tree_with("").replace("name = \"gold\"\n", &format!("name = \"gold\"\n{line}\n"));
            fails(&text, 7, &[&line[..line.find(' ').unwrap_or(0)], needle]);
        }
        fails(
            &tree_with("queue = { kind = \"hffs\", buckets = 0 }"),
            4,
            &["`buckets` = 0", "1..=16777216"],
        );
        fails(
            &tree_with("queue = { kind = \"hffs\", granularity = 0 }"),
            4,
            &["`granularity` = 0"],
        );
        fails(&tree_with("queue = { buckets = 8 }"), 4, &["no `kind`"]);
        fails(&tree_with("queue = 5"), 4, &["`queue`"]);
    }

    /// Bursts were taken up to 2^63 bytes (8 EiB: a gate that never closes); they are sizes
    /// like the others, below 4 GiB.
    #[test]
    fn bursts_are_capped_like_other_sizes() {
        let leaf = |extra: &str| {
            format!(
                "[[node]]\nname = \"r\"\npolicy = \"fq\"\nrate = \"1Gbit\"\nflow_rate = \"1Mbit\"\n{extra}\n"
            )
        };
        for (line, key) in [
            ("burst = \"5GB\"", "`burst`"),
            ("burst = 9223372036854775807", "`burst`"),
            ("flow_burst = \"4294967296B\"", "`flow_burst`"),
            ("flow_burst = \"8e18B\"", "`flow_burst`"),
        ] {
            fails(
                &leaf(line),
                6,
                &[key, "out of range", "0..=4294967295 bytes"],
            );
        }
        for line in ["burst = \"4294967295B\"", "flow_burst = 4294967295"] {
            let built = build_str(&leaf(line), "t.toml");
            assert!(
                built.is_ok(),
                "{line}: {:?}",
                built.err().map(|e| e.to_string())
            );
        }
    }

    /// A size out of the units' bounds is out of the key's: "-5B" said "sizes must be between
    /// 0 and 2^63 bytes" for a key that takes 1..=4294967295.
    #[test]
    fn sizes_out_of_range_state_the_keys_range() {
        for value in [
            "\"-5B\"",
            "\"-1e3B\"",
            "\"1e30B\"",
            "\"9223372036854775808B\"",
        ] {
            let text = format!(
                "[scheduler]\nmax_packet = {value}\n[[node]]\nname = \"r\"\npolicy = \"fifo\"\n"
            );
            let e = error(&text);
            assert!(
                e.contains(&format!("`max_packet` = {value} is out of range; expected"))
                    && e.contains("1..=4294967295 bytes")
                    && !e.contains("2^63"),
                "{e}"
            );
        }
        // A fraction is wrong whatever the range, and says so.
        fails(
            "[scheduler]\nmax_packet = \"1.5B\"\n",
            2,
            &["is out of range: a size must be a whole number of bytes"],
        );
    }

    #[test]
    fn classifier_values() {
        let rule = |cond: &str| format!("{}[[classify]]\nto = \"gold\"\n{cond}\n", tree_with(""));
        for (cond, needle) in [
            ("dscp = 64", "0..=63"),
            ("vlan = 4096", "0..=4095"),
            ("class = -1", "0..=4294967295"),
            ("proto = \"sctpx\"", "\"tcp\""),
            ("proto = 256", "0..=255"),
            ("src = \"10.0.0.0/33\"", "0..=32"),
            ("dst = \"fd00::/129\"", "0..=128"),
            ("src = \"10.1.0.0/8\"", "\"10.0.0.0/8\""),
            ("dst = \"not-an-ip\"", "CIDR"),
            ("src = 10", "is an integer"),
            ("dport = \"6000-5000\"", "empty range"),
            ("dport = 70000", "0..=65535"),
            ("sport = \"a-b\"", "not a port range"),
            ("sport = \"80-\"", "not a port range"),
            ("dport = true", "is a boolean"),
        ] {
            let key = &cond[..cond.find(' ').unwrap_or(0)];
            fails(&rule(cond), 15, &[key, needle]);
        }
        let (b, _) = compile_str(
            &rule("proto = \"UDP\"\nsrc = \"192.168.1.7\"\nsport = \"53\""),
            "t",
        )
        .unwrap();
        assert!(
            b.build()
                .unwrap()
                .describe()
                .contains("proto=17 and src=192.168.1.7/32 and sport=53")
        );
    }

    #[test]
    fn unknown_policy_and_queue_kinds() {
        fails(
            "[[node]]\nname = \"r\"\npolicy = \"wf2q\"\n",
            3,
            &["`policy` = \"wf2q\"", "fifo", "srpt"],
        );
        fails(
            &tree_with("queue = \"cfs\""),
            4,
            &["`queue` = \"cfs\"", "cffs", "auto"],
        );
        // A node's list leaves out the shaper's wheel, which it would refuse.
        assert!(!error(&tree_with("queue = \"cfs\"")).contains("timing_wheel"));
        fails(
            &tree_with("queue = { kind = \"cfs\" }"),
            4,
            &["`kind` = \"cfs\"", "cffs"],
        );
        fails(
            &format!("[shaper]\nqueue = \"wheel\"\n{}", tree_with("")),
            2,
            &["`queue` = \"wheel\"", "timing_wheel"],
        );
        let (b, _) = compile_str("[[node]]\nname = \"r\"\npolicy = \"srpt\"\n", "t").unwrap();
        assert!(b.build().unwrap().describe().contains("pfabric"));
    }

    #[test]
    fn misplaced_policies_and_rules_to_inner_nodes_point_at_the_node() {
        // Leaf-only policies with children.
        let text = tree_with("").replacen("policy = \"wfq\"", "policy = \"pfabric\"", 1);
        fails(&text, 3, &["node `root`", "pfabric", "only on a leaf"]);
        let text = tree_with("").replacen("policy = \"wfq\"", "policy = \"fq\"", 1);
        fails(&text, 3, &["node `root`", "`fq`", "only on a leaf"]);
        // Internal-only policy at a leaf.
        let text = tree_with("").replace(
            "parent = \"root\"\npolicy = \"fifo\"\n[[node]]\nname = \"bronze\"",
            "parent = \"root\"\npolicy = \"htb\"\n[[node]]\nname = \"bronze\"",
        );
        fails(
            &text,
            8,
            &["node `gold`", "`htb`", "only on a node with children"],
        );
        // Rules and the default naming a node with children.
        let text = format!("{}[[classify]]\nto = \"root\"\ndscp = 1\n", tree_with(""));
        fails(
            &text,
            14,
            &["`to` = \"root\"", "not a leaf", "`gold`, `bronze`"],
        );
        let text = format!("[scheduler]\ndefault = \"root\"\n{}", tree_with(""));
        fails(&text, 2, &["`default` = \"root\"", "not a leaf"]);
    }

    #[test]
    fn queues_too_big_together_are_refused_before_any_is_built() {
        let big = "queue = { kind = \"ffs\", buckets = 16777216 }";
        let mut text = format!("[[node]]\nname = \"root\"\npolicy = \"fifo\"\n{big}\n");
        for i in 0..16 {
            text += &format!(
                "[[node]]\nname = \"l{i}\"\nparent = \"root\"\npolicy = \"fifo\"\n{big}\n"
            );
        }
        // Node 17 (`l15`) crosses 2^28 buckets; its `queue` is on line 4 + 5 * 16.
        fails(
            &text,
            84,
            &["node `l15`", "285212672 buckets", "fewer `buckets`"],
        );
    }

    #[test]
    fn flow_keys_only_on_leaves() {
        for key in [
            "flow_rate = \"1Mbit\"",
            "flow_weight = 2",
            "flow_quantum = 1514",
            "flow_reservation = \"1Mbit\"",
        ] {
            let name = &key[..key.find(' ').unwrap_or(0)];
            // The hint names the node's own key (it said `rate` for every one).
            let own = format!("`{}` is the node's own", &name["flow_".len()..]);
            fails(
                &tree_with(key),
                4,
                &["node `root` has children", name, "only on leaves", &own],
            );
        }
        fails(
            &tree_with("burst = \"15KB\""),
            4,
            &["`burst` but no `rate`"],
        );
        let leaf = "[[node]]\nname = \"r\"\npolicy = \"fq\"\nflow_burst = 100\n";
        fails(leaf, 4, &["`flow_burst` but no `flow_rate`"]);
    }

    #[test]
    fn default_and_to_must_name_nodes() {
        let text = format!("[scheduler]\ndefault = \"silver\"\n{}", tree_with(""));
        fails(
            &text,
            2,
            &["`default` = \"silver\" names no node", "`gold`, `bronze`"],
        );
        let text = format!("{}[[classify]]\nto = \"silver\"\n", tree_with(""));
        fails(&text, 14, &["`to` = \"silver\" names no node"]);
        let text = format!("{}[[classify]]\nto = 3\n", tree_with(""));
        fails(&text, 14, &["`to` = 3 is an integer"]);
    }

    #[test]
    fn a_fixed_range_queue_under_moving_ranks_is_refused_at_the_queue() {
        for (policy, kind) in [("wfq", "hffs"), ("edf", "ffs"), ("hclock", "gradient")] {
            let text = format!(
                "[[node]]\nname = \"root\"\npolicy = \"{policy}\"\nqueue = \"{kind}\"\n\
                 [[node]]\nname = \"a\"\nparent = \"root\"\npolicy = \"fifo\"\n"
            );
            fails(
                &text,
                4,
                &[
                    &format!("queue `{kind}` has a fixed range"),
                    "or `queue = \"auto\"`",
                ],
            );
        }
        // Ranks in a fixed range (pFabric's compressed sizes) may have one.
        let text = "[[node]]\nname = \"r\"\npolicy = \"pfabric\"\nqueue = \"hffs\"\n";
        assert!(compile_str(text, "t.toml").is_ok());
    }

    #[test]
    fn an_approximate_queue_is_refused_at_a_leaf_ranked_by_time_only() {
        // It could send a flow's later packets before its earlier ones.
        for policy in ["edf", "lstf"] {
            let text = format!(
                "[[node]]\nname = \"root\"\npolicy = \"{policy}\"\nqueue = \"circular_approx\"\n"
            );
            fails(
                &text,
                4,
                &[
                    "queue `circular_approx` is approximate",
                    "a flow's later packets could leave before its earlier ones",
                    "or `circular_approx` at an internal node",
                ],
            );
            // As an internal node, or on `auto` (a cFFS at a leaf), it builds.
            let internal = format!(
                "[[node]]\nname = \"root\"\npolicy = \"{policy}\"\nqueue = \"circular_approx\"\n\
                 [[node]]\nname = \"a\"\nparent = \"root\"\npolicy = \"fifo\"\n"
            );
            assert!(compile_str(&internal, "t.toml").is_ok(), "{policy}");
            let auto = format!("[[node]]\nname = \"root\"\npolicy = \"{policy}\"\n");
            let tree = compile_str(&auto, "t.toml").unwrap().0.build().unwrap();
            assert!(
                tree.describe().contains("queue cffs("),
                "{}",
                tree.describe()
            );
        }
        // A leaf ranking flows as units keeps each flow's packets in its own FIFO.
        let text = "[[node]]\nname = \"r\"\npolicy = \"pfabric\"\nqueue = \"circular_approx\"\n";
        assert!(compile_str(text, "t.toml").is_ok());
    }

    #[test]
    fn a_timing_wheel_is_refused_as_a_nodes_queue() {
        // Its front never followed a node's ranks: EDF sent a deadline 400 ms sooner second,
        // WFQ shared 3 : 1 weights 1 : 1, hClock missed its reservations.
        for policy in ["edf", "wfq", "hclock", "fifo", "pfabric"] {
            let text = format!(
                "[[node]]\nname = \"root\"\npolicy = \"{policy}\"\nqueue = \"timing_wheel\"\n"
            );
            fails(
                &text,
                4,
                &[
                    "queue `timing_wheel` is the shaper's",
                    "or `queue = \"auto\"`",
                ],
            );
        }
    }

    #[test]
    fn queues_the_builder_rejects_point_at_the_queue() {
        let text = tree_with(
            "queue = { kind = \"hffs\", buckets = 16, granularity = 9223372036854775807 }",
        )
        .replacen("wfq", "prio", 1);
        fails(
            &text,
            4,
            &["node `root`", "queue", "does not fit", "`granularity`"],
        );
    }

    #[test]
    fn trees_too_deep_or_too_large() {
        let mut deep = "[[node]]\nname = \"n0\"\npolicy = \"wfq\"\n".to_string();
        for i in 1..=MAX_DEPTH {
            let policy = if i == MAX_DEPTH { "fifo" } else { "wfq" };
            deep += &format!(
                "[[node]]\nname = \"n{i}\"\nparent = \"n{}\"\npolicy = \"{policy}\"\n",
                i - 1
            );
        }
        fails(
            &deep,
            4 * MAX_DEPTH,
            &["`n16`", "deeper", "at most 16 levels"],
        );
        let mut wide = "[[node]]\nname = \"r\"\npolicy = \"drr\"\n".to_string();
        for i in 1..=MAX_NODES {
            wide += &format!("[[node]]\nname = \"n{i}\"\nparent = \"r\"\npolicy = \"fifo\"\n");
        }
        fails(&wide, 4 * MAX_NODES, &["65536 nodes", "at most 65535"]);
    }

    /// A named pipe without a writer made `policy check` wait forever in `open`.
    #[cfg(unix)]
    #[test]
    fn named_pipes_and_sockets_are_refused_before_reading() {
        let dir = std::env::temp_dir().join(format!("sluice-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("p.toml");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let sock = dir.join("s.toml");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        // On the old code this waits: run it aside and give up on it after a while.
        let (tx, rx) = std::sync::mpsc::channel();
        let paths = [fifo.clone(), sock.clone()];
        std::thread::spawn(move || {
            let errors: Vec<String> = paths
                .iter()
                .map(|p| {
                    compile_file(p)
                        .err()
                        .map(|e| e.to_string())
                        .unwrap_or_default()
                })
                .collect();
            let _ = tx.send(errors);
        });
        let errors = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("reading a named pipe did not return");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            errors[0].ends_with(
                "p.toml: cannot read: it is a named pipe (FIFO), not a file: \
                                 reading it would wait for a writer; a configuration file is a \
                                 regular file"
            ),
            "{}",
            errors[0]
        );
        assert!(
            errors[1].contains("s.toml: cannot read: it is a socket"),
            "{}",
            errors[1]
        );
    }

    /// A terminal as the policy file made `policy check` wait for typing; `/dev/zero` was read
    /// up to the size cap. Devices are refused before reading, as pipes are.
    #[cfg(unix)]
    #[test]
    fn devices_are_refused_before_reading() {
        for dev in ["/dev/null", "/dev/zero"] {
            let e = compile_file(Path::new(dev)).unwrap_err().to_string();
            assert_eq!(
                e,
                format!(
                    "{dev}: cannot read: it is a character device, not a file: reading it may \
                     wait or never end; a configuration file is a regular file"
                )
            );
        }
    }

    #[test]
    fn unreadable_files_name_the_file() {
        let e = compile_file(Path::new("/nonexistent/policy.toml")).unwrap_err();
        let s = e.to_string();
        assert!(
            s.starts_with("/nonexistent/policy.toml: cannot read: "),
            "{s}"
        );
        assert!(e.location().is_none());
        let e = build_file(Path::new("/nonexistent/policy.toml")).unwrap_err();
        assert!(matches!(e, PolicyError::Io { .. }));
    }
}
