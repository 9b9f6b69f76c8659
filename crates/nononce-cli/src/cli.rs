//! Command-line parsing and the commands.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use nononce::lease::{Access, LeaseTerms};
use nononce::nonce::{DEFAULT_EPOCH_MS, MachineId, NO_DEADLINE};
use nononce::{Base, BootClock, Factory, FactoryClock};

use crate::codec::{AnyNonce, Format, Input, Kind};
use crate::factory_options::CipherArgs;
use crate::keys::KeyArgs;
use crate::lease_dir::Borrowed;
use crate::output::{Exit, write_error};
use crate::store::Store;
use crate::store_arg::StoreArgs;

/// Unique 64/96/128-bit nonces, and the machine-ID leases that keep them unique.
#[derive(Debug, Parser)]
#[command(name = "nononce", version, about, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

const EXAMPLES: &str = "Examples:
  nononce gen -n 3
  nononce gen -n 3 | nononce decode -
  nononce gen --kind sortable --bits 128 --machine-id 7 --format base64url
  nononce decode 03be4cb500002000 --format json
  nononce bounds --from 2026-12-01T10:00:00Z --to 2026-12-01T11:00:00Z --format int
  openssl rand -hex 32 > nonce-key.hex
  nononce encrypt 03be4cb500002000 --base-key-file nonce-key.hex
  nononce leases list";

const GEN_EXAMPLES: &str = "Examples:
  nononce gen -n 3
  nononce gen --machine-id 7 -n 3 --format int
  export NONCE_KEY=$(openssl rand -hex 32)
  nononce gen --kind encrypted --bits 128 --base-key-env NONCE_KEY
  nononce gen --store postgres://app@db/app --quiet
  nononce leases migrate --store etcd://etcd:2379    # once, on a new etcd prefix or Redis hash
  nononce gen --store etcd://etcd:2379 -n 3

The lease: gen asks for 2 minutes, renewed every 30 s while it runs, and waits up to 10 s for
it (a progress line on stderr says why, unless --quiet). SIGINT, SIGTERM and SIGHUP stop gen:
it releases the machine id (free again after a 10 s guard) and exits with status 130, 143 or
129. A closed stdout (`nononce gen -n 1000000 | head -1`) ends it quietly with status 0.";

const DECODE_EXAMPLES: &str = "How the nonce is read (--input auto), in every form it is valid in:
  hex          16, 24 or 32 hex digits (64, 96 or 128 bits), 0x before them allowed
  base64url    11, 16 or 22 unpadded base64url characters (64, 96 or 128 bits)
  int          decimal digits: 64 bits if the value fits, else 96, else 128
16 hex digits are also 16 base64url characters, and digits alone also an integer. Of two
readings, one whose time is over a year after now is dropped; if both could be the nonce,
decode refuses, naming each, and --input picks one. --bits sets an integer's size. An
encrypted nonce's fields are noise, its time too: give --input for those.

Examples:
  nononce decode 03be4cb500002000    # prints bits=64 timestamp_ms=64310400000 unix_ms=1800000000000 time=2027-01-15T08:00:00.000Z machine_id=1 count=0
  nononce decode A75MtQAAIAA --format json
  nononce gen -n 3 --machine-id 7 --format int | nononce decode -
  nononce decode 55728bcb7d191444 --input hex --base-key-hex 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f    # prints bits=64 timestamp_ms=64310400000 unix_ms=1800000000000 time=2027-01-15T08:00:00.000Z machine_id=1 count=0";

const ENCRYPT_EXAMPLES: &str = "Example:
  nononce encrypt 03be4cb500002000 --base-key-hex 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f    # prints 55728bcb7d191444";

const DECRYPT_EXAMPLES: &str = "Example:
  nononce decrypt 55728bcb7d191444 --base-key-hex 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f    # prints 03be4cb500002000";

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate nonces and print one per line.
    #[command(after_help = GEN_EXAMPLES)]
    Gen(GenArgs),
    /// Print the fields of nonces: size, timestamp, time, machine ID, count.
    #[command(after_help = DECODE_EXAMPLES)]
    Decode(DecodeArgs),
    /// Print the smallest and largest nonce of a time range, for `BETWEEN` scans of sortable
    /// nonces.
    #[command(after_help = crate::bounds::EXAMPLES)]
    Bounds(crate::bounds::BoundsArgs),
    /// Encrypt a nonce (hex) with keys derived from a base key, as NoNoncense does.
    #[command(after_help = ENCRYPT_EXAMPLES)]
    Encrypt(CryptArgs),
    /// Inspect and manage machine-ID leases in a store.
    #[command(
        subcommand,
        after_help = "Examples:\n  nononce gen\n  nononce leases list\n  nononce leases migrate --store postgres://app@db/app"
    )]
    Leases(LeasesCommand),
    /// Decrypt a nonce (hex) encrypted with keys derived from a base key.
    #[command(after_help = DECRYPT_EXAMPLES)]
    Decrypt(CryptArgs),
    /// Print a shell completion script, for example `nononce completions bash >
    /// ~/.local/share/bash-completion/completions/nononce`.
    #[command(
        after_help = "Examples:\n  nononce completions bash > nononce.bash\n  nononce completions zsh > _nononce"
    )]
    Completions {
        /// The shell: bash, elvish, fish, powershell or zsh.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), for example `nononce man | man -l -`.
    #[command(after_help = "Example:\n  nononce man > nononce.1")]
    Man,
    /// Run a command holding one machine ID: every `nononce gen` it runs uses that ID.
    #[command(after_help = crate::lease_command::EXAMPLES)]
    Lease(crate::lease_command::LeaseArgs),
    /// Serve nonces over HTTP/JSON and gRPC, each kind on a leased machine ID.
    #[cfg(feature = "serve")]
    #[command(after_help = crate::serve::EXAMPLES)]
    Serve(crate::serve::ServeArgs),
}

#[derive(Debug, Subcommand)]
enum LeasesCommand {
    /// Who holds which machine ID, and how many of the 512 are free.
    #[command(
        after_help = "Examples:\n  nononce gen\n  nononce leases list\n  nononce leases list --format json\n  nononce leases list --free | head -3\n  nononce leases list --store etcd://etcd:2379\n\nexpires_in is on the store's clock; expires_at adds it to this host's clock. An ID a node gave\nback stays listed, blocked, for its release guard (10 s for gen)."
    )]
    List {
        #[command(flatten)]
        store: StoreArgs,
        /// Output format.
        #[arg(long, value_enum, default_value_t = TextOrJson::Text)]
        format: TextOrJson,
        /// List the free IDs instead, one a line (JSON: `free_ids`).
        #[arg(long)]
        free: bool,
    },
    /// Create or repair the lease table (Redis and etcd stores need none: it checks that they
    /// answer).
    #[command(after_help = "Example:\n  nononce leases migrate --store postgres://app@db/app")]
    Migrate {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Free the machine ID of a node known to be dead.
    #[command(
        after_help = "Example:\n  nononce leases migrate --store redis://cache:6379\n  nononce leases release --store redis://cache:6379 --id 17 --yes"
    )]
    Release {
        #[command(flatten)]
        store: StoreArgs,
        /// The machine ID to free.
        #[arg(long, value_parser = parse_machine_id)]
        id: MachineId,
        /// Confirms the node holding the ID is dead: a live one would share its ID until its
        /// next renewal.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TextOrJson {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
struct GenArgs {
    /// Which kind of nonce.
    #[arg(long, value_enum, default_value_t = Kind::Counter)]
    kind: Kind,
    /// Nonce size in bits: 64, 96 or 128.
    #[arg(long, default_value_t = 64, value_parser = crate::codec::parse_bits)]
    bits: u16,
    /// How many nonces.
    #[arg(short = 'n', long = "count", default_value_t = 1)]
    count: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Hex)]
    format: Format,
    /// Use this machine ID (0..=511) without a lease; you guarantee no other node uses it.
    #[arg(long, conflicts_with_all = ["store", "store_env"], value_name = "ID", value_parser = parse_machine_id)]
    machine_id: Option<MachineId>,
    #[command(flatten)]
    store: StoreArgs,
    /// No progress line while waiting for a lease (errors are still reported).
    #[arg(short, long)]
    quiet: bool,
    #[command(flatten)]
    key: KeyArgs,
    /// The epoch timestamps count from, in Unix ms.
    #[arg(long, default_value_t = DEFAULT_EPOCH_MS)]
    epoch_ms: u64,
    #[command(flatten)]
    ciphers: CipherArgs,
}

#[derive(Debug, clap::Args)]
struct DecodeArgs {
    /// Nonces (hex, base64url or decimal; see below), or `-` to read one a line from stdin.
    #[arg(required = true)]
    nonces: Vec<String>,
    /// How the nonces are written.
    #[arg(long, value_enum, default_value_t = Input::Auto)]
    input: Input,
    /// The size the nonces have: needed for integers whose value does not tell, checked for
    /// the rest.
    #[arg(long, value_parser = crate::codec::parse_bits)]
    bits: Option<u16>,
    /// The epoch the nonce's timestamp counts from, in Unix ms.
    #[arg(long, default_value_t = DEFAULT_EPOCH_MS)]
    epoch_ms: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = TextOrJson::Text)]
    format: TextOrJson,
    /// Report a nonce that cannot be read and go on with the next; the status is still 1.
    #[arg(long)]
    keep_going: bool,
    /// Encrypted nonces: decrypt each with keys derived from this base key first (needs
    /// --input: an encrypted nonce's form cannot be told by its fields). A 96-bit nonce of
    /// Blowfish or 3DES holds a 64-bit nonce and 32 zero bits: decoded as that 64-bit nonce.
    #[command(flatten)]
    key: KeyArgs,
    #[command(flatten)]
    ciphers: CipherArgs,
}

#[derive(Debug, clap::Args)]
struct CryptArgs {
    /// Nonces, or `-` to read one a line from stdin.
    #[arg(required = true)]
    nonces: Vec<String>,
    /// How the nonces are written [default: hex]. An encrypted nonce's fields are noise, so
    /// decrypt cannot tell its form by them: auto applies to encrypt only.
    #[arg(long, value_enum)]
    input: Option<Input>,
    /// Output format [default: the input's form; hex after auto].
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// The epoch the nonces count from, in Unix ms (for --input auto).
    #[arg(long, default_value_t = DEFAULT_EPOCH_MS)]
    epoch_ms: u64,
    #[command(flatten)]
    key: KeyArgs,
    #[command(flatten)]
    ciphers: CipherArgs,
}

fn parse_machine_id(s: &str) -> Result<MachineId, String> {
    match s.parse::<u64>() {
        // Values past `u16` get the same message as those past the 9-bit field.
        Ok(id) => u16::try_from(id)
            .ok()
            .and_then(|id| MachineId::new(id).ok())
            .ok_or_else(|| {
                format!(
                    "machine id {id} is out of range: use 0..={}",
                    MachineId::MAX
                )
            }),
        Err(_) => Err(format!(
            "`{s}` is not a machine id: use 0..={}",
            MachineId::MAX
        )),
    }
}

/// What clap's own result means: help and version on stdout (status 0), every usage error as
/// one `nononce:` line naming the help to read (status 2).
pub fn clap_exit(e: &clap::Error) -> Result<(), Exit> {
    use clap::error::ErrorKind;
    let rendered = e.render().to_string();
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        return crate::output::print_raw(&rendered);
    }
    // The command the user ran (`nononce leases list`): the subcommand names in argv.
    let mut command = <Cli as clap::CommandFactory>::command();
    let mut usage = vec!["nononce".to_owned()];
    for arg in std::env::args().skip(1) {
        match command.find_subcommand(&arg) {
            Some(sub) => {
                usage.push(sub.get_name().to_owned());
                command = sub.clone();
            }
            None => break,
        }
    }
    let usage = usage.join(" ");
    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        return Err(Exit::Usage(format!(
            "{usage} needs a command: run `{usage} --help` to see them"
        )));
    }
    let mut message = String::new();
    for line in rendered.lines().map(str::trim) {
        if line.starts_with("Usage:") {
            break;
        }
        if line.is_empty() || line.starts_with("For more information") {
            continue;
        }
        let line = line.strip_prefix("error: ").unwrap_or(line);
        if !message.is_empty() {
            message.push_str(if line.starts_with("tip:") { "; " } else { " " });
        }
        message.push_str(line);
    }
    Err(Exit::Usage(format!("{message} (see `{usage} --help`)")))
}

pub fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

/// The lease timing `gen` leases on, which a store opened for any command is checked against.
fn terms() -> LeaseTerms {
    crate::lease::config().terms()
}

/// Runs the parsed command.
pub fn run(cli: Cli) -> Result<(), Exit> {
    match cli.command {
        Command::Gen(args) => generate(args),
        Command::Decode(args) => decode(&args),
        Command::Bounds(args) => crate::bounds::run(&args),
        Command::Encrypt(args) => crypt(&args, true),
        Command::Decrypt(args) => crypt(&args, false),
        Command::Leases(command) => leases(command),
        Command::Lease(args) => crate::lease_command::run(args),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(
                shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "nononce",
                &mut script,
            );
            crate::output::print_raw(&String::from_utf8_lossy(&script))
        }
        Command::Man => {
            let mut page = Vec::new();
            clap_mangen::Man::new(<Cli as clap::CommandFactory>::command())
                .render(&mut page)
                .map_err(|e| format!("cannot render the manual page: {e}"))?;
            crate::output::print_raw(&String::from_utf8_lossy(&page))
        }
        #[cfg(feature = "serve")]
        Command::Serve(args) => crate::serve::run(args),
    }
}

fn leases(command: LeasesCommand) -> Result<(), Exit> {
    runtime()?.block_on(async {
        match command {
            LeasesCommand::List {
                store,
                format,
                free,
            } => {
                let store = store.choose(Access::Read)?;
                let holders = Store::open(&store, Access::Read, terms()).await?.holders().await?;
                crate::output::print(&listed(&holders, format, free))
            }
            LeasesCommand::Migrate { store } => {
                let store = store.choose(Access::Migrate)?;
                let message = Store::open(&store, Access::Migrate, terms()).await?.migrate().await?;
                crate::output::print(&message)
            }
            LeasesCommand::Release { store, id, yes } => {
                if !yes {
                    return Err(Exit::Usage(format!(
                        "freeing machine id {} lets another node take it while its holder may still run: add --yes if that node is dead",
                        id.get()
                    )));
                }
                let store = store.choose(Access::Read)?;
                let freed = Store::open(&store, Access::Read, terms())
                    .await?
                    .force_release(id)
                    .await?;
                let freed = if freed { "freed" } else { "was not held" };
                crate::output::print(&format!("machine id {} {freed}", id.get()))
            }
        }
    })
}

/// What `leases list` prints of `holders`: a table (or JSON) of the held IDs with the time
/// each has left and when that is, and the count of free ones; or the free IDs.
fn listed(holders: &[nononce::lease::Holder], format: TextOrJson, free: bool) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    // No expiry (a field written without a TTL): none; past the calendar: none either.
    let at = |left: Duration| {
        (left != Duration::MAX)
            .then(|| now.checked_add(left))
            .flatten()
            .and_then(|t| u64::try_from(t.as_millis()).ok())
            .and_then(crate::codec::rfc3339)
    };
    if free {
        let held: std::collections::HashSet<u16> =
            holders.iter().map(|h| h.machine_id.get()).collect();
        let ids: Vec<u16> = (0..MachineId::COUNT)
            .filter(|id| !held.contains(id))
            .collect();
        return match format {
            TextOrJson::Text => ids
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
            TextOrJson::Json => serde_json::json!({ "free_ids": ids }).to_string(),
        };
    }
    let free = usize::from(MachineId::COUNT).saturating_sub(holders.len());
    match format {
        TextOrJson::Text => {
            let mut text = format!(
                "{:>4}  {:<10} {:>14}  {}\n",
                "id", "token", "expires_in", "expires_at"
            );
            for h in holders {
                let left = if h.expires_in == Duration::MAX {
                    "never".to_owned()
                } else if h.expires_in < Duration::from_secs(1000) {
                    format!("{:.1}s", h.expires_in.as_secs_f64())
                } else {
                    nononce::lease::backend::duration(h.expires_in)
                };
                text.push_str(&format!(
                    "{:>4}  {:<10} {left:>14}  {}\n",
                    h.machine_id.get(),
                    crate::codec::shown(&h.token_prefix),
                    at(h.expires_in).as_deref().unwrap_or("-"),
                ));
            }
            text.push_str(&format!(
                "{} held, {free} of {} free",
                holders.len(),
                MachineId::COUNT
            ));
            text
        }
        TextOrJson::Json => {
            let held: Vec<serde_json::Value> = holders
                .iter()
                .map(|h| {
                    serde_json::json!({
                        "machine_id": h.machine_id.get(),
                        "token": h.token_prefix,
                        "expires_in_s": (h.expires_in != Duration::MAX)
                            .then_some(h.expires_in.as_secs_f64()),
                        "expires_at": at(h.expires_in),
                    })
                })
                .collect();
            serde_json::json!({ "held": held, "free": free }).to_string()
        }
    }
}

fn generate(args: GenArgs) -> Result<(), Exit> {
    let key = args.key.key()?;
    if args.kind == Kind::Encrypted && key.is_none() {
        return Err(Exit::Usage(format!(
            "encrypted nonces need a key: {}",
            crate::keys::HOW
        )));
    }
    // One kind per run: declared, so the factory refuses the other kind from the start.
    let base = if args.kind == Kind::Sortable {
        Base::Sortable
    } else {
        Base::Counter
    };
    let options = crate::factory_options::options(&args.ciphers, key, args.epoch_ms)
        .with_kind64(base)
        .with_kind96(base)
        .with_kind128(base);
    // A misconfigured factory fails before any store is touched. The facade's clock, as the
    // leased path below uses.
    let clock = FactoryClock::shared().map_err(|e| format!("cannot start the clock: {e}"))?;
    // A setting that cannot work (a future epoch, a short key) is a usage error.
    let factory = options
        .build(clock)
        .map_err(|e| Exit::Usage(e.to_string()))?;
    if args.count == 0 {
        // Nothing to make: no machine ID is leased (nor held for its release guard after).
        return Ok(());
    }
    // Inside `nononce lease`: its ID, unless told otherwise.
    let borrowed = if args.machine_id.is_none() && !args.store.given() {
        Borrowed::from_env()?
    } else {
        None
    };
    let args = Arc::new(args);
    runtime()?.block_on(async {
        let mut signals = crate::signals::Signals::new()?;
        if let Some(machine_id) = args.machine_id {
            factory
                .enable(machine_id, NO_DEADLINE)
                .map_err(|e| e.to_string())?;
            let generated =
                generate_until_signal(Arc::new(factory), &args, &mut signals, LOST, Arc::default())
                    .await;
            return generated.result;
        }
        if let Some(borrowed) = borrowed {
            return generate_borrowed(borrowed, &options, &args, &mut signals).await;
        }
        let store = args.store.choose(Access::Lease)?;
        // Set when the lease is lost: gen stops there (the manager would go on under a new ID).
        let lost = Arc::new(AtomicBool::new(false));
        let started =
            crate::lease::start_lease(&store, "gen", options, args.quiet, Some(Arc::clone(&lost)));
        let nonces = tokio::select! {
            started = started => started?.0,
            signal = signals.recv() => return Err(Exit::Signal(signal)),
        };
        let factory = Arc::clone(nonces.factory("gen").expect("configured above"));
        let generated = generate_until_signal(factory, &args, &mut signals, LOST, lost).await;
        // Factories off, then the ID released (blocked only for the release guard).
        nonces.shutdown().await;
        if let Some(finish) = generated.finish {
            // Lets the generator flush what it produced before the signal, if its reader
            // still reads; a generator blocked on a full pipe is left behind.
            let _ = tokio::time::timeout(Duration::from_secs(1), finish).await;
        }
        generated.result
    })
}

/// `gen` inside `nononce lease`: under the lease's ID, one issuer at a time, each above what
/// the ID's earlier issuers issued and before the lease's deadline, as the lease folder's rule
/// says ([`crate::lease_dir`]).
async fn generate_borrowed(
    borrowed: Borrowed,
    options: &nononce::FactoryOptions,
    args: &Arc<GenArgs>,
    signals: &mut crate::signals::Signals,
) -> Result<(), Exit> {
    use nononce::lease::LeaseTarget;
    use nononce::nonce::Clock;
    let factory = Arc::new(
        options
            .build(borrowed.clock()?)
            .map_err(|e| e.to_string())?,
    );
    let id = borrowed.machine_id();
    let borrowed = Arc::new(borrowed);
    let lock = {
        let (borrowed, quiet) = (Arc::clone(&borrowed), args.quiet);
        let locking = tokio::task::spawn_blocking(move || {
            borrowed.lock(|| {
                if !quiet {
                    crate::output::say(&format!(
                        "waiting for the other gen under this `nononce lease` (machine id {}) to finish",
                        id.get()
                    ));
                }
            })
        });
        tokio::select! {
            locked = locking => locked.map_err(|e| format!("cannot lock the lease folder: {e}"))??,
            signal = signals.recv() => return Err(Exit::Signal(signal)),
        }
    };
    let now = factory.floor_of(factory.clock().exact_now_ms());
    let floor = borrowed.floor_ms()?.max(now);
    let deadline = borrowed.deadline_ms()?;
    if deadline <= factory.clock().exact_now_ms() {
        return Err(Exit::Fail(format!(
            "the lease `nononce lease` held on machine id {} has ended (it said why): nothing more can be issued under it",
            id.get()
        )));
    }
    // The bound of the first millisecond, before anything is issued: true even if this
    // process is killed.
    borrowed.set_floor(floor.saturating_add(1))?;
    LeaseTarget::enable(&*factory, id, floor, deadline);
    // Follows the deadline until told to stop (or the sender is dropped).
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let follower = {
        let (factory, borrowed) = (Arc::clone(&factory), Arc::clone(&borrowed));
        std::thread::spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(crate::lease_dir::DEADLINE_POLL)
            {
                match borrowed.deadline_ms() {
                    Ok(deadline) if deadline > 0 => factory.set_deadline(deadline),
                    // Lost, given back, or its holder gone: stop now.
                    _ => factory.disable(),
                }
            }
        })
    };
    let generated = generate_until_signal(
        Arc::clone(&factory),
        args,
        signals,
        LOST_UNDER_LEASE,
        Arc::default(),
    )
    .await;
    if let Some(finish) = generated.finish {
        let _ = tokio::time::timeout(Duration::from_secs(1), finish).await;
    }
    factory.disable();
    drop(stop);
    let _ = follower.join();
    let issued = LeaseTarget::issued_up_to_ms(&*factory).max(floor.saturating_add(1));
    let recorded = borrowed.set_floor(issued);
    drop(lock);
    generated.result.and(recorded.map_err(Exit::Fail))
}

/// What `gen` says when its lease was lost or not renewed in time, on its own lease and under
/// `nononce lease`.
const LOST: &str = "generation stopped: the machine-id lease was lost or not renewed in time (the line above says why): run gen again to lease a machine id";
const LOST_UNDER_LEASE: &str = "generation stopped: the lease of `nononce lease` was lost or not renewed in time (it says why)";

struct Generated {
    result: Result<(), Exit>,
    /// After a signal: the generator's end, still to come.
    finish: Option<tokio::sync::oneshot::Receiver<Result<(), Exit>>>,
}

/// Prints nonces on a thread of its own (the runtime keeps renewing the lease meanwhile)
/// until they are all printed, the reader goes away, or a signal arrives.
async fn generate_until_signal(
    factory: Arc<Factory<FactoryClock>>,
    args: &Arc<GenArgs>,
    signals: &mut crate::signals::Signals,
    lost_message: &'static str,
    lost: Arc<AtomicBool>,
) -> Generated {
    let stop = Arc::new(AtomicBool::new(false));
    let (done, mut finish) = tokio::sync::oneshot::channel();
    {
        let (stop, args) = (Arc::clone(&stop), Arc::clone(args));
        std::thread::spawn(move || {
            let _ = done.send(print_nonces(&factory, &args, &stop, &lost, lost_message));
        });
    }
    tokio::select! {
        result = &mut finish => Generated {
            result: result.unwrap_or_else(|_| Err(Exit::Fail("the generator thread panicked".into()))),
            finish: None,
        },
        signal = signals.recv() => {
            stop.store(true, Ordering::Relaxed);
            Generated { result: Err(Exit::Signal(signal)), finish: Some(finish) }
        }
    }
}

fn print_nonces(
    factory: &Factory<FactoryClock>,
    args: &GenArgs,
    stop: &AtomicBool,
    lost: &AtomicBool,
    lost_message: &str,
) -> Result<(), Exit> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    for i in 0..args.count {
        if i % 256 == 0 && stop.load(Ordering::Relaxed) {
            break;
        }
        // Checked at every nonce: after a loss the factory may be on again under another ID.
        if lost.load(Ordering::SeqCst) {
            let _ = out.flush();
            return Err(Exit::Fail(lost_message.to_owned()));
        }
        let n = match crate::codec::next(factory, args.kind, args.bits) {
            Ok(n) => n,
            // Stopped by a signal: the factory is off, as it should be.
            Err(_) if stop.load(Ordering::Relaxed) => break,
            Err(e) => {
                let _ = out.flush();
                return Err(Exit::Fail(generation_error(&e, lost_message)));
            }
        };
        writeln!(out, "{}", n.format(args.format)).map_err(|e| write_error(&e))?;
    }
    out.flush().map_err(|e| write_error(&e))
}

fn generation_error(e: &nononce::nonce::Error, lost: &str) -> String {
    match e {
        nononce::nonce::Error::Disabled | nononce::nonce::Error::LeaseExpired => lost.to_owned(),
        _ => e.to_string(),
    }
}

/// Calls `one` on each of `texts`, and on each line of stdin for `-`, with its line number
/// there. A failure stops at once, or with `keep_going` is said (`nononce: line N: ...`) and
/// the next one read; the status is 1 if any failed.
fn each_nonce(
    texts: &[String],
    keep_going: bool,
    mut one: impl FnMut(&str) -> Result<(), Exit>,
) -> Result<(), Exit> {
    let mut failed = false;
    let mut on = |text: &str, line: Option<usize>| -> Result<(), Exit> {
        match one(text) {
            Err(Exit::Fail(e)) => {
                let e = match line {
                    Some(n) => format!("line {n}: {e}"),
                    None => e,
                };
                if !keep_going {
                    return Err(Exit::Fail(e));
                }
                crate::output::say(&e);
                failed = true;
                Ok(())
            }
            other => other,
        }
    };
    for text in texts {
        if text == "-" {
            for (n, line) in std::io::stdin().lock().lines().enumerate() {
                let line = line.map_err(|e| format!("cannot read stdin: {e}"))?;
                if !line.trim().is_empty() {
                    on(&line, Some(n + 1))?;
                }
            }
        } else {
            on(text, None)?;
        }
    }
    if failed {
        Err(Exit::FailedSaid)
    } else {
        Ok(())
    }
}

fn decode(args: &DecodeArgs) -> Result<(), Exit> {
    let decrypter = match args.key.key()? {
        Some(_) if args.input == Input::Auto => {
            return Err(Exit::Usage(
                "--input auto: an encrypted nonce's fields are noise, so decode cannot tell its form by them: give --input hex, base64url or int with a base key".to_owned(),
            ));
        }
        Some(key) => Some(crypter(&args.ciphers, key)?),
        None => None,
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = each_nonce(&args.nonces, args.keep_going, |text| {
        let parsed = AnyNonce::parse(text, args.input, args.bits, args.epoch_ms).and_then(|n| {
            match &decrypter {
                Some(f) => crypted(f, n, false).map(|n| inner_nonce(n, &args.ciphers)),
                None => Ok(n),
            }
        });
        let nonce = match parsed {
            Ok(n) => n,
            Err(e) => {
                // What was read before the failure reaches stdout before it is said.
                out.flush().map_err(|e| write_error(&e))?;
                return Err(Exit::Fail(e));
            }
        };
        let d = nonce.decode(args.epoch_ms);
        let time = crate::codec::rfc3339(d.unix_ms);
        let written = match args.format {
            TextOrJson::Text => writeln!(
                out,
                "bits={} timestamp_ms={} unix_ms={} time={} machine_id={} count={}",
                d.bits,
                d.timestamp_ms,
                d.unix_ms,
                time.as_deref().unwrap_or("-"),
                d.machine_id,
                d.count
            ),
            TextOrJson::Json => writeln!(out, "{}", crate::codec::decoded_json(&d)),
        };
        written.map_err(|e| write_error(&e))
    });
    out.flush().map_err(|e| write_error(&e))?;
    result
}

fn crypt(args: &CryptArgs, encrypt: bool) -> Result<(), Exit> {
    let input = args.input.unwrap_or(Input::Hex);
    if input == Input::Auto && !encrypt {
        return Err(Exit::Usage(
            "--input auto: an encrypted nonce's fields are noise, so decrypt cannot tell its form by them: give --input hex, base64url or int".to_owned(),
        ));
    }
    let format = args.format.unwrap_or(match input {
        Input::Base64url => Format::Base64url,
        Input::Int => Format::Int,
        Input::Auto | Input::Hex => Format::Hex,
    });
    let key = args.key.key()?.ok_or_else(|| {
        Exit::Usage(format!(
            "{} needs the base key: {}",
            if encrypt { "encrypt" } else { "decrypt" },
            crate::keys::HOW
        ))
    })?;
    let f = crypter(&args.ciphers, key)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = each_nonce(&args.nonces, false, |text| {
        let nonce = AnyNonce::parse(text, input, None, args.epoch_ms)?;
        let crypted = crypted(&f, nonce, encrypt)?;
        writeln!(out, "{}", crypted.format(format)).map_err(|e| write_error(&e))
    });
    out.flush().map_err(|e| write_error(&e))?;
    result
}

/// A factory that only encrypts and decrypts, with `ciphers` and keys derived from `key`. A
/// key or cipher setting that cannot work is a usage error.
fn crypter(ciphers: &CipherArgs, key: Vec<u8>) -> Result<Factory<BootClock>, Exit> {
    crate::factory_options::options(ciphers, Some(key), DEFAULT_EPOCH_MS)
        .build(BootClock::new())
        .map_err(|e| Exit::Usage(e.to_string()))
}

/// `nonce` encrypted (or decrypted) by `f`.
fn crypted(f: &Factory<BootClock>, nonce: AnyNonce, encrypt: bool) -> Result<AnyNonce, String> {
    match (nonce, encrypt) {
        (AnyNonce::N64(n), true) => f.encrypt64(n).map(AnyNonce::N64),
        (AnyNonce::N64(n), false) => f.decrypt64(n).map(AnyNonce::N64),
        (AnyNonce::N96(n), true) => f.encrypt96(n).map(AnyNonce::N96),
        (AnyNonce::N96(n), false) => f.decrypt96(n).map(AnyNonce::N96),
        (AnyNonce::N128(n), true) => f.encrypt128(n).map(AnyNonce::N128),
        (AnyNonce::N128(n), false) => f.decrypt128(n).map(AnyNonce::N128),
    }
    .map_err(|e| e.to_string())
}

/// The nonce a decrypted one carries: a 96-bit nonce of a 64-bit-block cipher (Blowfish, 3DES)
/// is an encrypted 64-bit nonce and 32 zero bits, as in NoNoncense, so its fields are those of
/// its first 64 bits.
fn inner_nonce(decrypted: AnyNonce, ciphers: &CipherArgs) -> AnyNonce {
    match decrypted {
        AnyNonce::N96(n) if ciphers.cipher96.has_64bit_block() => AnyNonce::N64(
            nononce::nonce::Nonce64::from_u64(u64::try_from(n.to_u128() >> 32).unwrap_or(u64::MAX)),
        ),
        other => other,
    }
}
