//! Builds the standard routines' client stubs and executable through the IDL compiler, so
//! every build exercises `ninf-gen` on `idl/examples/linpack.idl`.

fn main() {
    let idl = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../idl/examples/linpack.idl");
    if let Err(error) = ninf_idl::build::compile_module(&idl) {
        eprintln!("{error}");
        std::process::exit(1);
    }
}
