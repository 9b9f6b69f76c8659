//! A timestamp floor kept in a small file, for strategies that have no store of their own.
//!
//! A static strategy gives a node the same ID every time, so a replaced pod (same ordinal) or a
//! restarted host takes over the ID from its predecessor with no coordinator in between. Without
//! a floor it starts with whatever its clock says, and a clock behind the predecessor's by more
//! than the margin repeats the predecessor's nonces. With a [`FloorFile`] on storage that
//! outlives the process and follows the ID (a StatefulSet pod's persistent volume, a host's own
//! disk), every holder records the bound of its timestamps there before it extends its
//! deadline, and the next holder starts above it, as with the SQL and Redis stores.
//!
//! The file holds one decimal number (Unix ms) and a newline. It is replaced atomically
//! (written to a temporary file beside it, synced, renamed over it, and the directory synced),
//! so a crash leaves either the old or the new floor, never a torn one.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use lease_core::{ErrorKind, LeaseError};

/// The floor file of a static strategy: see the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FloorFile {
    path: PathBuf,
}

/// The floor file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FloorFileError {
    /// Reading, writing, syncing or renaming failed.
    #[error(
        "cannot {action} the timestamp floor file {path}: {source}; it must be on storage that \
         outlives this process and is writable by it (for a StatefulSet, a persistent volume)"
    )]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The file holds something other than a floor.
    #[error(
        "the timestamp floor file {path} holds {content:?}, not a number of milliseconds: \
         it may have been written by something else; move it away only if no node with this \
         machine id may still be running"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What it holds (at most 40 characters).
        content: String,
    },
}

impl LeaseError for FloorFileError {
    fn kind(&self) -> ErrorKind {
        match self {
            // Missing directories and permissions do not fix themselves; anything else
            // (a full disk, an I/O error) may.
            Self::Io { source, .. }
                if matches!(
                    source.kind(),
                    io::ErrorKind::NotFound
                        | io::ErrorKind::PermissionDenied
                        | io::ErrorKind::ReadOnlyFilesystem
                ) =>
            {
                ErrorKind::Misconfigured
            }
            Self::Io { .. } => ErrorKind::Retry,
            Self::Corrupt { .. } => ErrorKind::Misconfigured,
        }
    }
}

impl FloorFile {
    /// The floor kept at `path` (created on first use; its directory must exist).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The file's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stored floor (Unix ms); 0 when the file does not exist yet.
    ///
    /// # Errors
    /// [`FloorFileError`] when the file cannot be read or holds something else.
    pub fn read(&self) -> Result<u64, FloorFileError> {
        let content = match fs::read_to_string(&self.path) {
            Ok(content) => content,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(source) => return Err(self.io("read", source)),
        };
        content
            .trim_end_matches('\n')
            .parse::<u64>()
            .map_err(|_| FloorFileError::Corrupt {
                path: self.path.clone(),
                content: content.chars().take(40).collect(),
            })
    }

    /// Raises the floor to at least `floor_ms`; returns the floor as it was before.
    pub(crate) fn raise(&self, floor_ms: u64) -> Result<u64, FloorFileError> {
        let before = self.read()?;
        if floor_ms > before {
            self.set(floor_ms)?;
        }
        Ok(before)
    }

    /// Sets the floor to `floor_ms`.
    pub(crate) fn set(&self, floor_ms: u64) -> Result<(), FloorFileError> {
        let mut temporary = self.path.clone().into_os_string();
        temporary.push(".tmp");
        let temporary = PathBuf::from(temporary);
        let mut file = fs::File::create(&temporary).map_err(|e| self.io("create", e))?;
        writeln!(file, "{floor_ms}").map_err(|e| self.io("write", e))?;
        file.sync_all().map_err(|e| self.io("sync", e))?;
        drop(file);
        fs::rename(&temporary, &self.path).map_err(|e| self.io("replace", e))?;
        // The rename is durable only once the directory is.
        if let Some(directory) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::File::open(directory)
                .and_then(|d| d.sync_all())
                .map_err(|e| self.io("sync the directory of", e))?;
        }
        Ok(())
    }

    fn io(&self, action: &'static str, source: io::Error) -> FloorFileError {
        FloorFileError::Io {
            action,
            path: self.path.clone(),
            source,
        }
    }
}
