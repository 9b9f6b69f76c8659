//! The client side of `nononce serve`'s gRPC service, from the proto in the repository.

fn main() {
    const PROTO: &str = "../../crates/nononce-cli/proto/nononce/v1/nonces.proto";
    println!("cargo:rerun-if-changed={PROTO}");
    if let Err(e) = tonic_prost_build::configure()
        .build_server(false)
        .compile_protos(&[PROTO], &["../../crates/nononce-cli/proto"])
    {
        panic!("cannot compile {PROTO}: {e} (install protoc, or set PROTOC to its path)");
    }
}
