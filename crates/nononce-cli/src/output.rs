//! Writing results: a closed pipe ends the command quietly (status 0), any other write error
//! is one line and status 1; nothing panics on output.

use std::io::Write;

/// How a command ends when it does not simply succeed.
#[derive(Debug)]
pub enum Exit {
    /// A failure: the message for the `nononce: ` line, status 1.
    Fail(String),
    /// A failure said already (each bad input of `decode --keep-going`): status 1.
    FailedSaid,
    /// A usage error (clap's): the message for the `nononce: ` line, status 2.
    Usage(String),
    /// The status of a command `nononce lease` ran (said already, if there was anything to say).
    Status(u8),
    /// Stopped by a signal: status 128 + the signal number.
    Signal(u8),
    /// The reader of stdout went away: nothing more to say, status 0.
    ClosedPipe,
}

impl From<String> for Exit {
    fn from(message: String) -> Self {
        Self::Fail(message)
    }
}

/// What a failed write of the results means.
pub fn write_error(e: &std::io::Error) -> Exit {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Exit::ClosedPipe
    } else {
        Exit::Fail(format!("cannot write output: {e}"))
    }
}

/// Writes `text` and a line break to stdout, and flushes.
pub fn print(text: &str) -> Result<(), Exit> {
    print_raw(&format!("{text}\n"))
}

/// Writes `text` as it is to stdout, and flushes.
pub fn print_raw(text: &str) -> Result<(), Exit> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| write_error(&e))
}

/// One `nononce: ` line on stderr; a failing stderr has nobody left to tell.
pub fn say(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "nononce: {message}");
}
