//! `nononce`: generate, decode, encrypt and decrypt nonces; manage machine-ID leases.

mod backends;
mod cli;
mod codec;
mod keys;
mod lease;
mod output;
mod store;

use std::process::ExitCode;

use clap::Parser;

use crate::output::Exit;

fn main() -> ExitCode {
    let exit = match cli::Cli::try_parse() {
        Ok(args) => cli::run(args),
        Err(e) => cli::clap_exit(&e),
    };
    match exit {
        Ok(()) | Err(Exit::ClosedPipe) => ExitCode::SUCCESS,
        Err(Exit::Signal(signal)) => ExitCode::from(128 + signal),
        Err(Exit::Fail(message)) => {
            output::say(&message);
            ExitCode::FAILURE
        }
        Err(Exit::Usage(message)) => {
            output::say(&message);
            ExitCode::from(2)
        }
    }
}
