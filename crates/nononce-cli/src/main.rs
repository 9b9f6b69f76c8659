//! `nononce`: generate, decode, encrypt and decrypt nonces; manage machine-ID leases.

mod cli;
mod codec;
mod store;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nononce: {e}");
            ExitCode::FAILURE
        }
    }
}
