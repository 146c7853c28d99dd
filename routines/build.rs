//! Builds the standard routines' client stubs and executables through the IDL compiler, so
//! every build exercises `ninf-gen`: `linpack` (Rust routines on faer) and `vector` (C
//! routines compiled here with the system C compiler).

use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    println!("cargo:rerun-if-changed=c/vector.c");
    // The archive goes to the executables only: the library crate has no C code of its own,
    // and the generated executables do not link the library crate.
    cc::Build::new()
        .file(root.join("c/vector.c"))
        .warnings(true)
        .cargo_metadata(false)
        .compile("ninfvector");
    let out_dir = std::env::var("OUT_DIR").unwrap_or_default();
    println!("cargo:rustc-link-arg-bins={out_dir}/libninfvector.a");
    for module in ["linpack", "vector", "selftest"] {
        let idl = root.join("idl").join(format!("{module}.idl"));
        if let Err(error) = ninf_idl::build::compile_module(&idl) {
            eprintln!("{error}");
            std::process::exit(1);
        }
    }
}
