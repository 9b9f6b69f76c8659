//! The gRPC code of `nononce serve` is generated from `crates/nononce-cli/proto` and checked in
//! (`crates/nononce-cli/src/serve/nononce.v1.rs`): a build script in `nononce-cli` was compiled
//! and run again, with `protoc`, for every feature combination the suite checks. This crate's
//! build script generates it again and its test fails when the checked-in file differs; with
//! `NONONCE_WRITE_GRPC_CODE=1` the test writes the file instead.
//!
//! Building it needs `protoc` (or `PROTOC` naming it). Nothing here is an API.

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::Path;

    /// What the build script generated.
    const GENERATED: &str = include_str!(concat!(env!("OUT_DIR"), "/nononce.v1.rs"));
    /// The command that rewrites a stale file.
    const REWRITE: &str = "NONONCE_WRITE_GRPC_CODE=1 cargo test -p nononce-grpc-code";

    #[test]
    fn checked_in_grpc_code_is_what_the_proto_generates() {
        let checked_in =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../nononce-cli/src/serve/nononce.v1.rs");
        if std::env::var_os("NONONCE_WRITE_GRPC_CODE").is_some_and(|v| v == "1") {
            fs::write(&checked_in, GENERATED)
                .unwrap_or_else(|e| panic!("writing {}: {e}", checked_in.display()));
            return;
        }
        let current = fs::read_to_string(&checked_in)
            .unwrap_or_else(|e| panic!("reading {}: {e}", checked_in.display()));
        if current != GENERATED {
            let line = current
                .lines()
                .zip(GENERATED.lines())
                .position(|(a, b)| a != b)
                .map_or_else(
                    || current.lines().count().min(GENERATED.lines().count()) + 1,
                    |i| i + 1,
                );
            panic!(
                "{} is not what crates/nononce-cli/proto/nononce/v1/nonces.proto generates (first \
                 difference at line {line}): the .proto or the code generator changed; regenerate \
                 it with `{REWRITE}` and commit it",
                checked_in.display()
            );
        }
    }
}
