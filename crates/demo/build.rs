//! Generates the gRPC `Ask` service and client from `proto/`, with the
//! `protoc` bundled by `protoc-bin-vendored` (no system protoc needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure().compile_with_config(
        config,
        &["proto/tollgate/demo/v1/ask.proto"],
        &["proto"],
    )?;
    Ok(())
}
