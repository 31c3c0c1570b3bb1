//! Helpers shared by the tests that run the `sluice` command as a user does.

// Each test file uses its own subset of these helpers.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// Run `sluice` with `args` and wait for it.
pub fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice")
}

/// Run `sluice` with `args`, assert that it succeeded (showing its stderr if not) and return
/// its stdout.
pub fn sluice_ok(args: &[&str]) -> String {
    let out = sluice(args);
    assert!(
        out.status.success(),
        "sluice {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

/// Assert that each `(args, needle)` fails with a non-zero exit and says `needle` on stderr.
pub fn assert_rejected(cases: &[(&[&str], &str)]) {
    for &(args, needle) in cases {
        let out = sluice(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// A directory for one test's output files, unique to this process.
pub fn scratch_dir(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("sluice-{tag}-{}", std::process::id()))
}

/// The number after `"key":` in a JSON line, as written (to check its decimals).
pub fn number_text<'a>(line: &'a str, key: &str) -> &'a str {
    line.rsplit_once(&format!("\"{key}\":"))
        .map(|(_, t)| t.trim_end_matches('}'))
        .expect("key in line")
}
