//! `sluice run --config FILE`: the software NIC daemon (see `sluice_dp::daemon`), with its
//! structured logs on stderr.

use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};

/// Log line format.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines with key=value fields.
    Text,
    /// One JSON object per line.
    Json,
}

/// `sluice run` options.
#[derive(Args)]
pub struct RunArgs {
    /// The daemon's configuration file (TOML; see docs/daemon.md).
    #[arg(long, short)]
    pub config: PathBuf,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log: LogFormat,
    /// Log level (error, warn, info, debug, trace) or a tracing filter; RUST_LOG overrides.
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// Check the configuration and its policies, print a summary and exit without creating
    /// anything.
    #[arg(long)]
    pub check: bool,
}

/// Install the global log subscriber.
pub fn init_logs(format: LogFormat, level: &str) -> anyhow::Result<()> {
    use tracing_subscriber::EnvFilter;
    let (filter, from) = match std::env::var("RUST_LOG") {
        Ok(f) if !f.is_empty() => (EnvFilter::try_new(&f), format!("RUST_LOG=`{f}`")),
        _ => (EnvFilter::try_new(level), format!("--log-level `{level}`")),
    };
    let filter = filter.map_err(|e| anyhow::anyhow!("bad log filter {from}: {e}"))?;
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    installed.map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))
}

/// What `--check` prints for a configuration file that passed, its mode spelled as the
/// file's `[daemon] mode` is.
fn check_summary(file: &Path, cfg: &sluice_dp::config::Config) -> String {
    use sluice_dp::config::Mode;
    let count = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    let mode = match cfg.mode {
        Mode::Event => "event",
        Mode::Busy => "busy",
    };
    format!(
        "{}: ok ({}, {}, mode \"{mode}\")",
        file.display(),
        count(cfg.ports.len(), "port"),
        count(cfg.links.len(), "link"),
    )
}

/// Run the daemon until a signal stops it.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    init_logs(args.log, &args.log_level)?;
    if args.check {
        let cfg = sluice_dp::config::Config::load(&args.config)?;
        sluice_dp::daemon::check(&cfg)?;
        println!("{}", check_summary(&args.config, &cfg));
        return Ok(());
    }
    let summary = sluice_dp::daemon::run_file(&args.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    tracing::info!(
        signal = summary.signal.as_deref().unwrap_or("none"),
        dropped_at_stop = summary.dropped_at_stop,
        "stopped cleanly"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The summary of `--check` names the mode as the file spells it: `mode Busy` (the
    /// enum's debug name) is a value the file refuses.
    #[test]
    fn the_check_summary_spells_the_mode_as_the_file_does() {
        let text = "[daemon]\nmode = \"busy\"\n\
                    [[port]]\nname = \"a\"\nkind = \"tap\"\n\
                    [[port]]\nname = \"b\"\nkind = \"tap\"\n\
                    [[link]]\nfrom = \"a\"\nto = \"b\"\n";
        let cfg = sluice_dp::config::Config::parse(text, "d.toml", Path::new(".")).unwrap();
        assert_eq!(
            check_summary(Path::new("d.toml"), &cfg),
            "d.toml: ok (2 ports, 1 link, mode \"busy\")"
        );
        let cfg = sluice_dp::config::Config::parse(
            &text.replace("busy", "event"),
            "d.toml",
            Path::new("."),
        )
        .unwrap();
        assert!(
            check_summary(Path::new("d.toml"), &cfg).ends_with("mode \"event\")"),
            "{}",
            check_summary(Path::new("d.toml"), &cfg)
        );
    }
}
