//! The lease folder: how `nononce lease -- CMD` shares its one machine ID with the processes
//! CMD runs, so that any number of `nononce gen` in a row, or at once, issue under it without
//! repeating each other or the ID's other holders.
//!
//! `nononce lease` makes a folder of its own (mode 0700) and names it in `NONONCE_LEASE_DIR`;
//! the machine ID is also in `NONONCE_MACHINE_ID`. Its files, each one decimal number and a
//! line break:
//!
//! | file | written by | what it holds |
//! |---|---|---|
//! | `machine_id` | `nononce lease`, once | the leased ID |
//! | `clock_offset_ms` | `nononce lease`, once | the lease's clock: `CLOCK_BOOTTIME` in ms plus this |
//! | `deadline_ms` | `nononce lease`, at each renewal | nothing may be issued at or after it (the lease's clock); `0` once the lease is lost or given back |
//! | `floor_ms` | each issuer, holding `lock` | every timestamp issued under the ID, by earlier holders too, is at or below `max(floor_ms, the lease's clock now)` ([floor terms](nononce::lease::floor_terms)) |
//! | `lock` | - | an issuer holds an exclusive lock on it for as long as it issues |
//!
//! An issuer ([`Borrowed`]): locks `lock`; takes `floor = max(floor_ms, now)`; writes
//! `floor + 1` to `floor_ms` before it issues (the bound of its first millisecond, true even if
//! it is killed); issues strictly above `floor` and before `deadline_ms`, reading the deadline
//! again every [`DEADLINE_POLL`]; writes the bound of what it issued; unlocks. One clock for
//! every process of the lease (a boot clock with one offset) keeps "now" the same timeline in
//! each of them, whatever the wall clock does meanwhile. `floor_ms` and `deadline_ms` are
//! replaced whole (written aside, then renamed), so a reader never sees half a number.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nononce::FactoryClock;
use nononce::nonce::{BootClock, DEFAULT_TICK_PERIOD, MachineId};

/// The variable naming the lease folder.
pub const DIR_VAR: &str = "NONONCE_LEASE_DIR";
/// The variable holding the leased machine ID, for programs that only need the number.
pub const MACHINE_ID_VAR: &str = "NONONCE_MACHINE_ID";
/// How often an issuer reads `deadline_ms` again: a renewal reaches it this late at most,
/// well inside the lease's safety margin.
pub const DEADLINE_POLL: Duration = Duration::from_millis(100);

const MACHINE_ID: &str = "machine_id";
const CLOCK_OFFSET: &str = "clock_offset_ms";
const DEADLINE: &str = "deadline_ms";
const FLOOR: &str = "floor_ms";
const LOCK: &str = "lock";

/// The folder as `nononce lease` owns it; removed when dropped.
#[derive(Debug)]
pub struct LeaseDir {
    path: PathBuf,
}

impl LeaseDir {
    /// Makes a new private folder under `$XDG_RUNTIME_DIR` (else the temporary folder).
    ///
    /// # Errors
    /// When no folder can be made there, in one line naming it and what to do.
    pub fn create() -> Result<Self, String> {
        let parent = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(std::env::temp_dir);
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let path = parent.join(format!("nononce-lease-{}-{stamp}", std::process::id()));
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&path).map_err(|e| {
            format!(
                "cannot make the lease folder {}: {e}: set TMPDIR (or XDG_RUNTIME_DIR) to a writable folder",
                path.display()
            )
        })?;
        let dir = Self { path };
        File::create(dir.file(LOCK)).map_err(|e| dir.write_error(LOCK, &e))?;
        Ok(dir)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    fn write_error(&self, name: &str, e: &std::io::Error) -> String {
        format!(
            "cannot write {}: {e}: free space there, or set TMPDIR to another folder",
            self.file(name).display()
        )
    }

    /// Writes what an issuer needs before the first one starts.
    ///
    /// # Errors
    /// A file that could not be written.
    pub fn hand_out(
        &self,
        machine_id: MachineId,
        clock_offset_ms: u64,
        floor_ms: u64,
        deadline_ms: u64,
    ) -> Result<(), String> {
        for (name, value) in [
            (MACHINE_ID, u64::from(machine_id.get())),
            (CLOCK_OFFSET, clock_offset_ms),
            (FLOOR, floor_ms),
            (DEADLINE, deadline_ms),
        ] {
            replace(&self.path, name, value).map_err(|e| self.write_error(name, &e))?;
        }
        Ok(())
    }

    /// Moves the deadline (0: stop now).
    ///
    /// # Errors
    /// The file could not be replaced: the issuers keep the deadline they read last.
    pub fn set_deadline(&self, deadline_ms: u64) -> Result<(), String> {
        replace(&self.path, DEADLINE, deadline_ms).map_err(|e| self.write_error(DEADLINE, &e))
    }

    /// The floor the issuers have written so far; `None` if it cannot be read.
    pub fn floor_ms(&self) -> Option<u64> {
        read(&self.path, FLOOR).ok()
    }
}

impl Drop for LeaseDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Writes `value` to `dir/name` whole: aside first, then renamed over it.
fn replace(dir: &Path, name: &str, value: u64) -> std::io::Result<()> {
    let aside = dir.join(format!("{name}.{}.new", std::process::id()));
    let mut file = File::create(&aside)?;
    writeln!(file, "{value}")?;
    drop(file);
    std::fs::rename(&aside, dir.join(name))
}

fn read(dir: &Path, name: &str) -> Result<u64, String> {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.trim()
        .parse()
        .map_err(|_| format!("{}: `{}` is not a number", path.display(), text.trim()))
}

/// The lease folder as an issuer under `nononce lease` sees it: one `gen` in the command it
/// runs.
#[derive(Debug)]
pub struct Borrowed {
    path: PathBuf,
    machine_id: MachineId,
    clock_offset_ms: u64,
}

impl Borrowed {
    /// The folder named by [`DIR_VAR`], if set.
    ///
    /// # Errors
    /// A folder that is not one `nononce lease` made (gone, or a file missing): in one line.
    pub fn from_env() -> Result<Option<Self>, String> {
        let Some(path) = std::env::var_os(DIR_VAR).map(PathBuf::from) else {
            return Ok(None);
        };
        let fail = |e: String| {
            format!(
                "{DIR_VAR} names no lease of `nononce lease`: {e}: run gen inside `nononce lease -- ...` while it holds its lease, or unset {DIR_VAR}"
            )
        };
        let machine_id = read(&path, MACHINE_ID).map_err(fail)?;
        let machine_id = u16::try_from(machine_id)
            .ok()
            .and_then(|id| MachineId::new(id).ok())
            .ok_or_else(|| fail(format!("machine id {machine_id} is out of range")))?;
        let clock_offset_ms = read(&path, CLOCK_OFFSET).map_err(fail)?;
        Ok(Some(Self {
            path,
            machine_id,
            clock_offset_ms,
        }))
    }

    pub fn machine_id(&self) -> MachineId {
        self.machine_id
    }

    /// The lease's clock, as `nononce lease` reads it.
    ///
    /// # Errors
    /// No thread for the clock's ticker, or a system whose boot clock is not shared between
    /// processes.
    pub fn clock(&self) -> Result<FactoryClock, String> {
        if !cfg!(target_os = "linux") {
            return Err(
                "gen under `nononce lease` needs Linux: its processes share the lease's clock through CLOCK_BOOTTIME".to_owned(),
            );
        }
        FactoryClock::spawn(
            BootClock::with_offset(self.clock_offset_ms),
            DEFAULT_TICK_PERIOD,
        )
        .map_err(|e| format!("cannot start the clock: {e}"))
    }

    /// Locks the folder for this issuer, waiting for another one to finish; `waiting` is
    /// called once if it has to wait.
    ///
    /// # Errors
    /// The lock file cannot be opened or locked.
    pub fn lock(&self, waiting: impl FnOnce()) -> Result<File, String> {
        let path = self.path.join(LOCK);
        let fail = |e: std::io::Error| format!("cannot lock {}: {e}", path.display());
        let file = File::options().write(true).open(&path).map_err(fail)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                waiting();
                file.lock().map_err(fail)?;
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(fail(e)),
        }
        Ok(file)
    }

    /// The floor the lease's earlier issuers left.
    ///
    /// # Errors
    /// The file cannot be read.
    pub fn floor_ms(&self) -> Result<u64, String> {
        read(&self.path, FLOOR)
    }

    /// Records `floor_ms` as the bound of everything issued under the lease so far.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn set_floor(&self, floor_ms: u64) -> Result<(), String> {
        replace(&self.path, FLOOR, floor_ms)
            .map_err(|e| format!("cannot write {}: {e}", self.path.join(FLOOR).display()))
    }

    /// The deadline as `nononce lease` last wrote it (0 once the lease is gone).
    ///
    /// # Errors
    /// The file cannot be read: the lease's holder is gone.
    pub fn deadline_ms(&self) -> Result<u64, String> {
        read(&self.path, DEADLINE)
    }
}
