//! The Unix control socket: `sluice top`, scripts and tests talk to a running daemon here.
//!
//! **Protocol.** Newline-delimited JSON, both ways: one request object per line, one reply
//! object per line, in order. Requests are exactly [`Request`]'s JSON:
//!
//! ```text
//! > {"cmd":"stats"}
//! < {"ok":true,"stats":{"uptime_ns":...,"ports":[...],"links":[...],...}}
//! > {"cmd":"set_rate","link":"a","node":"gold","rate":"200Mbit","burst":"15KB"}
//! < {"ok":true}
//! > {"cmd":"set_weight","link":"a","node":"gold","weight":0}
//! < {"ok":false,"error":"..."}
//! ```
//!
//! Malformed JSON, an unknown `cmd`, unknown fields and invalid UTF-8 get an error reply and
//! the connection stays open for the next line; blank lines are skipped; a line longer than
//! [`MAX_LINE_BYTES`] gets an error reply and the connection is closed (the rest of that line
//! cannot be told apart from the next request). Nothing a client sends can panic the server.
//!
//! **Binding.** The socket file is mode 0600 from the moment anyone can reach it: it is bound
//! inside a fresh private (0700) directory next to the target, chmod-ed to 0600 there, then
//! hard-linked to its final path (the link fails rather than replacing a file that appeared
//! meanwhile) and the private name removed. The alternative, setting the umask around
//! `bind(2)`, changes a process-wide setting that other threads (and parallel tests) creating
//! files at the same moment would silently inherit. An existing socket at the path is probed:
//! if a daemon answers, binding is refused; if the connection is refused, the stale file is
//! moved aside into the private directory and removed if it still refuses there (another
//! daemon may have put its live socket in its place since the probe: that one is put back,
//! and binding is refused). Anything else at the path is left alone and binding is refused.
//! On close the file is removed only if it is still the inode we bound, then the directories
//! binding created for it (mode 0700), each only if empty (also when binding fails).
//!
//! **Threads.** One accept thread waits in epoll on the listener and a stop eventfd. Each
//! connection gets its own thread, at most [`MAX_CONNECTIONS`] at once (beyond that a client
//! gets a "busy" error reply and is closed), with an idle timeout ([`IDLE_TIMEOUT`]) between
//! requests and a write timeout, so a client that connects and sends nothing, or never reads,
//! holds one slot for a bounded time and blocks nobody else. Requests go to the datapath
//! through [`ControlHandle::call`] with a [`CALL_TIMEOUT`]. Closing stops accepting, shuts
//! every open connection down and joins every thread, so no thread holds the handle afterwards;
//! a connection waiting on the datapath finishes that wait first (at most [`CALL_TIMEOUT`]).

use crate::control::{ControlHandle, Reply, Request};
use crate::deadline::Deadlined;
use crate::stats::Snapshot;
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use serde::{Deserialize, Serialize};
use std::fs::{self, DirBuilder, Permissions};
use std::io::{self, BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Connections served at once; more are answered "busy" and closed.
pub const MAX_CONNECTIONS: usize = 16;
/// Longest request line, bytes (without its LF or CRLF).
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// A connection that sends no complete line for this long is closed (one deadline per line,
/// however the bytes trickle in).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection waits for the datapath to answer one request.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long writing one reply may take (a client that does not read, or reads slowly).
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest reply line the client helper accepts, bytes (a snapshot of many links is large).
const MAX_REPLY_BYTES: usize = 64 * 1024 * 1024;
/// After a failed accept (say, out of file descriptors), wait this long before retrying, so a
/// level-triggered listener does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Why the control socket could not be set up or reached.
///
/// System errors are part of each message rather than a `source()`, so an error chain printed
/// with `{:#}` does not repeat them.
#[derive(Debug, thiserror::Error)]
pub enum ControlSocketError {
    /// A daemon already answers at the path.
    #[error("another daemon is listening at {}; stop it or configure another control path", .path.display())]
    InUse {
        /// The socket path.
        path: PathBuf,
    },
    /// Something other than a socket is at the path.
    #[error("{} exists and is not a socket; refusing to replace it", .path.display())]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// The path does not fit in a Unix socket address.
    #[error("{}: too long for a Unix socket path ({len} bytes; at most {max})", .path.display())]
    PathTooLong {
        /// The path.
        path: PathBuf,
        /// Its length, bytes.
        len: usize,
        /// The limit, bytes.
        max: usize,
    },
    /// Nothing listens at the path (no file, or a stale one).
    #[error("no daemon at {}: {error}", .path.display())]
    NoDaemon {
        /// The socket path.
        path: PathBuf,
        /// The connect error.
        error: io::Error,
    },
    /// The daemon sent no reply in time.
    #[error("no reply from {} within {timeout:?}", .path.display())]
    Timeout {
        /// The socket path.
        path: PathBuf,
        /// How long we waited.
        timeout: Duration,
    },
    /// The daemon's reply could not be understood.
    #[error("bad reply from {}: {message}", .path.display())]
    Protocol {
        /// The socket path.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// Any other system error, with what we were doing.
    #[error("{what}: {error}")]
    Io {
        /// What failed, naming the path.
        what: String,
        /// The error.
        error: io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> ControlSocketError {
    let what = what.into();
    move |error| ControlSocketError::Io { what, error }
}

fn nix_err(what: &str) -> impl FnOnce(Errno) -> ControlSocketError + '_ {
    move |e| ControlSocketError::Io {
        what: what.to_string(),
        error: io::Error::from(e),
    }
}

/// Per-server limits; tests shrink them.
#[derive(Clone, Copy, Debug)]
struct Limits {
    max_connections: usize,
    max_line: usize,
    idle_timeout: Duration,
    write_timeout: Duration,
    call_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: MAX_CONNECTIONS,
            max_line: MAX_LINE_BYTES,
            idle_timeout: IDLE_TIMEOUT,
            write_timeout: WRITE_TIMEOUT,
            call_timeout: CALL_TIMEOUT,
        }
    }
}

/// A listening control socket. Dropping it (or [`ControlSocket::close`]) stops it and removes
/// its file.
pub struct ControlSocket {
    path: PathBuf,
    /// Device and inode of the socket file we bound, so we never remove someone else's.
    identity: (u64, u64),
    stop: Arc<EventFd>,
    thread: Option<JoinHandle<()>>,
    /// The directories made for the socket, removed after it (a field drops after `drop`).
    _created: CreatedDirs,
}

impl ControlSocket {
    /// Listen at `path` and forward every request to the datapath through `handle`.
    ///
    /// Creates the parent directory (mode 0700) if missing, and removes it (and any directory
    /// above it it created) with the socket, if nothing else is in it. Refuses if a daemon
    /// answers at `path` or if something other than a socket is there; replaces a stale socket
    /// file.
    pub fn bind(path: &Path, handle: ControlHandle) -> Result<ControlSocket, ControlSocketError> {
        Self::bind_with(path, handle, Limits::default())
    }

    fn bind_with(
        path: &Path,
        handle: ControlHandle,
        limits: Limits,
    ) -> Result<ControlSocket, ControlSocketError> {
        check_path_len(path)?;
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let created = CreatedDirs::create(&dir)?;
        let private = PrivateDir::create(&dir)?;
        clear_stale(path, &private.0.join("stale"))?;
        let tmp = private.0.join("s");
        let listener = private
            .bind()
            .map_err(io_err(format!("cannot bind {}", tmp.display())))?;
        fs::set_permissions(&tmp, Permissions::from_mode(0o600))
            .map_err(io_err(format!("cannot set the mode of {}", tmp.display())))?;
        let meta =
            fs::symlink_metadata(&tmp).map_err(io_err(format!("cannot stat {}", tmp.display())))?;
        let identity = (meta.dev(), meta.ino());
        publish(&tmp, path)?;
        drop(private);

        let cleanup_on_error = |e: ControlSocketError| {
            remove_if_ours(path, identity);
            e
        };
        listener
            .set_nonblocking(true)
            .map_err(io_err("cannot make the control listener non-blocking"))
            .map_err(cleanup_on_error)?;
        let stop = Arc::new(
            EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
                .map_err(nix_err("cannot create an eventfd"))
                .map_err(cleanup_on_error)?,
        );
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(nix_err("cannot create an epoll instance"))
            .map_err(cleanup_on_error)?;
        epoll
            .add(
                &listener,
                EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_LISTENER),
            )
            .map_err(nix_err("cannot watch the control listener"))
            .map_err(cleanup_on_error)?;
        epoll
            .add(&*stop, EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_STOP))
            .map_err(nix_err("cannot watch the stop eventfd"))
            .map_err(cleanup_on_error)?;
        let stop_for_thread = stop.clone();
        let thread = thread::Builder::new()
            .name("sluice-control".into())
            .spawn(move || {
                let _keep = stop_for_thread;
                accept_loop(listener, epoll, handle, limits)
            })
            .map_err(io_err("cannot start the control socket thread"))
            .map_err(cleanup_on_error)?;
        Ok(ControlSocket {
            path: path.to_path_buf(),
            identity,
            stop,
            thread: Some(thread),
            _created: created,
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stop accepting, close every connection, join every thread and remove the socket file
    /// (if it is still ours). The same as dropping it.
    pub fn close(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        if let Err(e) = self.stop.write(1) {
            tracing::warn!(error = %e, "cannot signal the control socket thread");
        }
        if thread.join().is_err() {
            tracing::warn!("the control socket thread panicked");
        }
        remove_if_ours(&self.path, self.identity);
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// `sun_path` holds 108 bytes on Linux, with a terminating NUL.
const SUN_PATH_MAX: usize = 107;

pub(crate) fn check_path_len(path: &Path) -> Result<(), ControlSocketError> {
    let len = path.as_os_str().len();
    if len > SUN_PATH_MAX || len == 0 {
        return Err(ControlSocketError::PathTooLong {
            path: path.to_path_buf(),
            len,
            max: SUN_PATH_MAX,
        });
    }
    Ok(())
}

/// Make room at `path`: nothing there, or a stale socket (removed). A live socket or any other
/// file is an error. `aside` is a free name in a private directory on the same filesystem.
fn clear_stale(path: &Path, aside: &Path) -> Result<(), ControlSocketError> {
    clear_stale_probed(path, aside, connect_to)
}

/// Connect to the socket at `path`, through its directory's descriptor in `/proc/self/fd` if
/// the path is too long for a socket address (the name aside is, for a path near the limit).
fn connect_to(path: &Path) -> io::Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return UnixStream::connect(path).map(drop);
    };
    if path.as_os_str().len() <= SUN_PATH_MAX {
        return UnixStream::connect(path).map(drop);
    }
    let dir = fs::File::open(parent)?;
    let short = Path::new("/proc/self/fd")
        .join(std::os::fd::AsRawFd::as_raw_fd(&dir).to_string())
        .join(name);
    UnixStream::connect(short).map(drop)
}

/// [`clear_stale`], a socket probed with `probe` (connecting to it).
///
/// A stale socket is moved aside, probed again there, and removed only if still refusing:
/// another daemon may have replaced it with its live socket since the first probe (two
/// daemons starting at once on one path), and removing the path by name removed theirs. A
/// live one moved aside is put back.
fn clear_stale_probed(
    path: &Path,
    aside: &Path,
    mut probe: impl FnMut(&Path) -> io::Result<()>,
) -> Result<(), ControlSocketError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(format!("cannot stat {}", path.display()))(e)),
    };
    if !meta.file_type().is_socket() {
        return Err(ControlSocketError::NotASocket {
            path: path.to_path_buf(),
        });
    }
    let in_use = || ControlSocketError::InUse {
        path: path.to_path_buf(),
    };
    let probe_err = |e| {
        io_err(format!(
            "cannot probe the existing socket {}",
            path.display()
        ))(e)
    };
    match probe(path) {
        Ok(()) => return Err(in_use()),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
        Err(e) => return Err(probe_err(e)),
    }
    match fs::rename(path, aside) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(io_err(format!(
                "cannot remove the stale socket {}",
                path.display()
            ))(e));
        }
    }
    let moved = probe(aside);
    let stale = matches!(&moved, Err(e) if e.kind() == ErrorKind::ConnectionRefused);
    if stale {
        tracing::info!(path = %path.display(), "removed a stale control socket");
    } else {
        // Not ours to remove: back where it was (unless the path was taken again meanwhile).
        let _ = fs::hard_link(aside, path);
    }
    let _ = fs::remove_file(aside);
    match moved {
        _ if stale => Ok(()),
        Ok(()) => Err(in_use()),
        Err(e) => Err(probe_err(e)),
    }
}

/// The directories [`ControlSocket::bind`] made for the socket, deepest first; when dropped
/// (after the socket file is removed, or when binding failed) each is removed if it is empty,
/// up to the first that is not: one that holds anything else (another daemon's socket) is
/// not only ours.
struct CreatedDirs(Vec<PathBuf>);

impl CreatedDirs {
    /// Create `dir` (mode 0700) and every missing directory above it.
    fn create(dir: &Path) -> Result<CreatedDirs, ControlSocketError> {
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
            .map(Path::to_path_buf)
            .collect();
        if missing.is_empty() {
            return Ok(CreatedDirs(missing));
        }
        // Made before creating, so that a failure half-way removes what was created.
        let guard = CreatedDirs(missing);
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io_err(format!("cannot create directory {}", dir.display())))?;
        // The umask may have taken bits from the mode we asked for; set it exactly.
        fs::set_permissions(dir, Permissions::from_mode(0o700))
            .map_err(io_err(format!("cannot set the mode of {}", dir.display())))?;
        Ok(guard)
    }
}

impl Drop for CreatedDirs {
    fn drop(&mut self) {
        for d in &self.0 {
            match fs::remove_dir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(_) => return,
            }
        }
    }
}

/// A fresh 0700 directory beside the socket path, removed (with the temporary socket name in
/// it) when dropped.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn create(parent: &Path) -> Result<PrivateDir, ControlSocketError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let pid = std::process::id();
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir = parent.join(format!(".sluice-bind-{pid}-{n}"));
            match DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {
                    let guard = PrivateDir(dir);
                    // Only ever narrower than 0700 after the umask; make it exactly 0700 so
                    // the owner can bind inside it whatever the umask.
                    fs::set_permissions(&guard.0, Permissions::from_mode(0o700)).map_err(
                        io_err(format!("cannot set the mode of {}", guard.0.display())),
                    )?;
                    return Ok(guard);
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists && n < 1_000_000 => continue,
                Err(e) => {
                    return Err(io_err(format!(
                        "cannot create a directory in {}",
                        parent.display()
                    ))(e));
                }
            }
        }
    }
}

impl PrivateDir {
    /// Bind a listener at `s` in the directory. Through the directory's descriptor in
    /// `/proc/self/fd` when its own path would not fit a Unix socket address: the temporary
    /// name is 20-odd bytes longer than the socket's, and refusing a path within the limit for
    /// a name the user never gave was wrong (conmon binds the same way).
    fn bind(&self) -> io::Result<UnixListener> {
        let tmp = self.0.join("s");
        if tmp.as_os_str().len() <= SUN_PATH_MAX {
            return UnixListener::bind(&tmp);
        }
        let dir = fs::File::open(&self.0)?;
        UnixListener::bind(format!(
            "/proc/self/fd/{}/s",
            std::os::fd::AsRawFd::as_raw_fd(&dir)
        ))
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = fs::remove_file(self.0.join("s"));
        if let Err(e) = fs::remove_dir(&self.0) {
            tracing::warn!(dir = %self.0.display(), error = %e, "cannot remove a temporary directory");
        }
    }
}

/// Give the bound socket `tmp` its public name `path`, never replacing a file that appeared
/// there since we checked.
fn publish(tmp: &Path, path: &Path) -> Result<(), ControlSocketError> {
    match fs::hard_link(tmp, path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(match fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_socket() => ControlSocketError::InUse {
                path: path.to_path_buf(),
            },
            _ => ControlSocketError::NotASocket {
                path: path.to_path_buf(),
            },
        }),
        // A filesystem without hard links for sockets: fall back to rename, which would replace
        // a file created in the instant since `clear_stale` (documented race, narrow).
        Err(_) => {
            clear_stale(path, &tmp.with_file_name("stale"))?;
            fs::rename(tmp, path).map_err(io_err(format!(
                "cannot create the socket {}",
                path.display()
            )))
        }
    }
}

/// Remove `path` if it is still the socket file with `identity`.
fn remove_if_ours(path: &Path, identity: (u64, u64)) {
    match fs::symlink_metadata(path) {
        Ok(m) if (m.dev(), m.ino()) == identity => {
            if let Err(e) = fs::remove_file(path) {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove the control socket");
            }
        }
        Ok(_) => {
            tracing::info!(path = %path.display(), "the control socket was replaced; leaving it")
        }
        Err(_) => {}
    }
}

const TOKEN_LISTENER: u64 = 0;
const TOKEN_STOP: u64 = 1;

/// One served connection: its thread and a second handle on its socket to shut it down.
struct Conn {
    thread: JoinHandle<()>,
    stream: UnixStream,
}

fn accept_loop(listener: UnixListener, epoll: Epoll, handle: ControlHandle, limits: Limits) {
    let mut conns: Vec<Conn> = Vec::new();
    let mut events = [EpollEvent::empty(); 2];
    'run: loop {
        let n = match epoll.wait(&mut events, EpollTimeout::NONE) {
            Ok(n) => n,
            Err(Errno::EINTR) => continue,
            Err(e) => {
                tracing::error!(error = %e, "control socket: epoll failed; no longer accepting");
                break;
            }
        };
        if events[..n].iter().any(|e| e.data() == TOKEN_STOP) {
            break;
        }
        loop {
            match listener.accept() {
                Ok((stream, _)) => admit(stream, &mut conns, &handle, limits),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "control socket: accept failed");
                    thread::sleep(ACCEPT_BACKOFF);
                    continue 'run;
                }
            }
        }
    }
    drop(listener);
    for c in &conns {
        let _ = c.stream.shutdown(std::net::Shutdown::Both);
    }
    for c in conns {
        if c.thread.join().is_err() {
            tracing::warn!("a control connection thread panicked");
        }
    }
}

/// Serve `stream` on its own thread, or tell it we are busy.
fn admit(stream: UnixStream, conns: &mut Vec<Conn>, handle: &ControlHandle, limits: Limits) {
    conns.retain(|c| !c.thread.is_finished());
    let setup = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_read_timeout(Some(limits.idle_timeout)))
        .and_then(|()| stream.set_write_timeout(Some(limits.write_timeout)));
    if let Err(e) = setup {
        tracing::debug!(error = %e, "control socket: cannot set up a connection");
        return;
    }
    if conns.len() >= limits.max_connections {
        let msg = format!(
            "too many control connections ({}); try again",
            limits.max_connections
        );
        let _ = (&stream).write_all(&encode_reply(Reply::Error(msg)));
        return;
    }
    let second = match stream.try_clone() {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "control socket: cannot clone a connection");
            return;
        }
    };
    let handle = handle.clone();
    match thread::Builder::new()
        .name("sluice-control-conn".into())
        .spawn(move || serve(stream, &handle, limits))
    {
        Ok(thread) => conns.push(Conn {
            thread,
            stream: second,
        }),
        Err(e) => tracing::warn!(error = %e, "control socket: cannot start a connection thread"),
    }
}

/// How reading one line ended.
#[derive(Debug, PartialEq, Eq)]
enum LineEnd {
    /// A newline-terminated line.
    Newline,
    /// The peer closed (the buffer may hold an unterminated last line).
    Eof,
    /// More than the limit without a newline.
    TooLong,
}

/// Read one line into `buf` (its end included), at most `max` bytes of content: the line
/// ends in LF or CRLF, and neither counts (a line ended by CRLF was allowed a byte less).
fn read_line(r: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> io::Result<LineEnd> {
    buf.clear();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    r.take(limit).read_until(b'\n', buf)?;
    if buf.last() == Some(&b'\n') {
        return Ok(LineEnd::Newline);
    }
    if buf.len() <= max {
        return Ok(LineEnd::Eof);
    }
    // A byte past the limit and no LF: too long, unless that byte is the CR of a CRLF. One more
    // byte tells; asked for only then, so an over-long line is refused without waiting.
    if buf.last() == Some(&b'\r') {
        r.take(1).read_until(b'\n', buf)?;
        if buf.last() == Some(&b'\n') {
            return Ok(LineEnd::Newline);
        }
    }
    Ok(LineEnd::TooLong)
}

/// Serve one connection until it closes, idles out or misbehaves, then shut it down (the
/// accept thread holds a second descriptor of it, so dropping ours alone would not close it).
fn serve(stream: UnixStream, handle: &ControlHandle, limits: Limits) {
    serve_lines(&stream, handle, limits);
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

fn serve_lines(stream: &UnixStream, handle: &ControlHandle, limits: Limits) {
    // One deadline per request line and per reply, not per read(2) or write(2): a client
    // trickling a byte now and then is idle all the same, and holds no connection for good.
    let mut reader = BufReader::new(Deadlined::new(stream, limits.idle_timeout));
    let mut line = Vec::new();
    loop {
        reader.get_mut().deadline = Instant::now() + limits.idle_timeout;
        let end = match read_line(&mut reader, &mut line, limits.max_line) {
            Ok(end) => end,
            // Idle timeout, reset, or shut down by close: nothing more to serve.
            Err(_) => return,
        };
        let reply = match end {
            LineEnd::TooLong => Some(Reply::Error(format!(
                "request line longer than {} bytes; closing the connection",
                limits.max_line
            ))),
            LineEnd::Newline | LineEnd::Eof => answer(&line, handle, limits.call_timeout),
        };
        if let Some(reply) = reply
            && Deadlined::new(stream, limits.write_timeout)
                .write_all(&encode_reply(reply))
                .is_err()
        {
            return;
        }
        if end != LineEnd::Newline {
            return;
        }
    }
}

/// The reply to one request line, or None for a blank line.
fn answer(line: &[u8], handle: &ControlHandle, call_timeout: Duration) -> Option<Reply> {
    let text = match std::str::from_utf8(line) {
        Ok(t) => t,
        Err(e) => {
            return Some(Reply::Error(format!(
                "request is not valid UTF-8 (at byte {})",
                e.valid_up_to()
            )));
        }
    };
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    Some(match serde_json::from_str::<Request>(text) {
        Ok(request) => handle.call(request, call_timeout),
        Err(e) => Reply::Error(format!("invalid request: {e}")),
    })
}

/// A reply as it travels: `{"ok":true}`, `{"ok":true,"stats":{..}}` or
/// `{"ok":false,"error":".."}`.
#[derive(Serialize, Deserialize)]
struct WireReply {
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stats: Option<Box<Snapshot>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// One reply line, newline included.
fn encode_reply(reply: Reply) -> Vec<u8> {
    let wire = match reply {
        Reply::Ok => WireReply {
            ok: true,
            stats: None,
            error: None,
        },
        Reply::Stats(s) => WireReply {
            ok: true,
            stats: Some(s),
            error: None,
        },
        Reply::Error(e) => WireReply {
            ok: false,
            stats: None,
            error: Some(e),
        },
    };
    let mut out = serde_json::to_vec(&wire).unwrap_or_else(|e| {
        // Not reachable with today's types (string keys, no floats); still an answer.
        let fallback = WireReply {
            ok: false,
            stats: None,
            error: Some(format!("cannot encode the reply: {e}")),
        };
        serde_json::to_vec(&fallback)
            .unwrap_or_else(|_| br#"{"ok":false,"error":"cannot encode the reply"}"#.to_vec())
    });
    out.push(b'\n');
    out
}

/// Parse one reply line.
fn decode_reply(line: &[u8]) -> Result<Reply, String> {
    let wire: WireReply = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    match wire {
        WireReply {
            ok: true,
            stats: Some(s),
            error: None,
        } => Ok(Reply::Stats(s)),
        WireReply {
            ok: true,
            stats: None,
            error: None,
        } => Ok(Reply::Ok),
        WireReply {
            ok: false,
            stats: None,
            error,
        } => Ok(Reply::Error(
            error.unwrap_or_else(|| "the daemon gave no reason".into()),
        )),
        _ => Err("a reply mixes \"ok\", \"stats\" and \"error\" inconsistently".into()),
    }
}

/// Send one request to the daemon listening at `path` and wait up to `timeout` for its reply.
///
/// A connection per call. Nothing listening (no file, or a stale one) is
/// [`ControlSocketError::NoDaemon`]; a reply that does not come in time is
/// [`ControlSocketError::Timeout`]. A [`Reply::Error`] from the daemon is an `Ok` result.
pub fn request(path: &Path, req: &Request, timeout: Duration) -> Result<Reply, ControlSocketError> {
    let stream = UnixStream::connect(path).map_err(|error| match error.kind() {
        ErrorKind::NotFound | ErrorKind::ConnectionRefused => ControlSocketError::NoDaemon {
            path: path.to_path_buf(),
            error,
        },
        ErrorKind::PermissionDenied => ControlSocketError::Io {
            what: format!(
                "cannot connect to {} (the control socket is mode 0600: run as its owner)",
                path.display()
            ),
            error,
        },
        _ => ControlSocketError::Io {
            what: format!("cannot connect to {}", path.display()),
            error,
        },
    })?;
    let timeout = timeout.max(Duration::from_millis(1));
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(io_err(format!("cannot set timeouts on {}", path.display())))?;
    let timed_out = |e: io::Error| match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => ControlSocketError::Timeout {
            path: path.to_path_buf(),
            timeout,
        },
        _ => ControlSocketError::Io {
            what: format!("talking to {}", path.display()),
            error: e,
        },
    };
    let mut line = serde_json::to_vec(req).map_err(|e| ControlSocketError::Protocol {
        path: path.to_path_buf(),
        message: format!("cannot encode the request: {e}"),
    })?;
    line.push(b'\n');
    if let Err(e) = (&stream).write_all(&line) {
        // A server that refuses the connection (too many clients) may answer and close before
        // reading: its reply is still there to read, so only other errors end here.
        if e.kind() != ErrorKind::BrokenPipe {
            return Err(timed_out(e));
        }
    }
    let mut reader = BufReader::new(&stream);
    let mut buf = Vec::new();
    match read_line(&mut reader, &mut buf, MAX_REPLY_BYTES).map_err(timed_out)? {
        LineEnd::Newline => {}
        LineEnd::TooLong => {
            return Err(ControlSocketError::Protocol {
                path: path.to_path_buf(),
                message: format!("reply longer than {MAX_REPLY_BYTES} bytes"),
            });
        }
        LineEnd::Eof => {
            return Err(ControlSocketError::Protocol {
                path: path.to_path_buf(),
                message: "the connection closed before a complete reply".into(),
            });
        }
    }
    decode_reply(&buf).map_err(|message| ControlSocketError::Protocol {
        path: path.to_path_buf(),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{ClassSnapshot, LinkSnapshot};
    use std::sync::mpsc::{self, Receiver};

    /// Safety net for reads in tests; never reached when things work.
    const PATIENCE: Duration = Duration::from_secs(30);

    /// A directory under the system temp dir, removed on drop.
    struct TestDir(PathBuf);

    impl TestDir {
        fn new(name: &str) -> TestDir {
            let p = std::env::temp_dir().join(format!("sluice-cs-{}-{name}", std::process::id()));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            TestDir(p)
        }

        fn sock(&self) -> PathBuf {
            self.0.join("ctl.sock")
        }
    }

    impl Drop for TestDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn snapshot() -> Snapshot {
        Snapshot {
            uptime_ns: 42,
            buffers_used: 3,
            buffers_total: 8,
            links: vec![LinkSnapshot {
                from: "a".into(),
                to: "b".into(),
                classes: vec![ClassSnapshot {
                    name: "gold".into(),
                    rate_bps: Some(200_000_000),
                    sent: 7,
                    sent_bytes: 7_000,
                    ..ClassSnapshot::default()
                }],
                ..LinkSnapshot::default()
            }],
            ..Snapshot::default()
        }
    }

    /// A datapath thread that answers Stats with [`snapshot`], accepts changes to link "a"
    /// (reporting them on the returned channel) and refuses the rest. It ends when every handle
    /// is gone, so joining it proves nothing kept one.
    fn fake_datapath() -> (ControlHandle, Receiver<Request>, JoinHandle<()>) {
        let (handle, rx) = ControlHandle::new(Arc::new(|| {}));
        let (seen_tx, seen_rx) = mpsc::channel();
        let thread = thread::spawn(move || {
            for cmd in rx {
                let reply = match &cmd.request {
                    Request::Stats {} | Request::Counters {} => Reply::Stats(Box::new(snapshot())),
                    Request::SetRate { link, .. } | Request::SetWeight { link, .. }
                        if link == "a" =>
                    {
                        Reply::Ok
                    }
                    Request::SetRate { link, .. } | Request::SetWeight { link, .. } => {
                        Reply::Error(format!("no link `{link}`"))
                    }
                };
                let _ = seen_tx.send(cmd.request);
                let _ = cmd.reply.send(reply);
            }
        });
        (handle, seen_rx, thread)
    }

    fn raw_client(path: &Path) -> (UnixStream, BufReader<UnixStream>) {
        let s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let r = BufReader::new(s.try_clone().unwrap());
        (s, r)
    }

    fn read_reply(r: &mut BufReader<UnixStream>) -> serde_json::Value {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(line.ends_with('\n'), "a whole reply line: {line:?}");
        serde_json::from_str(&line).unwrap()
    }

    #[test]
    fn stats_round_trip() {
        let dir = TestDir::new("stats");
        let (handle, seen, dp) = fake_datapath();
        let sock = ControlSocket::bind(&dir.sock(), handle).unwrap();
        let reply = request(&dir.sock(), &Request::Stats {}, PATIENCE).unwrap();
        assert_eq!(reply, Reply::Stats(Box::new(snapshot())));
        assert_eq!(seen.recv().unwrap(), Request::Stats {});
        // The raw wire form.
        let (mut s, mut r) = raw_client(&dir.sock());
        s.write_all(b"{\"cmd\":\"stats\"}\n").unwrap();
        let v = read_reply(&mut r);
        assert_eq!(v["ok"], true);
        assert_eq!(v["stats"]["uptime_ns"], 42);
        assert_eq!(v["stats"]["links"][0]["classes"][0]["name"], "gold");
        assert!(v.get("error").is_none());
        drop((s, r));
        sock.close();
        dp.join().unwrap();
    }

    #[test]
    fn set_rate_and_set_weight_are_forwarded() {
        let dir = TestDir::new("set");
        let (handle, seen, dp) = fake_datapath();
        let sock = ControlSocket::bind(&dir.sock(), handle).unwrap();
        let (mut s, mut r) = raw_client(&dir.sock());
        s.write_all(b"{\"cmd\":\"set_rate\",\"link\":\"a\",\"node\":\"gold\",\"rate\":\"200Mbit\",\"burst\":\"15KB\"}\n")
            .unwrap();
        assert_eq!(read_reply(&mut r), serde_json::json!({"ok": true}));
        assert_eq!(
            seen.recv().unwrap(),
            Request::SetRate {
                link: "a".into(),
                node: "gold".into(),
                rate: "200Mbit".into(),
                burst: Some("15KB".into())
            }
        );
        s.write_all(b"{\"cmd\":\"set_weight\",\"link\":\"zz\",\"node\":\"gold\",\"weight\":4}\n")
            .unwrap();
        assert_eq!(
            read_reply(&mut r),
            serde_json::json!({"ok": false, "error": "no link `zz`"})
        );
        assert_eq!(
            seen.recv().unwrap(),
            Request::SetWeight {
                link: "zz".into(),
                node: "gold".into(),
                weight: 4
            }
        );
        // Through the client helper, the daemon's refusal is a Reply::Error.
        let req = Request::SetWeight {
            link: "q".into(),
            node: "x".into(),
            weight: 1,
        };
        assert_eq!(
            request(&dir.sock(), &req, PATIENCE).unwrap(),
            Reply::Error("no link `q`".into())
        );
        drop((s, r));
        drop(sock);
        dp.join().unwrap();
    }

    #[test]
    fn garbage_gets_error_replies_and_the_connection_keeps_working() {
        let dir = TestDir::new("garbage");
        let (handle, seen, dp) = fake_datapath();
        let sock = ControlSocket::bind(&dir.sock(), handle).unwrap();
        let (mut s, mut r) = raw_client(&dir.sock());
        let bad: [&[u8]; 9] = [
            b"not json\n",
            b"{\"cmd\":\"reboot\"}\n",
            b"{\"cmd\":\"stats\",\"x\":1}\n",
            b"{\"cmd\":\"set_weight\",\"link\":\"a\",\"node\":\"b\",\"weight\":-1}\n",
            b"{\"cmd\":\"stats\"} trailing\n",
            b"[1,2,3]\n",
            b"\xff\xfe{\"cmd\":\"stats\"}\n",
            b"{\"cmd\":\"set_rate\"}\n",
            b"{\"cmd\":\"stats\"\n",
        ];
        for line in bad {
            s.write_all(line).unwrap();
            let v = read_reply(&mut r);
            assert_eq!(v["ok"], false, "{line:?}");
            assert!(
                v["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{line:?}: {v}"
            );
        }
        // Blank lines are skipped; the next good line works.
        s.write_all(b"\n  \r\n{\"cmd\":\"stats\"}\r\n").unwrap();
        let v = read_reply(&mut r);
        assert_eq!(v["ok"], true);
        assert_eq!(v["stats"]["uptime_ns"], 42);
        // Only the one good request reached the datapath.
        assert_eq!(seen.recv().unwrap(), Request::Stats {});
        assert!(seen.try_recv().is_err());
        drop((s, r));
        drop(sock);
        dp.join().unwrap();
    }

    #[test]
    fn an_over_long_line_gets_an_error_and_the_connection_closes() {
        let dir = TestDir::new("long");
        let (handle, _seen, dp) = fake_datapath();
        let limits = Limits {
            max_line: 1024,
            ..Limits::default()
        };
        let sock = ControlSocket::bind_with(&dir.sock(), handle, limits).unwrap();
        let (mut s, mut r) = raw_client(&dir.sock());
        s.write_all(&vec![b'x'; 1025]).unwrap();
        let v = read_reply(&mut r);
        assert_eq!(v["ok"], false);
        assert!(
            v["error"].as_str().unwrap().contains("longer than 1024"),
            "{v}"
        );
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "closed after the error");
        // Exactly at the limit is fine, whatever ends the line (a line ended by CRLF was
        // refused at the limit: its CR counted).
        for end in ["\n", "\r\n"] {
            let (mut s, mut r) = raw_client(&dir.sock());
            let mut line = vec![b' '; 1024 - 15];
            line.extend_from_slice(format!("{{\"cmd\":\"stats\"}}{end}").as_bytes());
            s.write_all(&line).unwrap();
            assert_eq!(read_reply(&mut r)["ok"], true, "{end:?}");
        }
        // A byte more is refused, whatever ends the line.
        for end in ["\n", "\r\n", ""] {
            let (mut s, mut r) = raw_client(&dir.sock());
            let mut line = vec![b' '; 1025 - 15];
            line.extend_from_slice(format!("{{\"cmd\":\"stats\"}}{end}").as_bytes());
            s.write_all(&line).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let v = read_reply(&mut r);
            assert!(
                v["error"].as_str().unwrap().contains("longer"),
                "{end:?}: {v}"
            );
        }
        drop((s, r));
        drop(sock);
        dp.join().unwrap();
    }

    #[test]
    fn a_line_is_limited_by_its_content_not_its_end() {
        for (input, end, line) in [
            ("ab\n", LineEnd::Newline, "ab\n"),
            ("ab\r\n", LineEnd::Newline, "ab\r\n"),
            ("ab\r\nc", LineEnd::Newline, "ab\r\n"),
            ("ab", LineEnd::Eof, "ab"),
            ("a\r", LineEnd::Eof, "a\r"),
            ("abc\n", LineEnd::TooLong, "abc"),
            ("abc\r\n", LineEnd::TooLong, "abc"),
            ("ab\rc\n", LineEnd::TooLong, "ab\rc"),
            ("ab\r", LineEnd::TooLong, "ab\r"),
            ("abc", LineEnd::TooLong, "abc"),
        ] {
            let mut buf = Vec::new();
            let got = read_line(&mut io::Cursor::new(input), &mut buf, 2).unwrap();
            assert_eq!((got, &buf[..]), (end, line.as_bytes()), "{input:?}");
        }
    }

    #[test]
    fn the_last_unterminated_line_is_answered() {
        let dir = TestDir::new("eof");
        let (handle, _seen, dp) = fake_datapath();
        let sock = ControlSocket::bind(&dir.sock(), handle).unwrap();
        let (mut s, mut r) = raw_client(&dir.sock());
        s.write_all(b"{\"cmd\":\"stats\"}").unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(read_reply(&mut r)["ok"], true);
        drop((s, r));
        drop(sock);
        dp.join().unwrap();
    }

    #[test]
    fn the_socket_is_mode_0600_and_a_created_parent_0700() {
        let dir = TestDir::new("mode");
        let path = dir.0.join("run").join("sluice").join("ctl.sock");
        let (handle, _seen, dp) = fake_datapath();
        let sock = ControlSocket::bind(&path, handle).unwrap();
        let meta = fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
        let parent = fs::metadata(path.parent().unwrap()).unwrap();
        assert_eq!(parent.permissions().mode() & 0o7777, 0o700);
        // No temporary directory left behind.
        let left: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("ctl.sock")]);
        drop(sock);
        dp.join().unwrap();
    }

    /// The directories bound created for the socket were left behind when it closed (and
    /// when the daemon's start failed after binding it). Now those it created are removed
    /// with the socket if nothing else is in them; a directory that existed is kept.
    #[test]
    fn directories_created_for_the_socket_are_removed_with_it() {
        let dir = TestDir::new("mkdir");
        let (handle, _seen, dp) = fake_datapath();
        let path = dir.0.join("run").join("sluice").join("ctl.sock");
        let sock = ControlSocket::bind(&path, handle.clone()).unwrap();
        drop(sock);
        assert!(!dir.0.join("run").exists(), "run/sluice left behind");
        assert!(dir.0.exists(), "a directory that existed is kept");

        // A directory someone else put a file in is theirs too: kept, with what is above it.
        let sock = ControlSocket::bind(&path, handle.clone()).unwrap();
        fs::write(dir.0.join("run").join("sluice").join("other"), b"x").unwrap();
        drop(sock);
        assert!(dir.0.join("run").join("sluice").join("other").exists());
        assert!(!path.exists());

        // Existing directories are never removed, even empty.
        let sock = ControlSocket::bind(&dir.0.join("run").join("ctl.sock"), handle).unwrap();
        fs::remove_dir_all(dir.0.join("run").join("sluice")).unwrap();
        drop(sock);
        assert!(dir.0.join("run").exists());
        dp.join().unwrap();
    }

    #[test]
    fn a_second_bind_on_a_live_path_fails_and_the_first_keeps_serving() {
        let dir = TestDir::new("live");
        let (handle, _seen, dp) = fake_datapath();
        let first = ControlSocket::bind(&dir.sock(), handle.clone()).unwrap();
        let err = ControlSocket::bind(&dir.sock(), handle).err().unwrap();
        assert!(matches!(err, ControlSocketError::InUse { .. }), "{err}");
        assert!(
            err.to_string().contains("another daemon is listening at"),
            "{err}"
        );
        assert!(matches!(
            request(&dir.sock(), &Request::Stats {}, PATIENCE),
            Ok(Reply::Stats(_))
        ));
        drop(first);
        dp.join().unwrap();
    }

    #[test]
    fn a_stale_socket_is_replaced_and_other_files_are_not() {
        let dir = TestDir::new("stale");
        drop(UnixListener::bind(dir.sock()).unwrap());
        assert!(
            fs::symlink_metadata(dir.sock())
                .unwrap()
                .file_type()
                .is_socket()
        );
        let (handle, _seen, dp) = fake_datapath();
        let sock = ControlSocket::bind(&dir.sock(), handle.clone()).unwrap();
        assert!(matches!(
            request(&dir.sock(), &Request::Stats {}, PATIENCE),
            Ok(Reply::Stats(_))
        ));
        drop(sock);

        let file = dir.0.join("plain");
        fs::write(&file, b"keep me").unwrap();
        let err = ControlSocket::bind(&file, handle).err().unwrap();
        assert!(
            matches!(err, ControlSocketError::NotASocket { .. }),
            "{err}"
        );
        assert_eq!(fs::read(&file).unwrap(), b"keep me");
        dp.join().unwrap();
    }

    /// Removing a stale socket removed whatever was at the path by then: another daemon that
    /// replaced the stale file with its live socket after the probe lost it (two daemons
    /// starting at once on one path). Now only the file probed is removed: here the probe finds
    /// the stale file refusing, and another daemon's socket takes its place before the removal.
    #[test]
    fn only_the_stale_socket_probed_is_removed() {
        let dir = TestDir::new("swap");
        let path = dir.sock();
        drop(UnixListener::bind(&path).unwrap());
        let aside = dir.0.join("aside");
        let mut theirs = None;
        let err = clear_stale_probed(&path, &aside, |p| {
            if theirs.is_some() {
                return UnixStream::connect(p).map(drop);
            }
            fs::remove_file(p).unwrap();
            theirs = Some(UnixListener::bind(p).unwrap());
            Err(io::Error::from(ErrorKind::ConnectionRefused))
        })
        .expect_err("another daemon listens there now");
        assert!(matches!(err, ControlSocketError::InUse { .. }), "{err}");
        assert!(
            UnixStream::connect(&path).is_ok(),
            "the other daemon's socket was removed"
        );
        drop(theirs);
        // The stale file itself is removed, and nothing is left beside it.
        clear_stale(&path, &aside).unwrap();
        assert!(fs::symlink_metadata(&path).is_err());
        let left: Vec<_> = fs::read_dir(&dir.0).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn the_file_is_removed_on_drop_unless_it_was_replaced() {
        let dir = TestDir::new("drop");
        let (handle, _seen, dp) = fake_datapath();
        let sock = ControlSocket::bind(&dir.sock(), handle.clone()).unwrap();
        assert!(dir.sock().exists());
        drop(sock);
        assert!(fs::symlink_metadata(dir.sock()).is_err(), "removed");
        let err = request(&dir.sock(), &Request::Stats {}, PATIENCE)
            .err()
            .unwrap();
        assert!(matches!(err, ControlSocketError::NoDaemon { .. }));
        assert!(
            err.to_string()
                .starts_with(&format!("no daemon at {}: ", dir.sock().display())),
            "{err}"
        );

        // Someone replaced our file: leave theirs.
        let sock = ControlSocket::bind(&dir.sock(), handle).unwrap();
        fs::remove_file(dir.sock()).unwrap();
        fs::write(dir.sock(), b"theirs").unwrap();
        sock.close();
        assert_eq!(fs::read(dir.sock()).unwrap(), b"theirs");
        dp.join().unwrap();
    }

    #[test]
    fn an_idle_client_blocks_nobody_and_times_out() {
        let dir = TestDir::new("idle");
        let (handle, _seen, dp) = fake_datapath();
        let limits = Limits {
            idle_timeout: Duration::from_millis(200),
            ..Limits::default()
        };
        let sock = ControlSocket::bind_with(&dir.sock(), handle, limits).unwrap();
        // Connects and sends nothing; another sends half a line and stalls.
        let (_idle, mut idle_r) = raw_client(&dir.sock());
        let (mut half, _half_r) = raw_client(&dir.sock());
        half.write_all(b"{\"cmd\":").unwrap();
        for _ in 0..3 {
            assert!(matches!(
                request(&dir.sock(), &Request::Stats {}, PATIENCE),
                Ok(Reply::Stats(_))
            ));
        }
        // The idle connection is closed by the server after its idle timeout (EOF, no reply).
        let mut rest = Vec::new();
        idle_r.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
        drop(sock);
        dp.join().unwrap();
    }

    #[test]
    fn a_client_trickling_bytes_is_idle_all_the_same() {
        // A space every 50 ms, with a 200 ms idle timeout: a timeout per read(2) never fired,
        // and 16 such clients locked everyone out of the control socket for good.
        let dir = TestDir::new("trickle");
        let (handle, _seen, dp) = fake_datapath();
        let limits = Limits {
            idle_timeout: Duration::from_millis(200),
            ..Limits::default()
        };
        let sock = ControlSocket::bind_with(&dir.sock(), handle, limits).unwrap();
        let (mut s, mut r) = raw_client(&dir.sock());
        let trickle = thread::spawn(move || {
            for _ in 0..100 {
                if s.write_all(b" ").is_err() {
                    return true;
                }
                thread::sleep(Duration::from_millis(50));
            }
            false
        });
        // Closed by the server (EOF, no reply) well before the client's 5 s of trickling end.
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
        assert!(
            trickle.join().unwrap(),
            "the server never closed the connection"
        );
        drop(sock);
        dp.join().unwrap();
    }

    #[test]
    fn connections_beyond_the_cap_are_told_busy() {
        let dir = TestDir::new("cap");
        let (handle, _seen, dp) = fake_datapath();
        let limits = Limits {
            max_connections: 2,
            ..Limits::default()
        };
        let sock = ControlSocket::bind_with(&dir.sock(), handle, limits).unwrap();
        // Two held connections, each proven served (so both threads are running).
        let mut held = Vec::new();
        for _ in 0..2 {
            let (mut s, mut r) = raw_client(&dir.sock());
            s.write_all(b"{\"cmd\":\"stats\"}\n").unwrap();
            assert_eq!(read_reply(&mut r)["ok"], true);
            held.push((s, r));
        }
        match request(&dir.sock(), &Request::Stats {}, PATIENCE).unwrap() {
            Reply::Error(e) => assert!(e.contains("too many control connections"), "{e}"),
            other => panic!("{other:?}"),
        }
        // Close drains the held connections and joins their threads (the datapath thread can end).
        sock.close();
        for (_, r) in &mut held {
            let mut rest = Vec::new();
            r.read_to_end(&mut rest).unwrap();
            assert!(rest.is_empty());
        }
        dp.join().unwrap();
    }

    #[test]
    fn reply_lines_decode_and_inconsistent_ones_do_not() {
        for reply in [
            Reply::Ok,
            Reply::Error("x \"y\"\nz".into()),
            Reply::Stats(Box::new(snapshot())),
        ] {
            let line = encode_reply(reply.clone());
            assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1, "one line");
            assert_eq!(decode_reply(&line).unwrap(), reply);
        }
        assert_eq!(encode_reply(Reply::Ok), b"{\"ok\":true}\n");
        assert_eq!(
            encode_reply(Reply::Error("no".into())),
            b"{\"ok\":false,\"error\":\"no\"}\n"
        );
        assert!(decode_reply(br#"{"ok":true,"error":"x"}"#).is_err());
        assert!(decode_reply(br#"{"ok":false,"stats":{}}"#).is_err());
        assert!(decode_reply(b"garbage").is_err());
    }

    #[test]
    fn a_path_at_the_limit_binds_whatever_the_temporary_name() {
        // The temporary name is 20-odd bytes longer than the socket's own, and paths of up to
        // 107 bytes used to be refused for it.
        let dir = TestDir::new("limit");
        let base = dir.0.as_os_str().len();
        let sub = dir
            .0
            .join("d".repeat(SUN_PATH_MAX - base - 1 - "/c.sock".len()));
        fs::create_dir_all(&sub).unwrap();
        let path = sub.join("c.sock");
        assert_eq!(path.as_os_str().len(), SUN_PATH_MAX);
        let (handle, _seen, dp) = fake_datapath();
        let sock = ControlSocket::bind(&path, handle.clone()).unwrap();
        let reply = request(&path, &Request::Stats {}, PATIENCE).unwrap();
        assert_eq!(reply, Reply::Stats(Box::new(snapshot())));
        // Nothing of the temporary name is left beside it.
        let names: Vec<_> = fs::read_dir(&sub)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["c.sock"]);
        sock.close();
        // A stale socket at that path is replaced (it is probed again where it is moved aside,
        // a name too long for a socket address).
        drop(UnixListener::bind(&path).unwrap());
        let sock = ControlSocket::bind(&path, handle).unwrap();
        assert!(matches!(
            request(&path, &Request::Stats {}, PATIENCE),
            Ok(Reply::Stats(_))
        ));
        sock.close();
        dp.join().unwrap();
    }

    #[test]
    fn too_long_paths_are_refused_clearly() {
        let (handle, _seen, dp) = fake_datapath();
        let long = PathBuf::from(format!("/tmp/{}", "x".repeat(200)));
        let err = ControlSocket::bind(&long, handle).err().unwrap();
        assert!(
            matches!(err, ControlSocketError::PathTooLong { .. }),
            "{err}"
        );
        dp.join().unwrap();
    }
}
