//! Child processes and Ctrl-C for `sluice bench dp`.
//!
//! Every program the bench starts (the daemon, iperf3, ping) runs in its own process group, so
//! a Ctrl-C in the terminal reaches only the bench, which then stops its children in order
//! (traffic first, the daemon last, so that the daemon removes its namespaces after nothing
//! runs in them). Each child also gets `PR_SET_PDEATHSIG`: if the bench itself is killed
//! outright, its children get SIGTERM (the daemon then removes what it created). Children
//! must therefore be started from the main thread, which lives for the whole bench (the death
//! signal follows the thread that forked).
//!
//! SIGINT and SIGTERM set a flag ([`stopped`]); every wait in the bench polls it at least
//! every [`POLL`] and returns [`Interrupted`], so the guards unwind and clean up.

use anyhow::{Context, anyhow, bail};
use nix::sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::unistd::Pid;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often waits look at the stop flag and at their children.
pub const POLL: Duration = Duration::from_millis(20);

/// How long a child gets to exit after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(10);

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: nix::libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::SeqCst);
}

/// The error a wait returns when SIGINT or SIGTERM arrived.
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted; everything the bench started has been stopped and removed")
    }
}

impl std::error::Error for Interrupted {}

/// Route SIGINT and SIGTERM to the stop flag.
pub fn install_handlers() -> anyhow::Result<()> {
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe, and
        // replaces no handler that other code relies on (the bench installs none).
        unsafe { signal::sigaction(sig, &action) }
            .with_context(|| format!("cannot install a {sig} handler"))?;
    }
    Ok(())
}

/// Whether SIGINT or SIGTERM arrived.
pub fn stopped() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// `Err(Interrupted)` once SIGINT or SIGTERM arrived.
pub fn check() -> anyhow::Result<()> {
    if stopped() {
        Err(Interrupted.into())
    } else {
        Ok(())
    }
}

/// Sleep until `deadline`, waking early (with `Interrupted`) on Ctrl-C.
pub fn sleep_until(deadline: Instant) -> anyhow::Result<()> {
    loop {
        check()?;
        let now = Instant::now();
        if now >= deadline {
            return Ok(());
        }
        std::thread::sleep((deadline - now).min(POLL));
    }
}

/// Have the child `cmd` starts get SIGTERM when the thread that starts it ends (the process
/// killed outright, say), so that no child outlives its parent. Start it from a thread that
/// lives as long as the child should (the death signal follows the forking thread).
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    // SAFETY: the closure runs in the child between fork and exec and only makes the prctl
    // system call, which is async-signal-safe; it touches no memory of the parent. Exercised
    // by every test that runs `sluice bench dp` or `sluice demo`.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(std::io::Error::from)
        })
    }
}

/// A running child that is stopped (SIGTERM, then SIGKILL) and reaped when dropped.
pub struct Proc {
    child: Option<Child>,
    what: String,
}

impl Proc {
    /// Start `cmd` (stdin from /dev/null) in its own process group with a parent-death
    /// signal; `what` names it in errors.
    pub fn spawn(cmd: &mut Command, what: impl Into<String>) -> anyhow::Result<Proc> {
        let what = what.into();
        cmd.stdin(Stdio::null()).process_group(0);
        die_with_parent(cmd);
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {what} ({:?})", cmd.get_program()))?;
        Ok(Proc {
            child: Some(child),
            what,
        })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Its name in errors.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// Its exit status if it has exited.
    pub fn try_wait(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        match &mut self.child {
            Some(c) => c
                .try_wait()
                .with_context(|| format!("cannot wait for {}", self.what)),
            None => Ok(None),
        }
    }

    /// Wait until it exits, at most `timeout` (an error after that, or on Ctrl-C).
    pub fn wait_timeout(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(status);
            }
            check()?;
            if Instant::now() >= deadline {
                bail!("{} did not finish within {timeout:?}", self.what);
            }
            std::thread::sleep(POLL);
        }
    }

    /// Send `sig` to it (not to its group: `ip netns exec` execs the program, so the pid is
    /// the program's own).
    pub fn signal(&self, sig: Signal) -> anyhow::Result<()> {
        let pid = Pid::from_raw(self.pid() as i32);
        signal::kill(pid, sig).map_err(|e| anyhow!("cannot send {sig} to {}: {e}", self.what))
    }

    /// Stop it: SIGTERM, up to [`TERM_GRACE`] to exit, then SIGKILL; reap it. Returns how it
    /// ended (`None` if it had to be killed).
    pub fn stop(mut self) -> Option<ExitStatus> {
        self.terminate()
    }

    fn terminate(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        let pid = Pid::from_raw(child.id() as i32);
        let _ = signal::kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + TERM_GRACE;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) => std::thread::sleep(POLL),
                Err(_) => break,
            }
        }
        eprintln!(
            "sluice bench dp: {} did not stop on SIGTERM within {TERM_GRACE:?}; killing it",
            self.what
        );
        let _ = child.kill();
        let _ = child.wait();
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// Run `program args` to completion and return its stdout; an error quotes the command and
/// its stderr.
pub fn output(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run `{program}`"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        bail!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            stderr.trim()
        );
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{program}` printed invalid UTF-8"))
}

/// `ip netns exec NETNS program args`, to completion; stdout.
pub fn output_in(netns: &str, program: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut all = vec!["netns", "exec", netns, program];
    all.extend_from_slice(args);
    output("ip", &all)
}

/// Whether `program` is on the PATH.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| {
            let p = dir.join(program);
            p.metadata().is_ok_and(|m| {
                m.is_file()
                    && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_child_is_stopped_and_reaped() {
        let mut p = Proc::spawn(Command::new("sleep").arg("30"), "sleep").unwrap();
        let pid = p.pid();
        assert!(p.try_wait().unwrap().is_none());
        let started = Instant::now();
        drop(p);
        assert!(started.elapsed() < Duration::from_secs(5));
        // Reaped: the pid no longer names our child.
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}/stat")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| !s.contains("(sleep)"))
        );
    }

    #[test]
    fn output_reports_failures_with_stderr() {
        assert_eq!(output("echo", &["hi"]).unwrap(), "hi\n");
        let e = output("sh", &["-c", "echo oops >&2; exit 3"]).unwrap_err();
        let text = format!("{e:#}");
        assert!(
            text.contains("oops") && text.contains("exit status: 3"),
            "{text}"
        );
        assert!(on_path("sh"));
        assert!(!on_path("no-such-program-sluice"));
    }
}
