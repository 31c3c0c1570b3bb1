//! `sluice policy check` as a user runs it: every example passes; broken files fail with
//! `FILE:LINE:COL: ...` on stderr and a non-zero exit.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn check(file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["policy", "check"])
        .arg(file)
        .output()
        .expect("run sluice")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn every_example_policy_checks_ok() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("examples/policies")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 13, "only {} example files", files.len());
    for file in &files {
        let out = check(file);
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{}: {}",
            file.display(),
            text(&out.stderr)
        );
        assert!(
            stdout.starts_with(&format!("{}: ok\n", file.display())),
            "{stdout}"
        );
        assert!(stdout.contains("shaper: "), "no description: {stdout}");
    }
}

#[test]
fn broken_files_fail_with_file_and_line() {
    let dir = std::env::temp_dir().join(format!("sluice-policy-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let root = "[[node]]\nname = \"root\"\npolicy = \"wfq\"\n";
    let leaf = "[[node]]\nname = \"leaf\"\nparent = \"root\"\npolicy = \"fifo\"\n";
    let cases: [(&str, String, usize, &str); 6] = [
        ("syntax.toml", format!("{root}rate = \n"), 4, "expected"),
        (
            "unknown-key.toml",
            format!("{root}{leaf}wieght = 2\n"),
            8,
            "`wieght`",
        ),
        (
            "bad-rate.toml",
            format!("{root}rate = \"10MB\"\n{leaf}"),
            4,
            "`rate`",
        ),
        (
            "bad-parent.toml",
            format!("{root}{}", leaf.replace("\"root\"", "\"rot\"")),
            6,
            "`parent` = \"rot\"",
        ),
        (
            "misplaced.toml",
            format!("{}{leaf}", root.replace("wfq", "pfabric")),
            3,
            "pfabric",
        ),
        (
            "rule-to-inner.toml",
            format!("{root}{leaf}[[classify]]\nto = \"root\"\ndscp = 46\n"),
            9,
            "not a leaf",
        ),
    ];
    for (name, body, line, needle) in &cases {
        let file = dir.join(name);
        std::fs::write(&file, body).unwrap();
        let out = check(&file);
        let stderr = text(&out.stderr);
        assert!(
            !out.status.success(),
            "{name} passed:\n{}",
            text(&out.stdout)
        );
        let at = format!("{}:{line}:", file.display());
        assert!(stderr.contains(&at), "{name}: want {at} in: {stderr}");
        assert!(
            stderr.contains(needle),
            "{name}: want {needle} in: {stderr}"
        );
        assert!(stderr.contains("; expected "), "{name}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line per error: {stderr}");
    }
    let missing = dir.join("missing.toml");
    let out = check(&missing);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("{}: cannot read: ", missing.display())),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
