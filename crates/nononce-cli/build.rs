//! Compiles the gRPC service of `nononce serve` (proto/nononce/v1/nonces.proto) into Rust, the
//! server side only, when the `serve` feature is on. Needs `protoc` (or `PROTOC` naming it).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "serve")]
    {
        const PROTO: &str = "proto/nononce/v1/nonces.proto";
        println!("cargo:rerun-if-changed={PROTO}");
        if let Err(e) = tonic_prost_build::configure()
            .build_client(false)
            .build_transport(false)
            .compile_protos(&[PROTO], &["proto"])
        {
            // protoc missing is the usual cause; the error names it.
            panic!("cannot compile {PROTO}: {e} (install protoc, or set PROTOC to its path)");
        }
    }
}
