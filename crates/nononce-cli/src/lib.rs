//! The `nononce` command's internals. A library only so that the command's benchmarks and
//! examples can reach them (a bare server on the same listener, for comparison); its API is
//! the command's, not one to build on: use the `nononce` crate.

#![forbid(unsafe_code)]
#![allow(missing_docs)]

mod backends;
pub mod bounds;
pub mod cli;
pub mod codec;
mod factory_options;
mod keys;
mod lease;
mod lease_command;
mod lease_dir;
pub mod output;
#[cfg(feature = "serve")]
pub mod serve;
mod signals;
mod store;
mod store_arg;

/// Runs the command on the process's arguments and returns its exit status.
pub fn main() -> std::process::ExitCode {
    use clap::Parser;
    use std::process::ExitCode;

    use crate::output::Exit;

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
        Err(Exit::FailedSaid) => ExitCode::FAILURE,
        Err(Exit::Status(status)) => ExitCode::from(status),
        Err(Exit::Usage(message)) => {
            output::say(&message);
            ExitCode::from(2)
        }
    }
}
