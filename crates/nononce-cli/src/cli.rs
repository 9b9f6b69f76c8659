//! Command-line parsing and the commands.

use std::io::Write;

use clap::{Parser, Subcommand, ValueEnum};
use nononce::nonce::{DEFAULT_EPOCH_MS, NO_DEADLINE};
use nononce::{BootClock, Cipher64, Cipher96, Cipher128, Factory, FactoryOptions};

use crate::codec::AnyNonce;

/// Unique 64/96/128-bit nonces, and the machine-ID leases that keep them unique.
#[derive(Debug, Parser)]
#[command(name = "nononce", version, about, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

const EXAMPLES: &str = "Examples:
  nononce gen --machine-id 7 -n 3
  nononce gen --kind sortable --bits 128 --machine-id 7 --format base64url
  nononce decode 03be4cb500002000 --format json
  nononce encrypt 03be4cb500002000 --base-key-hex $(openssl rand -hex 32)";

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate nonces and print one per line.
    #[command(
        after_help = "Examples:\n  nononce gen --machine-id 7 -n 3\n  nononce gen --kind encrypted --bits 128 --machine-id 7 --base-key-hex 000102...1f"
    )]
    Gen(GenArgs),
    /// Print the fields of a nonce: size, timestamp, machine ID, count.
    #[command(
        after_help = "Examples:\n  nononce decode 03be4cb500002000\n  nononce decode A75MtQAAIAA --format json"
    )]
    Decode {
        /// The nonce: 16, 24 or 32 hex digits, or 11, 16 or 22 base64url characters.
        nonce: String,
        /// The epoch the nonce's timestamp counts from, in Unix ms.
        #[arg(long, default_value_t = DEFAULT_EPOCH_MS)]
        epoch_ms: u64,
        /// Output format.
        #[arg(long, value_enum, default_value_t = DecodeFormat::Text)]
        format: DecodeFormat,
    },
    /// Encrypt a nonce (hex) with keys derived from a base key, as NoNoncense does.
    #[command(
        after_help = "Example:\n  nononce encrypt 03be4cb500002000 --base-key-hex 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
    )]
    Encrypt(CryptArgs),
    /// Inspect and manage machine-ID leases in a store.
    #[command(subcommand)]
    Leases(LeasesCommand),
    /// Decrypt a nonce (hex) encrypted with keys derived from a base key.
    #[command(
        after_help = "Example:\n  nononce decrypt 6b5e01c1f3f4a3a2 --base-key-hex 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
    )]
    Decrypt(CryptArgs),
}

#[derive(Debug, Subcommand)]
enum LeasesCommand {
    /// Who holds which machine ID, and how many of the 512 are free.
    #[command(after_help = "Example:\n  nononce leases list --store redis://127.0.0.1:6391")]
    List {
        /// The lease store URL.
        #[arg(long)]
        store: String,
    },
    /// Create or repair the lease table.
    #[command(after_help = "Example:\n  nononce leases migrate --store postgres://app@db/app")]
    Migrate {
        /// The lease store URL.
        #[arg(long)]
        store: String,
    },
    /// Free the machine ID of a node known to be dead.
    #[command(
        after_help = "Example:\n  nononce leases release --store redis://127.0.0.1:6391 --id 17 --yes"
    )]
    Release {
        /// The lease store URL.
        #[arg(long)]
        store: String,
        /// The machine ID to free.
        #[arg(long)]
        id: u16,
        /// Confirms the node holding the ID is dead: a live one would share its ID until its
        /// next renewal.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Kind {
    Counter,
    Sortable,
    Encrypted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Hex,
    Base64url,
    Int,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DecodeFormat {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
struct GenArgs {
    /// Which kind of nonce.
    #[arg(long, value_enum, default_value_t = Kind::Counter)]
    kind: Kind,
    /// Nonce size in bits: 64, 96 or 128.
    #[arg(long, default_value_t = 64, value_parser = parse_bits)]
    bits: u16,
    /// How many nonces.
    #[arg(short = 'n', long = "count", default_value_t = 1)]
    count: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Hex)]
    format: Format,
    /// Use this machine ID without a lease; you guarantee no other node uses it.
    #[arg(long, conflicts_with = "store")]
    machine_id: Option<u16>,
    /// Where machine-ID leases live: sqlite://PATH (default: ./nononce-leases.db, created on
    /// first use), postgres://..., mysql://..., redis://HOST:PORT, env:VAR (StatefulSet
    /// ordinal), hosts:NAME,NAME,...
    #[arg(long)]
    store: Option<String>,
    /// Base key (hex, at least 32 bytes) for encrypted nonces.
    #[arg(long)]
    base_key_hex: Option<String>,
    /// The epoch timestamps count from, in Unix ms.
    #[arg(long, default_value_t = DEFAULT_EPOCH_MS)]
    epoch_ms: u64,
    #[command(flatten)]
    ciphers: CipherArgs,
}

#[derive(Debug, clap::Args)]
struct CipherArgs {
    /// Cipher for 64-bit nonces: blowfish, des3 or speck.
    #[arg(long, default_value = "blowfish", value_parser = parse_cipher::<Cipher64>)]
    cipher64: Cipher64,
    /// Cipher for 96-bit nonces: blowfish, des3 or speck.
    #[arg(long, default_value = "blowfish", value_parser = parse_cipher::<Cipher96>)]
    cipher96: Cipher96,
    /// Cipher for 128-bit nonces: aes or speck.
    #[arg(long, default_value = "aes", value_parser = parse_cipher::<Cipher128>)]
    cipher128: Cipher128,
}

#[derive(Debug, clap::Args)]
struct CryptArgs {
    /// The nonce: 16, 24 or 32 hex digits.
    nonce_hex: String,
    /// Base key (hex, at least 32 bytes).
    #[arg(long)]
    base_key_hex: String,
    #[command(flatten)]
    ciphers: CipherArgs,
}

fn parse_bits(s: &str) -> Result<u16, String> {
    match s {
        "64" => Ok(64),
        "96" => Ok(96),
        "128" => Ok(128),
        _ => Err(format!("`{s}` is not a nonce size: use 64, 96 or 128")),
    }
}

fn parse_cipher<C: std::str::FromStr>(s: &str) -> Result<C, String>
where
    C::Err: std::fmt::Display,
{
    s.parse().map_err(|e: C::Err| e.to_string())
}

fn parse_key(hex: &str) -> Result<Vec<u8>, String> {
    let hex = hex.trim();
    if !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("base key is not hex: give an even number of hex digits".into());
    }
    let key: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("checked hex"))
        .collect();
    if key.len() < nononce::nonce::MIN_BASE_KEY_LEN {
        return Err(format!(
            "base key is {} bytes: use at least 32 random bytes (64 hex digits)",
            key.len()
        ));
    }
    Ok(key)
}

fn options(ciphers: &CipherArgs, key: Option<Vec<u8>>, epoch_ms: u64) -> FactoryOptions {
    let mut o = FactoryOptions::new()
        .epoch_ms(epoch_ms)
        .cipher64(ciphers.cipher64)
        .cipher96(ciphers.cipher96)
        .cipher128(ciphers.cipher128);
    if let Some(k) = key {
        o = o.base_key(k);
    }
    o
}

/// Runs the parsed command.
pub fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Gen(args) => generate(&args),
        Command::Decode {
            nonce,
            epoch_ms,
            format,
        } => decode(&nonce, epoch_ms, format),
        Command::Encrypt(args) => crypt(&args, true),
        Command::Decrypt(args) => crypt(&args, false),
        Command::Leases(command) => leases(command),
    }
}

fn leases(command: LeasesCommand) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async {
        match command {
            LeasesCommand::List { store } => {
                let holders = crate::store::Store::open(&store).await?.holders().await?;
                println!("{:>4}  {:<10} {:>12}", "id", "token", "expires_in");
                for h in &holders {
                    println!("{:>4}  {:<10} {:>11.1}s", h.machine_id.get(), h.token_prefix, h.expires_in.as_secs_f64());
                }
                println!("{} held, {} of 512 free", holders.len(), 512 - holders.len());
                Ok(())
            }
            LeasesCommand::Migrate { store } => {
                println!("{}", crate::store::Store::open(&store).await?.migrate().await?);
                Ok(())
            }
            LeasesCommand::Release { store, id, yes } => {
                let id = nononce::lease::MachineId::new(id).map_err(|e| e.to_string())?;
                if !yes {
                    return Err(format!("freeing machine id {} lets another node take it while its holder may still run: add --yes if that node is dead", id.get()));
                }
                if crate::store::Store::open(&store).await?.force_release(id).await? {
                    println!("machine id {} freed", id.get());
                } else {
                    println!("machine id {} was not held", id.get());
                }
                Ok(())
            }
        }
    })
}

fn generate(args: &GenArgs) -> Result<(), String> {
    let key = args.base_key_hex.as_deref().map(parse_key).transpose()?;
    if args.kind == Kind::Encrypted && key.is_none() {
        return Err(
            "encrypted nonces need a key: pass --base-key-hex with at least 32 bytes".into(),
        );
    }
    let options = options(&args.ciphers, key, args.epoch_ms);
    if let Some(machine_id) = args.machine_id {
        let factory = options.build(BootClock::new()).map_err(|e| e.to_string())?;
        factory
            .enable(machine_id, NO_DEADLINE)
            .map_err(|e| e.to_string())?;
        return print_nonces(&factory, args);
    }
    let url = args.store.as_deref().unwrap_or(crate::store::DEFAULT_STORE);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async {
        let store = crate::store::Store::open(url).await?;
        store.prepare_embedded().await?;
        let strategy = store.into_strategy();
        let nonces = nononce::Nononce::builder(strategy)
            .factory("gen", options)
            .acquire_timeout(Some(std::time::Duration::from_secs(10)))
            .start()
            .await
            .map_err(|e| chain(&e))?;
        let factory = nonces.factory("gen").expect("configured above").clone();
        let printed = print_nonces(&factory, args);
        nonces.shutdown().await;
        printed
    })
}

/// An error and its sources on one line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        // Many errors already quote their source; say each cause once.
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

fn print_nonces(factory: &Factory<BootClock>, args: &GenArgs) -> Result<(), String> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let handle = factory.handle();
    for _ in 0..args.count {
        let n = one(factory, &handle, args.kind, args.bits).map_err(|e| e.to_string())?;
        let text = match args.format {
            Format::Hex => n.hex(),
            Format::Base64url => n.base64url(),
            Format::Int => n.int(),
        };
        writeln!(out, "{text}").map_err(|e| format!("cannot write output: {e}"))?;
    }
    out.flush().map_err(|e| format!("cannot write output: {e}"))
}

fn one(
    f: &Factory<BootClock>,
    h: &nononce::Handle<'_, BootClock>,
    kind: Kind,
    bits: u16,
) -> Result<AnyNonce, nononce::nonce::Error> {
    Ok(match (kind, bits) {
        (Kind::Counter, 64) => AnyNonce::N64(h.counter64()?),
        (Kind::Counter, 96) => AnyNonce::N96(h.counter96()?),
        (Kind::Counter, _) => AnyNonce::N128(h.counter128()?),
        (Kind::Sortable, 64) => AnyNonce::N64(f.sortable64()?),
        (Kind::Sortable, 96) => AnyNonce::N96(f.sortable96()?),
        (Kind::Sortable, _) => AnyNonce::N128(f.sortable128()?),
        (Kind::Encrypted, 64) => AnyNonce::N64(h.encrypted64()?),
        (Kind::Encrypted, 96) => AnyNonce::N96(h.encrypted96()?),
        (Kind::Encrypted, _) => AnyNonce::N128(h.encrypted128()?),
    })
}

fn decode(text: &str, epoch_ms: u64, format: DecodeFormat) -> Result<(), String> {
    let d = AnyNonce::parse(text)?.decode(epoch_ms);
    match format {
        DecodeFormat::Text => println!(
            "bits={} timestamp_ms={} unix_ms={} machine_id={} count={}",
            d.bits, d.timestamp_ms, d.unix_ms, d.machine_id, d.count
        ),
        DecodeFormat::Json => println!(
            "{}",
            serde_json::json!({
                "bits": d.bits,
                "timestamp_ms": d.timestamp_ms,
                "unix_ms": d.unix_ms,
                "machine_id": d.machine_id,
                "count": d.count,
            })
        ),
    }
    Ok(())
}

fn crypt(args: &CryptArgs, encrypt: bool) -> Result<(), String> {
    let nonce = AnyNonce::parse_hex(&args.nonce_hex)?;
    let key = parse_key(&args.base_key_hex)?;
    let f = options(&args.ciphers, Some(key), DEFAULT_EPOCH_MS)
        .build(BootClock::new())
        .map_err(|e| e.to_string())?;
    let out = match (nonce, encrypt) {
        (AnyNonce::N64(n), true) => AnyNonce::N64(f.encrypt64(n).map_err(|e| e.to_string())?),
        (AnyNonce::N64(n), false) => AnyNonce::N64(f.decrypt64(n).map_err(|e| e.to_string())?),
        (AnyNonce::N96(n), true) => AnyNonce::N96(f.encrypt96(n).map_err(|e| e.to_string())?),
        (AnyNonce::N96(n), false) => AnyNonce::N96(f.decrypt96(n).map_err(|e| e.to_string())?),
        (AnyNonce::N128(n), true) => AnyNonce::N128(f.encrypt128(n).map_err(|e| e.to_string())?),
        (AnyNonce::N128(n), false) => AnyNonce::N128(f.decrypt128(n).map_err(|e| e.to_string())?),
    };
    println!("{}", out.hex());
    Ok(())
}
