//! `sluice policy ...`: policy files (the TOML format of [`sluice_sched::config`]).
//!
//! - `sluice policy check FILE`: parse, validate and build the scheduler the file describes,
//!   then print `FILE: ok` and the tree; on a problem, fail with `FILE:LINE:COL: what is
//!   wrong; expected ...`.

use clap::Subcommand;
use std::path::PathBuf;

/// What `sluice policy` can do.
#[derive(Subcommand)]
pub enum PolicyCommand {
    /// Check a policy file: parse, validate and build it, then print the scheduler it describes.
    Check {
        /// The policy file (TOML; see docs/policy-files.md).
        file: PathBuf,
    },
}

/// Run one `policy` subcommand.
pub fn run(cmd: PolicyCommand) -> anyhow::Result<()> {
    match cmd {
        PolicyCommand::Check { file } => {
            // The error already reads `FILE:LINE:COL: ...`; no context is added around it.
            let scheduler = sluice_sched::config::build_file(&file)?;
            println!("{}: ok", file.display());
            print!("{}", scheduler.describe());
            Ok(())
        }
    }
}
