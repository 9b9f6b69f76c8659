//! Generates the gRPC code of `nononce serve` from `nononce-cli`'s `.proto` into `OUT_DIR`, as
//! `nononce-cli` once did in its own build script: the server side only (the service runs on
//! axum's router and listener). The crate's test compares it with the checked-in file.

fn main() {
    const PROTO_DIR: &str = "../nononce-cli/proto";
    const PROTO: &str = "../nononce-cli/proto/nononce/v1/nonces.proto";
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={PROTO}");
    if let Err(e) = tonic_prost_build::configure()
        .build_client(false)
        .build_transport(false)
        .compile_protos(&[PROTO], &[PROTO_DIR])
    {
        // protoc missing is the usual cause; the error names it.
        panic!("cannot compile {PROTO}: {e} (install protoc, or set PROTOC to its path)");
    }
}
