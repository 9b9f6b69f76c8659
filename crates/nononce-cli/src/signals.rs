//! The signals that stop a long-running command.

/// SIGINT, SIGTERM and SIGHUP, as signal numbers.
pub struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn new() -> Result<Self, String> {
        use tokio::signal::unix::{SignalKind, signal};
        let on = |kind| signal(kind).map_err(|e| format!("cannot handle signals: {e}"));
        Ok(Self {
            interrupt: on(SignalKind::interrupt())?,
            terminate: on(SignalKind::terminate())?,
            hangup: on(SignalKind::hangup())?,
        })
    }

    pub async fn recv(&mut self) -> u8 {
        tokio::select! {
            _ = self.interrupt.recv() => 2,
            _ = self.terminate.recv() => 15,
            _ = self.hangup.recv() => 1,
        }
    }
}
