//! Generates the module's executable from its IDL (`hello_executable.rs` in OUT_DIR).

fn main() {
    let idl = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("idl/hello.idl");
    if let Err(error) = ninf_idl::build::compile_module(&idl) {
        eprintln!("{error}");
        std::process::exit(1);
    }
}
