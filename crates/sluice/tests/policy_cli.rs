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

/// The sessions docs/policy-files.md shows are what `sluice policy check` prints: the
/// description of `three-classes.toml`, and each error line (file, line, column and text) for
/// the broken files its Errors section describes, made here as it describes them. (The
/// `htb-leaf.toml` line said 28, where the leaf's `policy` is on line 29 since a line was
/// added to `htb.toml`'s comment.)
#[test]
fn the_sessions_in_the_docs_are_what_check_prints() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let docs = std::fs::read_to_string(root.join("docs/policy-files.md")).expect("docs");
    let example = |name: &str| {
        std::fs::read_to_string(root.join("examples/policies").join(name)).expect("example")
    };

    // The description, as the first session shows it (run from the repository's root).
    let session = docs
        .split("```\n$ sluice policy check examples/policies/three-classes.toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the three-classes session in the docs");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["policy", "check", "examples/policies/three-classes.toml"])
        .current_dir(&root)
        .output()
        .expect("run sluice");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), session);

    // The errors, each from a file made as its comment says.
    let three = example("three-classes.toml");
    let htb = example("htb.toml");
    let voip = "name = \"voip\"\nparent = \"office\"\npolicy = \"fifo\"\n";
    assert!(htb.contains(voip), "htb.toml changed: update this test");
    let files: [(&str, Option<String>); 4] = [
        (
            "three.toml",
            Some(three.replacen("rate = \"800Mbit\"", "rate = \"800MB\"", 1)),
        ),
        (
            "three2.toml",
            Some(three.replacen("weight = 6", "wieght = 6", 1)),
        ),
        (
            "htb-leaf.toml",
            Some(htb.replacen(voip, &voip.replace("fifo", "htb"), 1)),
        ),
        ("missing.toml", None),
    ];
    let dir = std::env::temp_dir().join(format!("sluice-policy-docs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, body) in &files {
        if let Some(body) = body {
            std::fs::write(dir.join(name), body).unwrap();
        }
        let want = docs
            .lines()
            .find(|l| l.starts_with(&format!("sluice: error: {name}:")))
            .unwrap_or_else(|| panic!("no error line for {name} in the docs"));
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["policy", "check", name])
            .current_dir(&dir)
            .output()
            .expect("run sluice");
        assert_eq!(out.status.code(), Some(1), "{name}");
        assert_eq!(text(&out.stderr).trim_end(), want, "{name}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
