//! Which lease store a command uses: `--store URL`, else `--store-env VAR` (the URL in an
//! environment variable, out of `ps` and the shell's history), else `NONONCE_STORE`, else this
//! user's own SQLite file on this host ([`default_store`]).
//!
//! The default is one file per user and host, whatever folder a command runs in: a file in the
//! working folder let two `gen` from two folders both lease machine ID 0 and print the same
//! nonces.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nononce::lease::Access;

use crate::output::Exit;

/// The variable a command reads its store URL from when given neither `--store` nor
/// `--store-env` (as sqlx-cli reads `DATABASE_URL`).
pub const STORE_VAR: &str = "NONONCE_STORE";

/// What `--store` takes.
pub const STORE_HELP: &str = "The lease store: sqlite://PATH, postgres://..., mysql://..., redis://HOST:PORT, etcd://HOST:PORT[,HOST:PORT...][/PREFIX/], zk://HOST:PORT[,HOST:PORT...][/ROOT], env:VAR (StatefulSet ordinal) and hosts:NAME=ID,NAME=ID,... (static IDs, no leases kept: for gen, lease and serve, not leases). Without --store or --store-env: the URL in NONONCE_STORE, else this user's SQLite file on this host, $XDG_STATE_HOME/nononce/leases.db (~/.local/state/nononce/leases.db), the same from every folder; it serves one host: nodes on several hosts need a shared store";

/// `--store` and `--store-env`, for every command that opens a store.
#[derive(Debug, Clone, clap::Args)]
pub struct StoreArgs {
    #[arg(long, value_name = "URL", help = STORE_HELP)]
    store: Option<String>,
    /// Read the store URL from the environment variable VAR: a password in it stays out of `ps`
    /// and the shell's history.
    #[arg(long, value_name = "VAR", conflicts_with = "store")]
    store_env: Option<String>,
    /// How long to wait for a server store's first answer, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    connect_timeout: u64,
}

/// The store a command uses: its URL, how a command to paste names it, and how long to wait
/// for its first answer.
#[derive(Debug, Clone)]
pub struct ChosenStore {
    pub url: String,
    /// What a command to paste gives instead of `--store 'URL'` (whose password is hidden):
    /// `--store-env VAR`, or nothing when the URL came from `NONONCE_STORE` or is the default
    /// store, which the pasted command finds the same way. `None` for `--store URL`.
    pub instead_of_url: Option<String>,
    pub connect_timeout: Duration,
}

impl StoreArgs {
    /// Whether `--store` or `--store-env` was given.
    pub fn given(&self) -> bool {
        self.store.is_some() || self.store_env.is_some()
    }

    /// The store the command uses, for `access`: the default store's folder is made (for
    /// its owner only) when the command may create the store in it.
    ///
    /// # Errors
    /// A variable named by `--store-env` or `NONONCE_STORE` that is empty or unset (a usage
    /// error), or no default store (no `HOME`), in one line saying what to give instead.
    pub fn choose(&self, access: Access) -> Result<ChosenStore, Exit> {
        let (url, instead_of_url) = if let Some(url) = &self.store {
            (url.clone(), None)
        } else if let Some(var) = &self.store_env {
            let url = from_var(var, &format!("--store-env {var}"))
                .and_then(|url| url.ok_or_else(|| format!("--store-env {var}: the environment variable {var} is not set: export {var}=URL, or give --store URL")))
                .map_err(Exit::Usage)?;
            (url, Some(format!("--store-env {var}")))
        } else {
            let url = match from_var(STORE_VAR, STORE_VAR).map_err(Exit::Usage)? {
                Some(url) => url,
                None => default_store(access)?,
            };
            (url, Some(String::new()))
        };
        Ok(ChosenStore {
            url,
            instead_of_url,
            connect_timeout: Duration::from_secs(self.connect_timeout),
        })
    }
}

/// The URL in the environment variable `var`, `None` if unset; `named` is how the message names
/// where it came from. An empty value is refused, not passed over: a secret that failed to
/// arrive must not put every node of a fleet on a default store of its own.
fn from_var(var: &str, named: &str) -> Result<Option<String>, String> {
    match std::env::var(var) {
        Ok(url) if url.trim().is_empty() => Err(format!(
            "{named}: the environment variable {var} is empty: set it to the store URL, or unset it to use the default store"
        )),
        Ok(url) => Ok(Some(url)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!(
            "{named}: the environment variable {var} is not valid UTF-8: set it to the store URL"
        )),
    }
}

/// This user's store on this host: `$XDG_STATE_HOME/nononce/leases.db`, or
/// `$HOME/.local/state/nononce/leases.db` (a relative `XDG_STATE_HOME` is ignored, as the XDG
/// base directory specification says). For `Access::Lease` and `Access::Migrate`, its folder is
/// made if missing, readable by its owner only.
pub fn default_store(access: Access) -> Result<String, String> {
    let dir = state_home()?.join("nononce");
    if access != Access::Read {
        make_private_dir(&dir)?;
    }
    let path = dir.join("leases.db");
    match path.to_str() {
        // `?` and `#` would end the path inside a URL, `%` start an escape.
        Some(text) if !text.contains(['?', '#', '%']) => Ok(format!("sqlite://{text}")),
        _ => Err(format!(
            "the default store {} cannot be written as a URL: give --store sqlite://PATH, one file every nononce process of this host uses",
            path.display()
        )),
    }
}

fn state_home() -> Result<PathBuf, String> {
    let absolute = |var| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
    };
    absolute("XDG_STATE_HOME")
        .or_else(|| absolute("HOME").map(|home| home.join(".local/state")))
        .ok_or_else(|| {
            "no default store: neither XDG_STATE_HOME nor HOME names a folder: give --store sqlite://PATH (one file every nononce process of this host uses) or set NONONCE_STORE".to_owned()
        })
}

fn make_private_dir(dir: &Path) -> Result<(), String> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(|e| {
        format!(
            "cannot make the folder of the default store, {}: {e}: give --store sqlite://PATH, or set XDG_STATE_HOME to a writable folder",
            dir.display()
        )
    })
}
