//! `sluice`: the command-line front end.
//!
//! - `sluice bench queues`: every queue and baseline side by side (see [`bench::queues`]).

mod bench;
mod report;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Scalable, programmable, zero-drop packet scheduling"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Benchmarks that put Sluice and its baselines side by side in one run.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(cmd) => bench::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
