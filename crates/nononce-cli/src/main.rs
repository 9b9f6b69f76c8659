//! `nononce`: generate, decode, encrypt and decrypt nonces; manage machine-ID leases.

fn main() -> std::process::ExitCode {
    nononce_cli::main()
}
