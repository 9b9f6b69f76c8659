//! `nononce lease -- CMD`: one machine ID held while a command runs, for as many `nononce gen`
//! as it runs, in a row or at once; given back when it exits.
//!
//! The lease is `gen`'s (2 minutes, renewed every 30 s). The command gets the ID in
//! `NONONCE_MACHINE_ID` and the lease folder in `NONONCE_LEASE_DIR` ([`crate::lease_dir`]):
//! `gen` inside it issues under the ID, above what every earlier issuer issued and before the
//! lease's deadline. When the lease cannot be kept (a renewal did not get through before it
//! would run out, or the ID was freed or taken), the deadline drops to 0 at once, so every
//! `gen` under it stops, and the command gets SIGTERM, then SIGKILL [`KILL_AFTER`] later.

use std::ffi::OsString;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use nononce::FactoryClock;
use nononce::lease::{Access, LeaseTarget};
use nononce::nonce::{Clock, MachineId};
use tokio::sync::watch;

use crate::lease_dir::{DIR_VAR, LeaseDir, MACHINE_ID_VAR};
use crate::output::Exit;
use crate::store_arg::StoreArgs;

/// How long the command has to end after SIGTERM once its lease is lost; far inside the
/// lease's 10 s safety margin.
pub const KILL_AFTER: Duration = Duration::from_secs(2);

pub const EXAMPLES: &str = "Examples:
  nononce lease -- env
  nononce lease -- sh -c 'for i in 1 2 3; do nononce gen -n 2; done'
  nononce lease --store postgres://app@db/app -- sh -c 'echo \"machine id $NONONCE_MACHINE_ID\"'

The command gets NONONCE_MACHINE_ID (0..=511) and NONONCE_LEASE_DIR; every `nononce gen` it
runs (without --store or --machine-id) issues under that ID, one at a time, each above the
last, none leasing an ID of its own: one-shot gens in a loop need no ID each. The lease is
gen's (2 minutes, renewed every 30 s) and given back when the command exits; nononce then exits
with the command's status. If the lease cannot be kept, gen under it stops at once, the command
gets SIGTERM (SIGKILL 2 s later), and nononce exits 1. A program that uses NONONCE_MACHINE_ID
by itself must keep to the lease folder's deadline_ms (docs/operations.md).
SIGINT, SIGTERM and SIGHUP are passed on to the command.";

/// `nononce lease`'s arguments.
#[derive(Debug, clap::Args)]
pub struct LeaseArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// No progress line while waiting for the lease (errors are still reported).
    #[arg(short, long)]
    quiet: bool,
    /// The command to run under the lease, and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    command: Vec<OsString>,
}

/// Where the lease stands, as the command sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No lease yet.
    Waiting,
    /// The command may issue under this ID.
    Held(MachineId),
    /// The lease is lost or given back: nothing more may be issued under it.
    Ended,
}

/// The command, as the lease manager switches it: through the lease folder's deadline.
struct CommandTarget {
    dir: LeaseDir,
    clock: FactoryClock,
    phase: watch::Sender<Phase>,
    /// The floor the lease was granted with.
    granted_floor: AtomicU64,
    /// The last deadline handed to the command.
    deadline: AtomicU64,
    /// Whether the lease folder was ever written for the command.
    handed_out: AtomicBool,
    /// Why the lease folder could not be written, if it could not.
    failed: std::sync::Mutex<Option<String>>,
}

impl CommandTarget {
    fn phase(&self) -> Phase {
        *self.phase.borrow()
    }
}

impl LeaseTarget for CommandTarget {
    fn enable(&self, machine_id: MachineId, floor_ms: u64, deadline_ms: u64) {
        // Once only: the command was told one ID, and keeps it.
        if self.phase() != Phase::Waiting {
            return;
        }
        let offset = self.clock.source().offset_ms();
        match self.dir.hand_out(machine_id, offset, floor_ms, deadline_ms) {
            Ok(()) => {
                self.granted_floor.store(floor_ms, Ordering::SeqCst);
                self.deadline.store(deadline_ms, Ordering::SeqCst);
                self.handed_out.store(true, Ordering::SeqCst);
                self.phase.send_replace(Phase::Held(machine_id));
            }
            Err(e) => {
                *self
                    .failed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e);
                self.phase.send_replace(Phase::Ended);
            }
        }
    }

    fn extend_deadline(&self, deadline_ms: u64) {
        // A deadline that could not be written leaves the command on the earlier one: safe.
        if matches!(self.phase(), Phase::Held(_)) && self.dir.set_deadline(deadline_ms).is_ok() {
            self.deadline.store(deadline_ms, Ordering::SeqCst);
        }
    }

    fn disable(&self) {
        if self.phase() != Phase::Waiting {
            let _ = self.dir.set_deadline(0);
        }
        self.phase.send_replace(Phase::Ended);
    }

    fn issued_up_to_ms(&self) -> u64 {
        if !self.handed_out.load(Ordering::SeqCst) {
            // The command never got the ID: nothing issued.
            return 0;
        }
        let granted = self.granted_floor.load(Ordering::SeqCst);
        // Every issuer wrote the bound of its first millisecond before issuing, and after that
        // follows the clock (the lease folder's rule). Unreadable, the floor is bounded by the
        // last deadline: no issuer starts at or after it.
        let written = self
            .dir
            .floor_ms()
            .unwrap_or_else(|| self.deadline.load(Ordering::SeqCst));
        granted.max(written).max(self.clock.exact_now_ms())
    }
}

/// Runs `nononce lease`.
pub fn run(args: LeaseArgs) -> Result<(), Exit> {
    if !cfg!(target_os = "linux") {
        return Err(Exit::Fail(
            "nononce lease needs Linux: its commands share the lease's clock through CLOCK_BOOTTIME".to_owned(),
        ));
    }
    crate::cli::runtime()?.block_on(lease(args))
}

async fn lease(args: LeaseArgs) -> Result<(), Exit> {
    let mut signals = crate::signals::Signals::new()?;
    let store = args.store.choose(Access::Lease)?;
    let clock = FactoryClock::shared().map_err(|e| format!("cannot start the clock: {e}"))?;
    let (phase, mut phases) = watch::channel(Phase::Waiting);
    let target = Arc::new(CommandTarget {
        dir: LeaseDir::create()?,
        clock: clock.clone(),
        phase,
        granted_floor: AtomicU64::new(0),
        deadline: AtomicU64::new(0),
        handed_out: AtomicBool::new(false),
        failed: std::sync::Mutex::default(),
    });
    let started = crate::lease::start_manager(
        &store,
        Arc::clone(&target) as Arc<dyn LeaseTarget>,
        clock,
        args.quiet,
    );
    let manager = tokio::select! {
        started = started => started?,
        signal = signals.recv() => return Err(Exit::Signal(signal)),
    };
    let Phase::Held(id) = target.phase() else {
        manager.shutdown().await;
        let failed = target
            .failed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        return Err(Exit::Fail(failed.unwrap_or_else(|| {
            "the lease ended before the command could start: run nononce lease again".to_owned()
        })));
    };
    let shown = shown(&args.command);
    let spawned = tokio::process::Command::new(&args.command[0])
        .args(&args.command[1..])
        .env(MACHINE_ID_VAR, id.get().to_string())
        .env(DIR_VAR, target.dir.path())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            manager.shutdown().await;
            return Err(spawn_error(&shown, &e));
        }
    };
    let pid = child.id().and_then(|pid| i32::try_from(pid).ok());
    let mut lost = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            signal = signals.recv() => send(pid, signal),
            _ = phases.wait_for(|p| *p == Phase::Ended), if !lost => {
                lost = true;
                crate::output::say(&format!(
                    "stopping `{shown}`: the lease of machine id {} can no longer be kept (the line above says why)",
                    id.get()
                ));
                send(pid, 15);
                if tokio::time::timeout(KILL_AFTER, child.wait()).await.is_err() {
                    let _ = child.start_kill();
                }
            }
        }
    };
    // Gives the ID back with the bound of what was issued under it.
    manager.shutdown().await;
    if lost {
        return Err(Exit::Fail(format!(
            "`{shown}` was stopped: machine id {} was no longer this process's to use",
            id.get()
        )));
    }
    let status = status.map_err(|e| format!("cannot wait for `{shown}`: {e}"))?;
    exit_of(status)
}

/// The command as the messages show it.
fn shown(command: &[OsString]) -> String {
    command
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A command that could not start, with the status a shell gives it: 127 not found, 126 not
/// runnable.
fn spawn_error(shown: &str, e: &std::io::Error) -> Exit {
    let (status, hint) = match e.kind() {
        std::io::ErrorKind::NotFound => (127, "check its name and PATH"),
        std::io::ErrorKind::PermissionDenied => (126, "check that it is a program you may run"),
        _ => (126, "check the command"),
    };
    crate::output::say(&format!("cannot run `{shown}`: {e}: {hint}"));
    Exit::Status(status)
}

/// Passes `signal` on to the command.
fn send(pid: Option<i32>, signal: u8) {
    use rustix::process::{Pid, Signal, kill_process};
    let signal = match signal {
        1 => Signal::HUP,
        2 => Signal::INT,
        _ => Signal::TERM,
    };
    if let Some(pid) = pid.and_then(Pid::from_raw) {
        // Gone already: nothing to stop.
        let _ = kill_process(pid, signal);
    }
}

/// nononce's status for the command's: the same code, or 128 + the signal that ended it.
fn exit_of(status: std::process::ExitStatus) -> Result<(), Exit> {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(0), _) => Ok(()),
        (Some(code), _) => Err(Exit::Status(u8::try_from(code).unwrap_or(1))),
        (None, Some(signal)) => Err(Exit::Signal(u8::try_from(signal).unwrap_or(127))),
        (None, None) => Err(Exit::Status(1)),
    }
}
