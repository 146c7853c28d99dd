//! Compiles the `.proto` files with `protox` (a pure-Rust protobuf compiler), so building needs
//! no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/ninf/v1/interface.proto",
        "proto/ninf/v1/executable.proto",
        "proto/ninf/v1/server.proto",
        "proto/ninf/v1/data.proto",
        "proto/ninf/v1/bench.proto",
        "proto/ninf/v1/metaserver.proto",
        "proto/ninf/v1/proxy.proto",
        "proto/ninf/v1/gang.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Large arrays move between storage, gRPC and executables without copies.
        .bytes(".")
        .compile_fds(descriptors)?;
    Ok(())
}
