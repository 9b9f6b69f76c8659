//! The factory settings the commands take from the command line: ciphers, key, epoch.

use nononce::{Cipher64, Cipher96, Cipher128, FactoryOptions, FactoryOptionsExt};

#[derive(Debug, clap::Args)]
pub struct CipherArgs {
    /// Cipher for 64-bit nonces: blowfish, des3 or speck.
    #[arg(long, default_value = "blowfish", value_parser = parse_cipher::<Cipher64>)]
    pub cipher64: Cipher64,
    /// Cipher for 96-bit nonces: blowfish, des3 or speck.
    #[arg(long, default_value = "blowfish", value_parser = parse_cipher::<Cipher96>)]
    pub cipher96: Cipher96,
    /// Cipher for 128-bit nonces: aes or speck.
    #[arg(long, default_value = "aes", value_parser = parse_cipher::<Cipher128>)]
    pub cipher128: Cipher128,
}

fn parse_cipher<C: std::str::FromStr>(s: &str) -> Result<C, String>
where
    C::Err: std::fmt::Display,
{
    s.parse().map_err(|e: C::Err| e.to_string())
}

/// The factory settings of `ciphers`, `key` and `epoch_ms`.
pub fn options(ciphers: &CipherArgs, key: Option<Vec<u8>>, epoch_ms: u64) -> FactoryOptions {
    let mut o = FactoryOptions::new()
        .with_epoch_ms(epoch_ms)
        .with_cipher64(ciphers.cipher64)
        .with_cipher96(ciphers.cipher96)
        .with_cipher128(ciphers.cipher128);
    if let Some(k) = key {
        o = o.with_base_key(k.into());
    }
    o
}
